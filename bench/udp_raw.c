/*
 * udp_raw: the floor under softib's UDP link — plain UDP between two
 * hosts (two network namespaces, or one host), with nothing of softib in
 * the path, so that bench/udp_vs_raw.sh can put softib's RC figures beside
 * what the same wire gives to a program that only moves datagrams.
 *
 *   server:  udp_raw [options]
 *   client:  udp_raw [options] HOST
 *
 * As with softib_osu, the two sides meet on a TCP connection (port -p),
 * where they check that their options agree and tell each other their UDP
 * ports; the data then goes over UDP (the server's UDP port is -p too).
 * The client prints the tables.
 *
 * Tests (-t):
 *   lat  ping-pong of one datagram each way; one-way latency is half the
 *        round trip (osu's convention). Sizes 1, 2, 4 ... up to -d,
 *        or -s alone.
 *   bw   a stream: -n messages of -m bytes each, every message cut into
 *        datagrams of -d payload bytes (the payload softib puts in one
 *        packet at the path MTU: 1024 for a 1500-byte Ethernet MTU, 4096
 *        for 9000), sent back to back with no flow control. The receiver
 *        counts the payload bytes that arrive and times them from the
 *        first datagram to the last: MB/s of delivered payload (10^6
 *        bytes per second), and the share the sender sent that was lost.
 *
 * Waiting (-w): poll spins on non-blocking receives, as a verbs program
 * spins on ibv_poll_cq (the default, and what softib_osu does); block
 * sleeps in a blocking recv (SO_RCVTIMEO bounds it), the floor for a
 * verbs program sleeping in ibv_get_cq_event (udp_rc -w event). Sockets are connect()ed unless -u: then every datagram
 * goes through sendto/recvfrom with an address, as softib's one socket per
 * process must. -B moves up to 64 datagrams per system call (sendmmsg,
 * recvmmsg), -G up to 64 per sendmsg as one UDP GSO buffer (UDP_SEGMENT:
 * the kernel cuts it into datagrams, on veth only at the receiving
 * socket), to show what batching would be worth. Neither is what the
 * targets compare with: softib sends one datagram per sendto.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_common.h"

const char bench_prog[] = "udp_raw";

#define DEFAULT_PORT   18520
#define MAX_DGRAM      65507    /* largest UDP payload over IPv4 */
#define BATCH          64       /* datagrams per sendmmsg/recvmmsg (-B) */
#define SOCK_BUF       (4 << 20)
/* Silences that end a wait. Long: on a loaded 2-core machine a process
 * can go unscheduled for seconds, and that is not a lost datagram. */
#define LAT_TIMEOUT_MS 10000    /* a ping-pong datagram this late is lost */
#define IDLE_MS        3000     /* the stream is over (end marks all lost) */
#define END_MARKS      8        /* empty datagrams that say "done" */
#define WIRE_MAGIC     0x55445230u /* "UDR0" */

enum { T_LAT = 1, T_BW = 2 };

struct opts {
	unsigned tests;
	int port;
	uint32_t dgram;      /* datagram payload bytes */
	uint64_t msg;        /* stream message bytes */
	uint32_t nmsg;       /* stream messages */
	uint32_t iters;      /* ping-pongs per size */
	uint32_t lat_size;   /* 0: every size up to dgram */
	bool block;          /* -w block */
	bool unconnected;    /* -u */
	bool batch;          /* -B */
	bool gso;            /* -G */
	const char *host;    /* NULL: server */
};

/* What the sides swap over TCP; all fields big-endian. */
struct hello {
	uint32_t magic;
	uint32_t tests;
	uint32_t dgram;
	uint32_t nmsg;
	uint64_t msg;
	uint32_t iters;
	uint32_t flags;      /* bit 0 block, 1 unconnected, 2 batch, 3 gso */
	uint32_t udp_port;   /* where the sender of this hello receives */
	uint32_t lat_size;
};

/* The receiver's count of a stream, sent back to the client. */
struct stream_report {
	uint64_t bytes;      /* payload bytes, first datagram excluded */
	uint64_t dgrams;     /* data datagrams, all of them */
	uint64_t ns;         /* first datagram to last */
};

struct raw {
	struct opts o;
	bool server;
	int tcp;
	int udp;
	struct sockaddr_in peer;  /* the other side's UDP address */
	uint8_t *buf;
	int rcvtimeo_ms;     /* -w block: the SO_RCVTIMEO set (0: none) */
};

static void usage(void)
{
	fprintf(stderr,
		"usage: udp_raw [options]          (server)\n"
		"       udp_raw [options] HOST     (client)\n"
		"  -p PORT   TCP port of the exchange and the server's UDP port "
		"(default %d)\n"
		"  -t TEST   lat | bw | all (default all)\n"
		"  -d SIZE   datagram payload: largest ping-pong size and the "
		"stream's datagrams (default 1024)\n"
		"  -m SIZE   stream message size (default 1m)\n"
		"  -n COUNT  stream messages (default 512)\n"
		"  -s SIZE   ping-pong this size only\n"
		"  -i ITERS  ping-pongs per size (default 10000)\n"
		"  -w MODE   poll (spin on non-blocking receives, default) | "
		"block\n"
		"  -u        unconnected sockets: sendto/recvfrom per datagram\n"
		"  -B        batch: sendmmsg/recvmmsg, up to %d datagrams a call\n"
		"  -G        stream sent as UDP GSO buffers (UDP_SEGMENT)\n"
		"Sizes take k/m suffixes. Both sides must be given the same "
		"-t -d -s -m -n -i -w -u -B -G.\n", DEFAULT_PORT, BATCH);
	exit(2);
}

static const char *const test_names[] = { "lat", "bw", NULL };

static void parse_opts(int argc, char **argv, struct opts *o)
{
	uint64_t v;
	int c;

	*o = (struct opts){ .tests = T_LAT | T_BW, .port = DEFAULT_PORT,
			    .dgram = 1024, .msg = 1u << 20, .nmsg = 512,
			    .iters = 10000 };
	while ((c = getopt(argc, argv, "p:t:d:s:m:n:i:w:uBGh")) != -1) {
		switch (c) {
		case 'p':
			o->port = (int)bench_parse_in(optarg, 1, 65534, 'p');
			break;
		case 't':
			o->tests = bench_parse_tests(optarg, test_names);
			break;
		case 'd':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > MAX_DGRAM)
				bench_die("-d must be in 1 .. %d", MAX_DGRAM);
			o->dgram = (uint32_t)v;
			break;
		case 's':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > MAX_DGRAM)
				bench_die("-s must be in 1 .. %d", MAX_DGRAM);
			o->lat_size = (uint32_t)v;
			break;
		case 'm':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > (1ull << 30))
				bench_die("-m must be in 1 .. 1g");
			o->msg = v;
			break;
		case 'n':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > 1000000)
				bench_die("-n must be in 1 .. 10^6");
			o->nmsg = (uint32_t)v;
			break;
		case 'i':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > 100000000)
				bench_die("-i must be in 1 .. 10^8");
			o->iters = (uint32_t)v;
			break;
		case 'w':
			if (!strcmp(optarg, "poll"))
				o->block = false;
			else if (!strcmp(optarg, "block"))
				o->block = true;
			else
				bench_die("bad wait mode '%s' (poll, block)",
					  optarg);
			break;
		case 'u':
			o->unconnected = true;
			break;
		case 'B':
			o->batch = true;
			break;
		case 'G':
			o->gso = true;
			break;
		default:
			usage();
		}
	}
	if (optind < argc)
		o->host = argv[optind++];
	if (optind < argc)
		usage();
}

/* ---- UDP ---- */

/* A UDP socket on port (0: any) of the address the TCP connection uses,
 * so that the datagrams take the same path as the exchange did. */
static int udp_open(struct raw *r, uint16_t port)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd, buf = SOCK_BUF;

	if (getsockname(r->tcp, (struct sockaddr *)&sa, &sl))
		bench_die("getsockname: %s", strerror(errno));
	sa.sin_port = htons(port);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		bench_die("socket: %s", strerror(errno));
	/* as softib's link asks; the kernel caps both at net.core.*mem_max */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		bench_die("bind UDP port %u: %s", port, strerror(errno));
	return fd;
}

static uint16_t udp_port_of(int fd)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);

	if (getsockname(fd, (struct sockaddr *)&sa, &sl))
		bench_die("getsockname: %s", strerror(errno));
	return ntohs(sa.sin_port);
}

/* Swap hellos, check that the options agree, learn the peer's UDP port. */
static void meet(struct raw *r)
{
	const struct opts *o = &r->o;
	uint32_t flags = (o->block ? 1 : 0) | (o->unconnected ? 2 : 0) |
			 (o->batch ? 4 : 0) | (o->gso ? 8 : 0);
	struct hello me = {
		.magic = htonl(WIRE_MAGIC), .tests = htonl(o->tests),
		.dgram = htonl(o->dgram), .nmsg = htonl(o->nmsg),
		.msg = htobe64(o->msg), .iters = htonl(o->iters),
		.flags = htonl(flags), .udp_port = htonl(udp_port_of(r->udp)),
		.lat_size = htonl(o->lat_size),
	}, peer;
	socklen_t sl = sizeof(r->peer);

	bench_tcp_write(r->tcp, &me, sizeof(me));
	bench_tcp_read(r->tcp, &peer, sizeof(peer), 60);
	if (ntohl(peer.magic) != WIRE_MAGIC)
		bench_die("the peer is not udp_raw (bad magic)");
	if (peer.tests != me.tests || peer.dgram != me.dgram ||
	    peer.nmsg != me.nmsg || peer.msg != me.msg ||
	    peer.iters != me.iters || peer.flags != me.flags ||
	    peer.lat_size != me.lat_size)
		bench_die("the two sides were given different options "
		    "(-t -d -s -m -n -i -w -u -B -G must agree)");
	if (getpeername(r->tcp, (struct sockaddr *)&r->peer, &sl))
		bench_die("getpeername: %s", strerror(errno));
	r->peer.sin_port = htons((uint16_t)ntohl(peer.udp_port));
	if (!o->unconnected &&
	    connect(r->udp, (struct sockaddr *)&r->peer, sizeof(r->peer)))
		bench_die("connect UDP: %s", strerror(errno));
}

static ssize_t udp_send(struct raw *r, const void *p, size_t n)
{
	for (;;) {
		ssize_t s = r->o.unconnected ?
			sendto(r->udp, p, n, 0, (struct sockaddr *)&r->peer,
			       sizeof(r->peer)) :
			send(r->udp, p, n, 0);

		if (s >= 0)
			return s;
		/* ENOBUFS: the device queue is full; the datagram is lost
		 * as on a wire, and the receiver's count says so */
		if (errno == ENOBUFS)
			return 0;
		if (errno != EINTR)
			bench_die("send: %s", strerror(errno));
	}
}

/* One datagram into buf (cap bytes), waiting at most ms (spinning or
 * sleeping as -w says). Returns its length, or -1 when none came. */
static ssize_t udp_recv(struct raw *r, void *buf, size_t cap, int ms)
{
	uint64_t deadline = 0;
	bool late = false;

	for (uint64_t spins = 0;; spins++) {
		if (r->o.block) {
			/* sleep in recv itself, the cheapest way to wait for
			 * one datagram (SO_RCVTIMEO bounds the wait) */
			struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

			if (r->rcvtimeo_ms != ms) {
				setsockopt(r->udp, SOL_SOCKET, SO_RCVTIMEO, &tv,
					   sizeof(tv));
				r->rcvtimeo_ms = ms;
			}
			ssize_t n = r->o.unconnected ?
				recvfrom(r->udp, buf, cap, 0, NULL, NULL) :
				recv(r->udp, buf, cap, 0);
			if (n >= 0)
				return n;
			if (errno == EAGAIN)
				return -1;
			if (errno != EINTR)
				bench_die("recv: %s", strerror(errno));
			continue;
		}
		ssize_t n = r->o.unconnected ?
			recvfrom(r->udp, buf, cap, MSG_DONTWAIT, NULL, NULL) :
			recv(r->udp, buf, cap, MSG_DONTWAIT);

		if (n >= 0)
			return n;
		if (errno != EAGAIN && errno != EINTR)
			bench_die("recv: %s", strerror(errno));
		if (late)
			return -1;
		if ((spins & 1023) == 0) {
			uint64_t t = bench_now_ns();

			/* past the deadline, one more look: the time may have
			 * gone while we were not running, not while we looked */
			if (!deadline)
				deadline = t + (uint64_t)ms * 1000000u;
			else if (t > deadline)
				late = true;
		}
	}
}

/* ---- ping-pong ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Half round trips, in us: the mean and the median. */
static void run_lat(struct raw *r, uint32_t size, uint64_t *rtt,
		    double *mean, double *median)
{
	uint32_t iters = r->o.iters, skip = iters / 10 + 10;
	bool client = !r->server;
	uint64_t sum = 0;

	bench_barrier(r->tcp);
	for (uint32_t i = 0; i < iters + skip; i++) {
		uint64_t t = bench_now_ns();
		ssize_t n;

		if (client)
			udp_send(r, r->buf, size);
		n = udp_recv(r, r->buf, MAX_DGRAM, LAT_TIMEOUT_MS);
		if (n != (ssize_t)size)
			bench_die("ping-pong of %u bytes, iteration %u: %s",
				  size, i, n < 0 ? "a datagram was lost" : "wrong size");
		if (!client)
			udp_send(r, r->buf, size);
		if (client && i >= skip) {
			rtt[i - skip] = bench_now_ns() - t;
			sum += rtt[i - skip];
		}
	}
	bench_barrier(r->tcp);
	if (client) {
		qsort(rtt, iters, sizeof(*rtt), cmp_u64);
		*mean = sum / 2e3 / iters;
		*median = rtt[iters / 2] / 2e3;
	}
}

static void table_lat(struct raw *r)
{
	uint64_t *rtt = calloc(r->o.iters, sizeof(*rtt));
	uint32_t last = r->o.lat_size ? r->o.lat_size : r->o.dgram;

	if (!rtt)
		bench_die("out of memory");
	if (!r->server)
		printf("# raw UDP latency (one-way = half the round trip, "
		       "%s%s)\n"
		       "# Size          Latency (us)    Median (us)\n",
		       r->o.block ? "blocking" : "spinning",
		       r->o.unconnected ? ", sendto/recvfrom" : "");
	for (uint32_t size = r->o.lat_size ? r->o.lat_size : 1; size <= last;
	     size = size < last && size * 2 > last ? last : size * 2) {
		double mean = 0, median = 0;

		run_lat(r, size, rtt, &mean, &median);
		if (!r->server)
			printf("%-10u%18.2f%15.2f\n", size, mean, median);
	}
	if (!r->server)
		printf("\n");
	free(rtt);
}

/* ---- stream ---- */

/* len bytes from p as one GSO buffer: datagrams of -d bytes each (the
 * last may be shorter). Returns how many datagrams that was. */
static uint64_t send_gso(struct raw *r, const uint8_t *p, size_t len)
{
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)p, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	uint16_t seg = (uint16_t)r->o.dgram;

	if (r->o.unconnected) {
		mh.msg_name = &r->peer;
		mh.msg_namelen = sizeof(r->peer);
	}
	cm->cmsg_level = SOL_UDP;
	cm->cmsg_type = UDP_SEGMENT;
	cm->cmsg_len = CMSG_LEN(sizeof(seg));
	memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
	while (sendmsg(r->udp, &mh, 0) < 0) {
		if (errno == ENOBUFS)
			break; /* lost, as on a wire */
		if (errno != EINTR)
			bench_die("sendmsg (UDP_SEGMENT): %s", strerror(errno));
	}
	return (len + r->o.dgram - 1) / r->o.dgram;
}

/* Sends every datagram of every message, then the end marks. */
static void stream_send(struct raw *r)
{
	uint64_t per = (r->o.msg + r->o.dgram - 1) / r->o.dgram;
	/* a GSO buffer is one UDP datagram to the stack: 64 KiB at most */
	uint64_t gso_segs = 65507 / r->o.dgram < BATCH ? 65507 / r->o.dgram :
							 BATCH;
	struct mmsghdr mh[BATCH];
	struct iovec iov[BATCH];

	memset(mh, 0, sizeof(mh));
	for (uint32_t m = 0; m < r->o.nmsg; m++) {
		for (uint64_t d = 0; d < per;) {
			uint64_t off = d * r->o.dgram;
			uint32_t k = 0;

			if (r->o.gso && gso_segs > 1) {
				uint64_t n = per - d < gso_segs ? per - d :
								  gso_segs;
				uint64_t len = n * r->o.dgram;

				if (len > r->o.msg - off)
					len = r->o.msg - off;
				d += send_gso(r, r->buf + off, len);
				continue;
			}
			if (!r->o.batch) {
				size_t len = r->o.msg - off < r->o.dgram ?
					     r->o.msg - off : r->o.dgram;

				udp_send(r, r->buf + off, len);
				d++;
				continue;
			}
			for (; k < BATCH && d + k < per; k++) {
				uint64_t o = (d + k) * r->o.dgram;

				iov[k].iov_base = r->buf + o;
				iov[k].iov_len = r->o.msg - o < r->o.dgram ?
						 r->o.msg - o : r->o.dgram;
				mh[k].msg_hdr.msg_iov = &iov[k];
				mh[k].msg_hdr.msg_iovlen = 1;
				mh[k].msg_hdr.msg_name = r->o.unconnected ?
							 &r->peer : NULL;
				mh[k].msg_hdr.msg_namelen = r->o.unconnected ?
							    sizeof(r->peer) : 0;
			}
			int s = sendmmsg(r->udp, mh, k, 0);

			if (s < 0 && errno != ENOBUFS && errno != EINTR)
				bench_die("sendmmsg: %s", strerror(errno));
			/* a refused datagram (ENOBUFS) counts as lost */
			d += s > 0 ? (uint64_t)s : 1;
		}
	}
	for (int i = 0; i < END_MARKS; i++) {
		usleep(1000);
		udp_send(r, r->buf, 0);
	}
}

/* Counts what arrives until an end mark, or IDLE_MS of silence. */
static void stream_recv(struct raw *r, struct stream_report *rep)
{
	uint64_t first = 0, last = 0, first_len = 0;
	struct mmsghdr mh[BATCH];
	struct iovec iov[BATCH];
	bool done = false;

	memset(rep, 0, sizeof(*rep));
	memset(mh, 0, sizeof(mh));
	for (int k = 0; k < BATCH; k++) {
		iov[k].iov_base = r->buf + (size_t)k * r->o.dgram;
		iov[k].iov_len = r->o.dgram;
		mh[k].msg_hdr.msg_iov = &iov[k];
		mh[k].msg_hdr.msg_iovlen = 1;
	}
	while (!done) {
		int got = 1;

		if (r->o.batch) {
			/* wait for the first, then take what is there */
			ssize_t n = udp_recv(r, r->buf, r->o.dgram, IDLE_MS);

			if (n < 0)
				break;
			mh[0].msg_len = (unsigned)n;
			int more = recvmmsg(r->udp, mh + 1, BATCH - 1,
					    MSG_DONTWAIT, NULL);
			got += more > 0 ? more : 0;
		} else {
			ssize_t n = udp_recv(r, r->buf, r->o.dgram, IDLE_MS);

			if (n < 0)
				break;
			mh[0].msg_len = (unsigned)n;
		}
		uint64_t t = bench_now_ns();

		for (int k = 0; k < got; k++) {
			if (mh[k].msg_len == 0) {
				done = true;
				break;
			}
			if (!first) {
				first = t;
				first_len = mh[k].msg_len;
			}
			rep->dgrams++;
			rep->bytes += mh[k].msg_len;
			last = t;
		}
	}
	rep->bytes -= first_len; /* it arrived at time zero */
	rep->ns = last - first;
}

static void table_bw(struct raw *r)
{
	uint64_t per = (r->o.msg + r->o.dgram - 1) / r->o.dgram;
	uint64_t sent = per * r->o.nmsg;
	struct stream_report rep;

	bench_barrier(r->tcp);
	if (r->server) {
		stream_recv(r, &rep);
		rep.bytes = htobe64(rep.bytes);
		rep.dgrams = htobe64(rep.dgrams);
		rep.ns = htobe64(rep.ns);
		bench_tcp_write(r->tcp, &rep, sizeof(rep));
		bench_barrier(r->tcp);
		return;
	}
	uint64_t t0 = bench_now_ns();

	stream_send(r);
	double send_s = (bench_now_ns() - t0 - END_MARKS * 1000000.0) / 1e9;

	bench_tcp_read(r->tcp, &rep, sizeof(rep), 120);
	rep.bytes = be64toh(rep.bytes);
	rep.dgrams = be64toh(rep.dgrams);
	rep.ns = be64toh(rep.ns);
	bench_barrier(r->tcp);
	printf("# raw UDP stream (%u x %llu-byte messages in %u-byte "
	       "datagrams%s%s)\n"
	       "# Size      Bandwidth (MB/s)   lost (%%)   sent (MB/s)\n",
	       r->o.nmsg, (unsigned long long)r->o.msg, r->o.dgram,
	       r->o.unconnected ? ", sendto" : "",
	       r->o.batch ? ", sendmmsg/recvmmsg" :
	       r->o.gso ? ", UDP GSO" : "");
	printf("%-10llu%18.2f%11.2f%14.2f\n\n", (unsigned long long)r->o.msg,
	       rep.ns ? rep.bytes * 1e3 / rep.ns : 0.0,
	       100.0 * (double)(sent - (rep.dgrams < sent ? rep.dgrams : sent)) /
	       (double)sent,
	       send_s > 0 ? r->o.msg * (double)r->o.nmsg / send_s / 1e6 : 0.0);
}

int main(int argc, char **argv)
{
	struct raw r = { .udp = -1 };
	size_t bufsz;

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_opts(argc, argv, &r.o);
	r.server = r.o.host == NULL;
	/* the stream's message, or BATCH receive slots, or one datagram */
	bufsz = r.o.msg > (uint64_t)BATCH * r.o.dgram ? r.o.msg :
		(size_t)BATCH * r.o.dgram;
	if (bufsz < MAX_DGRAM)
		bufsz = MAX_DGRAM;
	r.buf = malloc(bufsz);
	if (!r.buf)
		bench_die("cannot allocate %zu bytes", bufsz);
	memset(r.buf, r.server ? 's' : 'c', bufsz);
	r.tcp = r.server ? bench_tcp_accept(r.o.port) :
			   bench_tcp_connect(r.o.host, r.o.port);
	r.udp = udp_open(&r, r.server ? (uint16_t)r.o.port : 0);
	meet(&r);
	if (r.o.tests & T_LAT)
		table_lat(&r);
	if (r.o.tests & T_BW)
		table_bw(&r);
	bench_barrier(r.tcp);
	close(r.udp);
	close(r.tcp);
	free(r.buf);
	return 0;
}
