/*
 * softib_osu: osu-style latency and bandwidth at the verbs level, between
 * two processes over softib0 (RC QPs).
 *
 *   server:  softib_osu [options]
 *   client:  softib_osu [options] HOST
 *
 * The two sides meet on a small TCP connection (port -p) where they swap
 * what each needs to connect its QP (LID, GID, QPN, PSN, rkey, address)
 * and their options, which must agree.  The client prints the tables.
 *
 * Tests (-t): lat   ping-pong, half the round trip (sizes 0, 1, 2, 4 ...);
 *                   for RDMA READ the time of one read, as osu_get_latency
 *             bw    windows of 64 back-to-back messages, then an ack
 *             bibw  both sides send windows at once; the sum is reported
 * Operations (-o): send, write (RDMA WRITE; the last of a window carries an
 * immediate so that the target can ack it), read (RDMA READ; nothing to ack).
 *
 * Bandwidth is in MB/s (10^6 bytes per second).  From 64 KiB up each row
 * also gives the ratio to the shared-memory floor of DESIGN.md: one
 * process_vm_writev between two processes, ~12.6 GB/s at 64 KiB and
 * ~15 GB/s from 1 MiB.
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

const char bench_prog[] = "softib_osu";

#define DEFAULT_PORT   18515
#define DEFAULT_MAX    (4u << 20)
#define WINDOW         64
#define SIG_EVERY      16      /* unsignaled sends between signaled ones */
#define SQ_DEPTH       256
#define RQ_DEPTH       256
#define STALL_SECS     20      /* no completion for this long: give up */
#define WIRE_MAGIC     0x53494230u  /* "SIB0" */
#define ACK_IMM        0xac4u
#define DATA_IMM       0xda7au
#define CMA_FLOOR_64K  12600.0 /* MB/s, DESIGN.md */
#define CMA_FLOOR_1M   15000.0

enum { T_LAT = 1, T_BW = 2, T_BIBW = 4 };
enum op { OP_SEND, OP_WRITE, OP_READ };
static const char *const op_names[] = { "send", "write", "read" };

struct opts {
	unsigned tests;
	enum op op;
	int port;
	uint32_t max;
	uint32_t iters;   /* 0: the defaults of each size */
	const char *dev;
	const char *host; /* NULL: server */
	int gidx;         /* -g: source GID index; -1: LID path */
	bool post_time;   /* -P: time the client's ibv_post_send calls */
	bool median;      /* -M: lat (send): the median round trip too */
};

/* What the two sides swap over TCP; every field big-endian. */
struct wire {
	uint32_t magic;
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
	uint64_t addr;
	uint16_t lid;
	uint16_t pad;
	uint32_t tests;
	uint32_t op;
	uint32_t max;
	uint32_t iters;
	uint8_t gid[16];
};

struct bench {
	struct opts o;
	bool server;
	int sock;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_port_attr port;
	union ibv_gid gid;
	uint8_t *buf;           /* [0, max): send region; [max, 2max): receive */
	size_t region;          /* max, at least 64 */
	uint32_t max_inline;
	uint8_t rd_atom;
	uint64_t raddr;         /* peer's buffer */
	uint32_t rkey;
	/* Send queue accounting: a signaled completion carries in wr_id the
	 * number of WRs it retires (itself and the unsignaled ones before). */
	uint32_t unsig;
	uint32_t sq_out;
	uint64_t recv_data;     /* receive completions of data messages */
	uint64_t recv_ack;      /* ... of acks */
	/* -P: how long each ibv_post_send of the client took (ns) */
	uint64_t *post_ns;
	uint32_t npost, post_cap;
	/* -M: each iteration's half round trip (us), client, SEND latency */
	double *rt;
	uint32_t nrt, rt_cap;
};

static double now_us(void)
{
	return bench_now_ns() / 1e3;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: softib_osu [options]          (server)\n"
		"       softib_osu [options] HOST     (client)\n"
		"  -p PORT    TCP port of the exchange (default %d)\n"
		"  -t TEST    lat | bw | bibw | all (default lat)\n"
		"  -o OP      send | write | read (default send)\n"
		"  -m SIZE    largest message, k/m suffixes allowed "
		"(default 4m)\n"
		"  -n ITERS   iterations per size (default: osu's, fewer for "
		"large sizes)\n"
		"  -d DEV     device (default softib0)\n"
		"  -g INDEX   address the peer by GID (global path, source GID "
		"INDEX),\n"
		"             as across hosts (the UDP link) it must be\n"
		"  -P         lat: also the median time of one ibv_post_send "
		"(client),\n"
		"             the requester's own cost, whatever the peer does\n"
		"  -M         lat (send): also the median of the iterations' "
		"half round trips,\n"
		"             which a loaded machine's stalls move less than the mean\n"
		"Both sides must be given the same -t -o -m -n.\n",
		DEFAULT_PORT);
	exit(2);
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	int c;
	uint64_t v;

	*o = (struct opts){ .tests = T_LAT, .op = OP_SEND,
			    .port = DEFAULT_PORT, .max = DEFAULT_MAX,
			    .dev = "softib0", .gidx = -1 };
	while ((c = getopt(argc, argv, "p:t:o:m:n:d:g:PMh")) != -1) {
		switch (c) {
		case 'p':
			o->port = atoi(optarg);
			if (o->port <= 0 || o->port > 65535)
				bench_die("bad port '%s'", optarg);
			break;
		case 't':
			if (!strcmp(optarg, "lat"))
				o->tests = T_LAT;
			else if (!strcmp(optarg, "bw"))
				o->tests = T_BW;
			else if (!strcmp(optarg, "bibw"))
				o->tests = T_BIBW;
			else if (!strcmp(optarg, "all"))
				o->tests = T_LAT | T_BW | T_BIBW;
			else
				bench_die("bad test '%s' (lat, bw, bibw, all)",
					  optarg);
			break;
		case 'o':
			if (!strcmp(optarg, "send"))
				o->op = OP_SEND;
			else if (!strcmp(optarg, "write"))
				o->op = OP_WRITE;
			else if (!strcmp(optarg, "read"))
				o->op = OP_READ;
			else
				bench_die("bad operation '%s' "
					  "(send, write, read)", optarg);
			break;
		case 'm':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > (1u << 30))
				bench_die("-m must be in 1 .. 1g");
			o->max = (uint32_t)v;
			break;
		case 'n':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > 100000000)
				bench_die("-n must be in 1 .. 10^8");
			o->iters = (uint32_t)v;
			break;
		case 'd':
			o->dev = optarg;
			break;
		case 'P':
			o->post_time = true;
			break;
		case 'M':
			o->median = true;
			break;
		case 'g':
			o->gidx = atoi(optarg);
			if (o->gidx < 0 || o->gidx > 255)
				bench_die("bad GID index '%s'", optarg);
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

/* ---- verbs setup ---- */

static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int n, i;

	list = ibv_get_device_list(&n);
	if (!list)
		bench_die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (i == n)
		bench_die("no device %s among %d (is build/lib the libibverbs "
		    "in use?)", name, n);
	ctx = ibv_open_device(list[i]);
	if (!ctx)
		bench_die("ibv_open_device %s: %s", name, strerror(errno));
	ibv_free_device_list(list);
	return ctx;
}

static void post_recv(struct bench *b)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(b->buf + b->region),
			       .length = (uint32_t)b->region,
			       .lkey = b->mr->lkey };
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
	int err = ibv_post_recv(b->qp, &wr, &bad);

	if (err)
		bench_die("ibv_post_recv: %s", strerror(err));
}

static void setup(struct bench *b)
{
	struct ibv_device_attr dattr;
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = RQ_DEPTH,
			 .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 256 },
	};
	struct ibv_qp_attr attr;
	int err;

	b->ctx = open_device(b->o.dev);
	if (ibv_query_device(b->ctx, &dattr))
		bench_die("ibv_query_device failed");
	if ((err = ibv_query_port(b->ctx, 1, &b->port)))
		bench_die("ibv_query_port: %s", strerror(err));
	if (b->port.state != IBV_PORT_ACTIVE)
		bench_die("port 1 of %s is not active", b->o.dev);
	if ((err = ibv_query_gid(b->ctx, 1, b->o.gidx < 0 ? 0 : b->o.gidx,
				 &b->gid)))
		bench_die("ibv_query_gid: %s", strerror(err));
	b->rd_atom = dattr.max_qp_init_rd_atom < 16 ?
		     (uint8_t)dattr.max_qp_init_rd_atom : 16;
	if (b->rd_atom == 0)
		b->rd_atom = 1;

	b->pd = ibv_alloc_pd(b->ctx);
	if (!b->pd)
		bench_die("ibv_alloc_pd: %s", strerror(errno));
	b->region = b->o.max < 64 ? 64 : b->o.max;
	b->buf = aligned_alloc(4096, (2 * b->region + 4095) & ~(size_t)4095);
	if (!b->buf)
		bench_die("cannot allocate 2 x %zu bytes", b->region);
	memset(b->buf, b->server ? 's' : 'c', 2 * b->region);
	b->mr = ibv_reg_mr(b->pd, b->buf, 2 * b->region,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ);
	if (!b->mr)
		bench_die("ibv_reg_mr of %zu bytes: %s", 2 * b->region,
		    strerror(errno));
	b->cq = ibv_create_cq(b->ctx, SQ_DEPTH + RQ_DEPTH, NULL, NULL, 0);
	if (!b->cq)
		bench_die("ibv_create_cq: %s", strerror(errno));
	init.send_cq = init.recv_cq = b->cq;
	b->qp = ibv_create_qp(b->pd, &init);
	if (!b->qp) {
		/* Perhaps no inline data: ask again without. */
		init.cap.max_inline_data = 0;
		b->qp = ibv_create_qp(b->pd, &init);
	}
	if (!b->qp)
		bench_die("ibv_create_qp (RC): %s", strerror(errno));
	b->max_inline = init.cap.max_inline_data;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = 1;
	attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
			       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	err = ibv_modify_qp(b->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (err)
		bench_die("ibv_modify_qp to INIT: %s", strerror(err));
	for (int i = 0; i < RQ_DEPTH; i++)
		post_recv(b);
}

static void connect_qp(struct bench *b)
{
	struct wire me = { 0 }, peer;
	struct ibv_qp_attr attr;
	uint32_t psn = (uint32_t)lrand48() & 0xffffff;
	int err;

	me.magic = htobe32(WIRE_MAGIC);
	me.qpn = htobe32(b->qp->qp_num);
	me.psn = htobe32(psn);
	me.rkey = htobe32(b->mr->rkey);
	me.addr = htobe64((uintptr_t)b->buf);
	me.lid = htobe16(b->port.lid);
	me.tests = htobe32(b->o.tests);
	me.op = htobe32(b->o.op);
	me.max = htobe32(b->o.max);
	me.iters = htobe32(b->o.iters);
	memcpy(me.gid, b->gid.raw, 16);
	bench_tcp_write(b->sock, &me, sizeof(me));
	bench_tcp_read(b->sock, &peer, sizeof(peer), 60);
	if (be32toh(peer.magic) != WIRE_MAGIC)
		bench_die("the peer is not softib_osu (bad magic)");
	if (be32toh(peer.tests) != b->o.tests || be32toh(peer.op) != b->o.op ||
	    be32toh(peer.max) != b->o.max || be32toh(peer.iters) != b->o.iters)
		bench_die("the two sides were given different options "
		    "(-t -o -m -n must agree): peer has tests %#x op %s max %u iters %u",
		    be32toh(peer.tests),
		    be32toh(peer.op) < 3 ? op_names[be32toh(peer.op)] : "?",
		    be32toh(peer.max), be32toh(peer.iters));
	b->raddr = be64toh(peer.addr);
	b->rkey = be32toh(peer.rkey);

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = b->port.active_mtu;
	attr.dest_qp_num = be32toh(peer.qpn);
	attr.rq_psn = be32toh(peer.psn);
	attr.max_dest_rd_atomic = b->rd_atom;
	attr.min_rnr_timer = 1;
	attr.ah_attr.dlid = be16toh(peer.lid);
	attr.ah_attr.port_num = 1;
	if (b->o.gidx >= 0 || b->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		attr.ah_attr.is_global = 1;
		memcpy(attr.ah_attr.grh.dgid.raw, peer.gid, 16);
		attr.ah_attr.grh.hop_limit = 1;
		attr.ah_attr.grh.sgid_index = b->o.gidx < 0 ? 0 : (uint8_t)b->o.gidx;
	}
	err = ibv_modify_qp(b->qp, &attr, IBV_QP_STATE | IBV_QP_AV |
			    IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (err)
		bench_die("ibv_modify_qp to RTR: %s", strerror(err));
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = psn;
	attr.max_rd_atomic = b->rd_atom;
	err = ibv_modify_qp(b->qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (err)
		bench_die("ibv_modify_qp to RTS: %s", strerror(err));
	bench_barrier(b->sock); /* both QPs are ready to receive */
}

/* ---- data path ---- */

/* Polls the CQ once: counts completions, reposts receives.  Dies on an
 * error completion.  Returns how many completions it saw. */
static int progress(struct bench *b)
{
	struct ibv_wc wc[32];
	int n = ibv_poll_cq(b->cq, 32, wc);

	if (n < 0)
		bench_die("ibv_poll_cq failed");
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			bench_die("completion error: %s (status %d, opcode %d, "
			    "vendor_err %#x)", ibv_wc_status_str(wc[i].status),
			    wc[i].status, wc[i].opcode, wc[i].vendor_err);
		if (wc[i].opcode & IBV_WC_RECV) {
			if ((wc[i].wc_flags & IBV_WC_WITH_IMM) &&
			    be32toh(wc[i].imm_data) == ACK_IMM)
				b->recv_ack++;
			else
				b->recv_data++;
			post_recv(b);
		} else {
			b->sq_out -= (uint32_t)wc[i].wr_id;
		}
	}
	return n;
}

/* Stall watch for the busy-wait loops: call with the loop's spin count. */
static void check_stall(uint64_t spins, double *since, const char *what)
{
	double t;

	if (spins == 0) {
		*since = now_us();
		return;
	}
	if (spins % 4096)
		return;
	t = now_us();
	if (t - *since > STALL_SECS * 1e6)
		bench_die("nothing happened for %d s while waiting for %s "
		    "(is the peer alive?)", STALL_SECS, what);
}

static void wait_sq_empty(struct bench *b)
{
	double since = 0;

	for (uint64_t s = 0; b->sq_out; s++) {
		if (progress(b))
			s = 0;
		check_stall(s, &since, "send completions");
	}
}

static void wait_count(struct bench *b, const uint64_t *count, uint64_t want,
		       const char *what)
{
	double since = 0;

	for (uint64_t s = 0; *count < want; s++) {
		if (progress(b))
			s = 0;
		check_stall(s, &since, what);
	}
}

/* Posts one WR of the benchmark: SEND from the send region, WRITE from the
 * send region into the peer's receive region, READ from the peer's send
 * region into the local receive region.  Signals every SIG_EVERY-th WR and
 * those asked for. */
static void post(struct bench *b, enum ibv_wr_opcode opcode, uint32_t size,
		 uint32_t imm, bool signal)
{
	struct ibv_sge sge = { .addr = (uintptr_t)b->buf, .length = size,
			       .lkey = b->mr->lkey };
	struct ibv_send_wr wr = { .opcode = opcode }, *bad;
	double since = 0;
	int err;

	for (uint64_t s = 0; b->sq_out >= SQ_DEPTH; s++) {
		if (progress(b))
			s = 0;
		check_stall(s, &since, "room in the send queue");
	}
	if (size) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	switch (opcode) {
	case IBV_WR_RDMA_READ:
		sge.addr = (uintptr_t)(b->buf + b->region);
		wr.wr.rdma.remote_addr = b->raddr;
		wr.wr.rdma.rkey = b->rkey;
		break;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		wr.wr.rdma.remote_addr = b->raddr + b->region;
		wr.wr.rdma.rkey = b->rkey;
		/* fall through */
	default:
		if (size && size <= b->max_inline)
			wr.send_flags |= IBV_SEND_INLINE;
		break;
	}
	if (opcode == IBV_WR_SEND_WITH_IMM ||
	    opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htobe32(imm);
	b->unsig++;
	if (signal || b->unsig >= SIG_EVERY) {
		wr.send_flags |= IBV_SEND_SIGNALED;
		wr.wr_id = b->unsig;
		b->unsig = 0;
	}
	b->sq_out++;
	if (b->post_ns && b->npost < b->post_cap) {
		uint64_t t = bench_now_ns();

		err = ibv_post_send(b->qp, &wr, &bad);
		b->post_ns[b->npost++] = bench_now_ns() - t;
	} else {
		err = ibv_post_send(b->qp, &wr, &bad);
	}
	if (err)
		bench_die("ibv_post_send: %s", strerror(err));
}

/* Sends the ack of a window: an empty SEND carrying ACK_IMM. */
static void post_ack(struct bench *b, bool signal)
{
	post(b, IBV_WR_SEND_WITH_IMM, 0, ACK_IMM, signal);
}

/* After each size every WR is retired: the last WR of a size is always
 * signaled, so none is left unsignaled behind it. */
static void quiesce(struct bench *b)
{
	if (b->unsig)
		bench_die("internal error: %u unsignaled WRs at the end of "
			  "a size", b->unsig);
	wait_sq_empty(b);
}

/* ---- iteration counts: osu's defaults, scaled down for large sizes so
 * that `-t all` up to 4 MiB stays well under a minute ---- */

static uint32_t lat_iters(const struct opts *o, uint32_t size)
{
	uint64_t n = o->iters ? o->iters : (size <= 8192 ? 10000 : 1000);

	if (size > 65536) {
		n = n * 65536 / size;
		if (n < 20)
			n = o->iters && o->iters < 20 ? o->iters : 20;
	}
	return (uint32_t)n;
}

static uint32_t lat_skip(uint32_t size)
{
	return size <= 8192 ? 100 : size <= 65536 ? 10 : 2;
}

static uint32_t bw_iters(const struct opts *o, uint32_t size)
{
	uint64_t n = o->iters ? o->iters : (size <= 8192 ? 100 : 20);
	uint64_t budget = 512ull << 20; /* bytes per size, roughly */

	if ((uint64_t)size * WINDOW * n > budget) {
		n = budget / ((uint64_t)size * WINDOW);
		if (n < 2)
			n = 2;
	}
	return (uint32_t)n;
}

static uint32_t bw_skip(uint32_t size)
{
	return size <= 8192 ? 10 : 2;
}

/* ---- the tests ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* -M: the median half round trip of the last run_lat, in us. */
static double rt_median_us(struct bench *b)
{
	if (!b->nrt)
		return 0;
	qsort(b->rt, b->nrt, sizeof(*b->rt), cmp_double);
	return b->rt[b->nrt / 2];
}

/* -P: the median of the post times recorded since the last call, in us. */
static double post_median_us(struct bench *b)
{
	double m;

	if (!b->npost)
		return 0;
	qsort(b->post_ns, b->npost, sizeof(*b->post_ns), cmp_u64);
	m = (double)b->post_ns[b->npost / 2] / 1000.0;
	b->npost = 0;
	return m;
}

static double run_lat(struct bench *b, uint32_t size)
{
	uint32_t iters = lat_iters(&b->o, size), skip = lat_skip(size);
	volatile uint8_t *rx = b->buf + b->region + (size ? size - 1 : 0);
	uint8_t *tx = b->buf + (size ? size - 1 : 0);
	double t0 = 0, since;
	uint64_t base = b->recv_data;
	bool client = !b->server;

	if (b->o.op == OP_WRITE) {
		/* Arrival is seen by polling the last byte of the receive
		 * region for the tag of the iteration. */
		*rx = 0;
		bench_barrier(b->sock);
	}
	b->nrt = 0;
	for (uint32_t i = 0; i < iters + skip; i++) {
		uint8_t tag = (uint8_t)(i % 255 + 1);
		bool last = i == iters + skip - 1;
		double ti;

		if (i == skip)
			t0 = now_us();
		switch (b->o.op) {
		case OP_SEND:
			ti = now_us();
			if (client)
				post(b, IBV_WR_SEND, size, 0, last);
			wait_count(b, &b->recv_data, base + i + 1,
				   "the peer's message");
			if (!client)
				post(b, IBV_WR_SEND, size, 0, last);
			if (b->rt && i >= skip && b->nrt < b->rt_cap)
				b->rt[b->nrt++] = (now_us() - ti) / 2;
			break;
		case OP_WRITE:
			if (client) {
				*tx = tag;
				post(b, IBV_WR_RDMA_WRITE, size, 0, last);
			}
			since = 0;
			for (uint64_t s = 0; *rx != tag; s++) {
				if (progress(b))
					s = 0;
				check_stall(s, &since, "the peer's write");
			}
			if (!client) {
				*tx = tag;
				post(b, IBV_WR_RDMA_WRITE, size, 0, last);
			}
			break;
		case OP_READ:
			if (client) {
				post(b, IBV_WR_RDMA_READ, size, 0, true);
				wait_sq_empty(b);
			}
			break;
		}
	}
	double t = now_us() - t0;
	quiesce(b);
	bench_barrier(b->sock);
	return b->o.op == OP_READ ? t / iters : t / (2.0 * iters);
}

/* One window of messages toward the peer; for WRITE the last one carries
 * DATA_IMM so that the peer sees the window end. */
static void post_window(struct bench *b, uint32_t size)
{
	for (int w = 0; w < WINDOW; w++) {
		bool last = w == WINDOW - 1;

		switch (b->o.op) {
		case OP_SEND:
			post(b, IBV_WR_SEND, size, 0, last);
			break;
		case OP_WRITE:
			post(b, last ? IBV_WR_RDMA_WRITE_WITH_IMM :
				       IBV_WR_RDMA_WRITE, size, DATA_IMM, last);
			break;
		case OP_READ:
			post(b, IBV_WR_RDMA_READ, size, 0, last);
			break;
		}
	}
}

/* Receive completions one window produces at the peer. */
static uint64_t window_recvs(const struct bench *b)
{
	return b->o.op == OP_SEND ? WINDOW : b->o.op == OP_WRITE ? 1 : 0;
}

/* Returns MB/s (client side; the server's figure is meaningless). */
static double run_bw(struct bench *b, uint32_t size, bool bidir)
{
	uint32_t iters = bw_iters(&b->o, size), skip = bw_skip(size);
	uint64_t data0 = b->recv_data, ack0 = b->recv_ack;
	uint64_t per = window_recvs(b);
	bool sender = bidir || !b->server;
	double t0 = 0, t;

	for (uint32_t i = 0; i < iters + skip; i++) {
		if (i == skip)
			t0 = now_us();
		if (sender) {
			post_window(b, size);
			wait_sq_empty(b);
		}
		if (bidir || b->server)
			wait_count(b, &b->recv_data, data0 + (i + 1) * per,
				   "the peer's window");
		if (!bidir && b->o.op != OP_READ) {
			if (b->server)
				post_ack(b, i == iters + skip - 1);
			else
				wait_count(b, &b->recv_ack, ack0 + i + 1,
					   "the peer's ack");
		}
	}
	t = now_us() - t0;
	quiesce(b);
	bench_barrier(b->sock);
	return (bidir ? 2.0 : 1.0) * size * WINDOW * iters / t;
}

static void print_bw_row(uint32_t size, double mbs)
{
	double floor = size >= (1u << 20) ? CMA_FLOOR_1M :
		       size >= (64u << 10) ? CMA_FLOOR_64K : 0;

	if (floor > 0)
		printf("%-10u%18.2f%21.3f\n", size, mbs, mbs / floor);
	else
		printf("%-10u%18.2f\n", size, mbs);
	fflush(stdout);
}

static void table(struct bench *b, unsigned test)
{
	const char *op = op_names[b->o.op];
	bool client = !b->server;
	uint32_t first = test == T_LAT && b->o.op == OP_SEND ? 0 : 1;

	if (client) {
		if (test == T_LAT)
			printf("# softib verbs latency test (%s)\n"
			       "# Size          Latency (us)%s%s\n", op,
			       b->post_ns ? "   post (us, median)" : "",
			       b->rt ? "   median (us)" : "");
		else
			printf("# softib verbs %sbandwidth test (%s)\n"
			       "# Size      Bandwidth (MB/s)   "
			       "ratio to CMA floor\n",
			       test == T_BIBW ? "bi-directional " : "", op);
		fflush(stdout);
	}
	for (uint64_t size = first; size <= b->o.max;
	     size = size ? size * 2 : 1) {
		if (test == T_LAT) {
			double us;

			b->npost = 0;
			us = run_lat(b, (uint32_t)size);
			if (client && b->post_ns)
				printf("%-10u%18.2f%22.3f", (uint32_t)size, us,
				       post_median_us(b));
			else if (client)
				printf("%-10u%18.2f", (uint32_t)size, us);
			if (client && b->rt)
				printf("%16.2f", rt_median_us(b));
			if (client)
				printf("\n");
			if (client)
				fflush(stdout);
		} else {
			double mbs = run_bw(b, (uint32_t)size, test == T_BIBW);

			if (client)
				print_bw_row((uint32_t)size, mbs);
		}
	}
	if (client)
		printf("\n");
}

int main(int argc, char **argv)
{
	struct bench b = { 0 };

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_opts(argc, argv, &b.o);
	b.server = b.o.host == NULL;
	srand48(getpid() ^ (long)time(NULL));
	setup(&b);
	b.sock = b.server ? bench_tcp_accept(b.o.port)
			  : bench_tcp_connect(b.o.host, b.o.port);
	connect_qp(&b);
	if (b.o.post_time && !b.server) {
		b.post_cap = 1u << 16;
		b.post_ns = calloc(b.post_cap, sizeof(*b.post_ns));
		if (!b.post_ns)
			bench_die("out of memory");
	}
	if (b.o.median && !b.server && b.o.op == OP_SEND) {
		b.rt_cap = 1u << 20;
		b.rt = calloc(b.rt_cap, sizeof(*b.rt));
		if (!b.rt)
			bench_die("out of memory");
	}
	for (unsigned t = T_LAT; t <= T_BIBW; t <<= 1)
		if (b.o.tests & t)
			table(&b, t);
	bench_barrier(b.sock);
	close(b.sock);
	if (ibv_destroy_qp(b.qp) || ibv_destroy_cq(b.cq) ||
	    ibv_dereg_mr(b.mr) || ibv_dealloc_pd(b.pd) ||
	    ibv_close_device(b.ctx))
		bench_die("tearing down the verbs objects failed");
	free(b.buf);
	return 0;
}
