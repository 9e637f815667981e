/*
 * Issue 15 item 4: the progress thread's doorbell dispatch acts on a QP,
 * CQ or SRQ that the application may be destroying at the same moment
 * (obj_tab.c). Destruction must wait for a dispatch that found the object;
 * a dispatch that comes after must find nothing.
 *
 * The deterministic cases stop the dispatch, with the object found, in
 * the test hook hca_db_dispatch_hook, and destroy the object from the test
 * thread meanwhile: the destroy must not return while the hook holds the
 * dispatch (it returns once the hook lets go). Where the object is not
 * held, the destroy frees it under the dispatch, which then reads freed
 * memory: the ASan build reports it, and the plain build fails the
 * "destroy waited" assertion.
 *
 * The stress case has no hook: a thread rings our own doorbell with
 * events for QPs and CQs that the test thread creates and destroys as
 * fast as it can, for a while, under ASan.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu_run.h"
#include "hca.h"
#include "hca_int.h"

#define HOLD_MS 300 /* how long the hook holds a dispatch */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t want_kind;
	bool entered, destroyed, destroyed_inside;
} H = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false, false, false };

static void deadline_in(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* In the progress thread, the object found: let the test thread destroy
 * it, and see whether its destroy returns while we still hold it. */
static void hold_hook(const struct hca_db_msg *m)
{
	struct timespec ts;

	if (m->kind != H.want_kind)
		return;
	deadline_in(&ts, HOLD_MS);
	pthread_mutex_lock(&H.mu);
	H.entered = true;
	pthread_cond_broadcast(&H.cv);
	while (!H.destroyed && pthread_cond_timedwait(&H.cv, &H.mu, &ts) != ETIMEDOUT)
		;
	H.destroyed_inside = H.destroyed;
	pthread_mutex_unlock(&H.mu);
}

static void hook_arm(uint32_t kind)
{
	pthread_mutex_lock(&H.mu);
	H.want_kind = kind;
	H.entered = H.destroyed = H.destroyed_inside = false;
	pthread_mutex_unlock(&H.mu);
	hca_db_dispatch_hook = hold_hook;
}

static bool hook_wait_entered(void)
{
	struct timespec ts;
	bool ok;

	deadline_in(&ts, 5000);
	pthread_mutex_lock(&H.mu);
	while (!H.entered && pthread_cond_timedwait(&H.cv, &H.mu, &ts) != ETIMEDOUT)
		;
	ok = H.entered;
	pthread_mutex_unlock(&H.mu);
	return ok;
}

static void hook_destroyed(void)
{
	pthread_mutex_lock(&H.mu);
	H.destroyed = true;
	pthread_cond_broadcast(&H.cv);
	pthread_mutex_unlock(&H.mu);
}

static struct hca_dev *dev;
static struct hca_ctx *ctx;
static struct hca_pd *pd;
static struct hca_cq *cq;

static int setup(void)
{
	dev = hca_dev_get();
	ctx = dev ? hca_ctx_open(dev, NULL) : NULL;
	pd = ctx ? hca_pd_alloc(ctx) : NULL;
	cq = pd ? hca_cq_create(ctx, 64, NULL, 0, NULL) : NULL;
	return cq ? 0 : -1;
}

static int teardown(void)
{
	hca_db_dispatch_hook = NULL;
	if (cq)
		hca_cq_destroy(cq);
	if (pd)
		hca_pd_dealloc(pd);
	if (ctx)
		hca_ctx_close(ctx);
	if (dev)
		hca_dev_put(dev);
	return 0;
}

static struct hca_qp *qp_in_error(void *user)
{
	struct hca_qp_init in = { .type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq,
				  .cap = { .max_send_wr = 4, .max_recv_wr = 4,
					   .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	struct hca_qp *qp = hca_qp_create(pd, &in, user);

	if (qp && hca_qp_modify(qp, &a, IBV_QP_STATE)) {
		hca_qp_destroy(qp);
		return NULL;
	}
	return qp;
}

/* Ring our own doorbell, as a peer's responder would. */
static int ring(uint32_t kind, uint32_t event, uint32_t idx, uint32_t id)
{
	struct hca_db_msg m = { .kind = kind, .event = event, .idx = idx, .id = id };

	return hca_dev_notify(dev, dev->slot, dev->gen, &m, sizeof(m));
}

/* Drain the context's async events; true if one of `type` came. */
static bool async_seen(enum ibv_event_type type, void *user)
{
	struct pollfd p = { .fd = hca_ctx_async_fd(ctx), .events = POLLIN };
	struct hca_async_ev ev;
	bool seen = false;

	while (poll(&p, 1, 0) == 1 && hca_ctx_get_async_event(ctx, &ev) == 0)
		seen |= ev.type == type && ev.user == user;
	return seen;
}

static void test_qp_event(uint32_t kind)
{
	static int user;
	struct hca_qp *qp = qp_in_error(&user);

	CU_ASSERT_PTR_NOT_NULL_FATAL(qp);
	async_seen(0, NULL);
	hook_arm(kind);
	CU_ASSERT_EQUAL(ring(kind, kind == HCA_DB_ASYNC_QP ? IBV_EVENT_QP_FATAL : 0,
			     hca_qp_num(qp), hca_qp_num(qp)), 0);
	CU_ASSERT_FATAL(hook_wait_entered());
	CU_ASSERT_EQUAL(hca_qp_destroy(qp), 0);
	hook_destroyed();
	/* the destroy waited for the dispatch that had found the QP */
	CU_ASSERT_FALSE(H.destroyed_inside);
	hca_db_dispatch_hook = NULL;
	if (kind == HCA_DB_ASYNC_QP)
		CU_ASSERT_TRUE(async_seen(IBV_EVENT_QP_FATAL, &user));
}

static void test_qp_async(void)
{
	test_qp_event(HCA_DB_ASYNC_QP);
}

static void test_qp_flush(void)
{
	test_qp_event(HCA_DB_QP_FLUSH);
}

static void test_cq_event(void)
{
	static int user;
	struct hca_cq *c = hca_cq_create(ctx, 16, NULL, 0, &user);

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	async_seen(0, NULL);
	hook_arm(HCA_DB_ASYNC_CQ);
	CU_ASSERT_EQUAL(ring(HCA_DB_ASYNC_CQ, IBV_EVENT_CQ_ERR, c->idx, c->handle), 0);
	CU_ASSERT_FATAL(hook_wait_entered());
	CU_ASSERT_EQUAL(hca_cq_destroy(c), 0);
	hook_destroyed();
	CU_ASSERT_FALSE(H.destroyed_inside);
	hca_db_dispatch_hook = NULL;
	CU_ASSERT_TRUE(async_seen(IBV_EVENT_CQ_ERR, &user));
}

static void test_srq_event(void)
{
	static int user;
	struct ibv_srq_attr a = { .max_wr = 8, .max_sge = 1 };
	struct hca_srq *s = hca_srq_create(pd, &a, &user);

	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	async_seen(0, NULL);
	hook_arm(HCA_DB_ASYNC_SRQ);
	CU_ASSERT_EQUAL(ring(HCA_DB_ASYNC_SRQ, IBV_EVENT_SRQ_LIMIT_REACHED, s->idx,
			     s->handle), 0);
	CU_ASSERT_FATAL(hook_wait_entered());
	CU_ASSERT_EQUAL(hca_srq_destroy(s), 0);
	hook_destroyed();
	CU_ASSERT_FALSE(H.destroyed_inside);
	hca_db_dispatch_hook = NULL;
	CU_ASSERT_TRUE(async_seen(IBV_EVENT_SRQ_LIMIT_REACHED, &user));
}

/* ---- stress: no hook, the race as it comes ---- */

#define LIVE 16
#define STRESS_SECS 3

static struct {
	_Atomic uint32_t qpn[LIVE];       /* 0: none */
	_Atomic uint64_t cq[LIVE];        /* idx << 32 | handle, 0: none */
	_Atomic bool stop;
	_Atomic unsigned long rung;
} S;

static void *ringer(void *arg)
{
	unsigned seed = 1;

	(void)arg;
	while (!atomic_load(&S.stop)) {
		unsigned k = (unsigned)rand_r(&seed) % LIVE;
		uint32_t qpn = atomic_load(&S.qpn[k]);
		uint64_t c = atomic_load(&S.cq[k]);

		if (qpn) {
			ring(HCA_DB_ASYNC_QP, IBV_EVENT_QP_FATAL, qpn, qpn);
			ring(HCA_DB_QP_FLUSH, 0, qpn, qpn);
		}
		if (c)
			ring(HCA_DB_ASYNC_CQ, IBV_EVENT_CQ_ERR, (uint32_t)(c >> 32), (uint32_t)c);
		atomic_fetch_add(&S.rung, 1);
		if (!(atomic_load(&S.rung) & 7))
			sched_yield(); /* let the progress thread drain */
	}
	return NULL;
}

static void test_stress(void)
{
	struct hca_qp *qps[LIVE] = { 0 };
	struct hca_cq *cqs[LIVE] = { 0 };
	unsigned long cycles = 0;
	time_t end = time(NULL) + STRESS_SECS;
	pthread_t t;

	memset(&S, 0, sizeof(S));
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, ringer, NULL), 0);
	while (time(NULL) < end) {
		unsigned k = (unsigned)(cycles % LIVE);

		if (qps[k]) {
			atomic_store(&S.qpn[k], 0);
			CU_ASSERT_EQUAL(hca_qp_destroy(qps[k]), 0);
		}
		if (cqs[k]) {
			atomic_store(&S.cq[k], 0);
			CU_ASSERT_EQUAL(hca_cq_destroy(cqs[k]), 0);
		}
		qps[k] = qp_in_error(NULL);
		cqs[k] = hca_cq_create(ctx, 8, NULL, 0, NULL);
		CU_ASSERT_PTR_NOT_NULL_FATAL(qps[k]);
		CU_ASSERT_PTR_NOT_NULL_FATAL(cqs[k]);
		atomic_store(&S.qpn[k], hca_qp_num(qps[k]));
		atomic_store(&S.cq[k], (uint64_t)cqs[k]->idx << 32 | cqs[k]->handle);
		cycles++;
		async_seen(0, NULL); /* keep the async queue from filling */
	}
	atomic_store(&S.stop, true);
	pthread_join(t, NULL);
	for (unsigned k = 0; k < LIVE; k++) {
		if (qps[k])
			CU_ASSERT_EQUAL(hca_qp_destroy(qps[k]), 0);
		if (cqs[k])
			CU_ASSERT_EQUAL(hca_cq_destroy(cqs[k]), 0);
	}
	printf("\n    %lu create/destroy cycles, %lu doorbell rounds ... ", cycles,
	       atomic_load(&S.rung));
	CU_ASSERT_TRUE(cycles > 0);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("dispatch_uaf", setup, teardown);

	if (!s)
		return -1;
	if (!CU_add_test(s, "QP destroyed while its async event is dispatched",
			 test_qp_async) ||
	    !CU_add_test(s, "QP destroyed while its flush is dispatched", test_qp_flush) ||
	    !CU_add_test(s, "CQ destroyed while its overrun is dispatched", test_cq_event) ||
	    !CU_add_test(s, "SRQ destroyed while its limit event is dispatched",
			 test_srq_event) ||
	    !CU_add_test(s, "QPs and CQs destroyed under a doorbell storm", test_stress))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
