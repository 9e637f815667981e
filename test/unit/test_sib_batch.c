/*
 * test_sib_batch: small tagged messages sent in a burst share one SEND
 * (transport/batch.c), and the receiver's matching sees each on its own.
 * One process, a worker sending to itself through its own XRC send QP:
 *   - a lone send (a progress call between sends) is never batched;
 *   - a burst is: fewer SENDs than messages, every byte and the order kept,
 *     into posted receives (tags, masks, wildcards) and unexpected ones;
 *   - truncation, probe and matched probe of batched messages;
 *   - a batch closes before a larger message, an active message and a
 *     flush to the same endpoint (non-overtaking);
 *   - send callbacks run once each, when their batch is delivered;
 *   - a sender that stays away from libsib after a burst: its connection
 *     thread sends the open batch;
 *   - SIB_BATCH_MAX=0 turns it off.
 * Needs SOFTIB_SEG_TAG of its own when run beside other tests.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu_run.h"
#include "transport/sib.h"   /* installed as build/include/sib.h */

static sib_context_t *ctx;
static sib_worker_t *w;
static sib_ep_t *self;

static int open_self(sib_context_t **c, sib_worker_t **wp, sib_ep_t **ep)
{
	void *a;
	size_t len;

	if (sib_context_create(NULL, c) || sib_worker_create(*c, NULL, wp) ||
	    sib_worker_get_address(*wp, &a, &len) || sib_ep_create(*wp, a, len, ep))
		return 1;
	sib_address_free(a);
	return 0;
}

static int setup(void)
{
	return open_self(&ctx, &w, &self);
}

static int teardown(void)
{
	sib_ep_destroy(self);
	sib_worker_destroy(w);
	return sib_context_destroy(ctx) != SIB_OK;
}

static struct sib_worker_attr attr(void)
{
	struct sib_worker_attr a;

	memset(&a, 0, sizeof(a));
	CU_ASSERT_EQUAL(sib_worker_query(w, &a), SIB_OK);
	return a;
}

static void send_free(const void *b, size_t n, uint64_t tag, uint32_t c)
{
	sib_request_t *r;

	CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(self, b, n, tag, c, NULL, &r), SIB_OK);
	CU_ASSERT_EQUAL(sib_request_test(r, NULL), SIB_OK);   /* copied: done */
	sib_request_free(r);
}

static sib_status_t recv_wait(void *b, size_t n, uint32_t src, uint64_t tag,
			      uint64_t mask, uint32_t c, struct sib_tag_status *out)
{
	sib_request_t *r;
	sib_status_t st = sib_tag_recv_nb(w, b, n, src, tag, mask, c, NULL, &r);

	if (st)
		return st;
	st = sib_request_wait(r, out);
	sib_request_free(r);
	return st;
}

static void progress(int n)
{
	while (n--)
		sib_worker_progress(w);
}

static void test_lone(void)
{
	struct sib_worker_attr a0 = attr(), a1;
	uint64_t v;

	for (v = 0; v < 20; v++) {
		send_free(&v, sizeof(v), 1, 1);
		progress(1);
	}
	a1 = attr();
	CU_ASSERT_EQUAL(a1.tx_batched, a0.tx_batched);
	for (uint64_t i = 0; i < 20; i++) {
		CU_ASSERT_EQUAL(recv_wait(&v, sizeof(v), SIB_ANY_SOURCE, 1, ~0ull, 1,
					  NULL), SIB_OK);
		CU_ASSERT_EQUAL(v, i);
	}
}

/* 300 messages of 0..64 bytes, no progress between them: unexpected at
 * the receiver, taken in order, every byte checked. */
static void test_burst_unexpected(void)
{
	struct sib_worker_attr a0 = attr(), a1;
	uint8_t b[64], got[64];
	struct sib_tag_status ts;
	const int n = 300;

	for (int i = 0; i < n; i++) {
		memset(b, i & 0xff, sizeof(b));
		send_free(b, (size_t)(i % 65), 2, 2);
	}
	progress(20);
	a1 = attr();
	CU_ASSERT(a1.tx_batched - a0.tx_batched >= (uint64_t)n - 1);
	/* 64 B messages take 80 B each: at least 25 to a 2 KiB batch */
	CU_ASSERT(a1.tx_batches - a0.tx_batches <= (uint64_t)n / 10);
	CU_ASSERT(a1.rx_batches - a0.rx_batches == a1.tx_batches - a0.tx_batches);
	CU_ASSERT_EQUAL(a1.tx_msgs[SIB_PROTO_SHORT] - a0.tx_msgs[SIB_PROTO_SHORT],
			(uint64_t)n);
	CU_ASSERT_EQUAL(a1.rx_msgs[SIB_PROTO_SHORT] - a0.rx_msgs[SIB_PROTO_SHORT],
			(uint64_t)n);
	for (int i = 0; i < n; i++) {
		size_t len = (size_t)(i % 65);

		memset(got, 0xee, sizeof(got));
		CU_ASSERT_EQUAL_FATAL(recv_wait(got, sizeof(got), SIB_ANY_SOURCE, 2,
						~0ull, 2, &ts), SIB_OK);
		CU_ASSERT_EQUAL(ts.length, len);
		memset(b, i & 0xff, sizeof(b));
		CU_ASSERT(!memcmp(got, b, len));
		CU_ASSERT(len == sizeof(got) || got[len] == 0xee);
	}
}

/* Receives posted first: tag, masked and wildcard receives match the
 * batched messages as they would lone ones (oldest posted first). */
static void test_burst_posted(void)
{
	sib_request_t *r[4];
	uint64_t v[4] = { 0 }, x;
	struct sib_tag_status ts[4];
	uint32_t me = sib_worker_id(w);

	CU_ASSERT_EQUAL_FATAL(sib_tag_recv_nb(w, &v[0], 8, me, 0x20, ~0ull, 3,
					      NULL, &r[0]), SIB_OK);
	CU_ASSERT_EQUAL_FATAL(sib_tag_recv_nb(w, &v[1], 8, SIB_ANY_SOURCE, 0x10,
					      0xf0, 3, NULL, &r[1]), SIB_OK);
	CU_ASSERT_EQUAL_FATAL(sib_tag_recv_nb(w, &v[2], 8, SIB_ANY_SOURCE, 0, 0, 3,
					      NULL, &r[2]), SIB_OK);
	CU_ASSERT_EQUAL_FATAL(sib_tag_recv_nb(w, &v[3], 8, SIB_ANY_SOURCE, 0, 0, 4,
					      NULL, &r[3]), SIB_OK);
	/* tags 0x11, 0x20, 0x12 in context 3, then 0x99 in context 4 */
	x = 1;
	send_free(&x, 8, 0x11, 3);
	x = 2;
	send_free(&x, 8, 0x20, 3);
	x = 3;
	send_free(&x, 8, 0x12, 3);
	x = 4;
	send_free(&x, 8, 0x99, 4);
	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(sib_request_wait(r[i], &ts[i]), SIB_OK);
	CU_ASSERT_EQUAL(v[0], 2);   /* the exact tag */
	CU_ASSERT_EQUAL(v[1], 1);   /* 0x11 matches 0x10/0xf0 first */
	CU_ASSERT_EQUAL(v[2], 3);   /* any tag: what is left in context 3 */
	CU_ASSERT_EQUAL(v[3], 4);
	CU_ASSERT_EQUAL(ts[2].tag, 0x12);
	CU_ASSERT_EQUAL(ts[3].ctx_id, 4);
	CU_ASSERT_EQUAL(ts[1].source, me);
	for (int i = 0; i < 4; i++)
		sib_request_free(r[i]);
}

static void test_truncate_probe(void)
{
	uint8_t b[32], got[32];
	struct sib_tag_status ts;
	sib_message_t *m;
	sib_request_t *r;

	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(i + 1);
	send_free(b, 32, 5, 5);
	send_free(b, 32, 6, 5);
	send_free(b, 16, 7, 5);
	progress(10);
	/* probe sees the batched message 6, and leaves it */
	CU_ASSERT_EQUAL(sib_tag_probe_nb(w, SIB_ANY_SOURCE, 6, ~0ull, 5, &ts, NULL),
			SIB_OK);
	CU_ASSERT_EQUAL(ts.length, 32);
	/* truncated: the buffer holds what fits, the status the length */
	memset(got, 0, sizeof(got));
	CU_ASSERT_EQUAL(recv_wait(got, 10, SIB_ANY_SOURCE, 5, ~0ull, 5, &ts),
			SIB_ERR_TRUNCATED);
	CU_ASSERT_EQUAL(ts.length, 32);
	CU_ASSERT(!memcmp(got, b, 10));
	CU_ASSERT_EQUAL(got[10], 0);
	/* matched probe takes 7 (past 6), then 6 by tag */
	CU_ASSERT_EQUAL_FATAL(sib_tag_probe_nb(w, SIB_ANY_SOURCE, 7, ~0ull, 5, &ts,
					       &m), SIB_OK);
	CU_ASSERT_EQUAL(ts.length, 16);
	CU_ASSERT_EQUAL(sib_tag_probe_nb(w, SIB_ANY_SOURCE, 7, ~0ull, 5, &ts, NULL),
			SIB_ERR_NO_MESSAGE);
	CU_ASSERT_EQUAL_FATAL(sib_tag_mrecv_nb(w, got, sizeof(got), m, NULL, &r),
			      SIB_OK);
	CU_ASSERT_EQUAL(sib_request_wait(r, &ts), SIB_OK);
	sib_request_free(r);
	CU_ASSERT(!memcmp(got, b, 16));
	CU_ASSERT_EQUAL(recv_wait(got, sizeof(got), SIB_ANY_SOURCE, 6, ~0ull, 5, &ts),
			SIB_OK);
	CU_ASSERT(!memcmp(got, b, 32));
}

/* Small, large (not batched), small, an active message, small: all in
 * the order sent, so the open batch went before each. */
static int am_seen;
static sib_status_t am_cb(void *arg, uint32_t src, const void *h, size_t hl,
			  void *d, size_t dl)
{
	(void)arg; (void)src; (void)h; (void)hl; (void)d; (void)dl;
	am_seen++;
	return SIB_OK;
}

static void test_order_mixed(void)
{
	static uint8_t big[1500];
	uint64_t seq[6], got;
	uint8_t rb[1500];
	struct sib_tag_status ts;
	sib_request_t *r;

	CU_ASSERT_EQUAL(sib_am_register(w, 3, am_cb, NULL), SIB_OK);
	am_seen = 0;
	for (uint64_t i = 0; i < 6; i++)
		seq[i] = 100 + i;
	send_free(&seq[0], 8, 9, 6);
	send_free(&seq[1], 8, 9, 6);
	memcpy(big, &seq[2], 8);
	send_free(big, sizeof(big), 9, 6);
	send_free(&seq[3], 8, 9, 6);
	CU_ASSERT_EQUAL_FATAL(sib_am_send_nb(self, 3, "h", 1, NULL, 0, NULL, &r),
			      SIB_OK);
	sib_request_free(r);
	send_free(&seq[4], 8, 9, 6);
	send_free(&seq[5], 8, 9, 6);
	for (int i = 0; i < 6; i++) {
		CU_ASSERT_EQUAL(recv_wait(rb, sizeof(rb), SIB_ANY_SOURCE, 9, ~0ull, 6,
					  &ts), SIB_OK);
		memcpy(&got, rb, 8);
		CU_ASSERT_EQUAL(got, seq[i]);
		CU_ASSERT_EQUAL(ts.length, i == 2 ? sizeof(big) : 8);
	}
	progress(10);
	CU_ASSERT_EQUAL(am_seen, 1);
}

static int cb_calls;
static void cb(sib_request_t *r, sib_status_t st, void *arg)
{
	(void)r;
	(void)arg;
	if (st == SIB_OK)
		cb_calls++;
}

/* Callbacks run once each with their batch; a flush waits for it. */
static void test_callbacks_flush(void)
{
	struct sib_op_params op = { .send_cb = cb };
	struct sib_worker_attr a0 = attr(), a1;
	sib_request_t *r[10], *f;
	uint64_t v;

	cb_calls = 0;
	for (v = 0; v < 10; v++)
		CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(self, &v, 8, 11, 7, &op, &r[v]),
				      SIB_OK);
	for (int i = 1; i < 10; i++)   /* batched: waiting for delivery */
		sib_request_free(r[i]);
	a1 = attr();
	CU_ASSERT_EQUAL(a1.tx_batched - a0.tx_batched, 9);
	CU_ASSERT_EQUAL(sib_request_wait(r[0], NULL), SIB_OK);
	sib_request_free(r[0]);
	/* more, then a flush: it sends the open batch and waits for it */
	for (v = 10; v < 15; v++)
		send_free(&v, 8, 11, 7);
	CU_ASSERT_EQUAL(sib_ep_flush(self, &f), SIB_INPROGRESS);
	CU_ASSERT_EQUAL(sib_request_wait(f, NULL), SIB_OK);
	sib_request_free(f);
	progress(10);
	CU_ASSERT_EQUAL(cb_calls, 10);
	for (uint64_t i = 0; i < 15; i++) {
		CU_ASSERT_EQUAL(recv_wait(&v, 8, SIB_ANY_SOURCE, 11, ~0ull, 7, NULL),
				SIB_OK);
		CU_ASSERT_EQUAL(v, i);
	}
}

/* SIB_BATCH_MAX=0: every message alone; a bad value is refused. */
static void test_key_off(void)
{
	sib_context_t *c;
	sib_worker_t *x;
	sib_ep_t *e;
	sib_request_t *r;
	struct sib_worker_attr a;
	uint64_t v = 0;

	setenv("SIB_BATCH_MAX", "-5", 1);
	CU_ASSERT_NOT_EQUAL(sib_context_create(NULL, &c), SIB_OK);
	setenv("SIB_BATCH_MAX", "0", 1);
	CU_ASSERT_EQUAL_FATAL(open_self(&c, &x, &e), 0);
	unsetenv("SIB_BATCH_MAX");
	for (int i = 0; i < 20; i++) {
		CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(e, &v, 8, 1, 1, NULL, &r), SIB_OK);
		sib_request_free(r);
	}
	for (int i = 0; i < 20; i++) {
		CU_ASSERT_EQUAL_FATAL(sib_tag_recv_nb(x, &v, 8, SIB_ANY_SOURCE, 1, ~0ull,
						      1, NULL, &r), SIB_OK);
		CU_ASSERT_EQUAL(sib_request_wait(r, NULL), SIB_OK);
		sib_request_free(r);
	}
	CU_ASSERT_EQUAL(sib_worker_query(x, &a), SIB_OK);
	CU_ASSERT_EQUAL(a.tx_batched, 0);
	CU_ASSERT_EQUAL(a.rx_msgs[SIB_PROTO_SHORT], 20);
	sib_ep_destroy(e);
	CU_ASSERT_EQUAL(sib_worker_destroy(x), SIB_OK);
	CU_ASSERT_EQUAL(sib_context_destroy(c), SIB_OK);
}

/* A worker destroyed with a batch open: nothing leaks (ASan), no hang. */
static void test_destroy_open(void)
{
	sib_context_t *c;
	sib_worker_t *x;
	sib_ep_t *e;
	sib_request_t *r;
	uint64_t v = 7;

	CU_ASSERT_EQUAL_FATAL(open_self(&c, &x, &e), 0);
	for (int i = 0; i < 5; i++) {
		CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(e, &v, 8, 1, 1, NULL, &r), SIB_OK);
		sib_request_free(r);
	}
	sib_ep_destroy(e);
	CU_ASSERT_EQUAL(sib_worker_destroy(x), SIB_OK);
	CU_ASSERT_EQUAL(sib_context_destroy(c), SIB_OK);
}

/* A burst whose sender then stays away from libsib: the worker's
 * connection thread sends the open batch within a few of its looks
 * (async.c), the receiver gets every message. */
static void test_away(void)
{
	struct sib_worker_attr a0 = attr(), a1;
	uint64_t v;
	int tries;

	for (v = 0; v < 3; v++)
		send_free(&v, sizeof(v), 9, 9);
	/* (not asserted open here: a preempted test may already see the
	 * thread's work) */
	a1 = attr();
	for (tries = 0; tries < 50 && a1.tx_batches == a0.tx_batches; tries++) {
		usleep(100 * 1000);
		a1 = attr();
	}
	CU_ASSERT_EQUAL(a1.tx_batches, a0.tx_batches + 1);
	for (uint64_t i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(recv_wait(&v, sizeof(v), SIB_ANY_SOURCE, 9, ~0ull, 9,
					  NULL), SIB_OK);
		CU_ASSERT_EQUAL(v, i);
	}
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("sib_batch", setup, teardown);

	if (!s || !CU_add_test(s, "a lone send goes alone", test_lone) ||
	    !CU_add_test(s, "a burst, unexpected", test_burst_unexpected) ||
	    !CU_add_test(s, "a burst into posted receives", test_burst_posted) ||
	    !CU_add_test(s, "truncation, probe, mprobe", test_truncate_probe) ||
	    !CU_add_test(s, "order with long and AM sends", test_order_mixed) ||
	    !CU_add_test(s, "callbacks and flush", test_callbacks_flush) ||
	    !CU_add_test(s, "the sender away: the thread sends", test_away))
		return -1;
	s = CU_add_suite("sib_batch_workers", NULL, NULL);
	if (!s || !CU_add_test(s, "SIB_BATCH_MAX=0", test_key_off) ||
	    !CU_add_test(s, "destroy with a batch open", test_destroy_open))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
