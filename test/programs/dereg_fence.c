/*
 * dereg_fence: issue 15 item 5 — after ibv_dereg_mr (or ibv_rereg_mr)
 * returns, no byte lands through the old registration.
 *
 *   dereg_fence [-o write|send|read] [-m dereg|rereg|access] [-r rounds]
 *               [-t verify_ms] [-s size] [-k] [-p] [-v]
 *
 * The owner (the parent) registers a region R, and a stream of operations
 * lands in it as fast as they go:
 *   write  the peer (a child process) posts RDMA WRITEs of the whole region
 *          on two RC QPs and one UC QP;
 *   send   the peer posts SENDs, into receives the owner keeps posting on R;
 *   read   a thread of the owner posts RDMA READs from the peer's memory
 *          into R (the data lands through the owner's own lkey).
 * Once the traffic shows in R, at a random moment, the owner deregisters R
 * (-m dereg), moves the registration to another buffer (-m rereg: CHANGE_
 * TRANSLATION) or takes its remote rights away (-m access), and as soon as
 * the call returns fills R with a canary, from the end backwards (a copy
 * still in flight moves forwards: the two meet, and what it writes after
 * that shows). For verify_ms the canary must stay as it is, while the
 * stream goes on and fails (RC: remote access errors, or local protection
 * errors for READ; the UC QP's WRITEs are dropped in silence). A round
 * that sees a changed byte fails; so does one whose stream never failed.
 *
 * -p: the owner watches passively (owner_recvs says why: the UDP link).
 *
 * -k (write only): the peer is killed with SIGKILL just before the dereg,
 * maybe inside a copy; the dereg must still return (the dead copier does
 * not hold it), within 10 s.
 *
 * Exit 0 and a last line "PASS ..." if every round held; else "FAIL ...".
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#include "tp_common.h"

/* the longest the other side may stay silent on the control socket */
#define PEER_SECS 60

#define NQ_MAX   3
#define WINDOW   4        /* outstanding WRs per QP */
#define NRECV    64       /* receives per QP (send) */
#define PATTERN  0x5a     /* the two halves of a source: messages alternate */
#define PATTERN2 0xa5
#define CANARY   0xc3
#define ALARM_S  300

enum op { OP_WRITE, OP_SEND, OP_READ };
enum mode { M_DEREG, M_REREG, M_ACCESS };

static struct {
	enum op op;
	enum mode mode;
	int rounds;
	int verify_ms;
	size_t size;
	bool kill;
	bool passive;
	bool verbose;
} O = { OP_WRITE, M_DEREG, 40, 30, 1 << 20, false, false, false };

const char *tp_who = "dereg_fence";

/* The verdict line test_dereg_fence.sh reads, on any error exit. */
static void say_fail(void)
{
	printf("FAIL %s: error\n", tp_who);
}

/* ---- verbs plumbing ---- */

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_port_attr port;
	union ibv_gid gid;
};

/* What the two sides swap each round. */
struct info {
	uint32_t qpn[NQ_MAX];
	uint64_t addr;          /* the region they write into or read from */
	uint32_t rkey;
	uint16_t lid;
	uint8_t gid[16];
};

static void dev_open(struct dev *d)
{
	struct ibv_device **list;
	int n, i, err;

	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "softib0"))
			break;
	if (!list || i == n)
		tp_die("no softib0 (is build/lib the libibverbs in use?)");
	d->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!d->ctx)
		tp_die("ibv_open_device: %s", strerror(errno));
	if ((err = ibv_query_port(d->ctx, 1, &d->port)) ||
	    (err = ibv_query_gid(d->ctx, 1, 0, &d->gid)))
		tp_die("ibv_query_port/gid: %s", strerror(err));
	d->pd = ibv_alloc_pd(d->ctx);
	d->cq = d->pd ? ibv_create_cq(d->ctx, 4096, NULL, NULL, 0) : NULL;
	if (!d->cq)
		tp_die("ibv_alloc_pd/create_cq: %s", strerror(errno));
}

/* read: three RC QPs; write and send: two RC and one UC */
static int nqps(void)
{
	return NQ_MAX;
}

static enum ibv_qp_type qp_type(int i)
{
	return O.op != OP_READ && i == NQ_MAX - 1 ? IBV_QPT_UC : IBV_QPT_RC;
}

static void qps_create(struct dev *d, struct ibv_qp **qp)
{
	for (int i = 0; i < nqps(); i++) {
		struct ibv_qp_init_attr ia = {
			.qp_type = qp_type(i), .send_cq = d->cq, .recv_cq = d->cq,
			.cap = { .max_send_wr = WINDOW, .max_recv_wr = NRECV,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   (qp_type(i) == IBV_QPT_RC ? IBV_ACCESS_REMOTE_READ : 0),
		};
		int err;

		qp[i] = ibv_create_qp(d->pd, &ia);
		if (!qp[i])
			tp_die("ibv_create_qp: %s", strerror(errno));
		if ((err = ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					 IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
			tp_die("ibv_modify_qp INIT: %s", strerror(err));
	}
}

static void qps_connect(struct dev *d, struct ibv_qp **qp, const struct info *peer)
{
	for (int i = 0; i < nqps(); i++) {
		bool rc = qp_type(i) == IBV_QPT_RC;
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = d->port.active_mtu,
			.dest_qp_num = peer->qpn[i], .rq_psn = 1,
			.max_dest_rd_atomic = 4, .min_rnr_timer = 1,
			.ah_attr = { .dlid = peer->lid, .port_num = 1 },
		};
		int err;

		if (d->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
			a.ah_attr.is_global = 1;
			memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
			a.ah_attr.grh.hop_limit = 1;
		}
		err = ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				    (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0));
		if (err)
			tp_die("ibv_modify_qp RTR: %s", strerror(err));
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 1;
		a.timeout = 12;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		err = ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
				    (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					  IBV_QP_MAX_QP_RD_ATOMIC : 0));
		if (err)
			tp_die("ibv_modify_qp RTS: %s", strerror(err));
	}
}

static void qps_destroy(struct ibv_qp **qp)
{
	for (int i = 0; i < nqps(); i++)
		if (qp[i] && ibv_destroy_qp(qp[i]))
			tp_die("ibv_destroy_qp failed");
}

static void info_fill(struct dev *d, struct ibv_qp **qp, struct info *me, void *addr,
		      uint32_t rkey)
{
	memset(me, 0, sizeof(*me));
	for (int i = 0; i < nqps(); i++)
		me->qpn[i] = qp[i]->qp_num;
	me->addr = (uintptr_t)addr;
	me->rkey = rkey;
	me->lid = d->port.lid;
	memcpy(me->gid, d->gid.raw, 16);
}

/* ---- the control socket ---- */

static bool cmd_waiting(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, 0) == 1;
}

/* ---- the stream ---- */

struct stats {
	uint64_t posted, ok, failed, flushed;
	uint64_t by_status[32];
};

struct stream {
	struct dev *d;
	struct ibv_qp **qp;
	enum ibv_wr_opcode opcode;
	void *local;            /* source (write, send) or target (read) */
	uint32_t lkey;
	uint64_t raddr;
	uint32_t rkey;
	int stop_fd;            /* a command on it stops the stream, or: */
	_Atomic bool *stop;
	_Atomic bool done;      /* stream_run has returned */
	struct stats st;
};

static void account(struct stream *s, const struct ibv_wc *wc, int *out, bool *dead)
{
	for (int i = 0; i < nqps(); i++) {
		if (s->qp[i]->qp_num != wc->qp_num)
			continue;
		out[i]--;
		if (wc->status == IBV_WC_SUCCESS) {
			s->st.ok++;
		} else if (wc->status == IBV_WC_WR_FLUSH_ERR) {
			s->st.flushed++;
			dead[i] = true;
		} else {
			s->st.failed++;
			dead[i] = true;
		}
		if ((unsigned)wc->status < 32)
			s->st.by_status[wc->status]++;
	}
}

static bool stream_stopped(struct stream *s)
{
	return s->stop ? atomic_load(s->stop) : cmd_waiting(s->stop_fd);
}

static bool rc_all_dead(const bool *dead)
{
	for (int i = 0; i < nqps(); i++)
		if (qp_type(i) == IBV_QPT_RC && !dead[i])
			return false;
	return true;
}

/*
 * Post and poll until told to stop — and after that until every RC QP has
 * met the invalidated key and failed (5 s at most), so that each round
 * shows the stream failing while the owner still watches its canary —
 * then take what is still owed.
 */
static void stream_run(struct stream *s)
{
	int out[NQ_MAX] = { 0 };
	bool dead[NQ_MAX] = { false };
	struct ibv_wc wc[32];
	double t_end = 0;
	int total;

	for (;;) {
		bool any = false;

		if (!t_end && stream_stopped(s))
			t_end = tp_now_s() + 5;
		if (t_end && (rc_all_dead(dead) || tp_now_s() > t_end))
			break;

		for (int i = 0; i < nqps(); i++) {
			while (!dead[i] && out[i] < WINDOW) {
				/* odd and even messages from the source's two
				 * halves: R shows each one begin (owner_round) */
				size_t half = (s->st.posted & 1) * O.size;
				struct ibv_sge sge = { (uintptr_t)s->local +
						       (s->opcode == IBV_WR_RDMA_READ ? 0 : half),
						       (uint32_t)O.size, s->lkey };
				struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge,
							  .num_sge = 1, .opcode = s->opcode,
							  .send_flags = IBV_SEND_SIGNALED },
						   *bad;

				wr.wr.rdma.remote_addr = s->raddr +
							  (s->opcode == IBV_WR_RDMA_READ ? half : 0);
				wr.wr.rdma.rkey = s->rkey;
				if (ibv_post_send(s->qp[i], &wr, &bad)) {
					dead[i] = true;
					break;
				}
				out[i]++;
				s->st.posted++;
			}
			any |= !dead[i];
		}
		int n = ibv_poll_cq(s->d->cq, 32, wc);

		for (int k = 0; k < n; k++)
			account(s, &wc[k], out, dead);
		if (!any && !n)
			usleep(200);
	}
	t_end = tp_now_s() + 5;
	do {
		int n = ibv_poll_cq(s->d->cq, 32, wc);

		for (int k = 0; k < n; k++)
			account(s, &wc[k], out, dead);
		/* RC answers every WR; UC WRs over the UDP link were seen
		 * left without a completion after the first window (a fault
		 * of that link, reported apart): not waited for */
		total = 0;
		for (int i = 0; i < nqps(); i++)
			total += qp_type(i) == IBV_QPT_RC ? out[i] : 0;
	} while (total > 0 && tp_now_s() < t_end);
	atomic_store(&s->done, true);
	if (total && O.verbose)
		fprintf(stderr, "%s: still owed after 5 s: %d %d %d (%s)\n", tp_who, out[0], out[1],
			out[2], qp_type(2) == IBV_QPT_UC ? "RC RC UC" : "RC RC RC");
}

/* ---- the peer (child) ---- */

static void peer(int fd)
{
	struct dev d;
	uint8_t *buf = aligned_alloc(4096, 2 * O.size);
	struct ibv_mr *mr;

	tp_who = "dereg_fence[peer]";
	if (!buf)
		tp_die("out of memory");
	memset(buf, PATTERN, O.size);
	memset(buf + O.size, PATTERN2, O.size);
	dev_open(&d);
	mr = ibv_reg_mr(d.pd, buf, 2 * O.size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	for (;;) {
		struct ibv_qp *qp[NQ_MAX] = { 0 };
		struct info owner, me;
		char c;

		tp_xfer(fd, &c, 1, false, PEER_SECS);
		if (c == 'q')
			break;
		tp_xfer(fd, &owner, sizeof(owner), false, PEER_SECS);
		qps_create(&d, qp);
		info_fill(&d, qp, &me, buf, mr->rkey);
		tp_xfer(fd, &me, sizeof(me), true, PEER_SECS);
		qps_connect(&d, qp, &owner);
		tp_xfer(fd, &c, 1, false, PEER_SECS); /* go */
		struct stream s = { .d = &d, .qp = qp, .local = buf, .lkey = mr->lkey,
				    .raddr = owner.addr, .rkey = owner.rkey, .stop_fd = fd,
				    .opcode = O.op == OP_SEND ? IBV_WR_SEND : IBV_WR_RDMA_WRITE };

		if (O.op == OP_READ) {
			tp_xfer(fd, &c, 1, false, PEER_SECS); /* the owner streams: wait */
		} else {
			stream_run(&s);
			tp_xfer(fd, &c, 1, false, PEER_SECS); /* the stop */
		}
		tp_xfer(fd, &s.st, sizeof(s.st), true, PEER_SECS);
		tp_xfer(fd, &c, 1, false, PEER_SECS); /* the owner's QPs are gone */
		qps_destroy(qp);
		c = 'd';
		tp_xfer(fd, &c, 1, true, PEER_SECS);
	}
	exit(0);
}

/* ---- the owner (parent) ---- */

static void *read_streamer(void *arg)
{
	stream_run(arg);
	return NULL;
}

/*
 * Keep the receives coming on R, or only take completions (repost false).
 * Passive (-p): no poll, a look every 100 us — a poller receives the UDP
 * link itself, in the very thread that will call dereg; passive, the
 * progress thread receives, and its copies into R race with the dereg as
 * those of a peer process do over shared memory.
 */
static void owner_recvs(struct dev *d, struct ibv_qp **qp, uint8_t *r, uint32_t lkey,
			bool repost)
{
	struct ibv_wc wc[32];
	int n;

	if (O.passive) { /* the receives posted last the round */
		usleep(100);
		return;
	}
	n = ibv_poll_cq(d->cq, 32, wc);

	for (int k = 0; repost && k < n; k++) {
		for (int i = 0; i < nqps(); i++) {
			struct ibv_sge sge = { (uintptr_t)r, (uint32_t)O.size, lkey };
			struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

			if (qp[i]->qp_num == wc[k].qp_num && wc[k].status == IBV_WC_SUCCESS)
				ibv_post_recv(qp[i], &wr, &bad);
		}
	}
}

static int first_status(const struct stats *st)
{
	for (int k = 1; k < 32; k++)
		if (st->by_status[k])
			return k;
	return 0;
}

static bool is_pattern(uint8_t v)
{
	return v == PATTERN || v == PATTERN2;
}

/* Fill from the end backwards, a cache line at a time. */
static void canary_fill(uint8_t *r, size_t len)
{
	for (size_t off = len; off > 0;) {
		size_t n = off >= 64 ? 64 : off;

		off -= n;
		memset(r + off, CANARY, n);
	}
}

static ssize_t canary_broken(const uint8_t *r, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (r[i] != CANARY)
			return (ssize_t)i;
	return -1;
}

struct round_result {
	double t_call;          /* the dereg / rereg call, s */
	double t_watch;         /* how long the canary was watched, s */
	ssize_t bad_off;        /* first changed byte, -1 none */
	double bad_after;       /* seconds after the call */
	uint8_t bad_val;
	struct stats st;
};

static void invalidate(struct ibv_mr *mr, uint8_t *other)
{
	int err = 0;

	switch (O.mode) {
	case M_DEREG:
		err = ibv_dereg_mr(mr);
		break;
	case M_REREG:
		err = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, O.size,
				   0);
		break;
	case M_ACCESS:
		err = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE);
		break;
	}
	if (err)
		tp_die("dereg/rereg: %s", strerror(err));
}

static void owner_round(struct dev *d, int fd, pid_t child, struct round_result *res)
{
	uint8_t *r = aligned_alloc(4096, O.size), *other = aligned_alloc(4096, O.size);
	struct ibv_qp *qp[NQ_MAX] = { 0 };
	struct info me, peer_info;
	struct ibv_mr *mr;
	_Atomic bool stop = false;
	pthread_t th;
	double t0, t1;
	char c = 'r';

	if (!r || !other)
		tp_die("out of memory");
	memset(r, 0, O.size);
	mr = ibv_reg_mr(d->pd, r, O.size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ);
	if (!mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	qps_create(d, qp);
	if (O.op == OP_SEND)
		for (int i = 0; i < nqps(); i++)
			for (int k = 0; k < NRECV; k++) {
				struct ibv_sge sge = { (uintptr_t)r, (uint32_t)O.size, mr->lkey };
				struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

				if (ibv_post_recv(qp[i], &wr, &bad))
					tp_die("ibv_post_recv failed");
			}
	info_fill(d, qp, &me, r, mr->rkey);
	tp_xfer(fd, &c, 1, true, PEER_SECS);
	tp_xfer(fd, &me, sizeof(me), true, PEER_SECS);
	tp_xfer(fd, &peer_info, sizeof(peer_info), false, PEER_SECS);
	qps_connect(d, qp, &peer_info);
	c = 'g';
	tp_xfer(fd, &c, 1, true, PEER_SECS);

	struct stream s = { .d = d, .qp = qp, .opcode = IBV_WR_RDMA_READ, .local = r,
			    .lkey = mr->lkey, .raddr = peer_info.addr,
			    .rkey = peer_info.rkey, .stop = &stop };

	if (O.op == OP_READ && pthread_create(&th, NULL, read_streamer, &s))
		tp_die("pthread_create failed");
	/* the traffic shows at both ends of the region */
	t0 = tp_now_s();
	while (!is_pattern(((volatile uint8_t *)r)[0]) ||
	       !is_pattern(((volatile uint8_t *)r)[O.size - 1])) {
		if (O.op != OP_READ) /* the thread polls: it owns the CQ */
			owner_recvs(d, qp, r, mr->lkey, O.op == OP_SEND);
		else if (O.passive)
			usleep(100);
		if (tp_now_s() - t0 > 10)
			tp_die("no traffic into the region after 10 s (read stream: %" PRIu64
			    " posted, %" PRIu64 " ok, %" PRIu64 " failed: status %d first)",
			    s.st.posted, s.st.ok, s.st.failed, first_status(&s.st));
	}
	if (O.verbose)
		printf("  traffic seen after %.1f ms\n", (tp_now_s() - t0) * 1e3);
	/* then a moment of its own in each round */
	t0 = tp_now_s() + (rand() % 2000) / 1e6;
	while (tp_now_s() < t0)
		if (O.op != OP_READ)
			owner_recvs(d, qp, r, mr->lkey, O.op == OP_SEND);
		else if (O.passive)
			usleep(100);
	/* in two rounds of three, the moment a message begins to land: its
	 * first byte turns to the other half's pattern (50 ms at most) */
	if (rand() % 3) {
		uint8_t was = ((volatile uint8_t *)r)[0];

		for (t0 = tp_now_s(); ((volatile uint8_t *)r)[0] == was && tp_now_s() - t0 < 0.05;)
			;
	}
	if (O.kill) {
		kill(child, SIGKILL);
		alarm(10); /* the dereg must come back */
	}
	t0 = tp_now_s();
	invalidate(mr, other);
	t1 = tp_now_s();
	canary_fill(r, O.size);
	if (O.kill)
		alarm(ALARM_S);
	res->t_call = t1 - t0;
	res->bad_off = -1;
	/* verify_ms, then on until the stream has failed on every RC QP */
	for (bool told = false;;) {
		ssize_t b;

		if (O.op != OP_READ) /* inline payloads: refused */
			owner_recvs(d, qp, r, 0, false);
		else if (O.passive)
			usleep(100);
		b = canary_broken(r, O.size);
		if (b >= 0 && res->bad_off < 0) {
			res->bad_off = b;
			res->bad_after = tp_now_s() - t1;
			res->bad_val = r[b];
		}
		if (!told && tp_now_s() - t1 >= O.verify_ms / 1000.0) {
			told = true;
			if (O.kill)
				break;
			if (O.op == OP_READ) {
				atomic_store(&stop, true);
			} else {
				c = 's';
				tp_xfer(fd, &c, 1, true, PEER_SECS);
			}
		}
		if (told && (O.op == OP_READ ? atomic_load(&s.done) : cmd_waiting(fd)))
			break;
		if (tp_now_s() - t1 > 30)
			tp_die("the stream did not stop within 30 s");
	}
	res->t_watch = tp_now_s() - t1;
	if (O.kill) {
		waitpid(child, NULL, 0);
		qps_destroy(qp);
	} else if (O.op == OP_READ) {
		pthread_join(th, NULL);
		res->st = s.st;
		c = 's';
		tp_xfer(fd, &c, 1, true, PEER_SECS);
		struct stats ignored;
		tp_xfer(fd, &ignored, sizeof(ignored), false, PEER_SECS);
	} else {
		tp_xfer(fd, &res->st, sizeof(res->st), false, PEER_SECS);
	}
	if (O.verbose)
		printf("  stream stopped after %.1f ms\n", (tp_now_s() - t1) * 1e3);
	if (!O.kill) {
		qps_destroy(qp);
		c = 'x';
		tp_xfer(fd, &c, 1, true, PEER_SECS);
		tp_xfer(fd, &c, 1, false, PEER_SECS);
	}
	struct ibv_wc wc[32];
	while (ibv_poll_cq(d->cq, 32, wc) > 0)
		;
	if (O.mode != M_DEREG && ibv_dereg_mr(mr))
		tp_die("ibv_dereg_mr after rereg failed");
	free(r);
	free(other);
}

static void on_alarm(int sig)
{
	static const char m[] = "FAIL dereg_fence: HUNG (the dereg / rereg, or the "
				"run, did not come back in time)\n";

	(void)sig;
	if (write(1, m, sizeof(m) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void usage(void)
{
	fprintf(stderr, "usage: dereg_fence [-o write|send|read] [-m dereg|rereg|access] "
		"[-r rounds] [-t verify_ms] [-s size] [-k] [-p] [-v]\n");
	exit(2);
}

static void parse(int argc, char **argv)
{
	int c;

	while ((c = getopt(argc, argv, "o:m:r:t:s:kpv")) != -1) {
		switch (c) {
		case 'o':
			O.op = !strcmp(optarg, "write") ? OP_WRITE :
			       !strcmp(optarg, "send") ? OP_SEND :
			       !strcmp(optarg, "read") ? OP_READ : (usage(), OP_WRITE);
			break;
		case 'm':
			O.mode = !strcmp(optarg, "dereg") ? M_DEREG :
				 !strcmp(optarg, "rereg") ? M_REREG :
				 !strcmp(optarg, "access") ? M_ACCESS : (usage(), M_DEREG);
			break;
		case 'r':
			O.rounds = atoi(optarg);
			break;
		case 't':
			O.verify_ms = atoi(optarg);
			break;
		case 's':
			O.size = (size_t)strtoul(optarg, NULL, 0);
			break;
		case 'k':
			O.kill = true;
			break;
		case 'p':
			O.passive = true;
			break;
		case 'v':
			O.verbose = true;
			break;
		default:
			usage();
		}
	}
	if (O.rounds < 1 || O.verify_ms < 1 || O.size < 64 || O.size > (64u << 20) ||
	    (O.kill && O.op != OP_WRITE))
		usage();
	if (O.kill)
		O.rounds = 1;
}

int main(int argc, char **argv)
{
	static const char *ops[] = { "write", "send", "read" };
	static const char *modes[] = { "dereg", "rereg", "access" };
	struct stats tot = { 0 };
	int sv[2], bad_rounds = 0, quiet_rounds = 0;
	double max_call = 0, min_watch = 1e9;
	pid_t child, me = getpid();
	struct dev d;

	tp_on_die = say_fail;
	parse(argc, argv);
	srand((unsigned)getpid());
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm(ALARM_S);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		tp_die("socketpair: %s", strerror(errno));
	fflush(NULL);
	child = fork();
	if (child < 0)
		tp_die("fork: %s", strerror(errno));
	if (child == 0) {
		close(sv[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != me)
			_exit(1);
		peer(sv[1]);
	}
	close(sv[1]);
	dev_open(&d);
	for (int i = 0; i < O.rounds; i++) {
		struct round_result res = { 0 };
		uint64_t errs;

		owner_round(&d, sv[0], child, &res);
		errs = res.st.failed;
		if (res.t_call > max_call)
			max_call = res.t_call;
		if (res.t_watch < min_watch)
			min_watch = res.t_watch;
		for (int k = 0; k < 32; k++)
			tot.by_status[k] += res.st.by_status[k];
		tot.posted += res.st.posted;
		tot.ok += res.st.ok;
		tot.failed += res.st.failed;
		tot.flushed += res.st.flushed;
		if (res.bad_off >= 0) {
			bad_rounds++;
			printf("round %d: byte %zd of the region changed to 0x%02x %.1f us "
			       "after %s returned\n", i, res.bad_off, res.bad_val,
			       res.bad_after * 1e6, modes[O.mode]);
		} else if (!O.kill && !errs) {
			quiet_rounds++;
			printf("round %d: the stream never failed after %s\n", i, modes[O.mode]);
		}
		if (O.verbose)
			printf("round %d: %s took %.1f us; %" PRIu64 " posted, %" PRIu64
			       " ok, %" PRIu64 " failed, %" PRIu64 " flushed\n", i,
			       modes[O.mode], res.t_call * 1e6, res.st.posted, res.st.ok,
			       res.st.failed, res.st.flushed);
	}
	if (!O.kill) {
		char c = 'q';

		tp_xfer(sv[0], &c, 1, true, PEER_SECS);
		waitpid(child, NULL, 0);
	}
	printf("%s %s/%s%s: %d rounds of %zu B, canary held (%.0f ms at least) in %d; "
	       "longest %s %.1f us; stream: %" PRIu64 " ok, %" PRIu64 " failed "
	       "(%" PRIu64 " remote access, %" PRIu64 " local protection, %" PRIu64
	       " remote op), %" PRIu64 " flushed\n",
	       bad_rounds || quiet_rounds ? "FAIL" : "PASS", ops[O.op], modes[O.mode],
	       O.kill ? " (peer killed)" : "", O.rounds, O.size, min_watch * 1e3,
	       O.rounds - bad_rounds, modes[O.mode], max_call * 1e6, tot.ok, tot.failed,
	       tot.by_status[IBV_WC_REM_ACCESS_ERR], tot.by_status[IBV_WC_LOC_PROT_ERR],
	       tot.by_status[IBV_WC_REM_OP_ERR], tot.flushed);
	return bad_rounds || quiet_rounds ? 1 : 0;
}
