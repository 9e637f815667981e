/*
 * xrc_multi: the scalable-connection pattern of XRC (DESIGN.md, decision
 * 7) among processes of one host, with peers joining and leaving while
 * traffic flows.
 *
 * Every worker process opens one XRC domain on one file (FILE), makes an
 * XRC SRQ, publishes its number, and holds exactly one XRC send QP toward
 * the host (with the one receive QP it connects to, which it makes in the
 * shared domain: on one host it is its own far end).  Through that single
 * send QP it reaches every other worker's SRQ by number — the per-process
 * connection state is O(hosts), here 1, not O(processes).  Each message
 * carries (sender, receiver, sequence) and bytes derived from them; each
 * receiver checks every byte and the order per sender.
 *
 * The coordinator (the first process; it never opens the device) starts
 * workers on a schedule, at most four at a time: W0 and W1 at once, W2 and
 * W3 join, W1 leaves cleanly, W4 joins, W3 is killed (SIGKILL: a receiver
 * that exits abruptly), W5 joins, then all leave.  A clean leave tells the
 * senders first: each stops addressing the leaver, waits for its requests
 * in flight to it, and says so; only then does the leaver stop.  A killed
 * receiver makes the send QPs that were addressing it fail: each such
 * sender makes a new send QP (still one at a time) and sends again what
 * was flushed; the other receivers see nothing of it.
 *
 * Checked at the end, per process and pair: at most one XRC send QP and
 * one XRC receive QP held at any time; every message a sender saw complete
 * was received, once, in order, byte for byte (for a killed sender: at
 * least those); every pair of workers alive together at a census exchanged
 * messages; no error that a dead receiver does not explain.
 *
 *   xrc_multi [-t MS] [-s MAX_SIZE] [-K] FILE
 *      -t  length of the schedule in ms (default 3000)
 *      -s  largest message (default 4096; sizes vary from 24 up to it)
 *      -K  no abrupt kill (W3 leaves cleanly instead)
 * Exit 0 when every check holds; the summary goes to stdout.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_W 6                 /* workers over the whole run */
#define WINDOW 32               /* requests in flight per sender */
#define NRECV 256               /* receives posted per SRQ */
#define HDR 16

enum wstate { W_NONE, W_LIVE, W_LEAVING, W_GONE, W_DEAD };

/*
 * The directory, shared by the coordinator and every worker (MAP_SHARED
 * before fork).  Worker i writes slot i, except quiesced[] and sent_ok[]
 * of other slots, which sender j writes at index j.  state is read and
 * written seq_cst: a joiner publishes W_LIVE before it reads the others'
 * states, a leaver publishes W_LEAVING before it reads theirs, so of two
 * racing workers at least one sees the other.
 */
struct slot {
	_Atomic int state;
	_Atomic int leave;                  /* by the coordinator: leave now */
	pid_t pid;
	_Atomic uint32_t srqn;
	_Atomic int quiesced[MAX_W];        /* sender j sends me no more */
	_Atomic uint64_t sent_ok[MAX_W];    /* by sender j: completed to me */
	_Atomic uint64_t posted[MAX_W];     /* by sender j: posted to me */
	_Atomic uint64_t recvd[MAX_W];      /* by me: received from j */
	_Atomic uint64_t bytes;             /* by me: payload bytes checked */
	_Atomic uint64_t bad;               /* by me: wrong bytes, order, size */
	_Atomic uint64_t errors;            /* by me: unexplained send errors */
	_Atomic int max_send_qps, max_recv_qps;
	_Atomic int recoveries;
	_Atomic int reached;                /* distinct receivers I sent to */
};

struct dir {
	_Atomic int stop;
	struct slot w[MAX_W];
	bool census[MAX_W][MAX_W];          /* coordinator: live together */
};

static struct dir *D;
static uint32_t max_size = 4096;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Message (sender s, receiver r, sequence q): its length and bytes. */
static uint32_t msg_len(int s, int r, uint64_t q)
{
	return HDR + (uint32_t)((q * 7919 + (uint64_t)s * 131 + (uint64_t)r) %
				(max_size - HDR + 1));
}

static uint8_t msg_byte(int s, int r, uint64_t q, uint32_t i)
{
	return (uint8_t)(s * 31 + r * 17 + q * 13 + i);
}

static void msg_fill(uint8_t *p, int s, int r, uint64_t q)
{
	uint32_t len = msg_len(s, r, q), hdr[2] = { (uint32_t)s, (uint32_t)r };

	memcpy(p, hdr, 8);
	memcpy(p + 8, &q, 8);
	for (uint32_t i = HDR; i < len; i++)
		p[i] = msg_byte(s, r, q, i);
}

/* ---- one worker ---- */

struct req {
	int dst;
	uint64_t seq;
};

struct worker {
	int me;
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	struct ibv_pd *pd;
	struct ibv_xrcd *xrcd;
	struct ibv_cq *scq, *rcq;
	struct ibv_srq *srq;
	struct ibv_qp *sqp, *tqp;   /* the one send QP, its receive QP */
	int send_qps, recv_qps;
	uint8_t *buf;               /* NRECV receive slots, WINDOW send slots */
	struct ibv_mr *mr;
	struct req ring[WINDOW];
	uint64_t head, tail;        /* requests posted, completed */
	int inflight_to[MAX_W];
	uint64_t next_seq[MAX_W];   /* next sequence to each receiver */
	uint64_t expect[MAX_W];     /* next sequence from each sender */
	bool reached[MAX_W];
	int rr;                     /* round-robin position */
};

static void note_qps(struct worker *w)
{
	struct slot *me = &D->w[w->me];

	if (w->send_qps > atomic_load(&me->max_send_qps))
		atomic_store(&me->max_send_qps, w->send_qps);
	if (w->recv_qps > atomic_load(&me->max_recv_qps))
		atomic_store(&me->max_recv_qps, w->recv_qps);
}

static int post_recv(struct worker *w, int i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)w->buf + (size_t)i * max_size,
			       .length = max_size, .lkey = w->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	return ibv_post_srq_recv(w->srq, &wr, &bad);
}

/* The send QP and the receive QP it talks to, connected (RTS / RTR). */
static int connect_pair(struct worker *w)
{
	struct ibv_qp_init_attr_ex sa = {
		.send_cq = w->scq, .qp_type = IBV_QPT_XRC_SEND,
		.cap = { .max_send_wr = WINDOW, .max_send_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = w->pd,
	};
	struct ibv_qp_init_attr_ex ta = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = w->xrcd,
	};
	struct ibv_ah_attr av = { .dlid = w->port.lid, .port_num = 1 };
	struct ibv_qp_attr a;
	const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			 IBV_QP_ACCESS_FLAGS;
	const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;

	w->sqp = ibv_create_qp_ex(w->ctx, &sa);
	if (!w->sqp)
		return -1;
	w->send_qps++;
	w->tqp = ibv_create_qp_ex(w->ctx, &ta);
	if (!w->tqp)
		return -1;
	w->recv_qps++;
	note_qps(w);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (ibv_modify_qp(w->tqp, &a, init) || ibv_modify_qp(w->sqp, &a, init))
		return -1;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .ah_attr = av,
				  .path_mtu = IBV_MTU_1024, .rq_psn = 1,
				  .dest_qp_num = w->sqp->qp_num,
				  .max_dest_rd_atomic = 1, .min_rnr_timer = 1 };
	if (ibv_modify_qp(w->tqp, &a, rtr | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return -1;
	a.dest_qp_num = w->tqp->qp_num;
	if (ibv_modify_qp(w->sqp, &a, rtr))
		return -1;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 1,
				  .timeout = 12, .retry_cnt = 3, .rnr_retry = 7,
				  .max_rd_atomic = 1 };
	return ibv_modify_qp(w->sqp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
			     IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void disconnect_pair(struct worker *w)
{
	if (w->sqp && !ibv_destroy_qp(w->sqp))
		w->send_qps--;
	if (w->tqp && !ibv_destroy_qp(w->tqp))
		w->recv_qps--;
	w->sqp = w->tqp = NULL;
}

static int setup(struct worker *w, const char *file)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	int fd = open(file, O_RDWR | O_CREAT, 0600);
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd, .oflags = O_CREAT,
	};
	size_t len = (size_t)(NRECV + WINDOW) * max_size;

	w->ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	ibv_free_device_list(l);
	if (!w->ctx || fd < 0 || ibv_query_port(w->ctx, 1, &w->port))
		return -1;
	w->pd = ibv_alloc_pd(w->ctx);
	w->xrcd = ibv_open_xrcd(w->ctx, &xa);
	w->scq = ibv_create_cq(w->ctx, WINDOW * 2, NULL, NULL, 0);
	w->rcq = ibv_create_cq(w->ctx, NRECV * 2, NULL, NULL, 0);
	w->buf = malloc(len);
	if (!w->pd || !w->xrcd || !w->scq || !w->rcq || !w->buf)
		return -1;
	w->mr = ibv_reg_mr(w->pd, w->buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!w->mr)
		return -1;
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = NRECV, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC, .pd = w->pd, .xrcd = w->xrcd,
		.cq = w->rcq,
	};
	uint32_t n;

	w->srq = ibv_create_srq_ex(w->ctx, &sa);
	if (!w->srq || ibv_get_srq_num(w->srq, &n))
		return -1;
	for (int i = 0; i < NRECV; i++)
		if (post_recv(w, i))
			return -1;
	if (connect_pair(w))
		return -1;
	atomic_store(&D->w[w->me].srqn, n);
	return 0;
}

/* Receive what has arrived: check it, count it, give the buffer back.
 * Returns how many completions it took. */
static int poll_recv(struct worker *w)
{
	struct slot *me = &D->w[w->me];
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(w->rcq, 16, wc);

	for (int k = 0; k < n; k++) {
		uint8_t *p = w->buf + wc[k].wr_id * max_size;
		uint32_t hdr[2];
		uint64_t q;
		bool ok = wc[k].status == IBV_WC_SUCCESS;

		memcpy(hdr, p, 8);
		memcpy(&q, p + 8, 8);
		if (ok && (hdr[0] >= MAX_W || hdr[1] != (uint32_t)w->me ||
			   q != w->expect[hdr[0]] ||
			   wc[k].byte_len != msg_len((int)hdr[0], w->me, q)))
			ok = false;
		for (uint32_t i = HDR; ok && i < wc[k].byte_len; i++)
			ok = p[i] == msg_byte((int)hdr[0], w->me, q, i);
		if (ok) {
			w->expect[hdr[0]]++;
			atomic_fetch_add(&me->recvd[hdr[0]], 1);
			atomic_fetch_add(&me->bytes, wc[k].byte_len);
		} else {
			atomic_fetch_add(&me->bad, 1);
			fprintf(stderr, "W%d: bad message (status %d, from %u seq %llu, "
				"expected %llu, %u bytes)\n", w->me, wc[k].status,
				hdr[0], (unsigned long long)q,
				hdr[0] < MAX_W ? (unsigned long long)w->expect[hdr[0]] : 0ULL,
				wc[k].byte_len);
		}
		post_recv(w, (int)wc[k].wr_id);
	}
	return n > 0 ? n : 0;
}

static bool gone(int r)
{
	int st = atomic_load(&D->w[r].state);

	return st == W_GONE || st == W_DEAD;
}

/* Wait (bounded) for receiver r to be known dead or gone. */
static bool dies_soon(int r)
{
	uint64_t end = now_ms() + 3000;

	while (now_ms() < end) {
		if (gone(r))
			return true;
		usleep(1000);
	}
	return false;
}

/*
 * Completions of the send queue.  A failed request flushes every later
 * one: once all are back, the pair is made anew and what failed toward a
 * receiver still alive is sent again from its sequence number.
 */
static void poll_send(struct worker *w)
{
	struct slot *me = &D->w[w->me];
	struct ibv_wc wc[16];
	bool failed = false;
	int first_bad = -1;

	for (;;) {
		int n = ibv_poll_cq(w->scq, 16, wc);

		for (int k = 0; k < n; k++) {
			struct req *r = &w->ring[wc[k].wr_id % WINDOW];

			w->tail++;
			w->inflight_to[r->dst]--;
			if (wc[k].status == IBV_WC_SUCCESS && !failed) {
				atomic_fetch_add(&D->w[r->dst].sent_ok[w->me], 1);
				continue;
			}
			if (!failed) {
				failed = true;
				first_bad = r->dst;
			}
			if (r->seq < w->next_seq[r->dst])
				w->next_seq[r->dst] = r->seq;
		}
		if (!failed || w->tail == w->head)
			break;
		poll_recv(w);   /* keep receiving while the flush completes */
	}
	if (!failed)
		return;
	/* the request that failed was addressed to a receiver that died */
	if (!dies_soon(first_bad)) {
		atomic_fetch_add(&me->errors, 1);
		fprintf(stderr, "W%d: send to live W%d failed\n", w->me, first_bad);
	}
	atomic_fetch_add(&me->recoveries, 1);
	disconnect_pair(w);
	if (connect_pair(w)) {
		atomic_fetch_add(&me->errors, 1);
		fprintf(stderr, "W%d: cannot reconnect\n", w->me);
	}
}

static int post_one(struct worker *w, int dst)
{
	uint64_t q = w->next_seq[dst];
	uint8_t *p = w->buf + (size_t)(NRECV + w->head % WINDOW) * max_size;
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = msg_len(w->me, dst, q),
			       .lkey = w->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = w->head, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int rc;

	msg_fill(p, w->me, dst, q);
	wr.qp_type.xrc.remote_srqn = atomic_load(&D->w[dst].srqn);
	/* counted before the post: the message may be received before
	 * ibv_post_send returns (it executes inside it), and a sender killed
	 * right then must not have posted less than was received */
	atomic_fetch_add(&D->w[dst].posted[w->me], 1);
	rc = ibv_post_send(w->sqp, &wr, &bad);
	if (rc) {
		atomic_fetch_sub(&D->w[dst].posted[w->me], 1);
		return rc;
	}
	w->ring[w->head % WINDOW] = (struct req){ dst, q };
	w->head++;
	w->next_seq[dst]++;
	w->inflight_to[dst]++;
	if (!w->reached[dst]) {
		w->reached[dst] = true;
		atomic_fetch_add(&D->w[w->me].reached, 1);
	}
	return 0;
}

/*
 * One round: send to live receivers (round robin, within the window);
 * tell leavers that nothing more is coming once nothing is in flight.
 */
static void send_round(struct worker *w, bool sending)
{
	for (int i = 0; i < MAX_W; i++) {
		int r = (w->rr + i) % MAX_W;
		int st = atomic_load(&D->w[r].state);

		if (st == W_LIVE && sending) {
			if (w->head - w->tail < WINDOW && post_one(w, r)) {
				atomic_fetch_add(&D->w[w->me].errors, 1);
				fprintf(stderr, "W%d: post to W%d refused\n", w->me, r);
			}
		} else if (st != W_NONE && !w->inflight_to[r] &&
			   !atomic_load(&D->w[r].quiesced[w->me])) {
			atomic_store(&D->w[r].quiesced[w->me], 1);
		}
	}
	w->rr = (w->rr + 1) % MAX_W;
}

/* Every other worker that may still send to me has said it will not. */
static bool all_quiet(struct worker *w)
{
	for (int s = 0; s < MAX_W; s++) {
		int st = atomic_load(&D->w[s].state);

		if (s == w->me || st == W_NONE || st == W_GONE || st == W_DEAD)
			continue;
		if (!atomic_load(&D->w[w->me].quiesced[s]))
			return false;
	}
	return true;
}

static int worker_main(int me, const char *file)
{
	struct worker w = { .me = me };
	struct slot *s = &D->w[me];

	if (setup(&w, file)) {
		fprintf(stderr, "W%d: setup failed: %s\n", me, strerror(errno));
		return 2;
	}
	atomic_store(&s->state, W_LIVE);
	while (!atomic_load(&D->stop) && !atomic_load(&s->leave)) {
		send_round(&w, true);
		poll_send(&w);
		poll_recv(&w);
	}
	/* leave: first tell, then stop sending, then wait for the senders */
	atomic_store(&s->state, W_LEAVING);
	while (w.tail != w.head) {
		poll_send(&w);
		poll_recv(&w);
	}
	for (uint64_t end = now_ms() + 10000; !all_quiet(&w) && now_ms() < end;) {
		send_round(&w, false);
		poll_recv(&w);
	}
	if (!all_quiet(&w)) {
		atomic_fetch_add(&s->errors, 1);
		fprintf(stderr, "W%d: senders never went quiet\n", me);
	}
	/* every request to me has completed: its receive is in my CQ */
	while (poll_recv(&w))
		;
	send_round(&w, false);
	disconnect_pair(&w);
	atomic_store(&s->state, W_GONE);
	if (ibv_destroy_srq(w.srq) || ibv_dereg_mr(w.mr) ||
	    ibv_destroy_cq(w.scq) || ibv_destroy_cq(w.rcq) ||
	    ibv_close_xrcd(w.xrcd) || ibv_dealloc_pd(w.pd) ||
	    ibv_close_device(w.ctx))
		return 3;
	free(w.buf);
	return 0;
}

/* ---- coordinator ---- */

struct event {
	unsigned at_pct;            /* of the schedule */
	enum { EV_START, EV_LEAVE, EV_KILL, EV_CENSUS } what;
	int who;
};

static const struct event schedule[] = {
	{ 0, EV_START, 0 }, { 0, EV_START, 1 },
	{ 10, EV_CENSUS, 0 },
	{ 13, EV_START, 2 }, { 26, EV_START, 3 },
	{ 33, EV_CENSUS, 0 },
	{ 40, EV_LEAVE, 1 },
	{ 46, EV_START, 4 },
	{ 53, EV_CENSUS, 0 },
	{ 60, EV_KILL, 3 },
	{ 73, EV_START, 5 },
	{ 86, EV_CENSUS, 0 },
	{ 100, EV_LEAVE, -1 },      /* everyone */
};

static void census(void)
{
	for (int a = 0; a < MAX_W; a++)
		for (int b = 0; b < MAX_W; b++)
			if (atomic_load(&D->w[a].state) == W_LIVE &&
			    atomic_load(&D->w[b].state) == W_LIVE)
				D->census[a][b] = true;
}

int main(int argc, char **argv)
{
	unsigned total_ms = 3000;
	bool kill_one = true;
	pid_t pids[MAX_W] = { 0 };
	int status[MAX_W], opt, live = 0, fails = 0;
	bool killed[MAX_W] = { false }, done[MAX_W] = { false };
	uint64_t t0;
	size_t ev = 0;

	while ((opt = getopt(argc, argv, "t:s:K")) != -1) {
		switch (opt) {
		case 't':
			total_ms = (unsigned)atoi(optarg);
			break;
		case 's':
			max_size = (uint32_t)atoi(optarg);
			break;
		case 'K':
			kill_one = false;
			break;
		default:
			goto usage;
		}
	}
	if (optind != argc - 1 || max_size < 64 || total_ms < 300)
		goto usage;
	D = mmap(NULL, sizeof(*D), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (D == MAP_FAILED)
		return 2;
	memset(D, 0, sizeof(*D));
	t0 = now_ms();

	while (ev < sizeof(schedule) / sizeof(schedule[0]) || live) {
		uint64_t t = now_ms() - t0;
		int st;
		pid_t p;

		while (ev < sizeof(schedule) / sizeof(schedule[0]) &&
		       t >= (uint64_t)schedule[ev].at_pct * total_ms / 100) {
			const struct event *e = &schedule[ev++];

			if (e->what == EV_START) {
				fflush(stdout);
				pids[e->who] = fork();
				if (pids[e->who] == 0)
					_exit(worker_main(e->who, argv[optind]));
				D->w[e->who].pid = pids[e->who];
				live++;
				printf("%5llu ms  W%d joins (pid %d)\n",
				       (unsigned long long)t, e->who, pids[e->who]);
			} else if (e->what == EV_LEAVE && e->who < 0) {
				atomic_store(&D->stop, 1);
				printf("%5llu ms  all leave\n", (unsigned long long)t);
			} else if (e->what == EV_LEAVE ||
				   (e->what == EV_KILL && !kill_one)) {
				atomic_store(&D->w[e->who].leave, 1);
				printf("%5llu ms  W%d leaves\n", (unsigned long long)t,
				       e->who);
			} else if (e->what == EV_KILL) {
				kill(pids[e->who], SIGKILL);
				killed[e->who] = true;
				printf("%5llu ms  W%d killed\n", (unsigned long long)t,
				       e->who);
			} else {
				census();
			}
		}
		while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
			for (int i = 0; i < MAX_W; i++) {
				if (pids[i] != p)
					continue;
				status[i] = st;
				done[i] = true;
				live--;
				if (killed[i])
					atomic_store(&D->w[i].state, W_DEAD);
			}
		}
		usleep(1000);
		if (now_ms() - t0 > total_ms + 30000ULL) {
			printf("workers did not finish\n");
			for (int i = 0; i < MAX_W; i++)
				if (pids[i] && !done[i])
					kill(pids[i], SIGKILL);
			return 1;
		}
	}

	/* ---- checks ---- */
	uint64_t msgs = 0, bytes = 0;

	for (int r = 0; r < MAX_W; r++) {
		struct slot *R = &D->w[r];

		if (!killed[r] && (!WIFEXITED(status[r]) || WEXITSTATUS(status[r]))) {
			printf("FAIL W%d exit status %d\n", r, status[r]);
			fails++;
		}
		if (atomic_load(&R->max_send_qps) != 1 ||
		    atomic_load(&R->max_recv_qps) != 1) {
			printf("FAIL W%d held %d XRC send QPs and %d receive QPs at once\n",
			       r, atomic_load(&R->max_send_qps),
			       atomic_load(&R->max_recv_qps));
			fails++;
		}
		if (atomic_load(&R->bad) || atomic_load(&R->errors)) {
			printf("FAIL W%d: %llu bad messages, %llu send errors\n", r,
			       (unsigned long long)atomic_load(&R->bad),
			       (unsigned long long)atomic_load(&R->errors));
			fails++;
		}
		bytes += atomic_load(&R->bytes);
		for (int s = 0; s < MAX_W; s++) {
			uint64_t ok = atomic_load(&R->sent_ok[s]);
			uint64_t got = atomic_load(&R->recvd[s]);
			uint64_t posted = atomic_load(&R->posted[s]);

			msgs += got;
			if (killed[r])
				continue;   /* a dead receiver reports nothing */
			if (killed[s] ? got < ok || got > posted : got != ok) {
				printf("FAIL W%d -> W%d: %llu completed, %llu received\n",
				       s, r, (unsigned long long)ok,
				       (unsigned long long)got);
				fails++;
			}
			if (D->census[s][r] && !killed[s] && !got) {
				printf("FAIL W%d and W%d were live together, "
				       "nothing went from W%d to W%d\n", s, r, s, r);
				fails++;
			}
		}
	}
	printf("\nworker  send_qps  recv_qps  reached  recoveries  received  bytes\n");
	for (int i = 0; i < MAX_W; i++) {
		struct slot *W = &D->w[i];
		uint64_t got = 0;

		for (int s = 0; s < MAX_W; s++)
			got += atomic_load(&W->recvd[s]);
		printf("W%d%-5s  %8d  %8d  %7d  %10d  %8llu  %llu\n", i,
		       killed[i] ? "(k)" : "", atomic_load(&W->max_send_qps),
		       atomic_load(&W->max_recv_qps), atomic_load(&W->reached),
		       atomic_load(&W->recoveries), (unsigned long long)got,
		       (unsigned long long)atomic_load(&W->bytes));
	}
	printf("\n%llu messages, %llu bytes checked; each process held one XRC "
	       "send QP for the host; %d failure(s)\n",
	       (unsigned long long)msgs, (unsigned long long)bytes, fails);
	return fails ? 1 : 0;

usage:
	fprintf(stderr, "usage: %s [-t MS] [-s MAX_SIZE] [-K] FILE\n", argv[0]);
	return 2;
}
