/*
 * White-box tests of wake-ups and checked results (issue 15, items 1 and
 * 10): failures are forced through the SOFTIB_TEST_FAIL hooks of wake.c
 * (hca_test_fail[]), and the device must go on as if the kernel had not
 * refused — a failed wake datagram is sent again, a refused epoll_ctl
 * makes the device open fail cleanly, a timer that cannot be set is
 * replaced by the thread's own ticks, a failed mutex initialisation fails
 * the object's creation.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cu_run.h"
#include "hca.h"
#include "hca_int.h"

static struct hca_ah test_ah;

/* UD sends here use one AH, to our host: its contents go down with
 * every post (the verbs layer hands each WR's down the same way). */
static const struct hca_ah *const test_ah_list[] = { &test_ah, &test_ah, &test_ah, &test_ah };

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A device, a context, and two RC QPs of ours connected to each other. */
struct rig {
	struct hca_dev *dev;
	struct hca_ctx *ctx;
	struct hca_pd *pd;
	struct hca_chan *chan;
	struct hca_cq *scq, *rcq;   /* rcq on chan */
	struct hca_qp *a, *b;
	struct hca_mr *mr;
	uint8_t buf[4096];
};

static struct hca_qp *rig_qp(struct rig *r)
{
	struct hca_qp_init in = { .type = IBV_QPT_RC, .send_cq = r->scq, .recv_cq = r->rcq,
				  .cap = { .max_send_wr = 16, .max_recv_wr = 16,
					   .max_send_sge = 1, .max_recv_sge = 1,
					   .max_inline_data = 16 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	struct hca_qp *qp = hca_qp_create(r->pd, &in, NULL);

	if (qp && hca_qp_modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				IBV_QP_ACCESS_FLAGS)) {
		hca_qp_destroy(qp);
		return NULL;
	}
	return qp;
}

static int rig_connect(struct rig *r, struct hca_qp *qp, uint32_t dest)
{
	struct ibv_port_attr pa;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = dest, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = 1 };

	hca_dev_query_port(r->dev, 1, &pa, sizeof(pa));
	a.ah_attr.dlid = pa.lid;
	a.ah_attr.port_num = 1;
	if (hca_qp_modify(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return hca_qp_modify(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_MAX_QP_RD_ATOMIC) ? -1 : 0;
}

static int rig_open(struct rig *r, int scq_size)
{
	memset(r, 0, sizeof(*r));
	r->dev = hca_dev_get();
	if (!r->dev)
		return -1;
	r->ctx = hca_ctx_open(r->dev, NULL);
	r->pd = r->ctx ? hca_pd_alloc(r->ctx) : NULL;
	r->chan = r->ctx ? hca_chan_create(r->ctx) : NULL;
	r->scq = r->ctx ? hca_cq_create(r->ctx, scq_size, NULL, 0, &r->scq) : NULL;
	r->rcq = r->chan ? hca_cq_create(r->ctx, 64, r->chan, 0, &r->rcq) : NULL;
	r->mr = r->pd ? hca_mr_reg(r->pd, r->buf, sizeof(r->buf), (uintptr_t)r->buf,
				   IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!r->pd || !r->chan || !r->scq || !r->rcq || !r->mr)
		return -1;
	r->a = rig_qp(r);
	r->b = rig_qp(r);
	if (!r->a || !r->b)
		return -1;
	return rig_connect(r, r->a, hca_qp_num(r->b)) || rig_connect(r, r->b, hca_qp_num(r->a));
}

static void rig_close(struct rig *r)
{
	CU_ASSERT_EQUAL(hca_qp_destroy(r->a), 0);
	CU_ASSERT_EQUAL(hca_qp_destroy(r->b), 0);
	CU_ASSERT_EQUAL(hca_mr_dereg(r->mr), 0);
	CU_ASSERT_EQUAL(hca_cq_destroy(r->scq), 0);
	CU_ASSERT_EQUAL(hca_cq_destroy(r->rcq), 0);
	CU_ASSERT_EQUAL(hca_chan_destroy(r->chan), 0);
	CU_ASSERT_EQUAL(hca_pd_dealloc(r->pd), 0);
	hca_ctx_close(r->ctx);
	hca_dev_put(r->dev);
}

static int post_recv(struct rig *r, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)r->buf, 64, hca_mr_key(r->mr) };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	return hca_qp_post_recv(r->b, &wr, &bad);
}

static int post_send(struct rig *r, uint64_t id)
{
	uint64_t word = id;
	struct ibv_sge s = { (uintptr_t)&word, 8, 0 };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;

	return hca_qp_post_send_ah(r->a, &wr, test_ah_list, &bad);
}

struct waiter {
	struct hca_chan *chan;
	void *user;
	int rc;
	_Atomic int done;
};

static void *wait_event(void *p)
{
	struct waiter *w = p;

	w->rc = hca_chan_get_event(w->chan, &w->user);
	atomic_store(&w->done, 1);
	return NULL;
}

/* A thread asleep on the channel; the wake datagram's first sends fail. */
static void test_channel_wake_retried(void)
{
	struct rig r;
	struct waiter w = { 0 };
	pthread_t t;
	uint64_t deferred, retried;
	double t0;

	CU_ASSERT_FATAL(rig_open(&r, 64) == 0);
	deferred = atomic_load(&r.dev->wake.deferred);
	retried = atomic_load(&r.dev->wake.retried);
	w.chan = r.chan;
	CU_ASSERT_EQUAL(hca_cq_arm(r.rcq, 0), 0);
	CU_ASSERT_FATAL(pthread_create(&t, NULL, wait_event, &w) == 0);
	usleep(50000); /* asleep in poll() on the channel's fd by now */
	CU_ASSERT_EQUAL(post_recv(&r, 1), 0);
	atomic_store(&hca_test_fail[HCA_FAIL_SEND], 3);
	t0 = now_s();
	CU_ASSERT_EQUAL(post_send(&r, 2), 0);
	while (!atomic_load(&w.done) && now_s() - t0 < 3)
		usleep(1000);
	CU_ASSERT_FATAL(atomic_load(&w.done) == 1); /* else: the wake was lost */
	pthread_join(t, NULL);
	atomic_store(&hca_test_fail[HCA_FAIL_SEND], 0);
	CU_ASSERT_EQUAL(w.rc, 0);
	CU_ASSERT_PTR_EQUAL(w.user, &r.rcq);
	CU_ASSERT(atomic_load(&r.dev->wake.deferred) > deferred);
	/* the retry's count follows its send: the waiter may be first */
	for (t0 = now_s(); atomic_load(&r.dev->wake.retried) == retried &&
	     now_s() - t0 < 1;)
		usleep(1000);
	CU_ASSERT(atomic_load(&r.dev->wake.retried) > retried);
	CU_ASSERT_EQUAL(hca_wake_retry_pending(r.dev), 0);
	rig_close(&r);
}

/* A CQ overrun's doorbell (to ourselves) fails at first: CQ_ERR still comes. */
static void test_doorbell_retried(void)
{
	struct rig r;
	struct pollfd p;
	struct hca_async_ev ev;
	bool cq_err = false, qp_fatal = false;

	CU_ASSERT_FATAL(rig_open(&r, 1) == 0);
	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(post_recv(&r, (uint64_t)i), 0);
	atomic_store(&hca_test_fail[HCA_FAIL_SEND], 2);
	for (int i = 0; i < 4; i++) /* a's send CQ holds 2: overrun */
		CU_ASSERT_EQUAL(post_send(&r, 10 + (uint64_t)i), 0);
	p = (struct pollfd){ .fd = hca_ctx_async_fd(r.ctx), .events = POLLIN };
	while (poll(&p, 1, 3000) == 1 && hca_ctx_get_async_event(r.ctx, &ev) == 0) {
		cq_err |= ev.type == IBV_EVENT_CQ_ERR && ev.user == &r.scq;
		qp_fatal |= ev.type == IBV_EVENT_QP_FATAL;
		if (cq_err && qp_fatal)
			break;
	}
	atomic_store(&hca_test_fail[HCA_FAIL_SEND], 0);
	CU_ASSERT(cq_err);
	CU_ASSERT(qp_fatal);
	CU_ASSERT_EQUAL(hca_qp_state(r.a), IBV_QPS_ERR);
	rig_close(&r);
}

/* Each object whose creation initialises a mutex fails with its errno. */
static void test_mutex_init_checked(void)
{
	struct rig r;
	struct hca_qp_init in;

	CU_ASSERT_FATAL(rig_open(&r, 16) == 0);
	atomic_store(&hca_test_fail[HCA_FAIL_MUTEX], 1);
	errno = 0;
	CU_ASSERT_PTR_NULL(hca_cq_create(r.ctx, 16, NULL, 0, NULL));
	CU_ASSERT_EQUAL(errno, ENOMEM);
	atomic_store(&hca_test_fail[HCA_FAIL_MUTEX], 1);
	errno = 0;
	CU_ASSERT_PTR_NULL(hca_chan_create(r.ctx));
	CU_ASSERT_EQUAL(errno, ENOMEM);
	atomic_store(&hca_test_fail[HCA_FAIL_MUTEX], 1);
	errno = 0;
	CU_ASSERT_PTR_NULL(hca_ctx_open(r.dev, NULL));
	CU_ASSERT_EQUAL(errno, ENOMEM);
	for (int k = 1; k <= 2; k++) { /* the QP has two */
		in = (struct hca_qp_init){ .type = IBV_QPT_RC, .send_cq = r.scq,
					   .recv_cq = r.scq,
					   .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						    .max_send_sge = 1, .max_recv_sge = 1 } };
		atomic_store(&hca_test_fail[HCA_FAIL_MUTEX], k);
		errno = 0;
		CU_ASSERT_PTR_NULL(hca_qp_create(r.pd, &in, NULL));
		CU_ASSERT_EQUAL(errno, ENOMEM);
	}
	atomic_store(&hca_test_fail[HCA_FAIL_MUTEX], 0);
	/* and afterwards all is as before: a CQ and a channel work */
	struct hca_chan *ch = hca_chan_create(r.ctx);
	struct hca_cq *cq = ch ? hca_cq_create(r.ctx, 16, ch, 0, NULL) : NULL;

	CU_ASSERT(ch && cq);
	if (cq)
		CU_ASSERT_EQUAL(hca_cq_destroy(cq), 0);
	if (ch)
		CU_ASSERT_EQUAL(hca_chan_destroy(ch), 0);
	rig_close(&r);
}

/* epoll_ctl refused while the device starts: the open fails, cleanly. */
static void test_epoll_ctl_checked(void)
{
	struct hca_dev *dev;

	atomic_store(&hca_test_fail[HCA_FAIL_EPOLL], 1);
	errno = 0;
	dev = hca_dev_get();
	CU_ASSERT_PTR_NULL(dev);
	CU_ASSERT_EQUAL(errno, ENOMEM);
	if (dev)
		hca_dev_put(dev);
	atomic_store(&hca_test_fail[HCA_FAIL_EPOLL], 0);
	dev = hca_dev_get();
	CU_ASSERT_PTR_NOT_NULL(dev);
	if (dev)
		hca_dev_put(dev);
}

/*
 * The progress thread's timer cannot be set: it ticks by itself, so the
 * work of its ticks still happens — here, a peer that died is noticed
 * and its slot reclaimed.
 */
static void test_timerfd_checked(void)
{
	struct hca_dev *dev;
	int fd[2];
	uint16_t slot = 0;
	pid_t pid;
	double t0;

	atomic_store(&hca_test_fail[HCA_FAIL_TIMERFD], 1 << 30);
	dev = hca_dev_get();
	CU_ASSERT_FATAL(dev != NULL);
	CU_ASSERT(dev->timer_failed);
	CU_ASSERT_FATAL(pipe(fd) == 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (!pid) { /* a peer that attaches, then dies without a word */
		struct hca_dev *d = hca_dev_get();

		if (!d || write(fd[1], &d->slot, sizeof(d->slot)) != sizeof(d->slot))
			_exit(1);
		_exit(0);
	}
	CU_ASSERT_FATAL(read(fd[0], &slot, sizeof(slot)) == sizeof(slot));
	waitpid(pid, NULL, 0);
	t0 = now_s();
	while (atomic_load(&dev->seg->procs[slot].state) == HCA_PROC_LIVE &&
	       dev->seg->procs[slot].pid == pid && now_s() - t0 < 5)
		usleep(5000);
	CU_ASSERT(atomic_load(&dev->seg->procs[slot].state) != HCA_PROC_LIVE ||
		  dev->seg->procs[slot].pid != pid);
	atomic_store(&hca_test_fail[HCA_FAIL_TIMERFD], 0);
	close(fd[0]);
	close(fd[1]);
	hca_dev_put(dev);
}

/*
 * A responder in another process errs our QP (a SEND longer than our
 * receive buffer) and dies before its flush request could be sent (every
 * send of it fails): our QP's other receive must still be flushed — the
 * progress thread looks for owed flushes when the membership changes.
 */
static void test_flush_of_dead_sender(void)
{
	struct rig r;
	struct hca_qp *p;
	struct ibv_wc wc[2];
	int tochild[2], toparent[2], got = 0, status;
	uint32_t qpn;
	pid_t pid;
	double t0;

	CU_ASSERT_FATAL(rig_open(&r, 64) == 0);
	p = rig_qp(&r);
	CU_ASSERT_FATAL(p != NULL);
	for (uint64_t id = 1; id <= 2; id++) {
		struct ibv_sge s = { (uintptr_t)r.buf, 64, hca_mr_key(r.mr) };
		struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

		CU_ASSERT_EQUAL(hca_qp_post_recv(p, &wr, &bad), 0);
	}
	CU_ASSERT_FATAL(pipe(tochild) == 0 && pipe(toparent) == 0);
	qpn = hca_qp_num(p);
	CU_ASSERT_FATAL(write(tochild[1], &qpn, sizeof(qpn)) == sizeof(qpn));
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (!pid) {
		struct rig c;
		static uint8_t big[256];
		struct ibv_sge s = { (uintptr_t)big, sizeof(big), 0 };
		struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &s, .num_sge = 1,
					  .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		uint32_t peer;
		char go;

		memset(&c, 0, sizeof(c));
		c.dev = hca_dev_get();
		c.ctx = c.dev ? hca_ctx_open(c.dev, NULL) : NULL;
		c.pd = c.ctx ? hca_pd_alloc(c.ctx) : NULL;
		c.scq = c.rcq = c.ctx ? hca_cq_create(c.ctx, 16, NULL, 0, NULL) : NULL;
		c.mr = c.pd ? hca_mr_reg(c.pd, big, sizeof(big), (uintptr_t)big,
					 IBV_ACCESS_LOCAL_WRITE) : NULL;
		c.a = c.mr ? rig_qp(&c) : NULL;
		if (!c.a || read(tochild[0], &peer, sizeof(peer)) != sizeof(peer) ||
		    rig_connect(&c, c.a, peer))
			_exit(1);
		qpn = hca_qp_num(c.a);
		s.lkey = hca_mr_key(c.mr);
		if (write(toparent[1], &qpn, sizeof(qpn)) != sizeof(qpn) ||
		    read(tochild[0], &go, 1) != 1)
			_exit(1);
		atomic_store(&hca_test_fail[HCA_FAIL_SEND], 1 << 30);
		hca_qp_post_send_ah(c.a, &wr, test_ah_list, &bad); /* runs our responder's side */
		_exit(0);                         /* before any retry */
	}
	CU_ASSERT_FATAL(read(toparent[0], &qpn, sizeof(qpn)) == sizeof(qpn));
	CU_ASSERT_FATAL(rig_connect(&r, p, qpn) == 0);
	CU_ASSERT_FATAL(write(tochild[1], "g", 1) == 1);
	CU_ASSERT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		  WEXITSTATUS(status) == 0);
	for (t0 = now_s(); got < 2 && now_s() - t0 < 5;) {
		int n = hca_cq_poll(r.rcq, 2 - got, wc + got, NULL);

		if (n > 0)
			got += n;
		else
			usleep(1000);
	}
	CU_ASSERT_EQUAL_FATAL(got, 2);
	CU_ASSERT_EQUAL(wc[0].wr_id, 1);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_LOC_LEN_ERR);
	CU_ASSERT_EQUAL(wc[1].wr_id, 2);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	CU_ASSERT_EQUAL(hca_qp_destroy(p), 0);
	for (int i = 0; i < 2; i++) {
		close(tochild[i]);
		close(toparent[i]);
	}
	rig_close(&r);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("wake-ups and checked results", NULL, NULL);

	if (!s ||
	    !CU_add_test(s, "a channel wake whose send fails is sent again",
			 test_channel_wake_retried) ||
	    !CU_add_test(s, "a doorbell whose send fails is sent again (CQ_ERR)",
			 test_doorbell_retried) ||
	    !CU_add_test(s, "mutex initialisation failures fail the creation",
			 test_mutex_init_checked) ||
	    !CU_add_test(s, "epoll_ctl refused: the device open fails cleanly",
			 test_epoll_ctl_checked) ||
	    !CU_add_test(s, "timerfd_settime refused: the thread ticks by itself",
			 test_timerfd_checked) ||
	    !CU_add_test(s, "a flush whose sender died before sending it still happens",
			 test_flush_of_dead_sender))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
