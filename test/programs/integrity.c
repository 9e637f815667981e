/*
 * integrity: data-integrity stress of the verbs data path.
 *
 *   integrity [-p procs] [-q qps_per_proc] [-n messages] [-s seed]
 *             [-t rc|uc|ud|all] [-d dev] [-T timeout]
 *
 * A server process and `procs` forked client processes.  Every client opens
 * `qps_per_proc` QPs of each chosen transport, each connected to a QP of its
 * own in the server; the two meet over a socketpair made before the fork.
 *
 * Every client QP runs a stream of operations drawn from a PRNG seeded by
 * (seed, sender): opcode, size (1 B .. 64 KiB, a few up to 1 MiB; up to the
 * path MTU on UD), remote offset.  The server runs the same PRNG, so it
 * knows what each message must be before it arrives: it posts each receive
 * for the message that will consume it (random scatter lists, 1..4 SGEs,
 * random offsets, canary bytes around and after every piece) and checks
 * every byte, the completion's opcode, length, immediate and source, and
 * the order.  Payloads carry the sender id and sequence number in their
 * first 8 bytes (when they have 8), then a pattern keyed by (seed, sender,
 * sequence).  Client sends use random gather lists and inline data (the
 * buffer is scribbled over right after an inline post).
 *
 *   SEND, SEND_WITH_IMM     checked in the server's receive buffer
 *   RDMA_WRITE              followed by a SEND_WITH_IMM naming the region,
 *                           on which the server checks it and its guards
 *   RDMA_WRITE_WITH_IMM     the server checks the region on its completion
 *   RDMA_READ               (RC) the client checks against the server's
 *                           read region, whose contents both know
 *   ATOMIC_FETCH_AND_ADD    (RC) on counters shared by all clients (final
 *                           sums, monotone fetches) and on a word private to
 *                           the QP (every fetched value exact)
 *   ATOMIC_CMP_AND_SWP      (RC) on the private word, hits and misses
 *
 * Flow control goes over the socketpair: the server tells each client up to
 * which sequence number receives are posted and which operations it has
 * checked, so UC and UD lose nothing and a write region is not reused
 * before the server has checked it.
 *
 * Prints a summary; exits non-zero on any error.
 */
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS    64
#define MAX_QPS      64           /* per process and transport */
#define MAX_SGE      4
#define LARGE        (1u << 20)   /* the largest message */
#define FOOT_EXTRA   128          /* lead, gaps and notify around data */
#define NSLOT        4            /* write slots per QP */
#define GUARD        64           /* canary bytes checked around a write */
#define SLOT         (LARGE + 4 * GUARD)
#define WAREA        ((size_t)NSLOT * SLOT)
#define RSIZE        (LARGE + 65536)  /* the read region */
#define NSHARED      8            /* shared atomic counters */
#define SQ_DEPTH     128
#define RQ_WINDOW    32           /* receives posted ahead per server QP */
#define FIFO_CAP     256
#define CANARY       0x5a
#define SCRIBBLE     0xee
#define QKEY         0x11111111u
#define NOTIFY_X     0x4e4f5446u
#define STALL_SECS   30
#define MAX_ERR_SHOW 30
#define GRH_LEN      40

enum qtype { Q_RC, Q_UC, Q_UD, Q_NTYPES };
static const char *const type_names[] = { "rc", "uc", "ud" };

enum kind {
	K_SEND, K_SEND_IMM, K_WRITE, K_WRITE_IMM, K_READ,
	K_FAA_SHARED, K_FAA_PRIV, K_CAS_PRIV, K_NKINDS
};
static const char *const kind_names[] = {
	"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM",
	"RDMA_READ", "FETCH_AND_ADD(shared)", "FETCH_AND_ADD(private)",
	"CMP_AND_SWP(private)"
};

/* Percent weight of each kind per transport: what each one allows. */
static const uint8_t kind_weight[Q_NTYPES][K_NKINDS] = {
	[Q_RC] = { 22, 14, 14, 14, 18, 6, 6, 6 },
	[Q_UC] = { 30, 20, 25, 25, 0, 0, 0, 0 },
	[Q_UD] = { 60, 40, 0, 0, 0, 0, 0, 0 },
};

static bool consumes_recv(int k)
{
	return k == K_SEND || k == K_SEND_IMM || k == K_WRITE ||
	       k == K_WRITE_IMM;
}

static bool is_write(int k)
{
	return k == K_WRITE || k == K_WRITE_IMM;
}

static bool is_atomic(int k)
{
	return k >= K_FAA_SHARED;
}

/* ---- randomness and patterns ---- */

#define GOLDEN 0x9e3779b97f4a7c15ull

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct rng {
	uint64_t s;
};

static uint64_t rng64(struct rng *r)
{
	r->s += GOLDEN;
	return mix64(r->s);
}

static uint32_t rng_below(struct rng *r, uint32_t n)
{
	return (uint32_t)(((rng64(r) >> 32) * n) >> 32);
}

/* What a message's bytes are: header (sender, seq) in bytes 0..7 when
 * hdr is set, then the pattern keyed by key, by byte position. */
struct msgid {
	uint64_t key;
	uint32_t sid, seq;
	bool hdr;
};

static uint64_t pattern_word(uint64_t key, uint64_t w)
{
	uint64_t v = key + w * GOLDEN;

	v ^= v >> 29;
	v *= 0xbf58476d1ce4e5b9ull;
	return v ^ (v >> 32);
}

/* Fills out[0, n) with the bytes at [pos, pos + n) of message m. */
static void stream_fill(const struct msgid *m, uint64_t pos, uint8_t *out,
			size_t n)
{
	while (n) {
		if (m->hdr && pos < 8) {
			uint32_t v = pos < 4 ? m->sid : m->seq;

			*out++ = (uint8_t)(v >> (8 * (pos & 3)));
			pos++;
			n--;
			continue;
		}
		uint64_t v = pattern_word(m->key, pos >> 3);
		unsigned b = pos & 7;

		if (b == 0 && n >= 8) {
			uint64_t le = htole64(v);

			memcpy(out, &le, 8);
			out += 8;
			pos += 8;
			n -= 8;
			continue;
		}
		for (; b < 8 && n; b++, n--, pos++)
			*out++ = (uint8_t)(v >> (8 * b));
	}
}

/* ---- options and shared parameters ---- */

struct params {
	int procs, qps;
	uint64_t messages;
	uint64_t seed;
	int ntypes;
	int types[Q_NTYPES];
	const char *dev;
	uint32_t mtu;            /* UD payload limit, from the server */
	uint8_t timeout;         /* RC ACK timeout (4.096 us * 2^timeout) */
};

static struct params P;
static const char *who = "integrity"; /* prefix of messages */
static int errors_shown;

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* A data error: counted by the caller, shown up to MAX_ERR_SHOW times. */
static void report(const char *fmt, ...)
{
	va_list ap;

	if (errors_shown++ >= MAX_ERR_SHOW) {
		if (errors_shown == MAX_ERR_SHOW + 1)
			fprintf(stderr, "%s: (further errors not shown)\n",
				who);
		return;
	}
	fprintf(stderr, "%s: ERROR: ", who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- the operation stream of one QP ---- */

struct op {
	uint32_t seq;
	uint8_t kind;
	uint32_t len;     /* data bytes; 8 for atomics */
	uint64_t roff;    /* write/read region offset; counter index */
	uint64_t arg;     /* add value or swap value */
	bool cas_hit;
	uint32_t imm;
	uint64_t key;
};

static uint32_t sender_id(int client, int type, int q)
{
	return (uint32_t)client << 16 | (uint32_t)type << 8 | (uint32_t)q;
}

static uint64_t stream_seed(uint32_t sid)
{
	return mix64(P.seed * GOLDEN ^ ((uint64_t)sid << 20) ^ 0x5eed);
}

static struct msgid op_msgid(const struct op *op, uint32_t sid)
{
	return (struct msgid){ .key = op->key, .sid = sid, .seq = op->seq,
			       .hdr = op->len >= 8 };
}

static struct msgid read_msgid(void)
{
	return (struct msgid){ .key = mix64(P.seed ^ 0x7ead7ead) };
}

static uint32_t gen_len(struct rng *r, int type)
{
	uint32_t p;

	if (type == Q_UD)
		return 1 + rng_below(r, P.mtu);
	p = rng_below(r, 100);
	if (p < 35)
		return 1 + rng_below(r, 64);
	if (p < 65)
		return 65 + rng_below(r, 4096 - 64);
	if (p < 97)
		return 4097 + rng_below(r, 65536 - 4096);
	return 65537 + rng_below(r, LARGE - 65536);
}

/* The next operation of a stream.  Client and server call it with the
 * same generator state, so they agree on everything it decides. */
static void gen_op(struct rng *r, int type, uint32_t sid, uint32_t seq,
		   struct op *op)
{
	uint32_t w = rng_below(r, 100), acc = 0;
	int k;

	for (k = 0; k < K_NKINDS - 1; k++) {
		acc += kind_weight[type][k];
		if (w < acc)
			break;
	}
	while (kind_weight[type][k] == 0)
		k--;
	memset(op, 0, sizeof(*op));
	op->seq = seq;
	op->kind = (uint8_t)k;
	op->key = mix64(P.seed ^ ((uint64_t)sid << 32 | seq) ^ 0xda7a);
	op->imm = (uint32_t)(op->key >> 32);
	if (is_atomic(k)) {
		op->len = 8;
		op->roff = rng_below(r, NSHARED);
		op->arg = k == K_FAA_SHARED ? 1 + rng_below(r, 1000) : rng64(r);
		op->cas_hit = rng_below(r, 4) != 0;
		return;
	}
	op->len = gen_len(r, type);
	if (is_write(k))
		op->roff = (uint64_t)(seq % NSLOT) * SLOT + GUARD +
			   rng_below(r, SLOT - 2 * GUARD - op->len + 1);
	else if (k == K_READ)
		op->roff = rng_below(r, RSIZE - op->len + 1);
}

/* ---- ring allocator over a registered arena (FIFO release) ---- */

struct ring {
	uint8_t *base;
	uint64_t size, head, tail; /* head, tail: ever-growing */
};

/* Returns the offset of n contiguous bytes, or -1; *end is what to release
 * them with. */
static int64_t ring_alloc(struct ring *r, uint64_t n, uint64_t *end)
{
	uint64_t pos = r->head;

	if (r->head == r->tail) /* empty: restart at 0, no waste */
		pos = r->head = r->tail = 0;
	if (pos % r->size + n > r->size)
		pos += r->size - pos % r->size;
	if (pos + n - r->tail > r->size)
		return -1;
	r->head = pos + n;
	*end = r->head;
	return (int64_t)(pos % r->size);
}

static void ring_release(struct ring *r, uint64_t end)
{
	r->tail = end;
}

static uint64_t ring_used(const struct ring *r)
{
	return r->head - r->tail;
}

/* ---- scatter/gather layouts: pieces carved out of a footprint ---- */

struct layout {
	int n;
	uint32_t off[MAX_SGE], len[MAX_SGE]; /* relative to the footprint */
};

/* Splits total bytes into 1..MAX_SGE non-empty pieces, with a random lead
 * (< 64) and gaps (< 16) between them: fits in total + FOOT_EXTRA - 16. */
static void layout_make(struct rng *r, uint32_t total, struct layout *lo)
{
	uint32_t k = 1 + rng_below(r, MAX_SGE), at, left = total;

	if (total == 0) {
		lo->n = 0;
		return;
	}
	if (k > total)
		k = total;
	lo->n = (int)k;
	at = rng_below(r, 64);
	for (uint32_t i = 0; i < k; i++) {
		uint32_t len = i == k - 1 ? left :
			       1 + rng_below(r, left - (k - 1 - i));

		lo->off[i] = at;
		lo->len[i] = len;
		left -= len;
		at += len + rng_below(r, 16);
	}
}

static int layout_sges(const struct layout *lo, uint8_t *base, uint32_t lkey,
		       struct ibv_sge *sge)
{
	for (int i = 0; i < lo->n; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)(base + lo->off[i]),
					   .length = lo->len[i], .lkey = lkey };
	return lo->n;
}

/* Fills the pieces with bytes [pos0, ...) of message m. */
static void scatter_fill(const struct layout *lo, uint8_t *base,
			 const struct msgid *m, uint64_t pos0)
{
	for (int i = 0; i < lo->n; i++) {
		stream_fill(m, pos0, base + lo->off[i], lo->len[i]);
		pos0 += lo->len[i];
	}
}

/* Copies bytes [pos, pos + n) of the scattered stream out of the pieces. */
static void gather(const struct layout *lo, const uint8_t *base, uint64_t pos,
		   uint8_t *out, size_t n)
{
	for (int i = 0; i < lo->n && n; i++) {
		if (pos >= lo->len[i]) {
			pos -= lo->len[i];
			continue;
		}
		size_t take = lo->len[i] - pos < n ? lo->len[i] - pos : n;

		memcpy(out, base + lo->off[i] + pos, take);
		out += take;
		n -= take;
		pos = 0;
	}
}

/* First byte in [p, p + n) that is not the canary, or -1. */
static int64_t find_not_canary(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != CANARY)
			return (int64_t)i;
	return -1;
}

/* Compares p[0, n) with bytes [pos, pos + n) of m.  Returns the index of
 * the first difference or -1; *got / *want the bytes there. */
static int64_t compare_stream(const uint8_t *p, size_t n,
			      const struct msgid *m, uint64_t pos,
			      uint8_t *got, uint8_t *want)
{
	uint8_t tmp[4096];

	for (size_t done = 0; done < n;) {
		size_t c = n - done < sizeof(tmp) ? n - done : sizeof(tmp);

		stream_fill(m, pos + done, tmp, c);
		if (memcmp(p + done, tmp, c)) {
			for (size_t i = 0; i < c; i++)
				if (p[done + i] != tmp[i]) {
					*got = p[done + i];
					*want = tmp[i];
					return (int64_t)(done + i);
				}
		}
		done += c;
	}
	return -1;
}

/* Checks a footprint of fp bytes holding pieces lo: of the scattered
 * stream, the first skip bytes are not checked (the GRH of UD), the next
 * n must be bytes [pos0, ...) of m, the rest of the pieces and everything
 * outside them the canary.  Describes the first fault in msg. */
static bool check_scatter(const uint8_t *base, uint32_t fp,
			  const struct layout *lo, uint32_t skip, uint32_t n,
			  const struct msgid *m, uint64_t pos0, char *msg,
			  size_t msz)
{
	uint32_t cur = 0, sp = 0;
	uint8_t got, want;
	int64_t bad;

	for (int i = 0; i <= lo->n; i++) {
		uint32_t end = i < lo->n ? lo->off[i] : fp;

		bad = find_not_canary(base + cur, end - cur);
		if (bad >= 0) {
			snprintf(msg, msz, "byte %#x of the buffer, outside "
				 "the scatter list, was overwritten (%#x)",
				 (unsigned)(cur + bad), base[cur + bad]);
			return false;
		}
		if (i == lo->n)
			break;
		/* piece i holds stream bytes [sp, sp + len) */
		const uint8_t *pc = base + lo->off[i];
		uint32_t len = lo->len[i], a = 0;

		if (sp < skip) /* GRH part */
			a = skip - sp < len ? skip - sp : len;
		if (a < len && sp + a < skip + n) {
			uint32_t dlen = skip + n - (sp + a);

			if (dlen > len - a)
				dlen = len - a;
			bad = compare_stream(pc + a, dlen, m,
					     pos0 + (sp + a - skip), &got,
					     &want);
			if (bad >= 0) {
				snprintf(msg, msz, "payload byte %" PRIu64
					 " is %#04x, expected %#04x (SGE %d "
					 "of %d)", sp + a - skip + bad, got,
					 want, i, lo->n);
				return false;
			}
			a += dlen;
		}
		bad = find_not_canary(pc + a, len - a);
		if (bad >= 0) {
			snprintf(msg, msz, "receive buffer byte %" PRIu64
				 " beyond the message was overwritten (%#x)",
				 (uint64_t)sp + a + bad, pc[a + bad]);
			return false;
		}
		sp += len;
		cur = lo->off[i] + len;
	}
	return true;
}

/* ---- socketpair records ---- */

enum rec_tag {
	R_CQP = 1,     /* client -> server: idx, a = qpn, b = sid */
	R_CREADY,      /* a = nqps, b = lid, c/d = gid */
	R_SPORT,       /* server -> client: a = mtu bytes, b = mtu enum,
			  c = lid, d = link layer */
	R_SGID,        /* a/b = gid */
	R_SGLOBAL,     /* a = read addr, b = read rkey, c = atomic addr,
			  d = atomic rkey */
	R_SQP,         /* idx, a = qpn, b = write addr, c = write rkey,
			  d = recv_limit << 32 | done_limit */
	R_SREADY,
	R_UPDATE,      /* idx, a = recv_limit, b = done_limit */
	R_FPRIV,       /* client -> server at the end: idx = global QP,
			  a = private word's value */
	R_FSHARED,     /* idx = counter, a = sum of adds */
	R_FKIND,       /* idx = kind, a = ops, b = bytes */
	R_FINAL,       /* a = ops, b = bytes, c = errors */
};

struct rec {
	uint32_t tag, idx;
	uint64_t a, b, c, d;
};

struct chan {
	int fd;
	size_t len;
	uint8_t buf[64 * sizeof(struct rec)];
};

/* False if the peer is gone. */
static bool chan_try_send(struct chan *ch, const struct rec *r, size_t n)
{
	const uint8_t *p = (const uint8_t *)r;
	size_t left = n * sizeof(*r);

	while (left) {
		ssize_t w = write(ch->fd, p, left);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		left -= (size_t)w;
	}
	return true;
}

static void chan_send(struct chan *ch, const struct rec *r, size_t n)
{
	if (!chan_try_send(ch, r, n))
		die("write to the socketpair: %s (the peer is gone)",
		    strerror(errno));
}

/* One record: 1; none within wait_ms: 0; the peer is gone: -1. */
static int chan_recv(struct chan *ch, struct rec *r, int wait_ms)
{
	for (;;) {
		if (ch->len >= sizeof(*r)) {
			memcpy(r, ch->buf, sizeof(*r));
			ch->len -= sizeof(*r);
			memmove(ch->buf, ch->buf + sizeof(*r), ch->len);
			return 1;
		}
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		int pr = poll(&pfd, 1, wait_ms);

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return 0;
		ssize_t got = read(ch->fd, ch->buf + ch->len,
				   sizeof(ch->buf) - ch->len);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			return -1;
		ch->len += (size_t)got;
	}
}

static void chan_expect(struct chan *ch, struct rec *r, uint32_t tag)
{
	int got = chan_recv(ch, r, STALL_SECS * 1000);

	if (got < 0)
		die("the peer closed the socketpair during setup");
	if (got == 0)
		die("no word from the peer for %d s during setup",
		    STALL_SECS);
	if (r->tag != tag)
		die("setup: record %u where %u was expected", r->tag, tag);
}

/* ---- verbs setup shared by both sides ---- */

struct port {
	struct ibv_port_attr attr;
	union ibv_gid gid;
};

static struct ibv_context *open_dev(struct port *pt)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	int n, i, err;

	list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), P.dev))
			break;
	if (i == n)
		die("no device %s (is build/lib the libibverbs in use?)",
		    P.dev);
	ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("ibv_open_device %s: %s", P.dev, strerror(errno));
	ibv_free_device_list(list);
	if ((err = ibv_query_port(ctx, 1, &pt->attr)))
		die("ibv_query_port: %s", strerror(err));
	if ((err = ibv_query_gid(ctx, 1, 0, &pt->gid)))
		die("ibv_query_gid: %s", strerror(err));
	return ctx;
}

static void *alloc_mem(size_t n)
{
	void *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);

	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *p, size_t n, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, p, n, access);

	if (!mr)
		die("ibv_reg_mr of %zu bytes: %s", n, strerror(errno));
	return mr;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, int type,
			      uint32_t sq, uint32_t rq, uint32_t *inl)
{
	static const enum ibv_qp_type qpt[] = { IBV_QPT_RC, IBV_QPT_UC,
						IBV_QPT_UD };
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = qpt[type],
		.cap = { .max_send_wr = sq, .max_recv_wr = rq,
			 .max_send_sge = MAX_SGE, .max_recv_sge = MAX_SGE,
			 .max_inline_data = 256 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT, err;

	if (!qp)
		die("ibv_create_qp (%s): %s", type_names[type],
		    strerror(errno));
	*inl = ia.cap.max_inline_data;
	if (type == Q_UD) {
		a.qkey = QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
				    IBV_ACCESS_REMOTE_WRITE;
		if (type == Q_RC)
			a.qp_access_flags |= IBV_ACCESS_REMOTE_READ |
					     IBV_ACCESS_REMOTE_ATOMIC;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if ((err = ibv_modify_qp(qp, &a, mask)))
		die("ibv_modify_qp %s to INIT: %s", type_names[type],
		    strerror(err));
	return qp;
}

static void fill_ah(struct ibv_ah_attr *ah, uint16_t lid, const uint8_t *gid,
		    bool eth)
{
	memset(ah, 0, sizeof(*ah));
	ah->dlid = lid;
	ah->port_num = 1;
	if (eth) {
		ah->is_global = 1;
		memcpy(ah->grh.dgid.raw, gid, 16);
		ah->grh.hop_limit = 1;
	}
}

/* INIT -> RTR -> RTS.  PSNs derive from the sender id, so both ends know
 * them without saying. */
static void connect_qp(struct ibv_qp *qp, int type, uint32_t dqpn,
		       uint16_t dlid, const uint8_t *dgid, bool eth,
		       enum ibv_mtu mtu, uint32_t rq_psn, uint32_t sq_psn)
{
	struct ibv_qp_attr a;
	int mask, err;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (type != Q_UD) {
		a.path_mtu = mtu;
		a.dest_qp_num = dqpn;
		a.rq_psn = rq_psn;
		fill_ah(&a.ah_attr, dlid, dgid, eth);
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
	}
	if (type == Q_RC) {
		a.max_dest_rd_atomic = 16;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if ((err = ibv_modify_qp(qp, &a, mask)))
		die("ibv_modify_qp %s to RTR: %s", type_names[type],
		    strerror(err));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == Q_RC) {
		a.timeout = P.timeout;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 16;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if ((err = ibv_modify_qp(qp, &a, mask)))
		die("ibv_modify_qp %s to RTS: %s", type_names[type],
		    strerror(err));
}

static uint32_t psn_of(uint32_t sid, int dir)
{
	return (uint32_t)mix64(P.seed ^ sid ^ ((uint64_t)dir << 40)) &
	       0xffffff;
}

/* QPs per client, and their indexes: local li = ti * qps + q; global
 * gi = client * per_client + li. */
static int per_client(void)
{
	return P.ntypes * P.qps;
}

static uint32_t ops_of(int gi)
{
	uint64_t nq = (uint64_t)P.procs * per_client();

	return (uint32_t)(P.messages / nq + ((uint64_t)gi < P.messages % nq));
}

static uint64_t priv_init(int gi)
{
	return mix64(P.seed ^ 0xa70a70 ^ (uint64_t)gi);
}

/* ======================== client ======================== */

struct pend {
	uint32_t seq;
	uint8_t kind, nwr;
	bool signaled;
	uint64_t ring_end;
	uint32_t len;
	uint64_t roff;
	uint32_t at;          /* footprint offset in the arena */
	struct layout lo;     /* READ landing */
	uint64_t expect;      /* atomics: the value the fetch must return */
	uint64_t add;
};

struct cqp {
	int type, q, li, gi;
	uint32_t sid;
	struct ibv_qp *qp;
	struct ibv_ah *ah;
	uint32_t max_inline;
	uint32_t sqpn;
	uint64_t waddr;
	uint32_t wrkey;
	struct ibv_mr *mr;
	struct ring ring;
	struct rng oprng, local;
	uint32_t nops, next;
	struct op op;
	bool have_op;
	uint32_t recv_limit, done_limit;
	struct pend fifo[FIFO_CAP];
	uint32_t fhead, ftail;     /* ever-growing */
	uint32_t sq_used, unsig_run;
	uint64_t priv;             /* the private word, as ops have left it */
	uint64_t shared_floor[NSHARED];
};

struct client {
	int id;
	struct chan ch;
	struct port pt;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	int nq;
	struct cqp *q;
	uint64_t raddr, aaddr;
	uint32_t rrkey, arkey;
	bool eth;
	uint64_t ops, bytes, errors;
	uint64_t kind_ops[K_NKINDS], kind_bytes[K_NKINDS];
	uint64_t shared_sum[NSHARED];
};

static void client_setup(struct client *cl)
{
	struct rec r;
	uint8_t sgid[16];
	uint16_t slid;
	enum ibv_mtu mtu;

	cl->ctx = open_dev(&cl->pt);
	cl->pd = ibv_alloc_pd(cl->ctx);
	if (!cl->pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	cl->nq = per_client();
	cl->q = calloc((size_t)cl->nq, sizeof(*cl->q));
	if (!cl->q)
		die("out of memory");
	cl->cq = ibv_create_cq(cl->ctx, cl->nq * SQ_DEPTH + 16, NULL, NULL, 0);
	if (!cl->cq)
		die("ibv_create_cq: %s", strerror(errno));
	for (int li = 0; li < cl->nq; li++) {
		struct cqp *q = &cl->q[li];
		size_t arena;

		q->type = P.types[li / P.qps];
		q->q = li % P.qps;
		q->li = li;
		q->gi = cl->id * cl->nq + li;
		q->sid = sender_id(cl->id, q->type, q->q);
		q->qp = make_qp(cl->pd, cl->cq, q->type, SQ_DEPTH, 1,
				&q->max_inline);
		/* Large enough that a stuck arena always ends with a
		 * signaled WR (see client_post). */
		arena = q->type == Q_UD ? 256 << 10 : 3 * (size_t)LARGE;
		q->ring.base = alloc_mem(arena);
		q->ring.size = arena;
		q->mr = reg(cl->pd, q->ring.base, arena,
			    IBV_ACCESS_LOCAL_WRITE);
		q->oprng.s = stream_seed(q->sid);
		q->local.s = mix64(stream_seed(q->sid) ^ 0xc11e);
		q->nops = ops_of(q->gi);
		q->priv = priv_init(q->gi);
		r = (struct rec){ .tag = R_CQP, .idx = (uint32_t)li,
				  .a = q->qp->qp_num, .b = q->sid };
		chan_send(&cl->ch, &r, 1);
	}
	r = (struct rec){ .tag = R_CREADY, .a = (uint64_t)cl->nq,
			  .b = cl->pt.attr.lid };
	memcpy(&r.c, cl->pt.gid.raw, 16);
	chan_send(&cl->ch, &r, 1);

	chan_expect(&cl->ch, &r, R_SPORT);
	P.mtu = (uint32_t)r.a;
	mtu = (enum ibv_mtu)r.b;
	slid = (uint16_t)r.c;
	cl->eth = r.d == IBV_LINK_LAYER_ETHERNET;
	chan_expect(&cl->ch, &r, R_SGID);
	memcpy(sgid, &r.a, 16);
	chan_expect(&cl->ch, &r, R_SGLOBAL);
	cl->raddr = r.a;
	cl->rrkey = (uint32_t)r.b;
	cl->aaddr = r.c;
	cl->arkey = (uint32_t)r.d;
	for (int i = 0; i < cl->nq; i++) {
		struct cqp *q;

		chan_expect(&cl->ch, &r, R_SQP);
		if (r.idx >= (uint32_t)cl->nq)
			die("setup: bad QP index %u", r.idx);
		q = &cl->q[r.idx];
		q->sqpn = (uint32_t)r.a;
		q->waddr = r.b;
		q->wrkey = (uint32_t)r.c;
		q->recv_limit = (uint32_t)(r.d >> 32);
		q->done_limit = (uint32_t)r.d;
		connect_qp(q->qp, q->type, q->sqpn, slid, sgid, cl->eth, mtu,
			   psn_of(q->sid, 1), psn_of(q->sid, 0));
		if (q->type == Q_UD) {
			struct ibv_ah_attr ah;

			fill_ah(&ah, slid, sgid, cl->eth);
			q->ah = ibv_create_ah(cl->pd, &ah);
			if (!q->ah)
				die("ibv_create_ah: %s", strerror(errno));
		}
	}
	chan_expect(&cl->ch, &r, R_SREADY);
}

static const char *qname(const struct cqp *q, char *buf, size_t n)
{
	snprintf(buf, n, "%s qp %d", type_names[q->type], q->q);
	return buf;
}

/* Posts the next operation of q if flow control, the send queue and the
 * arena allow.  Returns true if it posted. */
static bool client_post(struct client *cl, struct cqp *q)
{
	struct ibv_send_wr wr[2], *bad;
	struct ibv_sge sge[MAX_SGE], nsge;
	struct layout lo = { .n = 0 };
	struct pend *pe;
	struct op *op = &q->op;
	uint64_t end, need;
	int64_t at;
	uint8_t *base;
	uint32_t nwr;
	bool inl = false, signal;
	int err;

	if (q->next >= q->nops)
		return false;
	if (!q->have_op) {
		gen_op(&q->oprng, q->type, q->sid, q->next, op);
		q->have_op = true;
	}
	if (consumes_recv(op->kind) && op->seq >= q->recv_limit)
		return false;
	if (is_write(op->kind) && op->seq >= q->done_limit + NSLOT)
		return false;
	nwr = op->kind == K_WRITE ? 2 : 1;
	if (q->sq_used + nwr > SQ_DEPTH || q->ftail - q->fhead >= FIFO_CAP)
		return false;
	need = is_atomic(op->kind) ? 16 : op->len + FOOT_EXTRA;
	at = ring_alloc(&q->ring, need, &end);
	if (at < 0)
		return false;
	base = q->ring.base + at;

	pe = &q->fifo[q->ftail % FIFO_CAP];
	memset(pe, 0, sizeof(*pe));
	pe->seq = op->seq;
	pe->kind = op->kind;
	pe->nwr = (uint8_t)nwr;
	pe->ring_end = end;
	pe->len = op->len;
	pe->roff = op->roff;
	pe->at = (uint32_t)at;

	memset(wr, 0, sizeof(wr));
	wr[0].wr_id = (uint64_t)q->li << 32 | op->seq;
	wr[0].sg_list = sge;
	if (is_atomic(op->kind)) {
		uint8_t *res = (uint8_t *)(((uintptr_t)base + 7) & ~(uintptr_t)7);

		memset(res, CANARY, 8);
		pe->at = (uint32_t)(res - q->ring.base);
		sge[0] = (struct ibv_sge){ .addr = (uintptr_t)res, .length = 8,
					   .lkey = q->mr->lkey };
		wr[0].num_sge = 1;
		wr[0].wr.atomic.rkey = cl->arkey;
		pe->expect = q->priv;
		pe->add = op->arg;
		if (op->kind == K_FAA_SHARED) {
			wr[0].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
			wr[0].wr.atomic.remote_addr = cl->aaddr + op->roff * 8;
			wr[0].wr.atomic.compare_add = op->arg;
			cl->shared_sum[op->roff] += op->arg;
		} else {
			wr[0].wr.atomic.remote_addr =
				cl->aaddr + (NSHARED + (uint64_t)q->gi) * 8;
			if (op->kind == K_FAA_PRIV) {
				wr[0].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
				wr[0].wr.atomic.compare_add = op->arg;
				q->priv += op->arg;
			} else {
				wr[0].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
				wr[0].wr.atomic.compare_add = op->cas_hit ?
					q->priv : q->priv ^ (op->arg | 1);
				wr[0].wr.atomic.swap = op->arg;
				if (op->cas_hit)
					q->priv = op->arg;
			}
		}
	} else {
		struct msgid m = op_msgid(op, q->sid);

		layout_make(&q->local, op->len, &lo);
		if (op->kind == K_READ) {
			memset(base, CANARY, need);
			pe->lo = lo;
		} else {
			scatter_fill(&lo, base, &m, 0);
			inl = op->len <= q->max_inline &&
			      rng_below(&q->local, 2);
		}
		wr[0].num_sge = layout_sges(&lo, base, q->mr->lkey, sge);
		switch (op->kind) {
		case K_SEND:
			wr[0].opcode = IBV_WR_SEND;
			break;
		case K_SEND_IMM:
			wr[0].opcode = IBV_WR_SEND_WITH_IMM;
			wr[0].imm_data = htobe32(op->imm);
			break;
		case K_WRITE:
		case K_WRITE_IMM:
			wr[0].opcode = op->kind == K_WRITE ?
				IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
			wr[0].imm_data = htobe32(op->imm);
			wr[0].wr.rdma.remote_addr = q->waddr + op->roff;
			wr[0].wr.rdma.rkey = q->wrkey;
			break;
		case K_READ:
			wr[0].opcode = IBV_WR_RDMA_READ;
			wr[0].wr.rdma.remote_addr = cl->raddr + op->roff;
			wr[0].wr.rdma.rkey = cl->rrkey;
			break;
		}
		if (inl)
			wr[0].send_flags |= IBV_SEND_INLINE;
		if (op->kind != K_READ && op->kind != K_WRITE &&
		    rng_below(&q->local, 8) == 0)
			wr[0].send_flags |= IBV_SEND_SOLICITED;
	}
	if (q->type == Q_RC && rng_below(&q->local, 8) == 0)
		wr[0].send_flags |= IBV_SEND_FENCE;
	if (q->type == Q_UD) {
		wr[0].wr.ud.ah = q->ah;
		wr[0].wr.ud.remote_qpn = q->sqpn;
		wr[0].wr.ud.remote_qkey = QKEY;
	}
	if (op->kind == K_WRITE) {
		/* The notice that names the region: sid, seq, offset, len. */
		uint32_t note[4] = { htole32(q->sid), htole32(op->seq),
				     htole32((uint32_t)op->roff),
				     htole32(op->len) };
		uint8_t *nb = base + op->len + FOOT_EXTRA - 16;

		memcpy(nb, note, 16);
		nsge = (struct ibv_sge){ .addr = (uintptr_t)nb, .length = 16,
					 .lkey = q->mr->lkey };
		wr[0].next = &wr[1];
		wr[1].wr_id = wr[0].wr_id;
		wr[1].opcode = IBV_WR_SEND_WITH_IMM;
		wr[1].imm_data = htobe32(op->imm ^ NOTIFY_X);
		wr[1].sg_list = &nsge;
		wr[1].num_sge = 1;
		if (rng_below(&q->local, 2))
			wr[1].send_flags |= IBV_SEND_INLINE;
	}
	/* Signal most WRs, and always when resources run short: then the
	 * WR that a stuck post waits behind is a signaled one. */
	signal = rng_below(&q->local, 4) != 0 || q->unsig_run >= 3 ||
		 q->next + 1 == q->nops ||
		 ring_used(&q->ring) > q->ring.size / 4 ||
		 q->sq_used + nwr > SQ_DEPTH / 4;
	if (signal)
		wr[nwr - 1].send_flags |= IBV_SEND_SIGNALED;
	pe->signaled = signal;
	q->unsig_run = signal ? 0 : q->unsig_run + 1;

	err = ibv_post_send(q->qp, wr, &bad);
	if (err) {
		char qn[32];

		die("client %d %s: ibv_post_send of seq %u (%s, %u bytes, %d "
		    "SGEs%s): %s", cl->id, qname(q, qn, sizeof(qn)), op->seq,
		    kind_names[op->kind], op->len, wr[0].num_sge,
		    inl ? ", inline" : "", strerror(err));
	}
	if (inl) /* the buffer is ours again on return */
		for (int i = 0; i < lo.n; i++)
			memset(base + lo.off[i], SCRIBBLE, lo.len[i]);
	if (op->kind == K_WRITE && (wr[1].send_flags & IBV_SEND_INLINE))
		memset(base + op->len + FOOT_EXTRA - 16, SCRIBBLE, 16);
	q->sq_used += nwr;
	q->ftail++;
	q->next++;
	q->have_op = false;
	return true;
}

/* An operation is complete: check what came back, free its resources. */
static void client_retire(struct client *cl, struct cqp *q, struct pend *pe)
{
	char qn[32], msg[256];
	uint8_t *base = q->ring.base + pe->at;

	if (pe->kind == K_READ) {
		struct msgid m = read_msgid();

		if (!check_scatter(base, pe->len + FOOT_EXTRA, &pe->lo, 0,
				   pe->len, &m, pe->roff, msg, sizeof(msg))) {
			cl->errors++;
			report("client %d %s seq %u RDMA_READ of %u bytes at "
			       "%#" PRIx64 ": %s", cl->id,
			       qname(q, qn, sizeof(qn)), pe->seq, pe->len,
			       pe->roff, msg);
		}
	} else if (is_atomic(pe->kind)) {
		uint64_t got;

		memcpy(&got, base, 8);
		if (pe->kind == K_FAA_SHARED) {
			uint64_t *floor = &q->shared_floor[pe->roff];

			/* Others only add: what this QP fetches never falls
			 * below what it last left there. */
			if (got < *floor) {
				cl->errors++;
				report("client %d %s seq %u FETCH_AND_ADD on "
				       "shared counter %" PRIu64 " fetched "
				       "%" PRIu64 ", below %" PRIu64
				       " left by this QP before", cl->id,
				       qname(q, qn, sizeof(qn)), pe->seq,
				       pe->roff, got, *floor);
			}
			*floor = got + pe->add;
		} else if (got != pe->expect) {
			cl->errors++;
			report("client %d %s seq %u %s on the private word "
			       "fetched %#" PRIx64 ", expected %#" PRIx64,
			       cl->id, qname(q, qn, sizeof(qn)), pe->seq,
			       kind_names[pe->kind], got, pe->expect);
		}
	}
	cl->ops++;
	cl->bytes += pe->len;
	cl->kind_ops[pe->kind]++;
	cl->kind_bytes[pe->kind] += pe->len;
	q->sq_used -= pe->nwr;
	ring_release(&q->ring, pe->ring_end);
}

static enum ibv_wc_opcode expected_wc(int kind)
{
	switch (kind) {
	case K_WRITE_IMM: return IBV_WC_RDMA_WRITE;
	case K_READ: return IBV_WC_RDMA_READ;
	case K_FAA_SHARED: case K_FAA_PRIV: return IBV_WC_FETCH_ADD;
	case K_CAS_PRIV: return IBV_WC_COMP_SWAP;
	default: return IBV_WC_SEND; /* SEND, SEND_IMM, WRITE's notice */
	}
}

static void client_completion(struct client *cl, const struct ibv_wc *wc)
{
	uint32_t li = (uint32_t)(wc->wr_id >> 32), seq = (uint32_t)wc->wr_id;
	struct cqp *q;
	struct pend *pe = NULL;
	char qn[32];

	if (li >= (uint32_t)cl->nq)
		die("client %d: completion with unknown wr_id %#" PRIx64
		    " (status %s)", cl->id, wc->wr_id,
		    ibv_wc_status_str(wc->status));
	q = &cl->q[li];
	if (wc->status != IBV_WC_SUCCESS) {
		const char *k = "?";

		for (uint32_t i = q->fhead; i != q->ftail; i++)
			if (q->fifo[i % FIFO_CAP].seq == seq)
				k = kind_names[q->fifo[i % FIFO_CAP].kind];
		die("client %d %s: seq %u (%s) completed with %s (status %d, "
		    "vendor_err %#x)", cl->id, qname(q, qn, sizeof(qn)), seq,
		    k, ibv_wc_status_str(wc->status), wc->status,
		    wc->vendor_err);
	}
	/* Send-queue completions come in order: this one retires every
	 * unsignaled WR before it. */
	while (q->fhead != q->ftail &&
	       (int32_t)(q->fifo[q->fhead % FIFO_CAP].seq - seq) <= 0) {
		pe = &q->fifo[q->fhead % FIFO_CAP];
		client_retire(cl, q, pe);
		q->fhead++;
	}
	if (!pe || pe->seq != seq || !pe->signaled) {
		cl->errors++;
		report("client %d %s: completion for seq %u that is not "
		       "outstanding or not signaled (duplicate or out of "
		       "order)", cl->id, qname(q, qn, sizeof(qn)), seq);
		return;
	}
	if (wc->opcode != expected_wc(pe->kind)) {
		cl->errors++;
		report("client %d %s seq %u %s: completion opcode %d, "
		       "expected %d", cl->id, qname(q, qn, sizeof(qn)), seq,
		       kind_names[pe->kind], wc->opcode,
		       expected_wc(pe->kind));
	}
	if (wc->qp_num != q->qp->qp_num) {
		cl->errors++;
		report("client %d %s seq %u: completion names QP %#x, not "
		       "%#x", cl->id, qname(q, qn, sizeof(qn)), seq,
		       wc->qp_num, q->qp->qp_num);
	}
}

static bool client_done(const struct client *cl)
{
	for (int i = 0; i < cl->nq; i++) {
		const struct cqp *q = &cl->q[i];

		if (q->next < q->nops || q->fhead != q->ftail ||
		    q->done_limit < q->nops)
			return false;
	}
	return true;
}

static void client_dump(const struct client *cl)
{
	for (int i = 0; i < cl->nq; i++) {
		const struct cqp *q = &cl->q[i];

		fprintf(stderr, "  client %d %s qp %d: posted %u/%u, "
			"outstanding %u (sq %u), server: receives up to %u, "
			"checked up to %u; arena %" PRIu64 "/%" PRIu64 "\n",
			cl->id, type_names[q->type], q->q, q->next, q->nops,
			q->ftail - q->fhead, q->sq_used, q->recv_limit,
			q->done_limit, ring_used(&q->ring), q->ring.size);
	}
}

static int client_main(int id, int fd)
{
	struct client *cl = calloc(1, sizeof(*cl));
	struct ibv_wc wc[32];
	struct rec r;
	double last = now_s();
	unsigned idle = 0;

	if (!cl)
		die("out of memory");
	static char name[32];
	snprintf(name, sizeof(name), "integrity[client %d]", id);
	who = name;
	cl->id = id;
	cl->ch.fd = fd;
	client_setup(cl);

	while (!client_done(cl)) {
		bool busy = false;
		int n = ibv_poll_cq(cl->cq, 32, wc);

		if (n < 0)
			die("ibv_poll_cq failed");
		for (int i = 0; i < n; i++)
			client_completion(cl, &wc[i]);
		busy = n > 0;
		for (;;) {
			int got = chan_recv(&cl->ch, &r, 0);

			if (got < 0)
				die("the server went away");
			if (!got)
				break;
			if (r.tag != R_UPDATE || r.idx >= (uint32_t)cl->nq)
				die("unexpected record %u from the server",
				    r.tag);
			cl->q[r.idx].recv_limit = (uint32_t)r.a;
			cl->q[r.idx].done_limit = (uint32_t)r.b;
			busy = true;
		}
		for (int i = 0; i < cl->nq; i++)
			for (int k = 0; k < 8 && client_post(cl, &cl->q[i]);
			     k++)
				busy = true;
		if (busy) {
			last = now_s();
			idle = 0;
			continue;
		}
		if (++idle < 64)
			continue;
		if (idle < 4096) {
			sched_yield();
			continue;
		}
		/* Long idle: wait for the server on the socketpair. */
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		poll(&pfd, 1, 1);
		if (now_s() - last > STALL_SECS) {
			fprintf(stderr, "%s: no progress for %d s:\n", who,
				STALL_SECS);
			client_dump(cl);
			exit(1);
		}
	}

	/* Report: private words, shared sums, per-kind counts, totals. */
	for (int i = 0; i < cl->nq; i++)
		if (cl->q[i].type == Q_RC) {
			r = (struct rec){ .tag = R_FPRIV,
					  .idx = (uint32_t)cl->q[i].gi,
					  .a = cl->q[i].priv };
			chan_send(&cl->ch, &r, 1);
		}
	for (int c = 0; c < NSHARED; c++) {
		r = (struct rec){ .tag = R_FSHARED, .idx = (uint32_t)c,
				  .a = cl->shared_sum[c] };
		chan_send(&cl->ch, &r, 1);
	}
	for (int k = 0; k < K_NKINDS; k++) {
		r = (struct rec){ .tag = R_FKIND, .idx = (uint32_t)k,
				  .a = cl->kind_ops[k],
				  .b = cl->kind_bytes[k] };
		chan_send(&cl->ch, &r, 1);
	}
	r = (struct rec){ .tag = R_FINAL, .a = cl->ops, .b = cl->bytes,
			  .c = cl->errors };
	chan_send(&cl->ch, &r, 1);

	for (int i = 0; i < cl->nq; i++) {
		struct cqp *q = &cl->q[i];

		if ((q->ah && ibv_destroy_ah(q->ah)) || ibv_destroy_qp(q->qp) ||
		    ibv_dereg_mr(q->mr))
			die("tearing down QP %d failed", i);
		free(q->ring.base);
	}
	if (ibv_destroy_cq(cl->cq) || ibv_dealloc_pd(cl->pd) ||
	    ibv_close_device(cl->ctx))
		die("tearing down failed");
	return cl->errors ? 1 : 0;
}

/* ======================== server ======================== */

struct expect {
	struct op op;
	struct layout lo;
	uint32_t at, fp, cap;
	uint64_t ring_end;
};

struct sqp {
	int client, type, q, gi;
	uint32_t sid, cqpn;
	struct ibv_qp *qp;
	uint32_t max_inline;
	struct ring ring;
	struct ibv_mr *rmr;
	uint8_t *warea;
	struct ibv_mr *wmr;
	struct rng mirror, local;
	uint32_t nops, scan;
	struct op next_op;
	bool have_next;
	struct expect fifo[RQ_WINDOW];
	uint32_t fhead, ftail;
	uint32_t sent_recv, sent_done;
	bool dirty;
};

struct server {
	struct port pt;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	int nqp;
	struct sqp *q;
	uint8_t *rregion, *aregion;
	struct ibv_mr *rmr, *amr;
	struct chan ch[MAX_PROCS];
	pid_t pid[MAX_PROCS];
	bool final[MAX_PROCS];
	uint64_t errors, ops, bytes, client_errors;
	uint64_t kind_ops[K_NKINDS], kind_bytes[K_NKINDS];
	uint64_t shared_sum[NSHARED];
	uint64_t *priv_final;
	bool *priv_seen;
	uint64_t recv_msgs;
};

static void server_kill_all(struct server *s)
{
	for (int c = 0; c < P.procs; c++)
		if (s->pid[c] > 0)
			kill(s->pid[c], SIGKILL);
}

static void server_fatal(struct server *s, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	server_kill_all(s);
	for (int c = 0; c < P.procs; c++)
		if (s->pid[c] > 0)
			waitpid(s->pid[c], NULL, 0);
	exit(1);
}

static uint32_t srv_recv_limit(const struct sqp *q)
{
	return q->scan;
}

static uint32_t srv_done_limit(const struct sqp *q)
{
	return q->fhead != q->ftail ? q->fifo[q->fhead % RQ_WINDOW].op.seq
				    : q->scan;
}

/* Posts receives for the coming receive-consuming operations of q, as
 * many as the window and the arena allow. */
static void server_fill(struct server *s, struct sqp *q)
{
	while (q->ftail - q->fhead < RQ_WINDOW) {
		struct ibv_recv_wr wr = { 0 }, *bad;
		struct ibv_sge sge[MAX_SGE];
		struct expect *e;
		uint32_t cap, fp;
		uint64_t end;
		int64_t at;
		int err;

		if (!q->have_next) {
			if (q->scan >= q->nops)
				break;
			gen_op(&q->mirror, q->type, q->sid, q->scan,
			       &q->next_op);
			q->have_next = true;
		}
		if (!consumes_recv(q->next_op.kind)) {
			q->scan++;
			q->have_next = false;
			continue;
		}
		switch (q->next_op.kind) {
		case K_WRITE:
			cap = 16;
			break;
		case K_WRITE_IMM:
			cap = 0;
			break;
		default:
			cap = q->next_op.len + (q->type == Q_UD ? GRH_LEN : 0);
		}
		cap += rng_below(&q->local, 33); /* room to spare */
		fp = cap + FOOT_EXTRA;
		at = ring_alloc(&q->ring, fp, &end);
		if (at < 0)
			break;
		e = &q->fifo[q->ftail % RQ_WINDOW];
		e->op = q->next_op;
		e->at = (uint32_t)at;
		e->fp = fp;
		e->cap = cap;
		e->ring_end = end;
		layout_make(&q->local, cap, &e->lo);
		memset(q->ring.base + at, CANARY, fp);
		wr.wr_id = (uint64_t)(q - s->q) << 32 | e->op.seq;
		wr.sg_list = sge;
		wr.num_sge = layout_sges(&e->lo, q->ring.base + at,
					 q->rmr->lkey, sge);
		err = ibv_post_recv(q->qp, &wr, &bad);
		if (err)
			server_fatal(s, "ibv_post_recv (%s, %d SGEs, %u "
				     "bytes): %s", type_names[q->type],
				     wr.num_sge, cap, strerror(err));
		q->ftail++;
		q->scan++;
		q->have_next = false;
	}
	if (srv_recv_limit(q) != q->sent_recv ||
	    srv_done_limit(q) != q->sent_done)
		q->dirty = true;
}

static void server_setup(struct server *s)
{
	int per = per_client();
	struct rec r;
	uint8_t cgid[MAX_PROCS][16];
	uint16_t clid[MAX_PROCS];
	size_t asize;

	s->ctx = open_dev(&s->pt);
	P.mtu = 128u << s->pt.attr.active_mtu;
	s->pd = ibv_alloc_pd(s->ctx);
	if (!s->pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	s->nqp = P.procs * per;
	s->q = calloc((size_t)s->nqp, sizeof(*s->q));
	s->priv_final = calloc((size_t)s->nqp, sizeof(uint64_t));
	s->priv_seen = calloc((size_t)s->nqp, sizeof(bool));
	if (!s->q || !s->priv_final || !s->priv_seen)
		die("out of memory");
	s->cq = ibv_create_cq(s->ctx, s->nqp * RQ_WINDOW + 16, NULL, NULL, 0);
	if (!s->cq)
		die("ibv_create_cq: %s", strerror(errno));

	/* The read region (contents known to all) and the atomic words:
	 * NSHARED shared counters, then one private word per QP. */
	s->rregion = alloc_mem(RSIZE);
	{
		struct msgid m = read_msgid();

		stream_fill(&m, 0, s->rregion, RSIZE);
	}
	s->rmr = reg(s->pd, s->rregion, RSIZE, IBV_ACCESS_REMOTE_READ);
	asize = ((size_t)NSHARED + s->nqp) * 8;
	s->aregion = alloc_mem(asize);
	memset(s->aregion, 0, asize);
	for (int gi = 0; gi < s->nqp; gi++) {
		uint64_t v = priv_init(gi);

		memcpy(s->aregion + (NSHARED + gi) * 8, &v, 8);
	}
	s->amr = reg(s->pd, s->aregion, asize, IBV_ACCESS_LOCAL_WRITE |
		     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_WRITE);

	for (int gi = 0; gi < s->nqp; gi++) {
		struct sqp *q = &s->q[gi];
		int li = gi % per;
		size_t arena;

		q->client = gi / per;
		q->type = P.types[li / P.qps];
		q->q = li % P.qps;
		q->gi = gi;
		q->sid = sender_id(q->client, q->type, q->q);
		q->qp = make_qp(s->pd, s->cq, q->type, 1, RQ_WINDOW,
				&q->max_inline);
		arena = q->type == Q_UD ? 256 << 10 :
					  2 * (size_t)LARGE + (256 << 10);
		q->ring.base = alloc_mem(arena);
		q->ring.size = arena;
		q->rmr = reg(s->pd, q->ring.base, arena,
			     IBV_ACCESS_LOCAL_WRITE);
		if (q->type != Q_UD) {
			q->warea = alloc_mem(WAREA);
			memset(q->warea, CANARY, WAREA);
			q->wmr = reg(s->pd, q->warea, WAREA,
				     IBV_ACCESS_LOCAL_WRITE |
				     IBV_ACCESS_REMOTE_WRITE);
		}
		q->mirror.s = stream_seed(q->sid);
		q->local.s = mix64(stream_seed(q->sid) ^ 0x5e7e);
		q->nops = ops_of(gi);
	}

	/* Each client's QPs, then connect ours to them. */
	for (int c = 0; c < P.procs; c++) {
		for (int i = 0; i < per; i++) {
			struct sqp *q;

			chan_expect(&s->ch[c], &r, R_CQP);
			if (r.idx >= (uint32_t)per)
				server_fatal(s, "setup: bad QP index %u",
					     r.idx);
			q = &s->q[c * per + (int)r.idx];
			if (r.b != q->sid)
				server_fatal(s, "setup: client %d QP %u has "
					     "sender id %#" PRIx64 ", not %#x",
					     c, r.idx, r.b, q->sid);
			q->cqpn = (uint32_t)r.a;
		}
		chan_expect(&s->ch[c], &r, R_CREADY);
		clid[c] = (uint16_t)r.b;
		memcpy(cgid[c], &r.c, 16);
	}
	for (int gi = 0; gi < s->nqp; gi++) {
		struct sqp *q = &s->q[gi];

		connect_qp(q->qp, q->type, q->cqpn, clid[q->client],
			   cgid[q->client],
			   s->pt.attr.link_layer == IBV_LINK_LAYER_ETHERNET,
			   s->pt.attr.active_mtu, psn_of(q->sid, 0),
			   psn_of(q->sid, 1));
		server_fill(s, q);
	}
	for (int c = 0; c < P.procs; c++) {
		r = (struct rec){ .tag = R_SPORT, .a = P.mtu,
				  .b = s->pt.attr.active_mtu,
				  .c = s->pt.attr.lid,
				  .d = s->pt.attr.link_layer };
		chan_send(&s->ch[c], &r, 1);
		r = (struct rec){ .tag = R_SGID };
		memcpy(&r.a, s->pt.gid.raw, 16);
		chan_send(&s->ch[c], &r, 1);
		r = (struct rec){ .tag = R_SGLOBAL,
				  .a = (uintptr_t)s->rregion,
				  .b = s->rmr->rkey,
				  .c = (uintptr_t)s->aregion,
				  .d = s->amr->rkey };
		chan_send(&s->ch[c], &r, 1);
		for (int i = 0; i < per; i++) {
			struct sqp *q = &s->q[c * per + i];

			q->sent_recv = srv_recv_limit(q);
			q->sent_done = srv_done_limit(q);
			q->dirty = false;
			r = (struct rec){ .tag = R_SQP, .idx = (uint32_t)i,
					  .a = q->qp->qp_num,
					  .b = (uintptr_t)q->warea,
					  .c = q->wmr ? q->wmr->rkey : 0,
					  .d = (uint64_t)q->sent_recv << 32 |
					       q->sent_done };
			chan_send(&s->ch[c], &r, 1);
		}
		r = (struct rec){ .tag = R_SREADY };
		chan_send(&s->ch[c], &r, 1);
	}
}

/* Checks the written region of e and its guards, then restores the
 * canary so that the slot is clean for its next write. */
static bool server_check_region(struct sqp *q, const struct expect *e,
				char *msg, size_t msz)
{
	struct msgid m = op_msgid(&e->op, q->sid);
	uint8_t *reg = q->warea + e->op.roff, got, want;
	int64_t bad;

	bad = find_not_canary(reg - GUARD, GUARD);
	if (bad < 0)
		bad = find_not_canary(reg + e->op.len, GUARD);
	if (bad >= 0) {
		snprintf(msg, msz, "a guard byte around the region %#" PRIx64
			 "+%u was overwritten", e->op.roff, e->op.len);
		return false;
	}
	bad = compare_stream(reg, e->op.len, &m, 0, &got, &want);
	memset(reg, CANARY, e->op.len);
	if (bad >= 0) {
		snprintf(msg, msz, "region %#" PRIx64 "+%u: byte %" PRId64
			 " is %#04x, expected %#04x%s", e->op.roff, e->op.len,
			 bad, got, want,
			 got == CANARY ? " (never written?)" : "");
		return false;
	}
	return true;
}

static void server_completion(struct server *s, const struct ibv_wc *wc)
{
	uint32_t gi = (uint32_t)(wc->wr_id >> 32), seq = (uint32_t)wc->wr_id;
	struct sqp *q;
	struct expect *e;
	char msg[320], where[96];
	bool ok = true, imm;
	uint32_t want_len, skip;
	int want_op;

	if (gi >= (uint32_t)s->nqp)
		server_fatal(s, "receive completion with unknown wr_id %#"
			     PRIx64 " (status %s)", wc->wr_id,
			     ibv_wc_status_str(wc->status));
	q = &s->q[gi];
	snprintf(where, sizeof(where), "client %d %s qp %d seq %u", q->client,
		 type_names[q->type], q->q, seq);
	if (wc->status != IBV_WC_SUCCESS)
		server_fatal(s, "%s: receive completed with %s (status %d, "
			     "vendor_err %#x)", where,
			     ibv_wc_status_str(wc->status), wc->status,
			     wc->vendor_err);
	if (q->fhead == q->ftail)
		server_fatal(s, "%s: a receive completion with no receive "
			     "posted", where);
	e = &q->fifo[q->fhead % RQ_WINDOW];
	if (e->op.seq != seq) {
		s->errors++;
		report("%s: completion of the receive posted for seq %u came "
		       "first (receives consumed out of order)", where,
		       e->op.seq);
	}
	snprintf(where, sizeof(where), "client %d %s qp %d seq %u %s len %u",
		 q->client, type_names[q->type], q->q, e->op.seq,
		 kind_names[e->op.kind], e->op.len);

	imm = e->op.kind != K_SEND;
	want_op = e->op.kind == K_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
					     : IBV_WC_RECV;
	skip = q->type == Q_UD ? GRH_LEN : 0;
	want_len = e->op.kind == K_WRITE ? 16 : e->op.len + skip;
	if ((int)wc->opcode != want_op) {
		s->errors++;
		report("%s: completion opcode %d, expected %d", where,
		       wc->opcode, want_op);
	}
	if (wc->byte_len != want_len) {
		s->errors++;
		report("%s: byte_len %u, expected %u", where, wc->byte_len,
		       want_len);
	}
	if (!!(wc->wc_flags & IBV_WC_WITH_IMM) != imm) {
		s->errors++;
		report("%s: IBV_WC_WITH_IMM is %s", where,
		       imm ? "missing" : "set on a plain SEND");
	} else if (imm) {
		uint32_t want = e->op.imm ^ (e->op.kind == K_WRITE ?
					     NOTIFY_X : 0);

		if (be32toh(wc->imm_data) != want) {
			s->errors++;
			report("%s: immediate %#x, expected %#x", where,
			       be32toh(wc->imm_data), want);
		}
	}
	if (wc->qp_num != q->qp->qp_num) {
		s->errors++;
		report("%s: completion names QP %#x, not %#x", where,
		       wc->qp_num, q->qp->qp_num);
	}
	if (q->type == Q_UD && wc->src_qp != q->cqpn) {
		s->errors++;
		report("%s: src_qp %#x, expected %#x", where, wc->src_qp,
		       q->cqpn);
	}

	/* The receive buffer. */
	if (e->op.kind == K_WRITE) {
		uint32_t note[4], want[4] = { q->sid, e->op.seq,
					      (uint32_t)e->op.roff,
					      e->op.len };
		struct msgid none = { 0 };

		gather(&e->lo, q->ring.base + e->at, 0, (uint8_t *)note, 16);
		for (int i = 0; i < 4; i++)
			if (le32toh(note[i]) != want[i])
				ok = false;
		if (!ok) {
			s->errors++;
			report("%s: the notice names sender %#x seq %u region "
			       "%#x+%u, expected %#x seq %u %#x+%u", where,
			       le32toh(note[0]), le32toh(note[1]),
			       le32toh(note[2]), le32toh(note[3]), want[0],
			       want[1], want[2], want[3]);
		}
		/* Only the notice's 16 bytes may have changed: put the
		 * canary back over them, then all must be canary. */
		uint8_t *b = q->ring.base + e->at;

		for (int i = 0, p = 0; i < e->lo.n && p < 16; i++) {
			int t = e->lo.len[i] < (uint32_t)(16 - p) ?
				(int)e->lo.len[i] : 16 - p;

			memset(b + e->lo.off[i], CANARY, (size_t)t);
			p += t;
		}
		if (!check_scatter(b, e->fp, &e->lo, 0, 0, &none, 0, msg,
				   sizeof(msg))) {
			s->errors++;
			report("%s (notice): %s", where, msg);
		}
	} else {
		struct msgid m = op_msgid(&e->op, q->sid);
		uint32_t n = e->op.kind == K_WRITE_IMM ? 0 : e->op.len;

		if (!check_scatter(q->ring.base + e->at, e->fp, &e->lo, skip,
				   n, &m, 0, msg, sizeof(msg))) {
			uint8_t h[8] = { 0 };

			if (n >= 8)
				gather(&e->lo, q->ring.base + e->at, skip, h,
				       8);
			s->errors++;
			report("%s: %s", where, msg);
			if (n >= 8)
				report("%s: (its header says sender %#x seq "
				       "%u)", where,
				       h[0] | h[1] << 8 | h[2] << 16 |
					       (uint32_t)h[3] << 24,
				       h[4] | h[5] << 8 | h[6] << 16 |
					       (uint32_t)h[7] << 24);
		}
	}
	/* The written region. */
	if (is_write(e->op.kind) && !server_check_region(q, e, msg,
							 sizeof(msg))) {
		s->errors++;
		report("%s: %s", where, msg);
	}
	s->recv_msgs++;
	ring_release(&q->ring, e->ring_end);
	q->fhead++;
	server_fill(s, q);
}

static void server_flush_updates(struct server *s)
{
	int per = per_client();

	for (int c = 0; c < P.procs; c++) {
		struct rec r[MAX_QPS * Q_NTYPES];
		size_t n = 0;

		for (int i = 0; i < per; i++) {
			struct sqp *q = &s->q[c * per + i];

			if (!q->dirty)
				continue;
			q->dirty = false;
			q->sent_recv = srv_recv_limit(q);
			q->sent_done = srv_done_limit(q);
			r[n++] = (struct rec){ .tag = R_UPDATE,
					       .idx = (uint32_t)i,
					       .a = q->sent_recv,
					       .b = q->sent_done };
		}
		if (n && !s->final[c] && !chan_try_send(&s->ch[c], r, n))
			server_fatal(s, "client %d went away (see its messages "
				     "above)", c);
	}
}

static void server_dump(const struct server *s)
{
	for (int gi = 0; gi < s->nqp; gi++) {
		const struct sqp *q = &s->q[gi];

		fprintf(stderr, "  server qp of client %d %s qp %d: %u ops, "
			"receives posted up to %u, %u outstanding, checked up "
			"to %u\n", q->client, type_names[q->type], q->q,
			q->nops, q->scan, q->ftail - q->fhead,
			srv_done_limit(q));
	}
}

/* A record from client c; false once it has said R_FINAL. */
static void server_record(struct server *s, int c, const struct rec *r)
{
	switch (r->tag) {
	case R_FPRIV:
		if (r->idx < (uint32_t)s->nqp) {
			s->priv_final[r->idx] = r->a;
			s->priv_seen[r->idx] = true;
		}
		break;
	case R_FSHARED:
		if (r->idx < NSHARED)
			s->shared_sum[r->idx] += r->a;
		break;
	case R_FKIND:
		if (r->idx < K_NKINDS) {
			s->kind_ops[r->idx] += r->a;
			s->kind_bytes[r->idx] += r->b;
		}
		break;
	case R_FINAL:
		s->ops += r->a;
		s->bytes += r->b;
		s->client_errors += r->c;
		s->final[c] = true;
		break;
	default:
		server_fatal(s, "unexpected record %u from client %d", r->tag,
			     c);
	}
}

static void server_check_atomics(struct server *s)
{
	for (int c = 0; c < NSHARED; c++) {
		uint64_t v;

		memcpy(&v, s->aregion + c * 8, 8);
		if (v != s->shared_sum[c]) {
			s->errors++;
			report("shared counter %d is %" PRIu64 ", but the "
			       "clients added %" PRIu64, c, v,
			       s->shared_sum[c]);
		}
	}
	for (int gi = 0; gi < s->nqp; gi++) {
		uint64_t v;

		if (!s->priv_seen[gi])
			continue;
		memcpy(&v, s->aregion + (NSHARED + gi) * 8, 8);
		if (v != s->priv_final[gi]) {
			s->errors++;
			report("client %d rc qp %d: private word is %#" PRIx64
			       ", the client's operations leave %#" PRIx64,
			       s->q[gi].client, s->q[gi].q, v,
			       s->priv_final[gi]);
		}
	}
}

static int server_main(struct server *s)
{
	struct ibv_wc wc[64];
	double t0, last;
	unsigned idle = 0;
	int finals = 0, status = 0;

	server_setup(s);
	t0 = last = now_s();
	while (finals < P.procs) {
		bool busy = false;
		int n = ibv_poll_cq(s->cq, 64, wc);

		if (n < 0)
			server_fatal(s, "ibv_poll_cq failed");
		for (int i = 0; i < n; i++)
			server_completion(s, &wc[i]);
		busy = n > 0;
		server_flush_updates(s);
		for (int c = 0; c < P.procs; c++) {
			struct rec r;
			int got;

			while (!s->final[c] &&
			       (got = chan_recv(&s->ch[c], &r, 0)) != 0) {
				if (got < 0)
					server_fatal(s, "client %d exited "
						     "before it finished (see "
						     "its messages above)", c);
				server_record(s, c, &r);
				finals += s->final[c];
				busy = true;
			}
		}
		if (busy) {
			last = now_s();
			idle = 0;
			continue;
		}
		if (++idle < 64)
			continue;
		if (idle < 4096) {
			sched_yield();
			continue;
		}
		{
			struct pollfd pfd[MAX_PROCS];

			for (int c = 0; c < P.procs; c++)
				pfd[c] = (struct pollfd){ .fd = s->ch[c].fd,
							  .events = POLLIN };
			poll(pfd, (nfds_t)P.procs, 1);
		}
		if (now_s() - last > STALL_SECS) {
			fprintf(stderr, "%s: no progress for %d s:\n", who,
				STALL_SECS);
			server_dump(s);
			server_fatal(s, "stalled");
		}
	}
	/* Everything the clients sent has been checked (they finish only
	 * when the server has): leftovers would be duplicates. */
	{
		int n = ibv_poll_cq(s->cq, 64, wc);

		for (int i = 0; i < n; i++) {
			s->errors++;
			report("an extra receive completion after the end "
			       "(wr_id %#" PRIx64 ", status %s)", wc[i].wr_id,
			       ibv_wc_status_str(wc[i].status));
		}
	}
	server_check_atomics(s);
	double secs = now_s() - t0;

	for (int c = 0; c < P.procs; c++) {
		int st;

		if (waitpid(s->pid[c], &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0) {
			status = 1;
			fprintf(stderr, "%s: client %d %s %d\n", who, c,
				WIFSIGNALED(st) ? "was killed by signal" :
						  "exited with",
				WIFSIGNALED(st) ? WTERMSIG(st) :
						  WEXITSTATUS(st));
		}
		s->pid[c] = 0;
	}

	printf("integrity: %d procs x %d QPs of", P.procs, P.qps);
	for (int t = 0; t < P.ntypes; t++)
		printf(" %s", type_names[P.types[t]]);
	printf(", seed %" PRIu64 ", device %s\n", P.seed, P.dev);
	for (int k = 0; k < K_NKINDS; k++)
		if (s->kind_ops[k])
			printf("  %-24s %10" PRIu64 " ops %14" PRIu64
			       " bytes\n", kind_names[k], s->kind_ops[k],
			       s->kind_bytes[k]);
	printf("messages %" PRIu64 " (expected %" PRIu64 "), bytes %" PRIu64
	       ", receives checked %" PRIu64 ", errors %" PRIu64
	       " (server %" PRIu64 ", clients %" PRIu64 "), %.1f s, %.0f "
	       "MB/s\n", s->ops, P.messages, s->bytes, s->recv_msgs,
	       s->errors + s->client_errors, s->errors, s->client_errors,
	       secs, s->bytes / secs / 1e6);
	if (s->ops != P.messages) {
		fprintf(stderr, "%s: %" PRIu64 " operations completed, "
			"not %" PRIu64 "\n", who, s->ops, P.messages);
		status = 1;
	}
	if (s->errors || s->client_errors)
		status = 1;
	printf("%s\n", status ? "FAILED" : "PASSED");
	return status;
}

/* ======================== main ======================== */

static void usage(void)
{
	fprintf(stderr,
		"usage: integrity [-p procs] [-q qps_per_proc] [-n messages] "
		"[-s seed] [-t rc|uc|ud|all] [-d dev] [-T timeout]\n"
		"  defaults: -p 4 -q 2 -n 100000 -s 1 -t all -d softib0 -T 14\n"
		"  -T: the RC QPs' ACK timeout exponent (4.096 us * 2^T)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static struct server s;
	int c, sv[MAX_PROCS][2];
	pid_t server_pid;

	P = (struct params){ .procs = 4, .qps = 2, .messages = 100000,
			     .seed = 1, .ntypes = 3,
			     .types = { Q_RC, Q_UC, Q_UD }, .dev = "softib0",
			     .timeout = 14 };
	while ((c = getopt(argc, argv, "p:q:n:s:t:d:T:h")) != -1) {
		char *end;

		switch (c) {
		case 'p':
			P.procs = atoi(optarg);
			if (P.procs < 1 || P.procs > MAX_PROCS)
				die("-p must be 1..%d", MAX_PROCS);
			break;
		case 'q':
			P.qps = atoi(optarg);
			if (P.qps < 1 || P.qps > MAX_QPS)
				die("-q must be 1..%d", MAX_QPS);
			break;
		case 'n':
			P.messages = strtoull(optarg, &end, 0);
			if (*end || P.messages > 1000000000ull)
				die("bad -n '%s'", optarg);
			break;
		case 's':
			P.seed = strtoull(optarg, &end, 0);
			if (*end)
				die("bad -s '%s'", optarg);
			break;
		case 't':
			P.ntypes = 1;
			if (!strcmp(optarg, "rc"))
				P.types[0] = Q_RC;
			else if (!strcmp(optarg, "uc"))
				P.types[0] = Q_UC;
			else if (!strcmp(optarg, "ud"))
				P.types[0] = Q_UD;
			else if (!strcmp(optarg, "all"))
				P.ntypes = 3;
			else
				die("bad -t '%s' (rc, uc, ud, all)", optarg);
			break;
		case 'd':
			P.dev = optarg;
			break;
		case 'T':
			c = atoi(optarg);
			if (c < 0 || c > 31)
				die("-T must be 0..31");
			P.timeout = (uint8_t)c;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();

	/* Socketpairs first; each process opens the device after the fork,
	 * so that no verbs object crosses it. */
	fflush(NULL);
	server_pid = getpid();
	for (int i = 0; i < P.procs; i++)
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]) < 0)
			die("socketpair: %s", strerror(errno));
	for (int i = 0; i < P.procs; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			server_kill_all(&s);
			die("fork: %s", strerror(errno));
		}
		if (pid == 0) {
			for (int j = 0; j < P.procs; j++) {
				close(sv[j][0]);
				if (j != i)
					close(sv[j][1]);
			}
			/* Die with the server. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != server_pid)
				_exit(1);
			exit(client_main(i, sv[i][1]));
		}
		s.pid[i] = pid;
	}
	for (int i = 0; i < P.procs; i++) {
		close(sv[i][1]);
		s.ch[i].fd = sv[i][0];
	}
	who = "integrity[server]";
	signal(SIGPIPE, SIG_IGN);
	return server_main(&s);
}
