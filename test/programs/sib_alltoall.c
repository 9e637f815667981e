/*
 * sib_alltoall: libsib under mpirun (PMIx bootstrap), every rank sends M
 * tagged messages to every rank (itself included) with sizes from 0 up to
 * the eager limit, and receives them all through wildcard receives (any
 * source, any tag).  Each message's length and bytes derive from (source,
 * destination, sequence); the tag carries (source, sequence).  Checked:
 * every byte, every length, the status's source and tag, per-sender order
 * (non-overtaking), nothing lost or duplicated, and from the runtime's own
 * counters that this process holds as many XRC send QPs as hosts it sent
 * to (and never held more).
 *
 *   mpirun -np N sib_alltoall [-m M] [-s MAX] [-k RANK] [-S RANK] [-J DIR]
 *                             [-q FILE]
 *   sib_alltoall --join DIR -n N [-m M] [-k RANK]    (a joiner, no mpirun)
 *
 *   -S RANK  that rank stops itself (SIGSTOP: all its threads) half-way,
 *            for whoever started the job to continue it (SIGCONT) later;
 *            nobody may take it for dead meanwhile
 *   -k RANK  that rank kills itself (SIGKILL) half-way; the others finish,
 *            accept a prefix from it, and see their sends to it fail with
 *            SIB_ERR_PEER_FAILED (or succeed, if they were delivered first)
 *   -J DIR   each rank writes its address to DIR/rank.<r>; a joiner started
 *            with --join DIR (outside mpirun, mid-run) reads them, writes its
 *            own to DIR/joiner, and exchanges M messages (context 7) with
 *            every rank, which then wait for it
 *   -q FILE  at the end (all ranks alive only) rank 0 runs `softib qps`
 *            into FILE while every rank still holds its QPs
 * Prints one line per process "sib_alltoall rank R: ok ..." and exits 0 on
 * success; every failed check goes to stderr and makes the exit 1.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "transport/sib.h"   /* installed as build/include/sib.h */

#define SEND_WIN 32
#define RECV_WIN 48
#define JOIN_CTX 7
#define JOINER_ID 1000000u
#define MAX_PEERS 64

static uint32_t me, nprocs, msgs = 200, victim = UINT32_MAX;
static uint32_t sleeper = UINT32_MAX;   /* -S: stops itself half-way */
static bool slept;
static size_t max_size;
static int errors;

#define FAIL(...) do { fprintf(stderr, "rank %u: ", me); \
		fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); errors++; } while (0)

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Sizes: half small, a third middling, the rest up to the limit. */
static size_t msg_len(uint32_t s, uint32_t d, uint64_t q)
{
	uint64_t h = mix(((uint64_t)s << 40) ^ ((uint64_t)d << 20) ^ q);
	size_t cap = (h & 7) < 4 ? 256 : (h & 7) < 6 ? 4096 : max_size;

	if (cap > max_size)
		cap = max_size;
	return (size_t)((h >> 8) % (cap + 1));
}

static uint8_t msg_byte(uint32_t s, uint32_t d, uint64_t q, size_t i)
{
	return (uint8_t)(mix(((uint64_t)s << 48) ^ ((uint64_t)d << 32) ^ (q << 8)) +
			 i * 131);
}

static void msg_fill(uint8_t *p, uint32_t s, uint32_t d, uint64_t q, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = msg_byte(s, d, q, i);
}

static uint64_t tag_of(uint32_t s, uint64_t q)
{
	return ((uint64_t)s << 32) | q;
}

/* ---- the traffic of one process ---- */

struct slot {
	sib_request_t *req;
	bool busy, done, checked_here;
	uint32_t peer;
	struct sib_tag_status st;
	uint8_t *buf;
};

struct run {
	sib_worker_t *w;
	sib_ep_t *eps[MAX_PEERS + 1];   /* [nprocs] = the joiner */
	uint32_t npeers;                /* destinations: ranks (+ joiner) */
	uint64_t next_send;             /* index over (seq, destination) */
	uint64_t expect[MAX_PEERS + 1]; /* next sequence from each source */
	uint64_t sent_ok, sent_failed, received;
	struct slot s[SEND_WIN], r[RECV_WIN];
	uint8_t *sbuf;
};

static void send_cb(sib_request_t *req, sib_status_t st, void *arg)
{
	struct slot *s = arg;

	(void)req;
	s->done = true;
	s->st.status = st;
}

static struct run *the_run;
static void check_recv(struct run *R, struct slot *s);

/* Checked here, in completion order: that is matching order, which is
 * what per-sender order is about (slots are scanned in another order). */
static void recv_cb(sib_request_t *req, const struct sib_tag_status *st, void *arg)
{
	struct slot *s = arg;

	(void)req;
	s->done = true;
	s->st = *st;
	if (s->checked_here && st->status != SIB_ERR_CANCELED)
		check_recv(the_run, s);
}

static uint32_t src_index(uint32_t id)
{
	return id == JOINER_ID ? nprocs : id;
}

static void check_recv(struct run *R, struct slot *s)
{
	uint32_t src = (uint32_t)(s->st.tag >> 32), i = src_index(src);
	uint64_t q = s->st.tag & 0xffffffffu;
	size_t n = s->st.length;

	if (s->st.status != SIB_OK) {
		FAIL("receive completed with %s", sib_status_string(s->st.status));
		return;
	}
	if (i > nprocs || src != s->st.source) {
		FAIL("tag %#llx from source %u", (unsigned long long)s->st.tag,
		     s->st.source);
		return;
	}
	if (q != R->expect[i])
		FAIL("from %u: sequence %llu, expected %llu (order or loss)", src,
		     (unsigned long long)q, (unsigned long long)R->expect[i]);
	R->expect[i] = q + 1;
	if (n != msg_len(src, me, q)) {
		FAIL("from %u seq %llu: %zu bytes, expected %zu", src,
		     (unsigned long long)q, n, msg_len(src, me, q));
		return;
	}
	for (size_t k = 0; k < n; k++)
		if (s->buf[k] != msg_byte(src, me, q, k)) {
			FAIL("from %u seq %llu: byte %zu wrong", src,
			     (unsigned long long)q, k);
			return;
		}
	R->received++;
}

static void post_recv(struct run *R, struct slot *s, uint32_t ctx)
{
	struct sib_op_params op = { .recv_cb = recv_cb, .cb_arg = s };
	sib_status_t st;

	s->done = false;
	st = sib_tag_recv_nb(R->w, s->buf, max_size, SIB_ANY_SOURCE, 0, 0, ctx,
			     &op, &s->req);
	if (st)
		FAIL("recv_nb: %s", sib_status_string(st));
	s->busy = !st;
}

/* The next (destination, sequence) this process sends, or false. */
static bool next_dest(struct run *R, uint32_t *d, uint64_t *q, uint32_t ndest,
		      uint32_t first)
{
	if (R->next_send >= (uint64_t)msgs * ndest)
		return false;
	*q = R->next_send / ndest;
	*d = (uint32_t)((R->next_send + first) % ndest);
	R->next_send++;
	return true;
}

static bool peer_gone(struct run *R, uint32_t i)
{
	return R->eps[i] && sib_ep_status(R->eps[i]) == SIB_ERR_PEER_FAILED;
}

/* ---- checks on the runtime's counters ---- */

static void check_counters(sib_worker_t *w, const char *who)
{
	struct sib_worker_attr a;

	if (sib_worker_query(w, &a)) {
		FAIL("sib_worker_query failed");
		return;
	}
	/* after a peer died a connection may have been dropped and not made
	 * again (nothing left to send there): fewer, never more */
	if ((victim == UINT32_MAX ? a.send_qps != a.hosts_sent_to :
	     a.send_qps > a.hosts_sent_to) || a.send_qps_max != a.hosts_sent_to)
		FAIL("%s holds %u XRC send QPs (at most %u) for %u hosts", who,
		     a.send_qps, a.send_qps_max, a.hosts_sent_to);
	printf("sib_alltoall %s: send_qps=%u send_qps_max=%u hosts_sent_to=%u "
	       "recv_qps=%u short=%llu eager=%llu unexpected=%llu reconnects=%llu "
	       "resent=%llu batched=%llu/%llu\n", who, a.send_qps, a.send_qps_max,
	       a.hosts_sent_to,
	       a.recv_qps, (unsigned long long)a.tx_msgs[SIB_PROTO_SHORT],
	       (unsigned long long)a.tx_msgs[SIB_PROTO_EAGER],
	       (unsigned long long)a.unexpected, (unsigned long long)a.reconnects,
	       (unsigned long long)a.resent, (unsigned long long)a.tx_batched,
	       (unsigned long long)a.tx_batches);
}

static void write_addr(sib_worker_t *w, const char *dir, const char *name)
{
	char path[512], tmp[520];
	void *a;
	size_t len;
	FILE *f;

	if (sib_worker_get_address(w, &a, &len))
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (f && fwrite(a, 1, len, f) == len && !fclose(f))
		rename(tmp, path);
	sib_address_free(a);
}

static bool read_addr(const char *dir, const char *name, void *buf, size_t *len)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (!f)
		return false;
	*len = fread(buf, 1, 4096, f);
	fclose(f);
	return *len > 0;
}

/* ---- the main loop, shared by ranks and the joiner ---- */

struct plan {
	uint32_t ndest, first;          /* ranks to send to, starting where */
	uint32_t ctx;                   /* context of this traffic */
	const char *join_dir;           /* ranks: watch for a joiner */
	bool joiner;
};

static bool recv_complete(struct run *R, const struct plan *P)
{
	for (uint32_t i = 0; i < P->ndest; i++)
		if (R->expect[i] < msgs && !(i == victim && peer_gone(R, i)) &&
		    !(P->joiner && peer_gone(R, i)))
			return false;
	return true;
}

static void run_traffic(struct run *R, const struct plan *P)
{
	uint32_t d;
	uint64_t q, joiner_sent = 0, joiner_expect = 0;
	time_t deadline = time(NULL) + 120;
	bool joiner_on = false, more = true;
	struct slot js[RECV_WIN / 4];
	uint8_t jbuf[8192];

	memset(js, 0, sizeof(js));
	for (int i = 0; i < RECV_WIN; i++)
		post_recv(R, &R->r[i], P->ctx);
	for (;;) {
		int work = 0;

		/* sends */
		for (int i = 0; i < SEND_WIN; i++) {
			struct slot *s = &R->s[i];
			struct sib_op_params op = { .send_cb = send_cb, .cb_arg = s };
			size_t n;

			if (s->busy && s->done) {
				sib_request_free(s->req);
				s->busy = false;
				work++;
				if (s->st.status == SIB_OK)
					R->sent_ok++;
				else if (s->st.status == SIB_ERR_PEER_FAILED &&
					 (s->peer == victim || P->joiner ||
					  s->peer == nprocs))
					R->sent_failed++;
				else
					FAIL("send to %u: %s", s->peer,
					     sib_status_string(s->st.status));
			}
			if (s->busy || !more)
				continue;
			if (!next_dest(R, &d, &q, P->ndest, P->first)) {
				more = false;
				continue;
			}
			if (me == victim && R->next_send > (uint64_t)msgs * P->ndest / 2)
				raise(SIGKILL);
			if (me == sleeper && !slept &&
			    R->next_send > (uint64_t)msgs * P->ndest / 2) {
				slept = true;   /* every thread stops till SIGCONT */
				raise(SIGSTOP);
			}
			if (peer_gone(R, d)) {
				R->sent_failed++;
				continue;
			}
			n = msg_len(me, d, q);
			msg_fill(R->sbuf, me, d, q, n);
			s->done = false;
			s->peer = d;
			sib_status_t st = sib_tag_send_nb(R->eps[d], R->sbuf, n,
							  tag_of(P->joiner ? JOINER_ID : me, q),
							  P->ctx, &op, &s->req);
			if (st == SIB_ERR_PEER_FAILED && (d == victim || P->joiner)) {
				R->sent_failed++;
				continue;
			}
			if (st) {
				FAIL("send_nb to %u: %s", d, sib_status_string(st));
				continue;
			}
			s->busy = true;
			work++;
		}
		/* receives */
		for (int i = 0; i < RECV_WIN; i++) {
			struct slot *s = &R->r[i];

			if (s->busy && s->done) {
				sib_request_free(s->req);
				s->busy = false;
				post_recv(R, s, P->ctx);
				work++;
			}
		}
		/* the joiner's traffic, on the ranks */
		if (P->join_dir && !joiner_on) {
			uint8_t a[4096];
			size_t len;

			if (read_addr(P->join_dir, "joiner", a, &len)) {
				if (sib_ep_create(R->w, a, len, &R->eps[nprocs]))
					FAIL("ep to the joiner");
				else
					joiner_on = true;
				for (unsigned k = 0; k < sizeof(js) / sizeof(js[0]); k++) {
					struct sib_op_params op = { .recv_cb = recv_cb,
								    .cb_arg = &js[k] };
					js[k].buf = jbuf;
					js[k].done = false;
					/* source-specific receives, tag by tag */
					if (!sib_tag_recv_nb(R->w, jbuf, sizeof(jbuf),
							     JOINER_ID, joiner_expect + k,
							     UINT64_MAX, JOIN_CTX, &op, &js[k].req))
						js[k].busy = true;
				}
			}
		}
		if (joiner_on) {
			for (unsigned k = 0; k < sizeof(js) / sizeof(js[0]); k++) {
				struct slot *s = &js[k];

				if (!s->busy || !s->done)
					continue;
				sib_request_free(s->req);
				s->busy = false;
				work++;
				if (s->st.status == SIB_ERR_PEER_FAILED)
					continue;
				if (s->st.status || s->st.source != JOINER_ID ||
				    s->st.length != 64)
					FAIL("from the joiner: %s, %zu bytes",
					     sib_status_string(s->st.status), s->st.length);
				joiner_expect++;
				if (s->st.tag + sizeof(js) / sizeof(js[0]) < msgs) {
					struct sib_op_params op = { .recv_cb = recv_cb,
								    .cb_arg = s };
					s->done = false;
					if (!sib_tag_recv_nb(R->w, jbuf, sizeof(jbuf),
							     JOINER_ID,
							     s->st.tag + sizeof(js) / sizeof(js[0]),
							     UINT64_MAX, JOIN_CTX, &op, &s->req))
						s->busy = true;
				}
			}
			while (joiner_sent < msgs) {
				sib_request_t *rq;
				uint8_t b[64];

				memset(b, (int)joiner_sent, sizeof(b));
				if (sib_tag_send_nb(R->eps[nprocs], b, sizeof(b),
						    tag_of(me, joiner_sent), JOIN_CTX,
						    NULL, &rq))
					break;
				sib_request_free(rq);   /* released when done */
				joiner_sent++;
			}
		}
		bool joiner_done = !P->join_dir ||
			(joiner_on && (joiner_expect >= msgs || peer_gone(R, nprocs)));
		if (!more && recv_complete(R, P) && joiner_done) {
			bool idle = true;

			for (int i = 0; i < SEND_WIN; i++)
				idle &= !R->s[i].busy;
			if (idle)
				break;
		}
		if (time(NULL) > deadline) {
			FAIL("timed out: next_send %llu/%llu, received %llu, joiner %s %llu",
			     (unsigned long long)R->next_send,
			     (unsigned long long)msgs * P->ndest,
			     (unsigned long long)R->received, joiner_on ? "on" : "off",
			     (unsigned long long)joiner_expect);
			for (uint32_t i = 0; i < P->ndest; i++)
				fprintf(stderr, "  from %u: %llu\n", i,
					(unsigned long long)R->expect[i]);
			break;
		}
		if (!work && sib_worker_progress(R->w) == 0)
			sib_worker_wait(R->w, 10);
	}
	for (int i = 0; i < RECV_WIN; i++)
		if (R->r[i].busy) {
			sib_request_cancel(R->r[i].req);
			sib_request_wait(R->r[i].req, NULL);
			sib_request_free(R->r[i].req);
		}
	for (unsigned k = 0; k < sizeof(js) / sizeof(js[0]); k++)
		if (js[k].busy) {
			sib_request_cancel(js[k].req);
			sib_request_wait(js[k].req, NULL);
			sib_request_free(js[k].req);
		}
	if (P->join_dir && joiner_on) {   /* what we sent the joiner is out */
		sib_request_t *f;

		if (sib_ep_flush(R->eps[nprocs], &f) == SIB_INPROGRESS) {
			sib_request_wait(f, NULL);
			sib_request_free(f);
		}
	}
}

/*
 * No PMIx fence once a rank is dead: the survivors close among themselves.
 * Each tells every live rank it is done (all its sends completed), then
 * waits for the same from each, so nobody leaves while another's last
 * messages to it are still unacknowledged.  The "done" messages themselves
 * may meet a peer that has just left: that is accepted.
 */
static void closing(struct run *R)
{
	sib_request_t *s[MAX_PEERS], *r[MAX_PEERS];
	uint8_t b[MAX_PEERS];

	for (uint32_t i = 0; i < nprocs; i++) {
		s[i] = r[i] = NULL;
		if (i == me || peer_gone(R, i))
			continue;
		sib_tag_recv_nb(R->w, &b[i], 1, i, 0xd0e, ~0ull, 99, NULL, &r[i]);
		sib_tag_send_nb(R->eps[i], "", 0, 0xd0e, 99, NULL, &s[i]);
	}
	for (uint32_t i = 0; i < nprocs; i++) {
		sib_status_t st;

		if (r[i]) {
			st = sib_request_wait(r[i], NULL);
			if (st && st != SIB_ERR_PEER_FAILED)
				FAIL("closing: from %u: %s", i, sib_status_string(st));
			sib_request_free(r[i]);
		}
		if (s[i]) {
			st = sib_request_wait(s[i], NULL);
			if (st && st != SIB_ERR_PEER_FAILED)
				FAIL("closing: to %u: %s", i, sib_status_string(st));
			sib_request_free(s[i]);
		}
	}
}

static void run_alloc(struct run *R, sib_worker_t *w)
{
	struct sib_worker_attr a;

	memset(R, 0, sizeof(*R));
	R->w = w;
	sib_worker_query(w, &a);
	if (!max_size || max_size > a.eager_max)
		max_size = a.eager_max;
	R->sbuf = malloc(max_size + 1);
	for (int i = 0; i < RECV_WIN; i++) {
		R->r[i].buf = malloc(max_size + 1);
		R->r[i].checked_here = true;
	}
	the_run = R;
}

static int joiner_main(const char *dir)
{
	struct sib_context_params cp = { .progress_mode = SIB_PROGRESS_BLOCKING,
					 .progress_mode_set = 1 };
	struct sib_worker_params wp = { .id = JOINER_ID, .id_set = 1 };
	sib_context_t *ctx;
	struct run R;
	char name[32];
	uint8_t a[4096];
	size_t len;

	me = JOINER_ID;
	if (sib_context_create(&cp, &ctx) || sib_worker_create(ctx, &wp, &R.w)) {
		FAIL("joiner: no worker");
		return 1;
	}
	run_alloc(&R, R.w);
	for (uint32_t r = 0; r < nprocs; r++) {
		snprintf(name, sizeof(name), "rank.%u", r);
		if (!read_addr(dir, name, a, &len) ||
		    sib_ep_create(R.w, a, len, &R.eps[r]))
			FAIL("joiner: no address for rank %u", r);
	}
	write_addr(R.w, dir, "joiner");
	/* the joiner sends 64-byte messages tagged by sequence */
	for (uint64_t q = 0; q < msgs; q++)
		for (uint32_t r = 0; r < nprocs; r++) {
			sib_request_t *rq;
			uint8_t b[64];
			sib_status_t st;

			memset(b, (int)q, sizeof(b));
			st = sib_tag_send_nb(R.eps[r], b, sizeof(b), q, JOIN_CTX,
					     NULL, &rq);
			if (st == SIB_OK)
				sib_request_free(rq);
			else if (!(st == SIB_ERR_PEER_FAILED && r == victim))
				FAIL("joiner: send to %u: %s", r, sib_status_string(st));
		}
	/* receive what the ranks send it: ranks tag (rank, seq), 64 bytes */
	uint64_t got[MAX_PEERS] = { 0 }, total = 0;
	time_t deadline = time(NULL) + 120;
	bool done = false;

	while (!done && time(NULL) < deadline) {
		struct sib_tag_status st;
		sib_message_t *m;
		uint8_t b[64];

		/* a matched probe, then its receive */
		if (sib_tag_probe_nb(R.w, SIB_ANY_SOURCE, 0, 0, JOIN_CTX, &st, &m) == SIB_OK) {
			sib_request_t *rq;
			uint32_t src = (uint32_t)(st.tag >> 32);

			if (sib_tag_mrecv_nb(R.w, b, sizeof(b), m, NULL, &rq) ||
			    sib_request_wait(rq, &st) || src >= nprocs ||
			    st.source != src || (st.tag & 0xffffffffu) != got[src] ||
			    b[0] != (uint8_t)got[src])
				FAIL("joiner: bad message from %u", src);
			else
				got[src]++;
			sib_request_free(rq);
			total++;
			continue;
		}
		done = true;
		for (uint32_t r = 0; r < nprocs; r++)
			if (got[r] < msgs && !(r == victim && peer_gone(&R, r)))
				done = false;
		if (!done)
			sib_worker_wait(R.w, 20);
	}
	if (!done)
		FAIL("joiner: timed out (%llu received)", (unsigned long long)total);
	for (uint32_t r = 0; r < nprocs; r++) {
		sib_request_t *f;

		if (r != victim && sib_ep_flush(R.eps[r], &f) == SIB_INPROGRESS) {
			sib_request_wait(f, NULL);
			sib_request_free(f);
		}
	}
	check_counters(R.w, "joiner");
	if (!errors)
		printf("sib_alltoall joiner: ok, %llu messages from %u ranks\n",
		       (unsigned long long)total, nprocs);
	sib_worker_destroy(R.w);
	sib_context_destroy(ctx);
	return errors != 0;
}

int main(int argc, char **argv)
{
	const char *join_dir = NULL, *joiner_dir = NULL, *qps_file = NULL;
	struct sib_context_params cp = { .progress_mode = SIB_PROGRESS_BLOCKING,
					 .progress_mode_set = 1 };
	struct sib_job job;
	struct run R;
	struct plan P = { .ctx = 1 };
	char who[32];
	sib_status_t st;
	int c;

	if (getenv("SIB_PROGRESS"))
		cp.progress_mode_set = 0;   /* the environment decides */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--join") && i + 1 < argc) {
			joiner_dir = argv[i + 1];
			argv[i] = argv[i + 1] = (char *)"-x";
		}
	while ((c = getopt(argc, argv, "m:s:k:S:J:q:n:x")) != -1) {
		switch (c) {
		case 'm': msgs = (uint32_t)atoi(optarg); break;
		case 's': max_size = (size_t)atol(optarg); break;
		case 'k': victim = (uint32_t)atoi(optarg); break;
		case 'S': sleeper = (uint32_t)atoi(optarg); break;
		case 'J': join_dir = optarg; break;
		case 'q': qps_file = optarg; break;
		case 'n': nprocs = (uint32_t)atoi(optarg); break;
		case 'x': break;
		default:
			fprintf(stderr, "usage: see the comment at the top\n");
			return 2;
		}
	}
	if (joiner_dir)
		return joiner_main(joiner_dir);
	st = sib_init_pmix(&cp, &job);
	if (st) {
		fprintf(stderr, "sib_init_pmix: %s\n", sib_status_string(st));
		return 1;
	}
	me = job.rank;
	nprocs = job.size;
	if (nprocs > MAX_PEERS) {
		FAIL("at most %d ranks", MAX_PEERS);
		return 1;
	}
	run_alloc(&R, job.worker);
	memcpy(R.eps, job.eps, nprocs * sizeof(job.eps[0]));
	if (join_dir) {
		char name[32];

		snprintf(name, sizeof(name), "rank.%u", me);
		write_addr(job.worker, join_dir, name);
		P.join_dir = join_dir;
	}
	sib_job_fence(&job);   /* every address file is there */
	P.ndest = nprocs;
	P.first = me;          /* spread: not everyone at rank 0 first */
	/* a receive naming the victim, for a message it never sends: its
	 * death must fail it (requests from a dead peer fail too) */
	sib_request_t *vr = NULL;
	uint8_t vb[8];

	if (victim < nprocs && me != victim &&
	    sib_tag_recv_nb(job.worker, vb, sizeof(vb), victim, 0, 0, 9, NULL, &vr))
		FAIL("recv_nb from the victim");
	run_traffic(&R, &P);
	if (vr) {
		struct sib_tag_status vst;
		sib_status_t vs = sib_request_wait(vr, &vst);

		if (vs != SIB_ERR_PEER_FAILED || vst.source != victim)
			FAIL("a receive from the dead rank ended with %s",
			     sib_status_string(vs));
		else
			printf("sib_alltoall rank %u: receive from dead rank %u: %s\n",
			       me, victim, sib_status_string(vs));
		sib_request_free(vr);
	}
	if (victim < nprocs)
		closing(&R);
	snprintf(who, sizeof(who), "rank %u", me);
	check_counters(job.worker, who);
	if (qps_file && victim == UINT32_MAX) {
		sib_worker_publish(job.worker);   /* what softib sib reads */
		sib_job_fence(&job);
		if (me == 0) {
			char cmd[1400];

			const char *tool = getenv("SOFTIB_TOOL") ? getenv("SOFTIB_TOOL") :
					   "softib";

			snprintf(cmd, sizeof(cmd), "%s qps > %s 2>&1 && %s sib > %s.sib 2>&1",
				 tool, qps_file, tool, qps_file);
			if (system(cmd))
				FAIL("softib qps failed");
		}
		sib_job_fence(&job);
	}
	printf("sib_alltoall rank %u: %s, received %llu, sent %llu (%llu to a dead peer)\n",
	       me, errors ? "FAILED" : "ok", (unsigned long long)R.received,
	       (unsigned long long)R.sent_ok, (unsigned long long)R.sent_failed);
	fflush(stdout);
	/* no closing fence when a rank was killed: PMIx would wait for it */
	if (victim == UINT32_MAX)
		sib_fini_pmix(&job);
	else
		_exit(errors != 0);
	return errors != 0;
}
