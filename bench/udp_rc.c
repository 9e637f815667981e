/*
 * udp_rc: RC latency and bandwidth at the verbs level between two hosts,
 * addressed by GID as RoCE paths are — the softib side of
 * bench/udp_vs_raw.sh, whose other side is bench/udp_raw.c. It measures
 * what udp_raw measures, the same way, so that the two tables compare:
 *
 *   lat  SEND ping-pong of -s bytes; one-way latency is half the round
 *        trip; mean and median of -i round trips (the median says what
 *        the link costs when the 2-core test machines are busy, the mean
 *        what the scheduler adds). Every -S-th send is signaled (CQ
 *        moderation, as perftest does), the last one always.
 *   bw   windows of -W back-to-back messages of -m bytes (SEND, or RDMA
 *        WRITE with -o write, the last one carrying an immediate), each
 *        window answered by an empty SEND; MB/s (10^6 bytes per second)
 *        of payload from the first window to the last answer, -n windows.
 *
 *   server:  udp_rc [options]
 *   client:  udp_rc [options] HOST
 *
 * The sides meet on TCP (port -p) to swap QPN, PSN, GID, rkey and
 * address, and to check that their options agree; the client prints.
 * The path is global (is_global, the peer's GID from the exchange, source
 * GID index -g), so across hosts softib carries it over its UDP link.
 * Completions are polled (ibv_poll_cq in a loop), as udp_raw spins on
 * its socket; with -w event the program sleeps instead, as udp_raw -w
 * block sleeps in recv: it arms the CQ (ibv_req_notify_cq), polls once
 * more (a completion may have come before the arming), and blocks in
 * ibv_get_cq_event on the CQ's completion channel.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_common.h"

const char bench_prog[] = "udp_rc";

#define DEFAULT_PORT 18521
#define SQ_DEPTH     256
#define RQ_DEPTH     256
#define STALL_SECS   20        /* no completion for this long: give up */
#define WIRE_MAGIC   0x55524330u /* "URC0" */
#define ACK_IMM      0x61636bu

enum { T_LAT = 1, T_BW = 2 };

struct opts {
	unsigned tests;
	bool write;          /* -o write (bw only) */
	int port;
	int gidx;
	uint32_t lat_size;
	uint32_t bw_size;
	uint32_t iters;      /* ping-pongs */
	uint32_t sig_every;  /* the ping-pong signals every this many sends */
	uint32_t windows;
	uint32_t window;
	bool event;          /* -w event: sleep in ibv_get_cq_event */
	const char *dev;
	const char *host;    /* NULL: server */
};

/* What the sides swap over TCP; all fields big-endian. */
struct hello {
	uint32_t magic;
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
	uint64_t addr;
	uint32_t tests;
	uint32_t write;
	uint32_t lat_size;
	uint32_t bw_size;
	uint32_t iters;
	uint32_t windows;
	uint32_t window;
	uint32_t event;
	uint8_t gid[16];
};

struct rc {
	struct opts o;
	bool server;
	int tcp;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan; /* -w event */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_port_attr port;
	union ibv_gid gid;
	uint8_t *buf;        /* [0, len): send; [len, 2 len): receive */
	size_t len;
	uint32_t max_inline;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t sq_out;     /* send WRs not yet retired */
	uint32_t unsig;      /* unsignaled sends since the last signaled one */
	uint32_t batch[SQ_DEPTH]; /* sends each signaled completion retires */
	uint32_t batch_head, batch_tail;
	uint64_t data_in;    /* receive completions: data messages */
	uint64_t acks_in;    /* ... window answers */
};

static void usage(void)
{
	fprintf(stderr,
		"usage: udp_rc [options]          (server)\n"
		"       udp_rc [options] HOST     (client)\n"
		"  -p PORT   TCP port of the exchange (default %d)\n"
		"  -t TEST   lat | bw | all (default all)\n"
		"  -o OP     send | write: the bandwidth test's operation "
		"(default send)\n"
		"  -s SIZE   ping-pong message size (default 8)\n"
		"  -m SIZE   bandwidth message size (default 1m)\n"
		"  -i ITERS  ping-pongs (default 10000)\n"
		"  -S N      ping-pong: signal every Nth send (default 16, as\n"
		"            perftest's CQ moderation; 1: every send)\n"
		"  -n COUNT  bandwidth windows (default 8)\n"
		"  -W COUNT  messages per window (default 64)\n"
		"  -w WAIT   poll | event: spin on ibv_poll_cq (default) or\n"
		"            sleep in ibv_get_cq_event\n"
		"  -g INDEX  source GID index (default 0)\n"
		"  -d DEV    device (default softib0)\n"
		"Sizes take k/m suffixes. Both sides must be given the same "
		"-t -o -s -m -i -n -W.\n", DEFAULT_PORT);
	exit(2);
}

static const char *const test_names[] = { "lat", "bw", NULL };

static void parse_opts(int argc, char **argv, struct opts *o)
{
	int c;

	*o = (struct opts){ .tests = T_LAT | T_BW, .port = DEFAULT_PORT,
			    .lat_size = 8, .bw_size = 1u << 20,
			    .iters = 10000, .sig_every = 16, .windows = 8, .window = 64,
			    .dev = "softib0" };
	while ((c = getopt(argc, argv, "p:t:o:s:m:i:S:n:W:w:g:d:h")) != -1) {
		switch (c) {
		case 'p':
			o->port = (int)bench_parse_in(optarg, 1, 65535, 'p');
			break;
		case 't':
			o->tests = bench_parse_tests(optarg, test_names);
			break;
		case 'o':
			if (!strcmp(optarg, "send"))
				o->write = false;
			else if (!strcmp(optarg, "write"))
				o->write = true;
			else
				bench_die("bad operation '%s' (send, write)",
					  optarg);
			break;
		case 's':
			o->lat_size = bench_parse_in(optarg, 0, 1u << 30, 's');
			break;
		case 'm':
			o->bw_size = bench_parse_in(optarg, 1, 1u << 30, 'm');
			break;
		case 'i':
			o->iters = bench_parse_in(optarg, 1, 100000000, 'i');
			break;
		case 'S':
			o->sig_every = bench_parse_in(optarg, 1, SQ_DEPTH / 2, 'S');
			break;
		case 'n':
			o->windows = bench_parse_in(optarg, 1, 1000000, 'n');
			break;
		case 'W':
			o->window = bench_parse_in(optarg, 1, RQ_DEPTH / 2, 'W');
			break;
		case 'w':
			if (!strcmp(optarg, "event"))
				o->event = true;
			else if (strcmp(optarg, "poll"))
				bench_die("bad wait '%s' (poll, event)", optarg);
			break;
		case 'g':
			o->gidx = (int)bench_parse_in(optarg, 0, 255, 'g');
			break;
		case 'd':
			o->dev = optarg;
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

/* ---- verbs objects ---- */

static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	int n, i;

	list = ibv_get_device_list(&n);
	if (!list)
		bench_die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (i == n)
		bench_die("no device %s among %d", name, n);
	ctx = ibv_open_device(list[i]);
	if (!ctx)
		bench_die("ibv_open_device %s: %s", name, strerror(errno));
	ibv_free_device_list(list);
	return ctx;
}

static void post_recv(struct rc *r)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(r->buf + r->len),
			       .length = (uint32_t)r->len,
			       .lkey = r->mr->lkey };
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
	int err = ibv_post_recv(r->qp, &wr, &bad);

	if (err)
		bench_die("ibv_post_recv: %s", strerror(err));
}

static void setup(struct rc *r)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = RQ_DEPTH,
			 .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 64 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
						    IBV_ACCESS_REMOTE_WRITE };
	uint32_t big = r->o.lat_size > r->o.bw_size ? r->o.lat_size :
						      r->o.bw_size;
	int err;

	r->ctx = open_device(r->o.dev);
	if ((err = ibv_query_port(r->ctx, 1, &r->port)))
		bench_die("ibv_query_port: %s", strerror(err));
	if (r->port.state != IBV_PORT_ACTIVE)
		bench_die("port 1 of %s is not active", r->o.dev);
	if ((err = ibv_query_gid(r->ctx, 1, r->o.gidx, &r->gid)))
		bench_die("ibv_query_gid %d: %s", r->o.gidx, strerror(err));
	r->pd = ibv_alloc_pd(r->ctx);
	if (!r->pd)
		bench_die("ibv_alloc_pd: %s", strerror(errno));
	r->len = big < 64 ? 64 : big;
	r->buf = aligned_alloc(4096, (2 * r->len + 4095) & ~(size_t)4095);
	if (!r->buf)
		bench_die("cannot allocate 2 x %zu bytes", r->len);
	memset(r->buf, r->server ? 's' : 'c', 2 * r->len);
	r->mr = ibv_reg_mr(r->pd, r->buf, 2 * r->len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!r->mr)
		bench_die("ibv_reg_mr: %s", strerror(errno));
	if (r->o.event && !(r->chan = ibv_create_comp_channel(r->ctx)))
		bench_die("ibv_create_comp_channel: %s", strerror(errno));
	r->cq = ibv_create_cq(r->ctx, SQ_DEPTH + RQ_DEPTH, NULL, r->chan, 0);
	if (!r->cq)
		bench_die("ibv_create_cq: %s", strerror(errno));
	init.send_cq = init.recv_cq = r->cq;
	r->qp = ibv_create_qp(r->pd, &init);
	if (!r->qp) {
		init.cap.max_inline_data = 0;
		r->qp = ibv_create_qp(r->pd, &init);
	}
	if (!r->qp)
		bench_die("ibv_create_qp: %s", strerror(errno));
	r->max_inline = init.cap.max_inline_data;
	err = ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (err)
		bench_die("ibv_modify_qp to INIT: %s", strerror(err));
	for (int i = 0; i < RQ_DEPTH; i++)
		post_recv(r);
}

/* Swap hellos; connect the QP over a global path to the peer's GID. */
static void connect_qp(struct rc *r)
{
	const struct opts *o = &r->o;
	uint32_t psn = (uint32_t)lrand48() & 0xffffff;
	struct hello me = {
		.magic = htonl(WIRE_MAGIC), .qpn = htonl(r->qp->qp_num),
		.psn = htonl(psn), .rkey = htonl(r->mr->rkey),
		.addr = htobe64((uintptr_t)r->buf), .tests = htonl(o->tests),
		.write = htonl(o->write), .lat_size = htonl(o->lat_size),
		.bw_size = htonl(o->bw_size), .iters = htonl(o->iters),
		.windows = htonl(o->windows), .window = htonl(o->window),
		.event = htonl(o->event),
	}, peer;
	struct ibv_qp_attr a;
	int err;

	memcpy(me.gid, r->gid.raw, 16);
	bench_tcp_write(r->tcp, &me, sizeof(me));
	bench_tcp_read(r->tcp, &peer, sizeof(peer), 60);
	if (ntohl(peer.magic) != WIRE_MAGIC)
		bench_die("the peer is not udp_rc (bad magic)");
	if (peer.tests != me.tests || peer.write != me.write ||
	    peer.lat_size != me.lat_size || peer.bw_size != me.bw_size ||
	    peer.iters != me.iters || peer.windows != me.windows ||
	    peer.window != me.window || peer.event != me.event)
		bench_die("the two sides were given different options "
		    "(-t -o -s -m -i -n -W -w must agree)");
	r->raddr = be64toh(peer.addr);
	r->rkey = ntohl(peer.rkey);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = r->port.active_mtu;
	a.dest_qp_num = ntohl(peer.qpn);
	a.rq_psn = ntohl(peer.psn);
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)o->gidx;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	err = ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_AV |
			    IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (err)
		bench_die("ibv_modify_qp to RTR: %s", strerror(err));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	/* 4.096 us x 2^18 = 1.07 s per try: on a loaded 2-core test machine
	 * a process can go unscheduled for over a second, and with perftest's
	 * 14 (67 ms) seven retries ran out while the peer was only starved */
	a.timeout = 18;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	err = ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (err)
		bench_die("ibv_modify_qp to RTS: %s", strerror(err));
	bench_barrier(r->tcp);
}

/* ---- data path ---- */

/* One poll of the CQ: counts, reposts receives, dies on an error. */
static int progress(struct rc *r)
{
	struct ibv_wc wc[32];
	int n = ibv_poll_cq(r->cq, 32, wc);

	if (n < 0)
		bench_die("ibv_poll_cq failed");
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			bench_die("completion error: %s (opcode %d)",
			    ibv_wc_status_str(wc[i].status), wc[i].opcode);
		if (wc[i].opcode & IBV_WC_RECV) {
			if ((wc[i].wc_flags & IBV_WC_WITH_IMM) &&
			    ntohl(wc[i].imm_data) == ACK_IMM)
				r->acks_in++;
			else
				r->data_in++;
			post_recv(r);
		} else {
			r->sq_out -= r->batch[r->batch_head++ % SQ_DEPTH];
		}
	}
	return n;
}

/*
 * -w event: nothing to poll, so arm the CQ, look once more (a completion
 * that came before the arming raises no event), and sleep until the
 * channel says the CQ has something.
 */
static void sleep_on_cq(struct rc *r)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	if (ibv_req_notify_cq(r->cq, 0))
		bench_die("ibv_req_notify_cq failed");
	if (progress(r))
		return;
	if (ibv_get_cq_event(r->chan, &cq, &cq_ctx))
		bench_die("ibv_get_cq_event: %s", strerror(errno));
	ibv_ack_cq_events(cq, 1);
}

/* Spins until *count reaches want; dies after STALL_SECS of nothing. */
static void wait_for(struct rc *r, const uint64_t *count, uint64_t want,
		     const char *what)
{
	uint64_t since = bench_now_ns();

	for (uint64_t spins = 0; *count < want; spins++) {
		if (progress(r)) {
			spins = 0;
			continue;
		}
		if (r->o.event) {
			sleep_on_cq(r);
			continue;
		}
		if ((spins & 4095) == 4095) {
			if (spins == 4095)
				since = bench_now_ns();
			else if (bench_now_ns() - since >
				 STALL_SECS * 1000000000ull)
				bench_die("nothing for %d s while waiting "
					  "for %s", STALL_SECS, what);
		}
	}
}

static void wait_sq_room(struct rc *r, uint32_t room)
{
	uint64_t since = bench_now_ns();

	for (uint64_t spins = 0; r->sq_out > SQ_DEPTH - room; spins++) {
		if (progress(r))
			spins = 0;
		else if (r->o.event)
			sleep_on_cq(r);
		else if ((spins & 4095) == 4095 &&
			 bench_now_ns() - since > STALL_SECS * 1000000000ull)
			bench_die("no send completion for %d s", STALL_SECS);
	}
}

/*
 * A send WR, signaled if `sig` or every o.sig_every-th: a signaled
 * completion retires the unsignaled WRs before it too. A test ends on a
 * signaled WR, so that its send queue drains.
 */
static void post(struct rc *r, enum ibv_wr_opcode op, uint32_t size,
		 uint32_t imm, bool sig)
{
	struct ibv_sge sge = { .addr = (uintptr_t)r->buf, .length = size,
			       .lkey = r->mr->lkey };
	struct ibv_send_wr wr = { .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED,
				  .sg_list = size ? &sge : NULL,
				  .num_sge = size ? 1 : 0 }, *bad;
	int err;

	wait_sq_room(r, 1);
	r->unsig++;
	if (sig || r->unsig >= r->o.sig_every) {
		r->batch[r->batch_tail++ % SQ_DEPTH] = r->unsig;
		r->unsig = 0;
	} else {
		wr.send_flags &= ~IBV_SEND_SIGNALED;
	}
	if (size && size <= r->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM) {
		wr.wr.rdma.remote_addr = r->raddr + r->len;
		wr.wr.rdma.rkey = r->rkey;
	}
	wr.imm_data = htonl(imm);
	r->sq_out++;
	err = ibv_post_send(r->qp, &wr, &bad);
	if (err)
		bench_die("ibv_post_send: %s", strerror(err));
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void run_lat(struct rc *r)
{
	uint32_t iters = r->o.iters, skip = iters / 10 + 10;
	uint64_t *rtt = calloc(iters, sizeof(*rtt)), sum = 0;
	uint64_t base = r->data_in;
	bool client = !r->server;

	if (!rtt)
		bench_die("out of memory");
	bench_barrier(r->tcp);
	for (uint32_t i = 0; i < iters + skip; i++) {
		uint64_t t = bench_now_ns();
		bool last = i + 1 == iters + skip;

		if (client)
			post(r, IBV_WR_SEND, r->o.lat_size, 0, last);
		wait_for(r, &r->data_in, base + i + 1, "the peer's message");
		if (!client)
			post(r, IBV_WR_SEND, r->o.lat_size, 0, last);
		if (client && i >= skip) {
			rtt[i - skip] = bench_now_ns() - t;
			sum += rtt[i - skip];
		}
	}
	wait_sq_room(r, SQ_DEPTH);
	bench_barrier(r->tcp);
	if (client) {
		qsort(rtt, iters, sizeof(*rtt), cmp_u64);
		printf("# softib RC latency over GID (SEND ping-pong, one-way "
		       "= half the round trip%s)\n"
		       "# Size          Latency (us)    Median (us)\n"
		       "%-10u%18.2f%15.2f\n\n",
		       r->o.event ? "; sleeping in ibv_get_cq_event" : "",
		       r->o.lat_size,
		       sum / 2e3 / iters, rtt[iters / 2] / 2e3);
	}
	free(rtt);
}

static void run_bw(struct rc *r)
{
	uint32_t n = r->o.windows, skip = 1, w = r->o.window;
	uint64_t data0 = r->data_in, acks0 = r->acks_in, t0 = 0;
	uint32_t size = r->o.bw_size;

	bench_barrier(r->tcp);
	for (uint32_t i = 0; i < n + skip; i++) {
		if (i == skip)
			t0 = bench_now_ns();
		if (r->server) {
			/* SEND: a completion per message; WRITE: one, the
			 * immediate of the window's last */
			wait_for(r, &r->data_in,
				 data0 + (uint64_t)(i + 1) * (r->o.write ? 1 : w),
				 "the peer's window");
			post(r, IBV_WR_SEND_WITH_IMM, 0, ACK_IMM, true);
			continue;
		}
		for (uint32_t k = 0; k < w; k++) {
			if (!r->o.write)
				post(r, IBV_WR_SEND, size, 0, true);
			else if (k + 1 < w)
				post(r, IBV_WR_RDMA_WRITE, size, 0, true);
			else
				post(r, IBV_WR_RDMA_WRITE_WITH_IMM, size, 1, true);
		}
		wait_for(r, &r->acks_in, acks0 + i + 1, "the peer's answer");
	}
	double secs = (bench_now_ns() - t0) / 1e9;

	wait_sq_room(r, SQ_DEPTH);
	bench_barrier(r->tcp);
	if (!r->server)
		printf("# softib RC bandwidth over GID (%s, %u windows of %u)\n"
		       "# Size      Bandwidth (MB/s)\n%-10u%18.2f\n\n",
		       r->o.write ? "RDMA WRITE" : "SEND", n, w, size,
		       (double)size * w * n / secs / 1e6);
}

int main(int argc, char **argv)
{
	struct rc r = { 0 };

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_opts(argc, argv, &r.o);
	r.server = r.o.host == NULL;
	srand48(getpid() ^ (long)time(NULL));
	setup(&r);
	r.tcp = r.server ? bench_tcp_accept(r.o.port) :
			   bench_tcp_connect(r.o.host, r.o.port);
	connect_qp(&r);
	if (!r.server)
		printf("# %s port 1: active MTU %d bytes, GID index %d\n\n",
		       r.o.dev, 128 << r.port.active_mtu, r.o.gidx);
	if (r.o.tests & T_LAT)
		run_lat(&r);
	if (r.o.tests & T_BW)
		run_bw(&r);
	bench_barrier(r.tcp);
	close(r.tcp);
	if (ibv_destroy_qp(r.qp) || ibv_destroy_cq(r.cq) ||
	    (r.chan && ibv_destroy_comp_channel(r.chan)) ||
	    ibv_dereg_mr(r.mr) || ibv_dealloc_pd(r.pd) ||
	    ibv_close_device(r.ctx))
		bench_die("tearing down the verbs objects failed");
	free(r.buf);
	return 0;
}
