/*
 * event_storm: many CQs armed by several processes, bursts of completions
 * far beyond what a completion channel's socket queues (about ten
 * datagrams), and no waiter may ever be stuck (issue 15, item 1).
 *
 *   event_storm [-p procs] [-q qps_per_peer] [-c channels] [-b burst]
 *               [-t seconds] [-s stuck_seconds] [-m msg_bytes]
 *
 * The parent forks `procs` children; every pair of children is connected
 * by `qps_per_peer` RC QPs, each QP with a CQ of its own, the CQs of a
 * child spread over `channels` completion channels (so a channel carries
 * far more CQs than its socket holds datagrams). In lock-step rounds each
 * child posts `burst` SENDs on every QP and then learns of its completions
 * only through its channels: even children poll() all their channel fds
 * (non-blocking, the event-loop style), odd children sleep in a blocking
 * ibv_get_cq_event on one channel that carries all their CQs. A CQ is
 * polled only after its event arrived and it was armed again, so a lost
 * wake-up leaves a round unfinished: a child that hears nothing for
 * `stuck_seconds` while a round is unfinished reports STUCK and fails.
 * Child 0 ends the run after `seconds`, telling the others in the
 * immediate data of its last round's SENDs.
 *
 * Messages of 8 bytes go inline; -m above 8 sends them from a registered
 * buffer, by cross-memory attach or, with SOFTIB_NO_CMA=1, through the
 * bounce path, whose requests are doorbells to the target's progress
 * thread (they must not be lost either).
 *
 * Exit 0 when every child finished every round; prints per child the
 * rounds, the events and completions it took, and its longest wait.
 */
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "storm_util.h"

const char *tp_who = "event_storm";

#define MAXP 16

static int P = 4, Q = 12, C = 2, B = 8, STUCK = 10, M = 8;
static double T = 60;

struct child {
	int me, fd, nqp, nch;
	bool blocking;
	struct storm_dev d;
	struct ibv_comp_channel **ch;
	struct ibv_cq **cq;
	struct ibv_qp **qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	/* this round */
	uint32_t round;
	uint64_t recv_now, recv_next, sends_done;
	int64_t stop_at;       /* the round child 0 said is the last, or -1 */
	uint64_t events, cqes;
	double longest_wait;
};

static volatile sig_atomic_t cur_round;
static int my_index;

static void on_alarm(int sig)
{
	char m[160];
	int n;

	(void)sig;
	n = snprintf(m, sizeof(m), "event_storm: child %d: STUCK in round %d: no "
		     "completion event for %d s (a lost wake-up)\n", my_index,
		     (int)cur_round, STUCK);
	if (n > 0 && write(2, m, (size_t)n) < 0)
		_exit(3);
	_exit(3);
}

static void post_recv(struct child *c, int x)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf, .length = (uint32_t)M,
			       .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)x, .sg_list = &sge, .num_sge = 1 }, *bad;
	int err = ibv_post_recv(c->qp[x], &wr, &bad);

	if (err)
		tp_die("ibv_post_recv: %s", strerror(err));
}

static void post_sends(struct child *c, uint32_t imm)
{
	uint64_t payload = imm;
	struct ibv_sge sge = { .addr = (uintptr_t)&payload, .length = 8 };
	unsigned flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;

	if (M > 8) { /* from the registered buffer: CMA or the bounce path */
		sge = (struct ibv_sge){ .addr = (uintptr_t)c->buf, .length = (uint32_t)M,
					.lkey = c->mr->lkey };
		flags = IBV_SEND_SIGNALED;
	}

	for (int x = 0; x < c->nqp; x++)
		for (int i = 0; i < B; i++) {
			struct ibv_send_wr wr = {
				.wr_id = (1ULL << 32) | (uint64_t)x, .sg_list = &sge,
				.num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				.send_flags = flags,
				.imm_data = htobe32(imm),
			}, *bad;
			int err = ibv_post_send(c->qp[x], &wr, &bad);

			if (err)
				tp_die("ibv_post_send: %s", strerror(err));
		}
}

static void take_wc(struct child *c, const struct ibv_wc *wc)
{
	int x = (int)(uint32_t)wc->wr_id;

	if (wc->status != IBV_WC_SUCCESS)
		tp_die("child %d: completion with status %s", c->me,
		    ibv_wc_status_str(wc->status));
	c->cqes++;
	if (wc->wr_id >> 32) {
		c->sends_done++;
		return;
	}
	uint32_t imm = be32toh(wc->imm_data), r = imm & 0x7fffffff;

	if (r == c->round)
		c->recv_now++;
	else if (r == c->round + 1)
		c->recv_next++;
	else
		tp_die("child %d: round %u message in round %u", c->me, r, c->round);
	if (imm >> 31)
		c->stop_at = r;
	post_recv(c, x);
}

/* An event came for CQ x: acknowledge, arm again, then take what it holds. */
static void on_event(struct child *c, struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	int n;

	c->events++;
	ibv_ack_cq_events(cq, 1);
	if (ibv_req_notify_cq(cq, 0))
		tp_die("ibv_req_notify_cq failed");
	while ((n = ibv_poll_cq(cq, 16, wc)) > 0)
		for (int i = 0; i < n; i++)
			take_wc(c, &wc[i]);
	if (n < 0)
		tp_die("ibv_poll_cq failed");
}

static bool round_done(const struct child *c)
{
	uint64_t want = (uint64_t)B * (uint64_t)c->nqp;

	return c->recv_now >= want && c->sends_done >= want;
}

/* Non-blocking channels watched with poll(): the event-loop style. */
static void wait_round_polling(struct child *c)
{
	struct pollfd pf[64];
	double idle_since = tp_now_s();

	for (int i = 0; i < c->nch; i++)
		pf[i] = (struct pollfd){ .fd = c->ch[i]->fd, .events = POLLIN };
	while (!round_done(c)) {
		int n = poll(pf, (nfds_t)c->nch, 1000);
		double t = tp_now_s();

		if (n < 0 && errno != EINTR)
			tp_die("poll: %s", strerror(errno));
		if (n <= 0) {
			if (t - idle_since > STUCK)
				on_alarm(0);
			continue;
		}
		if (t - idle_since > c->longest_wait)
			c->longest_wait = t - idle_since;
		idle_since = t;
		for (int i = 0; i < c->nch; i++) {
			struct ibv_cq *cq;
			void *ctx;

			if (!pf[i].revents)
				continue;
			while (ibv_get_cq_event(c->ch[i], &cq, &ctx) == 0)
				on_event(c, cq);
			if (errno != EAGAIN)
				tp_die("ibv_get_cq_event: %s", strerror(errno));
		}
	}
}

/* One blocking channel: the rc_pingpong -e style; the alarm is the judge. */
static void wait_round_blocking(struct child *c)
{
	while (!round_done(c)) {
		struct ibv_cq *cq;
		void *ctx;
		double t = tp_now_s();

		alarm((unsigned)STUCK);
		if (ibv_get_cq_event(c->ch[0], &cq, &ctx))
			tp_die("ibv_get_cq_event: %s", strerror(errno));
		alarm(0);
		if (tp_now_s() - t > c->longest_wait)
			c->longest_wait = tp_now_s() - t;
		on_event(c, cq);
	}
}

static void child_setup(struct child *c)
{
	struct storm_addr *mine, *theirs;
	int x;

	storm_open(&c->d);
	c->nqp = (P - 1) * Q;
	c->blocking = c->me % 2 == 1;
	c->nch = c->blocking ? 1 : C;
	c->ch = calloc((size_t)c->nch, sizeof(*c->ch));
	c->cq = calloc((size_t)c->nqp, sizeof(*c->cq));
	c->qp = calloc((size_t)c->nqp, sizeof(*c->qp));
	mine = calloc((size_t)c->nqp, sizeof(*mine));
	theirs = calloc((size_t)c->nqp, sizeof(*theirs));
	c->buf = calloc(1, (size_t)M < 4096 ? 4096 : (size_t)M);
	if (!c->ch || !c->cq || !c->qp || !mine || !theirs || !c->buf)
		tp_die("out of memory");
	c->mr = ibv_reg_mr(c->d.pd, c->buf, (size_t)M < 4096 ? 4096 : (size_t)M,
			   IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	for (int i = 0; i < c->nch; i++) {
		c->ch[i] = ibv_create_comp_channel(c->d.ctx);
		if (!c->ch[i])
			tp_die("ibv_create_comp_channel: %s", strerror(errno));
		if (!c->blocking &&
		    fcntl(c->ch[i]->fd, F_SETFL, fcntl(c->ch[i]->fd, F_GETFL) | O_NONBLOCK))
			tp_die("fcntl: %s", strerror(errno));
	}
	for (x = 0; x < c->nqp; x++) {
		c->cq[x] = ibv_create_cq(c->d.ctx, 4 * B + 4, (void *)(intptr_t)x,
					 c->ch[x % c->nch], 0);
		if (!c->cq[x])
			tp_die("ibv_create_cq: %s", strerror(errno));
		c->qp[x] = storm_qp(&c->d, c->cq[x], c->cq[x], (uint32_t)(2 * B),
				    (uint32_t)(2 * B));
		storm_addr_of(&c->d, c->qp[x], &mine[x]);
	}
	/* QP x faces peer x / Q (peers in order, ourselves skipped) */
	storm_write_all(c->fd, mine, (size_t)c->nqp * sizeof(*mine));
	storm_read_all(c->fd, theirs, (size_t)c->nqp * sizeof(*theirs));
	for (x = 0; x < c->nqp; x++) {
		storm_connect(&c->d, c->qp[x], &theirs[x]);
		for (int i = 0; i < 2 * B; i++)
			post_recv(c, x);
		if (ibv_req_notify_cq(c->cq[x], 0))
			tp_die("ibv_req_notify_cq failed");
	}
	free(mine);
	free(theirs);
}

static int child_main(int me, int fd)
{
	struct child c = { .me = me, .fd = fd, .stop_at = -1 };
	double deadline;
	char go;

	my_index = me;
	tp_who = "event_storm child";
	signal(SIGALRM, on_alarm);
	child_setup(&c);
	storm_write_all(fd, "r", 1);       /* connected, receives posted */
	storm_read_all(fd, &go, 1);        /* every child is */
	deadline = tp_now_s() + T;
	for (;; c.round++) {
		bool last = me == 0 ? tp_now_s() >= deadline : false;

		cur_round = (sig_atomic_t)c.round;
		post_sends(&c, c.round | (last ? 0x80000000u : 0));
		if (c.blocking)
			wait_round_blocking(&c);
		else
			wait_round_polling(&c);
		c.recv_now = c.recv_next;
		c.recv_next = 0;
		c.sends_done = 0;
		if (last || c.stop_at == (int64_t)c.round)
			break;
	}
	printf("child %d (%s, %d channel%s, %d CQs): %u rounds, %" PRIu64
	       " events, %" PRIu64 " completions, longest wait %.3f s\n", me,
	       c.blocking ? "blocking" : "poll", c.nch, c.nch > 1 ? "s" : "", c.nqp,
	       c.round + 1, c.events, c.cqes, c.longest_wait);
	fflush(stdout);
	storm_write_all(fd, "d", 1);       /* done: peers may still take ours */
	storm_read_all(fd, &go, 1);
	return 0;
}

/* The parent: hands each child its peers' QP addresses, then waits. */
static int parent_main(int *fds, pid_t *pids)
{
	struct storm_addr *a = calloc((size_t)P * (size_t)(P - 1) * (size_t)Q, sizeof(*a));
	size_t per = (size_t)(P - 1) * (size_t)Q;
	int rc = 0, status;
	char b;

	if (!a)
		tp_die("out of memory");
	for (int i = 0; i < P; i++)
		if (recv(fds[i], a + (size_t)i * per, per * sizeof(*a), MSG_WAITALL) !=
		    (ssize_t)(per * sizeof(*a)))
			goto reap; /* a child died: its status says why */
	for (int i = 0; i < P; i++) {
		struct storm_addr *out = calloc(per, sizeof(*out));

		/* child i's QP toward j, k-th: child j's k-th QP toward i */
		for (int j = 0, pj = 0; j < P; j++) {
			if (j == i)
				continue;
			int pi = i < j ? i : i - 1; /* i's place among j's peers */

			for (int k = 0; k < Q; k++)
				out[pj * Q + k] = a[(size_t)j * per + (size_t)(pi * Q + k)];
			pj++;
		}
		storm_write_all(fds[i], out, per * sizeof(*out));
		free(out);
	}
	for (int phase = 0; phase < 2; phase++) {
		for (int i = 0; i < P; i++)
			if (read(fds[i], &b, 1) != 1)
				goto reap; /* a child died: its status says why */
		for (int i = 0; i < P; i++)
			storm_write_all(fds[i], "g", 1);
	}
reap:
	/* as children end: the first that failed takes the others down */
	for (int left = P; left > 0; left--) {
		pid_t pid = waitpid(-1, &status, 0);
		int i = 0;

		if (pid < 0)
			break;
		while (i < P && pids[i] != pid)
			i++;
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			if (!rc)
				fprintf(stderr, "event_storm: child %d failed (%s %d)\n", i,
					WIFSIGNALED(status) ? "signal" : "exit",
					WIFSIGNALED(status) ? WTERMSIG(status) :
							      WEXITSTATUS(status));
			rc = 1;
			for (int j = 0; j < P; j++)
				kill(pids[j], SIGKILL);
		}
	}
	free(a);
	return rc;
}

int main(int argc, char **argv)
{
	int fds[MAXP], opt;
	pid_t pids[MAXP];

	while ((opt = getopt(argc, argv, "p:q:c:b:t:s:m:")) != -1) {
		switch (opt) {
		case 'p': P = atoi(optarg); break;
		case 'q': Q = atoi(optarg); break;
		case 'c': C = atoi(optarg); break;
		case 'b': B = atoi(optarg); break;
		case 't': T = atof(optarg); break;
		case 's': STUCK = atoi(optarg); break;
		case 'm': M = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: event_storm [-p procs] [-q qps_per_peer] "
				"[-c channels] [-b burst] [-t seconds] [-s stuck_s] "
				"[-m msg_bytes]\n");
			return 2;
		}
	}
	if (P < 2 || P > MAXP || Q < 1 || C < 1 || C > 64 || B < 1 || STUCK < 1 ||
	    M < 8 || M > (1 << 24))
		tp_die("bad arguments");
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < P; i++) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			tp_die("socketpair: %s", strerror(errno));
		pids[i] = fork();
		if (pids[i] < 0)
			tp_die("fork: %s", strerror(errno));
		if (!pids[i]) {
			close(sv[0]);
			for (int j = 0; j < i; j++)
				close(fds[j]);
			exit(child_main(i, sv[1]));
		}
		close(sv[1]);
		fds[i] = sv[0];
	}
	if (parent_main(fds, pids))
		return 1;
	printf("event_storm: PASS: %d processes, %d CQs each, no waiter stuck\n", P,
	       (P - 1) * Q);
	return 0;
}
