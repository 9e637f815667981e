/*
 * kill_storm: processes that push into each other's CQs and receive
 * queues are killed with SIGKILL at random moments; the survivors'
 * traffic must keep flowing, every message they receive must be the
 * next of its sender (sequence) with the right bytes (payload), and the
 * segment's heap must be consistent after each reclaim (issue 15).
 *
 *   kill_storm [-k kills] [-s seed] [-H] [-v]
 *
 * -H leaves the heap checks out (to compare with a tree that has no
 * `softib heap-check`); KS_HOLD=<command> runs <command> in a survivor
 * that fails, before it exits (a debugging aid: dump the rings).
 *
 * Two survivors, each with one CQ and one SRQ that every QP of theirs
 * shares, stream messages to each other (64 B to 32 KiB: the small ones
 * through the CQ's inline pool, the large by CMA). Three victim places
 * hold short-lived processes that connect an RC QP to each survivor and
 * stream to both: on the shared-memory link each of their posts takes a
 * WQE from a survivor's SRQ and pushes into its CQ. The orchestrator (the
 * parent, which opens no device) kills each victim at a random moment —
 * while it sets up, connects or streams — starts another in its place,
 * waits until the survivors have reclaimed the dead one and runs `softib
 * heap-check` on the segment. One victim in three also runs with a test
 * point armed (SOFTIB_TEST_DIE_AT, hca/die_at.h): it kills itself at the
 * n-th pass of a random place between claim and publish in the
 * survivors' rings, or inside the heap's critical section, where a random
 * SIGKILL seldom lands. A survivor whose stream from the other
 * stalls for STALL_S seconds, a message out of sequence or with a wrong
 * byte, or an inconsistent heap fails the run.
 *
 * Exit 0 and "PASS" on success.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tp_common.h"

#define NS        2          /* survivors */
#define NV        3          /* victim places */
#define SRQ_WR    256
#define MAXMSG    32768
#define WINDOW    8
#define STALL_S   15.0
#define UP_S      30.0 /* a process that starts takes less than this to be up */
#define HDR       24

struct vplace {
	_Atomic uint32_t inc;          /* incarnation running (0: none) */
	_Atomic uint32_t ready;        /* incarnation whose QPs are published */
	_Atomic uint32_t dead;         /* last incarnation killed */
	uint32_t qpn[NS];
	uint16_t lid;
	uint8_t gid[16];
	uint32_t sqpn[NS];             /* survivor s's QP toward it */
	_Atomic uint32_t sready[NS];   /* incarnation sqpn[s] is for */
};

struct splace {
	_Atomic uint32_t up;           /* QP toward the other published */
	uint32_t qpn;
	uint16_t lid;
	uint8_t gid[16];
	_Atomic uint64_t from_peer;    /* messages checked from the other survivor */
	_Atomic uint64_t from_victims; /* ... from victims */
	_Atomic int failed;
	char why[200];
};

struct board {
	struct vplace v[NV];
	struct splace s[NS];
	_Atomic int stop;
};

static struct board *B;
static bool verbose, no_heap_check;

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kill_storm[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* A survivor's failure: on the board for the orchestrator, then exit. */
static void sfail(int s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(B->s[s].why, sizeof(B->s[s].why), fmt, ap);
	va_end(ap);
	atomic_store(&B->s[s].failed, 1);
	if (getenv("KS_HOLD") && system(getenv("KS_HOLD")) < 0)
		exit(1);
	exit(1);
}

static uint8_t pattern(uint32_t src, uint32_t inc, uint64_t seq, uint32_t i)
{
	return (uint8_t)(src * 31 + inc * 17 + seq * 131 + i * 7 + (i >> 8));
}

static uint32_t size_of(uint64_t seq, uint32_t src)
{
	static const uint32_t sizes[] = { 64, 200, 1024, 4096, 8192, 16384, 24576, 32768 };

	return sizes[(seq * 2654435761u + src) % 8];
}

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	uint8_t *buf;
	size_t nbuf;
	struct ibv_mr *mr;
};

static void dev_open(struct dev *d, int cqe, bool srq, size_t nbuf)
{
	struct ibv_device **list = ibv_get_device_list(NULL);

	if (!list || !list[0])
		die("no device");
	d->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!d->ctx || ibv_query_port(d->ctx, 1, &d->port) ||
	    ibv_query_gid(d->ctx, 1, 0, &d->gid))
		die("ibv_open_device: %s", strerror(errno));
	d->pd = ibv_alloc_pd(d->ctx);
	d->nbuf = nbuf;
	d->buf = aligned_alloc(4096, nbuf * MAXMSG);
	if (!d->pd || !d->buf)
		die("ibv_alloc_pd: %s", strerror(errno));
	memset(d->buf, 0, nbuf * MAXMSG);
	d->mr = ibv_reg_mr(d->pd, d->buf, nbuf * MAXMSG, IBV_ACCESS_LOCAL_WRITE);
	d->cq = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
	if (!d->mr || !d->cq)
		die("ibv_reg_mr / ibv_create_cq: %s", strerror(errno));
	if (srq) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = SRQ_WR, .max_sge = 1 } };

		d->srq = ibv_create_srq(d->pd, &sa);
		if (!d->srq)
			die("ibv_create_srq: %s", strerror(errno));
	}
}

static struct ibv_qp *qp_new(struct dev *d)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = d->cq, .recv_cq = d->cq, .srq = d->srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = WINDOW * 2, .max_recv_wr = d->srq ? 0 : 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);

	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				 IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_create_qp / INIT: %s", strerror(errno));
	return qp;
}

static void connect_qp(struct dev *d, struct ibv_qp *qp, uint32_t qpn, uint16_t lid,
		       const uint8_t *gid)
{
	struct ibv_qp_attr a = { 0 };

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = d->port.active_mtu;
	a.dest_qp_num = qpn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = lid;
	a.ah_attr.port_num = 1;
	if (d->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
		a.ah_attr.grh.hop_limit = 1;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp to RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 12;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp to RTS: %s", strerror(errno));
}

/* Message seq of src (incarnation inc) into send buffer slot k, posted. */
static int send_msg(struct dev *d, struct ibv_qp *qp, uint32_t k, uint32_t src,
		    uint32_t inc, uint64_t seq)
{
	uint8_t *p = d->buf + (size_t)k * MAXMSG;
	uint32_t len = size_of(seq, src);
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = len, .lkey = d->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = k, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	memcpy(p, &src, 4);
	memcpy(p + 4, &inc, 4);
	memcpy(p + 8, &seq, 8);
	memcpy(p + 16, &len, 4);
	for (uint32_t i = HDR; i < len; i++)
		p[i] = pattern(src, inc, seq, i);
	return ibv_post_send(qp, &wr, &bad);
}

/* ---- victims ---- */

static void victim(int v, uint32_t inc)
{
	struct vplace *vp = &B->v[v];
	struct ibv_qp *qp[NS];
	struct dev d = { 0 };
	uint64_t seq[NS] = { 0 };
	uint32_t inflight = 0, free_k[2 * WINDOW], nfree = 0;
	double t0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	dev_open(&d, 4 * WINDOW, false, 2 * WINDOW);
	for (int s = 0; s < NS; s++) {
		qp[s] = qp_new(&d);
		vp->qpn[s] = qp[s]->qp_num;
	}
	vp->lid = d.port.lid;
	memcpy(vp->gid, d.gid.raw, 16);
	atomic_store(&vp->ready, inc);
	for (t0 = tp_now_s(); ; usleep(1000)) {
		int n = 0;

		for (int s = 0; s < NS; s++)
			n += atomic_load(&vp->sready[s]) == inc;
		if (n == NS)
			break;
		if (tp_now_s() - t0 > 30)
			die("victim %d.%u: survivors never connected", v, inc);
	}
	for (int s = 0; s < NS; s++)
		connect_qp(&d, qp[s], vp->sqpn[s], B->s[s].lid, B->s[s].gid);
	for (uint32_t k = 0; k < 2 * WINDOW; k++)
		free_k[nfree++] = k;
	/* stream to both survivors until killed */
	for (uint64_t i = 0;; i++) {
		struct ibv_wc wc[8];
		int n = ibv_poll_cq(d.cq, 8, wc);

		for (int j = 0; j < n; j++) {
			if (wc[j].status != IBV_WC_SUCCESS)
				_exit(0); /* a survivor QP went away: we are being killed */
			free_k[nfree++] = (uint32_t)wc[j].wr_id;
			inflight--;
		}
		if (inflight < WINDOW && nfree) {
			int s = (int)(i % NS);

			if (send_msg(&d, qp[s], free_k[--nfree], 100 + (uint32_t)v, inc,
				     seq[s]++))
				_exit(0);
			inflight++;
		} else if (!n) {
			usleep(50);
		}
	}
}

/* ---- survivors ---- */

struct srv {
	int s;
	struct dev d;
	struct ibv_qp *peer;
	struct ibv_qp *vqp[NV];
	uint32_t vinc[NV];          /* incarnation vqp[v] is for */
	/* per place, the incarnation connected now and the one before (its
	 * last messages may still be in the CQ after its QP is destroyed):
	 * QP number, incarnation, next sequence expected */
	struct { uint32_t qpn, inc; uint64_t seq; } vrec[NV][2];
	uint64_t peer_seq, send_seq;
	uint32_t inflight, free_k[WINDOW], nfree;
	uint32_t pending[SRQ_WR], npending;   /* buffers to post again */
};

/*
 * A buffer back to the SRQ. ENOMEM is no error here: a slot whose WQE a
 * requester is still copying out (one preempted in the middle, on a
 * loaded host) counts against the ring until it is handed back, so the
 * buffer waits in pending[] and is posted again later.
 */
static void srq_post(struct srv *x, uint32_t k)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(x->d.buf + (size_t)k * MAXMSG),
			       .length = MAXMSG, .lkey = x->d.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = k, .sg_list = &sge, .num_sge = 1 }, *bad;
	int err = ibv_post_srq_recv(x->d.srq, &wr, &bad);

	if (err == ENOMEM && x->npending < SRQ_WR)
		x->pending[x->npending++] = k;
	else if (err)
		sfail(x->s, "ibv_post_srq_recv: %s", strerror(err));
}

static void srq_post_pending(struct srv *x)
{
	uint32_t n = x->npending;

	x->npending = 0;
	for (uint32_t i = 0; i < n; i++)
		srq_post(x, x->pending[i]);
}

/* A receive: its sender's next message, byte for byte. */
static void check_recv(struct srv *x, const struct ibv_wc *wc)
{
	const uint8_t *p = x->d.buf + (size_t)wc->wr_id * MAXMSG;
	uint32_t src, inc, len;
	uint64_t seq, *want;

	if (wc->status != IBV_WC_SUCCESS)
		sfail(x->s, "receive on QP %#x: %s", wc->qp_num, ibv_wc_status_str(wc->status));
	memcpy(&src, p, 4);
	memcpy(&inc, p + 4, 4);
	memcpy(&seq, p + 8, 8);
	memcpy(&len, p + 16, 4);
	if (wc->qp_num == x->peer->qp_num) {
		if (src != (uint32_t)(1 - x->s))
			sfail(x->s, "message from %u on the survivors' QP", src);
		want = &x->peer_seq;
	} else {
		int v = (int)src - 100, r;

		for (r = 0; v >= 0 && v < NV && r < 2; r++)
			if (x->vrec[v][r].qpn == wc->qp_num && x->vrec[v][r].inc == inc)
				break;
		if (v < 0 || v >= NV || r == 2)
			sfail(x->s, "message %" PRIu64 " from %u.%u on QP %#x: not its sender's",
			      seq, src, inc, wc->qp_num);
		want = &x->vrec[v][r].seq;
	}
	if (seq != *want || len != wc->byte_len || len != size_of(seq, src))
		sfail(x->s, "from %u.%u: message %" PRIu64 " (%u B, %u received), expected %"
		      PRIu64, src, inc, seq, len, wc->byte_len, *want);
	for (uint32_t i = HDR; i < len; i++)
		if (p[i] != pattern(src, inc, seq, i))
			sfail(x->s, "from %u.%u: message %" PRIu64 " byte %u wrong", src, inc,
			      seq, i);
	(*want)++;
	if (wc->qp_num == x->peer->qp_num)
		atomic_fetch_add(&B->s[x->s].from_peer, 1);
	else
		atomic_fetch_add(&B->s[x->s].from_victims, 1);
	srq_post(x, (uint32_t)wc->wr_id);
}

/* New victims connected, dead ones' QPs destroyed. */
static void victims_follow(struct srv *x)
{
	for (int v = 0; v < NV; v++) {
		struct vplace *vp = &B->v[v];
		uint32_t ready = atomic_load(&vp->ready);

		if (x->vqp[v] && atomic_load(&vp->dead) == x->vinc[v]) {
			if (ibv_destroy_qp(x->vqp[v]))
				sfail(x->s, "ibv_destroy_qp: %s", strerror(errno));
			x->vqp[v] = NULL;
		}
		if (!ready || ready == x->vinc[v] || atomic_load(&vp->dead) == ready)
			continue;
		if (x->vqp[v] && ibv_destroy_qp(x->vqp[v]))
			sfail(x->s, "ibv_destroy_qp: %s", strerror(errno));
		x->vqp[v] = qp_new(&x->d);
		x->vinc[v] = ready;
		x->vrec[v][1] = x->vrec[v][0];
		x->vrec[v][0].qpn = x->vqp[v]->qp_num;
		x->vrec[v][0].inc = ready;
		x->vrec[v][0].seq = 0;
		connect_qp(&x->d, x->vqp[v], vp->qpn[x->s], vp->lid, vp->gid);
		vp->sqpn[x->s] = x->vqp[v]->qp_num;
		atomic_store(&vp->sready[x->s], ready);
	}
}

static void survivor(int s)
{
	struct srv x = { .s = s };
	struct splace *me = &B->s[s], *other = &B->s[1 - s];
	uint32_t nrecv = SRQ_WR;
	double last = tp_now_s();
	uint64_t seen = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	dev_open(&x.d, 4096, true, nrecv + WINDOW);
	x.peer = qp_new(&x.d);
	for (uint32_t k = 0; k < nrecv; k++)
		srq_post(&x, k);
	for (uint32_t k = 0; k < WINDOW; k++)
		x.free_k[x.nfree++] = nrecv + k;
	me->qpn = x.peer->qp_num;
	me->lid = x.d.port.lid;
	memcpy(me->gid, x.d.gid.raw, 16);
	atomic_store(&me->up, 1);
	for (double t0 = tp_now_s(); !atomic_load(&other->up); usleep(1000))
		if (tp_now_s() - t0 > UP_S)
			sfail(s, "the other survivor never came up in %.0f s", UP_S);
	connect_qp(&x.d, x.peer, other->qpn, other->lid, other->gid);
	while (!atomic_load(&B->stop)) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(x.d.cq, 16, wc);

		if (n < 0)
			sfail(s, "ibv_poll_cq failed");
		for (int j = 0; j < n; j++) {
			if (wc[j].opcode & IBV_WC_RECV) {
				check_recv(&x, &wc[j]);
			} else if (wc[j].status != IBV_WC_SUCCESS) {
				sfail(s, "send to the other survivor: %s",
				      ibv_wc_status_str(wc[j].status));
			} else {
				x.free_k[x.nfree++] = (uint32_t)wc[j].wr_id;
				x.inflight--;
			}
		}
		if (x.inflight < WINDOW && x.nfree) {
			if (send_msg(&x.d, x.peer, x.free_k[--x.nfree], (uint32_t)s, 0,
				     x.send_seq++))
				sfail(s, "ibv_post_send: %s", strerror(errno));
			x.inflight++;
		}
		victims_follow(&x);
		if (x.npending)
			srq_post_pending(&x);
		if (x.peer_seq != seen) {
			seen = x.peer_seq;
			last = tp_now_s();
		} else if (tp_now_s() - last > STALL_S) {
			sfail(s, "nothing from the other survivor for %.0f s (message %" PRIu64
			      " awaited, %u of ours in flight)", STALL_S, x.peer_seq, x.inflight);
		}
		if (!n)
			usleep(20);
	}
	exit(0);
}

/* ---- the orchestrator ---- */

/* softib heap-check; 1 while the dead are still being reclaimed. */
static int heap_check(char *out, size_t len)
{
	FILE *f;
	size_t n = 0;
	int st;

	out[0] = 0;
	if (no_heap_check)
		return 0;
	f = popen("build/bin/softib heap-check 2>&1", "r");
	if (!f)
		return -1;
	while (n + 1 < len && fgets(out + n, (int)(len - n), f))
		n = strlen(out);
	st = pclose(f);
	if (strstr(out, "processes being reclaimed: 0") == NULL && WIFEXITED(st) &&
	    WEXITSTATUS(st) == 0)
		return 1;
	return WIFEXITED(st) ? WEXITSTATUS(st) == 0 ? 0 : -1 : -1;
}

static pid_t spawn(void (*fn)(int), int arg)
{
	pid_t p;

	fflush(NULL);
	p = fork();
	if (p < 0)
		die("fork: %s", strerror(errno));
	if (p == 0) {
		fn(arg);
		exit(0);
	}
	return p;
}

static uint32_t next_inc = 1;
static pid_t vpid[NV];
static double vkill_at[NV];

static const char *const die_sites[] = {
	"cq_claimed", "cq_written", "rq_claimed", "rq_held", "inl_filling",
	"inl_ready", "heap_pop", "heap_gap", "heap_drain", "heap_quar",
};
static char die_env[64];

static void victim_entry(int v)
{
	if (die_env[0])
		setenv("SOFTIB_TEST_DIE_AT", die_env, 1);
	victim(v, atomic_load(&B->v[v].inc));
}

static void victim_start(int v, unsigned *rnd)
{
	unsigned r = (unsigned)rand_r(rnd);

	die_env[0] = 0;
	if (r % 3 == 0) {
		int site = (int)((r / 3) % 10);

		snprintf(die_env, sizeof(die_env), "%s:%u", die_sites[site],
			 1 + (r / 30) % (site < 6 ? 200 : 3));
	}
	atomic_store(&B->v[v].inc, next_inc++);
	vpid[v] = spawn(victim_entry, v);
	/* a random moment: 0..250 ms, so that deaths fall in setup, in the
	 * connection and in the stream */
	vkill_at[v] = tp_now_s() + (rand_r(rnd) % 250) / 1000.0;
}

static bool survivors_ok(pid_t *spid)
{
	for (int s = 0; s < NS; s++) {
		int st;

		if (atomic_load(&B->s[s].failed)) {
			printf("FAIL: survivor %d: %s\n", s, B->s[s].why);
			return false;
		}
		if (waitpid(spid[s], &st, WNOHANG) == spid[s]) {
			printf("FAIL: survivor %d exited (status %#x)\n", s, st);
			spid[s] = 0;
			return false;
		}
	}
	return true;
}

/* A run that cannot go on: no survivor left behind (they would stream
 * until the timeout). */
static int end_early(pid_t *spid)
{
	for (int s = 0; s < NS; s++) {
		if (spid[s]) {
			kill(spid[s], SIGKILL);
			waitpid(spid[s], NULL, 0);
		}
	}
	printf("kill storm ended before the first kill: FAIL\n");
	return 1;
}

int main(int argc, char **argv)
{
	unsigned seed = 1, kills = 100, done = 0, checks = 0;
	pid_t spid[NS];
	double t0 = tp_now_s();
	char out[2048];
	bool ok = true;
	int opt;

	while ((opt = getopt(argc, argv, "k:s:Hv")) != -1) {
		if (opt == 'k')
			kills = (unsigned)strtoul(optarg, NULL, 0);
		else if (opt == 's')
			seed = (unsigned)strtoul(optarg, NULL, 0);
		else if (opt == 'v')
			verbose = true;
		else if (opt == 'H')
			no_heap_check = true;
		else
			die("usage: kill_storm [-k kills] [-s seed] [-H] [-v]");
	}
	B = mmap(NULL, sizeof(*B), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (B == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	memset(B, 0, sizeof(*B));
	for (int s = 0; s < NS; s++)
		spid[s] = spawn(survivor, s);
	/* a survivor that cannot start (it says why on stderr) fails the run
	 * now: the storm needs both */
	for (double w = tp_now_s(); !atomic_load(&B->s[0].up) || !atomic_load(&B->s[1].up);
	     usleep(1000)) {
		if (!survivors_ok(spid))
			return end_early(spid);
		if (tp_now_s() - w > UP_S) {
			printf("FAIL: the survivors were not up in %.0f s\n", UP_S);
			return end_early(spid);
		}
	}
	for (int v = 0; v < NV; v++)
		victim_start(v, &seed);
	while (ok && done < kills) {
		for (int v = 0; v < NV && done < kills; v++) {
			int st, hc = 1;

			if (tp_now_s() < vkill_at[v])
				continue;
			kill(vpid[v], SIGKILL);
			waitpid(vpid[v], &st, 0);
			if (WIFEXITED(st) && WEXITSTATUS(st)) {
				/* it died of a failure of its own (its message
				 * is on stderr), not of our kill or a test point */
				printf("FAIL: victim %d (kill %u) exited with status %d before its kill\n",
				       v, done + 1, WEXITSTATUS(st));
				ok = false;
				break;
			}
			atomic_store(&B->v[v].dead, atomic_load(&B->v[v].inc));
			done++;
			/* the survivors reclaim it (pidfd): then the heap */
			for (double w = tp_now_s(); hc == 1 && tp_now_s() - w < 10; usleep(2000))
				hc = heap_check(out, sizeof(out));
			checks++;
			if (hc) {
				printf("FAIL: after kill %u: softib heap-check:\n%s", done, out);
				ok = false;
				break;
			}
			if (verbose && done % 10 == 0)
				printf("%u kills, survivors: %" PRIu64 "/%" PRIu64 " from each other, %"
				       PRIu64 "/%" PRIu64 " from victims\n", done,
				       atomic_load(&B->s[0].from_peer), atomic_load(&B->s[1].from_peer),
				       atomic_load(&B->s[0].from_victims),
				       atomic_load(&B->s[1].from_victims));
			victim_start(v, &seed);
		}
		ok = ok && survivors_ok(spid);
		usleep(2000);
	}
	for (int v = 0; v < NV; v++) {
		kill(vpid[v], SIGKILL);
		waitpid(vpid[v], NULL, 0);
	}
	/* the survivors' streams still flow after the last kill */
	if (ok) {
		uint64_t a = atomic_load(&B->s[0].from_peer), b = atomic_load(&B->s[1].from_peer);

		for (double w = tp_now_s(); ok && tp_now_s() - w < STALL_S; usleep(10000)) {
			ok = survivors_ok(spid);
			if (atomic_load(&B->s[0].from_peer) > a + 100 &&
			    atomic_load(&B->s[1].from_peer) > b + 100)
				break;
		}
		if (ok && (atomic_load(&B->s[0].from_peer) <= a + 100 ||
			   atomic_load(&B->s[1].from_peer) <= b + 100)) {
			printf("FAIL: the survivors' streams stalled after the last kill\n");
			ok = false;
		}
	}
	atomic_store(&B->stop, 1);
	for (int s = 0; s < NS; s++) {
		int st = 0;

		if (spid[s] && waitpid(spid[s], &st, 0) == spid[s] &&
		    (!WIFEXITED(st) || WEXITSTATUS(st))) {
			if (ok)
				printf("FAIL: survivor %d: %s\n", s, B->s[s].why);
			ok = false;
		}
	}
	if (ok) {
		/* nobody is left to reclaim the survivors: consistent is enough */
		int hc = heap_check(out, sizeof(out));

		if (hc < 0) {
			printf("FAIL: at the end: softib heap-check:\n%s", out);
			ok = false;
		}
	}
	printf("%u kills in %.1f s, %u heap checks; survivors checked %" PRIu64 " + %" PRIu64
	       " messages from each other, %" PRIu64 " + %" PRIu64 " from victims: %s\n",
	       done, tp_now_s() - t0, checks, atomic_load(&B->s[0].from_peer),
	       atomic_load(&B->s[1].from_peer), atomic_load(&B->s[0].from_victims),
	       atomic_load(&B->s[1].from_victims), ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}
