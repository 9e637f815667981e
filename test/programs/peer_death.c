/*
 * peer_death: a connected RC peer is killed with SIGKILL mid-stream; the
 * survivor's outstanding work requests must all complete, the first with
 * IBV_WC_RETRY_EXC_ERR and the others with IBV_WC_WR_FLUSH_ERR (the QP has
 * gone to the error state), within a bounded time, and nothing may hang.
 *
 *   peer_death [-o send|write|both] [-k K] [-T timeout] [-r retry_cnt]
 *              [-w window] [-d dev]
 *
 * The parent forks a child; they swap QP numbers over a socketpair made
 * before the fork and connect RC QPs.  The child posts more receives than
 * it will ever need (so that no receiver-not-ready comes into it), then
 * counts what arrives: K received SENDs (-o send), or a counter that the
 * parent's RDMA WRITEs carry reaching K (-o write); then it raises SIGKILL.
 * The parent keeps up to `window` signaled WRs outstanding and polls.
 *
 * Exit 0 if both variants behaved; else prints what it saw and exits 1.
 */
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
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
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tp_common.h"

/* the longest the other side may stay silent on the control socket */
#define PEER_SECS 30

#define MSG_SIZE    64
#define MAX_WINDOW  64
#define BOUND_SECS  10.0   /* death to last completion */
#define ALARM_SECS  30     /* per variant: then it is declared hung */

struct opts {
	bool send, write;
	uint32_t k;
	uint8_t timeout, retry;
	uint32_t window;
	const char *dev;
	bool verbose;
};

static struct opts O = { .send = true, .write = true, .k = 1000,
			 .timeout = 14, .retry = 7, .window = 16,
			 .dev = "softib0" };

/* What the two sides swap. */
struct info {
	uint32_t qpn;
	uint16_t lid;
	uint8_t gid[16];
	uint32_t rkey;
	uint64_t addr;
	uint32_t psn;
};

const char *tp_who = "peer_death";

/*
 * Shared with the child (MAP_SHARED before the fork): the CLOCK_MONOTONIC
 * time at which it is about to raise SIGKILL, so that bounds are measured
 * from the death itself, not from when the survivor reaps it.
 */
struct shared {
	_Atomic int64_t kill_ns;     /* 0 until the child is about to die */
};
static struct shared *SH;

/* What the survivor is doing, for the alarm's report. */
static volatile sig_atomic_t phase;
static volatile uint64_t n_posted, n_done;
static const char *volatile variant = "";
static const char *const phase_names[] = {
	"setting up", "inside ibv_post_send", "inside ibv_poll_cq",
	"between calls", "tearing down",
};
enum { PH_SETUP, PH_POST, PH_POLL, PH_LOOP, PH_TEARDOWN };

static void on_alarm(int sig)
{
	char m[256];
	int64_t k = atomic_load(&SH->kill_ns);
	int n;

	(void)sig;
	n = snprintf(m, sizeof(m), "peer_death: %s: HUNG: still %s after %d s; "
		     "%" PRIu64 " WRs posted, %" PRIu64 " completed; %s %" PRId64
		     " ms ago\n", variant, phase_names[phase], ALARM_SECS, n_posted,
		     n_done, k ? "the child raised SIGKILL" :
		     "the child has not died", k ? (tp_now_ns() - k) / 1000000 : 0);
	if (n > 0 && write(1, m, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_port_attr port;
	union ibv_gid gid;
	uint8_t *buf;
	size_t buflen;
};

static void open_side(struct side *s, uint32_t sq, uint32_t rq)
{
	struct ibv_device **list;
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = sq, .max_recv_wr = rq,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
				   IBV_ACCESS_REMOTE_WRITE,
	};
	int n, i, err;

	list = ibv_get_device_list(&n);
	if (!list)
		tp_die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), O.dev))
			break;
	if (i == n)
		tp_die("no device %s (is build/lib the libibverbs in use?)",
		    O.dev);
	s->ctx = ibv_open_device(list[i]);
	if (!s->ctx)
		tp_die("ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	if ((err = ibv_query_port(s->ctx, 1, &s->port)))
		tp_die("ibv_query_port: %s", strerror(err));
	if ((err = ibv_query_gid(s->ctx, 1, 0, &s->gid)))
		tp_die("ibv_query_gid: %s", strerror(err));
	s->pd = ibv_alloc_pd(s->ctx);
	if (!s->pd)
		tp_die("ibv_alloc_pd: %s", strerror(errno));
	s->buflen = (size_t)MAX_WINDOW * MSG_SIZE;
	s->buf = aligned_alloc(4096, s->buflen);
	if (!s->buf)
		tp_die("out of memory");
	memset(s->buf, 0, s->buflen);
	s->mr = ibv_reg_mr(s->pd, s->buf, s->buflen, IBV_ACCESS_LOCAL_WRITE |
			   IBV_ACCESS_REMOTE_WRITE);
	if (!s->mr)
		tp_die("ibv_reg_mr: %s", strerror(errno));
	s->cq = ibv_create_cq(s->ctx, (int)(sq + rq), NULL, NULL, 0);
	if (!s->cq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = s->cq;
	s->qp = ibv_create_qp(s->pd, &ia);
	if (!s->qp)
		tp_die("ibv_create_qp: %s", strerror(errno));
	if ((err = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				 IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		tp_die("ibv_modify_qp to INIT: %s", strerror(err));
}

static void exchange(struct side *s, int fd, struct info *peer, uint32_t psn)
{
	struct info me = { .qpn = s->qp->qp_num, .lid = s->port.lid,
			   .rkey = s->mr->rkey, .addr = (uintptr_t)s->buf,
			   .psn = psn };
	struct ibv_qp_attr a;
	int err;

	memcpy(me.gid, s->gid.raw, 16);
	tp_xfer(fd, &me, sizeof(me), true, PEER_SECS);
	tp_xfer(fd, peer, sizeof(*peer), false, PEER_SECS);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = s->port.active_mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	if (s->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.hop_limit = 1;
	}
	if ((err = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV |
				 IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				 IBV_QP_MIN_RNR_TIMER)))
		tp_die("ibv_modify_qp to RTR: %s", strerror(err));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = O.timeout;
	a.retry_cnt = O.retry;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	if ((err = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		tp_die("ibv_modify_qp to RTS: %s", strerror(err));
}

/* ---- the victim ---- */

static void child(int fd, bool writes)
{
	struct side s;
	struct info peer;
	uint32_t nrecv = O.k + 4096, got = 0;
	volatile uint64_t *counter;
	double t0;
	char c = 'r';

	tp_who = "peer_death[child]";
	open_side(&s, 1, nrecv);
	for (uint32_t i = 0; i < nrecv; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)s.buf,
				       .length = MSG_SIZE,
				       .lkey = s.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;
		int err = ibv_post_recv(s.qp, &wr, &bad);

		if (err)
			tp_die("ibv_post_recv %u of %u: %s", i, nrecv,
			    strerror(err));
	}
	exchange(&s, fd, &peer, 0x123456);
	tp_xfer(fd, &c, 1, true, PEER_SECS);

	/* Receives land in the last slot of the buffer; writes update the
	 * counter in the first 8 bytes. */
	counter = (volatile uint64_t *)s.buf;
	t0 = tp_now_s();
	for (;;) {
		if (writes) {
			if (*counter >= O.k)
				break;
		} else {
			struct ibv_wc wc;
			int n = ibv_poll_cq(s.cq, 1, &wc);

			if (n < 0)
				tp_die("ibv_poll_cq failed");
			if (n && wc.status != IBV_WC_SUCCESS)
				tp_die("receive %u completed with %s", got,
				    ibv_wc_status_str(wc.status));
			if (n && ++got >= O.k)
				break;
		}
		if (tp_now_s() - t0 > 30)
			tp_die("only %u of %u messages arrived in 30 s",
			    writes ? (uint32_t)*counter : got, O.k);
	}
	atomic_store(&SH->kill_ns, tp_now_ns());
	raise(SIGKILL);
	_exit(3); /* not reached */
}

/* ---- the survivor ---- */

struct result {
	uint64_t posted, ok, retry_exc, flushed, other;
	enum ibv_wc_status first_err;
	uint64_t first_err_wr;
	bool had_err;
	bool out_of_order;
	double t_death, t_first_err, t_last;
	int child_status;
	bool child_reaped;
	int post_after;        /* ibv_post_send's return after the error */
	enum ibv_wc_status after_status;
	bool after_completed;
	double max_post;       /* the longest ibv_post_send call, s */
};

static int run_variant(bool writes)
{
	const char *name = writes ? "RDMA_WRITE" : "SEND";
	struct side s;
	struct info peer;
	struct result r = { .t_death = 0 };
	uint64_t next_done = 0, outstanding = 0;
	int sv[2], fd;
	pid_t pid, me = getpid();
	char c;
	bool pass = true;

	atomic_store(&SH->kill_ns, 0);
	variant = name;
	phase = PH_SETUP;
	n_posted = n_done = 0;
	alarm(ALARM_SECS);
	fflush(NULL);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		tp_die("socketpair: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		tp_die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != me)
			_exit(1);
		child(sv[1], writes);
	}
	close(sv[1]);
	fd = sv[0];
	open_side(&s, O.window, 1);
	exchange(&s, fd, &peer, 0x654321);
	tp_xfer(fd, &c, 1, false, PEER_SECS); /* the child's receives are posted */

	double start = tp_now_s(), t_kill = 0;
	for (;;) {
		struct ibv_wc wc[16];
		double t;
		int n;

		/* Keep the window full until the first error. */
		while (!r.had_err && outstanding < O.window) {
			uint8_t *src = s.buf + (r.posted % O.window) * MSG_SIZE;
			uint64_t v = r.posted + 1;
			struct ibv_sge sge = { .addr = (uintptr_t)src,
					       .length = MSG_SIZE,
					       .lkey = s.mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = r.posted, .sg_list = &sge,
				.num_sge = 1, .send_flags = IBV_SEND_SIGNALED,
				.opcode = writes ? IBV_WR_RDMA_WRITE
						 : IBV_WR_SEND,
			}, *bad;
			int err;

			memcpy(src, &v, 8);
			if (writes) {
				wr.wr.rdma.remote_addr = peer.addr;
				wr.wr.rdma.rkey = peer.rkey;
			}
			double tp = tp_now_s();

			phase = PH_POST;
			err = ibv_post_send(s.qp, &wr, &bad);
			phase = PH_LOOP;
			tp = tp_now_s() - tp;
			if (tp > r.max_post)
				r.max_post = tp;
			if (err) {
				fprintf(stderr, "%s: ibv_post_send of WR %" PRIu64
					" failed: %s (before any error "
					"completion)\n", tp_who, r.posted,
					strerror(err));
				pass = false;
				goto out;
			}
			r.posted++;
			n_posted = r.posted;
			outstanding++;
		}
		phase = PH_POLL;
		n = ibv_poll_cq(s.cq, 16, wc);
		phase = PH_LOOP;
		if (n < 0)
			tp_die("ibv_poll_cq failed");
		t = tp_now_s();
		n_done += n > 0 ? (uint64_t)n : 0;
		if (!t_kill && atomic_load(&SH->kill_ns))
			t_kill = atomic_load(&SH->kill_ns) / 1e9;
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id != next_done)
				r.out_of_order = true;
			next_done = wc[i].wr_id + 1;
			outstanding--;
			r.t_last = t;
			if (wc[i].status == IBV_WC_SUCCESS && !r.had_err) {
				r.ok++;
				continue;
			}
			if (!r.had_err) {
				r.had_err = true;
				r.first_err = wc[i].status;
				r.first_err_wr = wc[i].wr_id;
				r.t_first_err = t;
			}
			if (wc[i].status == IBV_WC_RETRY_EXC_ERR)
				r.retry_exc++;
			else if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
				r.flushed++;
			else
				r.other++;
		}
		if (!r.child_reaped) {
			int st;

			if (waitpid(pid, &st, WNOHANG) == pid) {
				r.child_reaped = true;
				r.child_status = st;
				if (O.verbose)
					fprintf(stderr, "%s: %s: child reaped "
						"%.3f s after it raised SIGKILL;"
						" %" PRIu64 " WRs outstanding\n",
						tp_who, name, tp_now_s() - t_kill,
						outstanding);
			}
		}
		if (r.had_err && outstanding == 0)
			break;
		if (t_kill && t - t_kill > BOUND_SECS)
			break;
		if (!t_kill && t - start > 25)
			break;
	}
	r.t_death = t_kill;

	/* Post once more on the errored QP: it must not go through; a
	 * flushed completion (or a refused post) is what hardware gives. */
	if (r.had_err && outstanding == 0) {
		struct ibv_sge sge = { .addr = (uintptr_t)s.buf,
				       .length = MSG_SIZE,
				       .lkey = s.mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = ~0ull, .sg_list = &sge, .num_sge = 1,
			.send_flags = IBV_SEND_SIGNALED,
			.opcode = writes ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
		}, *bad;
		struct ibv_wc wc;
		double t0 = tp_now_s();

		if (writes) {
			wr.wr.rdma.remote_addr = peer.addr;
			wr.wr.rdma.rkey = peer.rkey;
		}
		r.post_after = ibv_post_send(s.qp, &wr, &bad);
		while (!r.post_after && tp_now_s() - t0 < 5) {
			int n = ibv_poll_cq(s.cq, 1, &wc);

			if (n < 0)
				tp_die("ibv_poll_cq failed");
			if (n) {
				r.after_completed = true;
				r.after_status = wc.status;
				break;
			}
		}
	}
out:
	phase = PH_TEARDOWN;
	if (!r.child_reaped) {
		kill(pid, SIGKILL);
		waitpid(pid, &r.child_status, 0);
		r.child_reaped = true;
		fprintf(stderr, "%s: %s: the child had not died; killed it\n",
			tp_who, name);
		pass = false;
	}

	/* The verdict. */
	printf("%s variant: child killed after %u %s; parent posted %" PRIu64
	       ", %" PRIu64 " completed OK", name, O.k,
	       writes ? "writes seen" : "receives", r.posted, r.ok);
	if (r.had_err)
		printf(", then WR %" PRIu64 " %s %.3f s after the child "
		       "raised SIGKILL, %" PRIu64 " RETRY_EXC_ERR, %" PRIu64
		       " WR_FLUSH_ERR, %" PRIu64 " other; last completion "
		       "%.3f s after the kill\n", r.first_err_wr,
		       ibv_wc_status_str(r.first_err),
		       r.t_first_err - r.t_death, r.retry_exc, r.flushed,
		       r.other, r.t_last - r.t_death);
	else
		printf(", and no error completion\n");

	if (!WIFSIGNALED(r.child_status) ||
	    WTERMSIG(r.child_status) != SIGKILL) {
		printf("  FAIL: the child did not die of SIGKILL (%s %d)\n",
		       WIFEXITED(r.child_status) ? "exit" : "status",
		       WIFEXITED(r.child_status) ? WEXITSTATUS(r.child_status)
						 : r.child_status);
		pass = false;
	}
	/* The child saw K messages; their requester completions may still
	 * fail if the responder died before acknowledging them (real
	 * hardware coalesces ACKs), so fewer is only worth a note. */
	if (r.ok < O.k)
		printf("  note: %" PRIu64 " WRs completed OK though the child "
		       "saw %u (acknowledgements lost with it)\n", r.ok,
		       O.k);
	if (!r.had_err) {
		printf("  FAIL: no error completion within %.0f s of the "
		       "death (%" PRIu64 " WRs still outstanding)\n",
		       BOUND_SECS, outstanding);
		pass = false;
	} else {
		if (r.first_err != IBV_WC_RETRY_EXC_ERR) {
			printf("  FAIL: the first error is %s (%d), not "
			       "IBV_WC_RETRY_EXC_ERR\n",
			       ibv_wc_status_str(r.first_err), r.first_err);
			pass = false;
		}
		if (r.retry_exc != 1 || r.other ||
		    r.flushed != r.posted - r.ok - 1) {
			printf("  FAIL: after the first error expected %" PRIu64
			       " WR_FLUSH_ERR and nothing else, got %" PRIu64
			       " flushed, %" PRIu64 " RETRY_EXC_ERR, %" PRIu64
			       " other\n", r.posted - r.ok - 1, r.flushed,
			       r.retry_exc, r.other);
			pass = false;
		}
		if (outstanding) {
			printf("  FAIL: %" PRIu64 " WRs never completed "
			       "(waited %.0f s after the death)\n",
			       outstanding, BOUND_SECS);
			pass = false;
		}
		if (r.t_last - r.t_death > BOUND_SECS) {
			printf("  FAIL: the completions took %.3f s after "
			       "the death (bound %.0f s)\n",
			       r.t_last - r.t_death, BOUND_SECS);
			pass = false;
		}
	}
	if (r.max_post > 1.0) {
		printf("  FAIL: one ibv_post_send call blocked for %.3f s\n",
		       r.max_post);
		pass = false;
	}
	if (r.out_of_order) {
		printf("  FAIL: completions came out of posting order\n");
		pass = false;
	}
	if (r.had_err && outstanding == 0) {
		if (r.post_after)
			printf("  a post on the errored QP was refused: %s\n",
			       strerror(r.post_after));
		else if (!r.after_completed) {
			printf("  FAIL: a WR posted on the errored QP never "
			       "completed (5 s)\n");
			pass = false;
		} else if (r.after_status != IBV_WC_WR_FLUSH_ERR) {
			printf("  FAIL: a WR posted on the errored QP "
			       "completed with %s, not WR_FLUSH_ERR\n",
			       ibv_wc_status_str(r.after_status));
			pass = false;
		} else {
			printf("  a WR posted on the errored QP completed "
			       "with WR_FLUSH_ERR\n");
		}
	}

	/* Tearing down must not hang either (the alarm watches). */
	if (ibv_destroy_qp(s.qp) || ibv_destroy_cq(s.cq) ||
	    ibv_dereg_mr(s.mr) || ibv_dealloc_pd(s.pd) ||
	    ibv_close_device(s.ctx)) {
		printf("  FAIL: tearing down the survivor's objects failed\n");
		pass = false;
	}
	free(s.buf);
	close(fd);
	printf("%s variant: %s\n", name, pass ? "PASS" : "FAIL");
	return pass ? 0 : 1;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: peer_death [-o send|write|both] [-k K] [-T timeout] "
		"[-r retry_cnt] [-w window] [-d dev] [-v]\n"
		"  defaults: -o both -k 1000 -T 14 -r 7 -w 16 -d softib0\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int c, rc = 0;

	while ((c = getopt(argc, argv, "o:k:T:r:w:d:vh")) != -1) {
		switch (c) {
		case 'o':
			O.send = !strcmp(optarg, "send") ||
				 !strcmp(optarg, "both");
			O.write = !strcmp(optarg, "write") ||
				  !strcmp(optarg, "both");
			if (!O.send && !O.write)
				tp_die("bad -o '%s' (send, write, both)", optarg);
			break;
		case 'k':
			O.k = (uint32_t)strtoul(optarg, NULL, 0);
			if (O.k < 1 || O.k > 12000)
				tp_die("-k must be 1..12000");
			break;
		case 'T':
			O.timeout = (uint8_t)atoi(optarg);
			if (atoi(optarg) < 1 || atoi(optarg) > 18)
				tp_die("-T must be 1..18 (a try lasts 4.096 us "
				    "* 2^T: 1.07 s at 18)");
			break;
		case 'r':
			O.retry = (uint8_t)atoi(optarg);
			if (atoi(optarg) < 0 || atoi(optarg) > 7)
				tp_die("-r must be 0..7");
			break;
		case 'w':
			O.window = (uint32_t)atoi(optarg);
			if (O.window < 1 || O.window > MAX_WINDOW)
				tp_die("-w must be 1..%d", MAX_WINDOW);
			break;
		case 'd':
			O.dev = optarg;
			break;
		case 'v':
			O.verbose = true;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	SH = mmap(NULL, sizeof(*SH), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (SH == MAP_FAILED)
		tp_die("mmap: %s", strerror(errno));
	signal(SIGALRM, on_alarm);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("peer_death: RC, timeout %u (%.3f s a try), retry_cnt %u: the "
	       "first outstanding WR should fail after ~%.2f s\n", O.timeout,
	       4.096e-6 * (1u << O.timeout), O.retry,
	       4.096e-6 * (1u << O.timeout) * (O.retry + 1));
	if (O.send)
		rc |= run_variant(false);
	if (O.write)
		rc |= run_variant(true);
	return rc;
}
