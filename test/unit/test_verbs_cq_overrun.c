/*
 * Issue 15 items 1 and 10 through the verbs API: completion events and
 * async events that must not be lost, and a CQ that overflows.
 *  - a burst over more CQs than a channel's socket queues (about ten):
 *    every CQ's event is delivered;
 *  - CQ overrun (the spec's CQ error): a tiny CQ flooded with completions
 *    raises IBV_EVENT_CQ_ERR, the QP that completes to it goes to the
 *    error state with IBV_EVENT_QP_FATAL, and a QP pair on another CQ
 *    goes on unharmed;
 *  - async storm, local: a thousand QPs on the CQ that overflows, each an
 *    IBV_EVENT_QP_FATAL, none lost, though the application reads none
 *    until all are raised;
 *  - async storm, across processes: another process's requests err
 *    hundreds of our QPs at once (bad rkey: IBV_EVENT_QP_ACCESS_ERR, each
 *    through our doorbell), none lost.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "cu_run.h"
#include "test/programs/storm_util.h"

static struct storm_dev D;

static int suite_init(void)
{
	tp_who = "test_verbs_cq_overrun";
	storm_open(&D);
	return 0;
}

static int suite_clean(void)
{
	ibv_dealloc_pd(D.pd);
	return ibv_close_device(D.ctx);
}

/* The next async event within ms milliseconds: 0, or -1 on none. */
static int next_async(struct ibv_context *c, struct ibv_async_event *ev, int ms)
{
	struct pollfd p = { .fd = c->async_fd, .events = POLLIN };

	if (poll(&p, 1, ms) != 1)
		return -1;
	return ibv_get_async_event(c, ev);
}

static void connect_pair(struct ibv_qp *a, struct ibv_qp *b)
{
	struct storm_addr aa, ba;

	storm_addr_of(&D, a, &aa);
	storm_addr_of(&D, b, &ba);
	storm_connect(&D, a, &ba);
	storm_connect(&D, b, &aa);
}

static int post_send_imm(struct ibv_qp *qp, uint64_t wr_id, uint32_t imm)
{
	uint64_t payload = imm;
	struct ibv_sge sge = { .addr = (uintptr_t)&payload, .length = 8 };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
				  .imm_data = htobe32(imm) }, *bad;

	return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return (enum ibv_qp_state)-1;
	return a.qp_state;
}

/* Drain n completions of cq within 5 s; how many came with SUCCESS. */
static int poll_n(struct ibv_cq *cq, int n)
{
	struct ibv_wc wc;
	int ok = 0, got = 0;
	double end = tp_now_s() + 5;

	while (got < n && tp_now_s() < end) {
		int r = ibv_poll_cq(cq, 1, &wc);

		if (r < 0)
			break;
		if (r == 1) {
			got++;
			ok += wc.status == IBV_WC_SUCCESS;
		}
	}
	return ok;
}

/*
 * Wait for `want_qp` QP events of type qt (one per QP of qps[], none
 * twice) and, if cq, one IBV_EVENT_CQ_ERR for it. Reads until 3 s pass
 * with nothing new. Returns how many of the expected arrived; *bad counts
 * anything else.
 */
static int collect(struct ibv_qp **qps, int nqp, enum ibv_event_type qt,
		   struct ibv_cq *cq, int *bad)
{
	bool *seen = calloc((size_t)nqp, 1);
	struct ibv_async_event ev;
	int got = 0;

	*bad = 0;
	while (next_async(D.ctx, &ev, 3000) == 0) {
		int i = 0;

		if (cq && ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == cq) {
			got++;
			cq = NULL; /* once */
		} else if (ev.event_type == qt) {
			while (i < nqp && qps[i] != ev.element.qp)
				i++;
			if (i < nqp && !seen[i]) {
				seen[i] = true;
				got++;
			} else {
				(*bad)++;
			}
		} else {
			(*bad)++;
		}
		ibv_ack_async_event(&ev);
	}
	free(seen);
	printf("(%d of the events expected, %d others) ", got, *bad);
	return got;
}

static void test_cq_overrun(void)
{
	struct ibv_cq *tiny = ibv_create_cq(D.ctx, 1, NULL, NULL, 0);
	struct ibv_cq *big = ibv_create_cq(D.ctx, 64, NULL, NULL, 0);
	struct ibv_cq *other = ibv_create_cq(D.ctx, 64, NULL, NULL, 0);
	static uint8_t buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(D.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *a, *b, *c, *d;
	struct ibv_wc wc;
	int bad = 0, n;

	CU_ASSERT_FATAL(tiny && big && other && mr);
	a = storm_qp(&D, tiny, tiny, 16, 16);
	b = storm_qp(&D, big, big, 16, 16);
	c = storm_qp(&D, other, other, 16, 16);
	d = storm_qp(&D, other, other, 16, 16);
	connect_pair(a, b);
	connect_pair(c, d);
	for (int i = 0; i < 16; i++)
		CU_ASSERT_EQUAL(post_recv(b, mr, buf, 100 + (uint64_t)i), 0);
	/* a's send completions flood the tiny CQ, which nobody polls */
	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(post_send_imm(a, (uint64_t)i, (uint32_t)i), 0);
	CU_ASSERT_EQUAL(collect(&a, 1, IBV_EVENT_QP_FATAL, tiny, &bad), 2);
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(qp_state(a), IBV_QPS_ERR);
	/* what the tiny CQ kept is whole: its entries, at most its size + 1 */
	n = 0;
	while (ibv_poll_cq(tiny, 1, &wc) == 1) {
		CU_ASSERT(wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_WR_FLUSH_ERR);
		n++;
	}
	CU_ASSERT(n >= 1 && n <= tiny->cqe + 1);
	/* b received in order, on its own CQ */
	for (int i = 0; ibv_poll_cq(big, 1, &wc) == 1; i++) {
		CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
		CU_ASSERT_EQUAL(be32toh(wc.imm_data), (uint32_t)i);
	}
	CU_ASSERT_EQUAL(qp_state(b), IBV_QPS_RTS);
	/* the other pair is untouched: its traffic flows */
	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(post_recv(d, mr, buf + 64, 200 + (uint64_t)i), 0);
	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(post_send_imm(c, (uint64_t)i, 0x55 + (uint32_t)i), 0);
	CU_ASSERT_EQUAL(poll_n(other, 16), 16);
	CU_ASSERT_EQUAL(qp_state(c), IBV_QPS_RTS);
	CU_ASSERT_EQUAL(qp_state(d), IBV_QPS_RTS);
	CU_ASSERT_EQUAL(next_async(D.ctx, &(struct ibv_async_event){ 0 }, 200), -1);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_qp(c);
	ibv_destroy_qp(d);
	ibv_destroy_cq(tiny);
	ibv_destroy_cq(big);
	ibv_destroy_cq(other);
	ibv_dereg_mr(mr);
}

#define LOCAL_STORM 1000

static void test_async_storm_local(void)
{
	struct ibv_cq *tiny = ibv_create_cq(D.ctx, 1, NULL, NULL, 0);
	struct ibv_cq *big = ibv_create_cq(D.ctx, 64, NULL, NULL, 0);
	static uint8_t buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(D.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp **qps = calloc(LOCAL_STORM + 1, sizeof(*qps)), *b;
	int bad = 0;

	CU_ASSERT_FATAL(tiny && big && mr && qps);
	/* a thousand QPs (INIT) complete to the tiny CQ, and qps[0] floods it */
	for (int i = 0; i <= LOCAL_STORM; i++)
		qps[i] = storm_qp(&D, tiny, tiny, 8, 8);
	b = storm_qp(&D, big, big, 16, 16);
	connect_pair(qps[0], b);
	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(post_recv(b, mr, buf, (uint64_t)i), 0);
	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(post_send_imm(qps[0], (uint64_t)i, (uint32_t)i), 0);
	/* the application reads nothing until all are raised */
	sleep(1);
	CU_ASSERT_EQUAL(collect(qps, LOCAL_STORM + 1, IBV_EVENT_QP_FATAL, tiny, &bad),
			LOCAL_STORM + 2);
	CU_ASSERT_EQUAL(bad, 0);
	for (int i = 0; i <= LOCAL_STORM; i++) {
		CU_ASSERT_EQUAL(qp_state(qps[i]), IBV_QPS_ERR);
		ibv_destroy_qp(qps[i]);
	}
	ibv_destroy_qp(b);
	ibv_destroy_cq(tiny);
	ibv_destroy_cq(big);
	ibv_dereg_mr(mr);
	free(qps);
}

#define REMOTE_STORM 400

/* The other process: RDMA WRITEs with a bad rkey into each of our QPs. */
static void storm_child(int fd, const struct storm_addr *ours)
{
	struct storm_dev d;
	struct storm_addr *mine = calloc(REMOTE_STORM, sizeof(*mine));
	struct ibv_qp **qps = calloc(REMOTE_STORM, sizeof(*qps));
	struct ibv_cq *cq;
	uint64_t word = 0;
	struct ibv_wc wc;
	int got = 0;
	char c;

	storm_open(&d);
	cq = ibv_create_cq(d.ctx, 2 * REMOTE_STORM, NULL, NULL, 0);
	if (!cq || !mine || !qps)
		_exit(3);
	for (int i = 0; i < REMOTE_STORM; i++) {
		qps[i] = storm_qp(&d, cq, cq, 4, 4);
		storm_addr_of(&d, qps[i], &mine[i]);
		storm_connect(&d, qps[i], &ours[i]);
	}
	storm_write_all(fd, mine, REMOTE_STORM * sizeof(*mine));
	storm_read_all(fd, &c, 1); /* the parent connected */
	for (int i = 0; i < REMOTE_STORM; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)&word, .length = 8 };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge,
					  .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
					  .wr.rdma = { .remote_addr = 4096, .rkey = 0xdead00 } },
			*bad;

		if (ibv_post_send(qps[i], &wr, &bad))
			_exit(4);
	}
	for (double end = tp_now_s() + 20; got < REMOTE_STORM && tp_now_s() < end;)
		got += ibv_poll_cq(cq, 1, &wc) == 1;
	storm_write_all(fd, &got, sizeof(got));
	storm_read_all(fd, &c, 1);
	_exit(0);
}

static void test_async_storm_remote(void)
{
	struct ibv_cq *cq = ibv_create_cq(D.ctx, 2 * REMOTE_STORM, NULL, NULL, 0);
	struct storm_addr *ours = calloc(REMOTE_STORM, sizeof(*ours));
	struct storm_addr *theirs = calloc(REMOTE_STORM, sizeof(*theirs));
	struct ibv_qp **qps = calloc(REMOTE_STORM, sizeof(*qps));
	int sv[2], got = 0, bad = 0, status;
	pid_t pid;

	CU_ASSERT_FATAL(cq && ours && theirs && qps);
	CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	for (int i = 0; i < REMOTE_STORM; i++) {
		qps[i] = storm_qp(&D, cq, cq, 4, 4);
		storm_addr_of(&D, qps[i], &ours[i]);
	}
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (!pid) {
		close(sv[0]);
		storm_child(sv[1], ours);
	}
	close(sv[1]);
	storm_read_all(sv[0], theirs, REMOTE_STORM * sizeof(*theirs));
	for (int i = 0; i < REMOTE_STORM; i++)
		storm_connect(&D, qps[i], &theirs[i]);
	storm_write_all(sv[0], "c", 1);
	storm_read_all(sv[0], &got, sizeof(got));
	CU_ASSERT_EQUAL(got, REMOTE_STORM); /* every WRITE answered (with an error) */
	/* only now does the application look: every event is still there */
	CU_ASSERT_EQUAL(collect(qps, REMOTE_STORM, IBV_EVENT_QP_ACCESS_ERR, NULL, &bad),
			REMOTE_STORM);
	CU_ASSERT_EQUAL(bad, 0);
	for (int i = 0; i < REMOTE_STORM; i++) {
		CU_ASSERT_EQUAL(qp_state(qps[i]), IBV_QPS_ERR);
		ibv_destroy_qp(qps[i]);
	}
	storm_write_all(sv[0], "x", 1);
	CU_ASSERT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		  WEXITSTATUS(status) == 0);
	close(sv[0]);
	ibv_destroy_cq(cq);
	free(ours);
	free(theirs);
	free(qps);
}

#define CHAN_CQS 64

/*
 * 64 CQs on one channel, every one signalled before the application reads
 * any: 64 events, one per CQ, then nothing — the channel's socket holds
 * about ten datagrams, and the events beyond them must not be lost.
 */
static void test_channel_burst(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(D.ctx);
	struct ibv_cq *scq = ibv_create_cq(D.ctx, 2 * CHAN_CQS, NULL, NULL, 0);
	struct ibv_cq *cqs[CHAN_CQS];
	struct ibv_qp *a[CHAN_CQS], *b[CHAN_CQS];
	static uint8_t buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(D.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	bool seen[CHAN_CQS] = { false };
	struct ibv_cq *cq;
	struct ibv_wc wc;
	void *user;
	int got = 0;

	CU_ASSERT_FATAL(ch && scq && mr);
	CU_ASSERT_FATAL(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
	for (int i = 0; i < CHAN_CQS; i++) {
		cqs[i] = ibv_create_cq(D.ctx, 4, (void *)(intptr_t)i, ch, 0);
		CU_ASSERT_FATAL(cqs[i] != NULL);
		a[i] = storm_qp(&D, scq, scq, 4, 4);
		b[i] = storm_qp(&D, cqs[i], cqs[i], 4, 4);
		connect_pair(a[i], b[i]);
		CU_ASSERT_EQUAL(post_recv(b[i], mr, buf, (uint64_t)i), 0);
		CU_ASSERT_EQUAL(ibv_req_notify_cq(cqs[i], 0), 0);
	}
	for (int i = 0; i < CHAN_CQS; i++)
		CU_ASSERT_EQUAL(post_send_imm(a[i], (uint64_t)i, (uint32_t)i), 0);
	CU_ASSERT_EQUAL(poll_n(scq, CHAN_CQS), CHAN_CQS);
	for (double end = tp_now_s() + 3; got < CHAN_CQS && tp_now_s() < end;) {
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };

		if (poll(&p, 1, 100) != 1)
			continue;
		while (ibv_get_cq_event(ch, &cq, &user) == 0) {
			int i = (int)(intptr_t)user;

			ibv_ack_cq_events(cq, 1);
			CU_ASSERT(i >= 0 && i < CHAN_CQS && cqs[i] == cq && !seen[i]);
			if (i >= 0 && i < CHAN_CQS && !seen[i]) {
				seen[i] = true;
				got++;
				CU_ASSERT_EQUAL(ibv_poll_cq(cq, 1, &wc), 1);
				CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
			}
		}
	}
	printf("(%d of %d CQs' events) ", got, CHAN_CQS);
	CU_ASSERT_EQUAL(got, CHAN_CQS);
	for (int i = 0; i < CHAN_CQS; i++) {
		ibv_destroy_qp(a[i]);
		ibv_destroy_qp(b[i]);
		ibv_destroy_cq(cqs[i]);
	}
	ibv_destroy_cq(scq);
	ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(mr);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("cq overrun and async events", suite_init, suite_clean);

	if (!s ||
	    !CU_add_test(s, "64 CQs signalled at once on one channel: 64 events",
			 test_channel_burst) ||
	    !CU_add_test(s, "CQ overrun: CQ_ERR, its QP to error, another pair unharmed",
			 test_cq_overrun) ||
	    !CU_add_test(s, "async storm: 1000 QP_FATAL from one overrun, none lost",
			 test_async_storm_local) ||
	    !CU_add_test(s, "async storm: 400 QP_ACCESS_ERR raised by another process",
			 test_async_storm_remote))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
