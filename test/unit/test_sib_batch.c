/*
 * test_sib_batch: small tagged messages sent in a burst share one SEND
 * (transport/batch.c), and the receiver's matching sees each on its own.
 * One process, a worker sending to itself through its own XRC send QP:
 *   - a lone send (a progress call between sends) is never batched;
 *   - a burst is: fewer SENDs than messages, every byte and the order kept,
 *     into posted receives (tags, masks, wildcards) and unexpected ones;
 *   - truncation, probe and matched probe of batched messages;
 *   - a batch closes before a larger message and a flush to the same
 *     endpoint (non-overtaking);
 *   - small active messages join batches too, in order with tagged ones,
 *     every byte kept; a handler that keeps batched payloads keeps their
 *     receive buffer out of the SRQ until the last is released (in any
 *     order, some from inside a later handler of the same batch);
 *   - send callbacks run once each, when their batch is delivered;
 *   - a sender that stays away from libsib after a burst: its connection
 *     thread sends the open batch;
 *   - SIB_BATCH_MAX=0 turns it off;
 *   - SIB_OP_NOREQ: a send done in its call (lone short, batched, eager)
 *     returns SIB_DONE and no request; one with a callback, or one above
 *     the rendezvous threshold, still gives a request; flush covers both.
 * Needs SOFTIB_SEG_TAG of its own when run beside other tests.
 */
#include <stdbool.h>
#include <stdint.h>
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

/* Small, large (not batched), small, an active message (batched with
 * them), small: all in the order sent, so the open batch went before the
 * large one. */
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

/* ---- active messages in batches ---- */

/* The payload of message i: header i % 9 bytes, data (i * 7) % 120, or
 * am_fixed bytes in all when set. */
static size_t am_fixed;
static size_t am_hl(int i) { return (size_t)(i % 9); }
static size_t am_dl(int i)
{
	return am_fixed ? am_fixed - am_hl(i) : (size_t)((i * 7) % 120);
}
static uint8_t am_byte(int i, size_t k) { return (uint8_t)(i * 31 + k * 7 + 1); }

static void am_fill(int i, uint8_t *hb, uint8_t *db)
{
	for (size_t k = 0; k < am_hl(i); k++)
		hb[k] = am_byte(i, k);
	for (size_t k = 0; k < am_dl(i); k++)
		db[k] = am_byte(i, 1000 + k);
}

static bool am_check(int i, const uint8_t *hb, size_t hl, const uint8_t *db,
		     size_t dl)
{
	if (hl != am_hl(i) || dl != am_dl(i))
		return false;
	for (size_t k = 0; k < hl; k++)
		if (hb[k] != am_byte(i, k))
			return false;
	for (size_t k = 0; k < dl; k++)
		if (db[k] != am_byte(i, 1000 + k))
			return false;
	return true;
}

/* The burst's handler: message number in the header's first byte is not
 * used (it may be empty); the order is the call order. */
static int amb_next, amb_bad;
static uint64_t amb_unexp[200], amb_unexp0;
static sib_status_t amb_cb(void *arg, uint32_t src, const void *h, size_t hl,
			   void *d, size_t dl)
{
	struct sib_worker_attr a;

	(void)arg;
	(void)src;
	if (amb_next >= 200 || !am_check(amb_next, h, hl, d, dl))
		amb_bad++;
	/* tagged messages delivered before this one (all unexpected) */
	sib_worker_query(w, &a);
	if (amb_next < 200)
		amb_unexp[amb_next] = a.unexpected - amb_unexp0;
	amb_next++;
	return SIB_OK;
}

/* 200 AMs of 0..127 bytes with a tagged message after every third, no
 * progress between them: batched, each handler run in order with every
 * byte, each tagged message delivered between the AMs it was sent
 * between. */
static void test_am_burst(void)
{
	struct sib_worker_attr a0 = attr(), a1;
	uint8_t hb[16], db[128];
	sib_request_t *r;
	uint64_t v;
	int ntag = 0, k;

	CU_ASSERT_EQUAL(sib_am_register(w, 5, amb_cb, NULL), SIB_OK);
	amb_next = amb_bad = 0;
	amb_unexp0 = a0.unexpected;
	progress(1);            /* the first of the burst goes alone */
	for (int i = 0; i < 200; i++) {
		am_fill(i, hb, db);
		CU_ASSERT_EQUAL_FATAL(sib_am_send_nb(self, 5, hb, am_hl(i), db,
						     am_dl(i), NULL, &r), SIB_OK);
		sib_request_free(r);   /* copied: the buffers are free */
		memset(hb, 0xee, sizeof(hb));
		memset(db, 0xee, sizeof(db));
		if (i % 3 == 2) {
			v = (uint64_t)ntag++;
			send_free(&v, 8, 21, 21);
		}
	}
	a1 = attr();
	CU_ASSERT(a1.tx_batched - a0.tx_batched >= 200 + (uint64_t)ntag - 1);
	CU_ASSERT(a1.tx_batches - a0.tx_batches < 40);
	for (k = 0; k < 100 && amb_next < 200; k++)
		progress(10);
	CU_ASSERT_EQUAL(amb_next, 200);
	CU_ASSERT_EQUAL(amb_bad, 0);
	for (int i = 0; i < 200; i++)
		CU_ASSERT_EQUAL(amb_unexp[i], (uint64_t)(i / 3));
	for (int i = 0; i < ntag; i++) {
		CU_ASSERT_EQUAL(recv_wait(&v, 8, SIB_ANY_SOURCE, 21, ~0ull, 21, NULL),
				SIB_OK);
		CU_ASSERT_EQUAL(v, (uint64_t)i);
	}
	a1 = attr();
	CU_ASSERT(a1.rx_batches > a0.rx_batches);
}

/*
 * A handler that keeps payloads. A worker whose 2 KiB class is 16 deep:
 * a burst of 10 AMs of 100 B (the first alone, in a 256 B buffer; the
 * other 9 one batch, in a 2 KiB buffer); the handler keeps #0 (a lone
 * message's buffer), #1, #4, #7, and #2 (released from #3's handler,
 * inside the same batch). Then 40 batches through the class: none lands
 * in the held buffer, and the kept bytes are intact. The kept ones are
 * released in another order; after the last, the buffer is used again.
 */
#define KEEP_N 10
static sib_worker_t *kw;
static void *kept[KEEP_N];
static int kn, kmode, kbad;
static uintptr_t kbuf;      /* the held 2 KiB buffer */
static int kreused;

static sib_status_t keep_cb(void *arg, uint32_t src, const void *h, size_t hl,
			    void *d, size_t dl)
{
	int i = kn++;

	(void)arg;
	(void)src;
	if (kmode) {            /* traffic: where did it land? */
		if (kbuf && ((uintptr_t)d & ~(uintptr_t)2047) == kbuf)
			kreused++;
		return SIB_OK;
	}
	if (!am_check(i, h, hl, d, dl))
		kbad++;
	if (i == 3)             /* #2 was kept by its handler: release it */
		sib_am_data_release(kw, kept[2]);
	if (i == 0 || i == 1 || i == 2 || i == 4 || i == 7) {
		kept[i] = d;
		return SIB_INPROGRESS;
	}
	return SIB_OK;
}

static void keep_send(sib_ep_t *e, int n, int base)
{
	uint8_t hb[16], db[128];
	sib_request_t *r;

	for (int i = 0; i < n; i++) {
		am_fill(base + i, hb, db);
		CU_ASSERT_EQUAL_FATAL(sib_am_send_nb(e, 6, hb, am_hl(base + i), db,
						     am_dl(base + i), NULL, &r),
				      SIB_OK);
		sib_request_free(r);
	}
}

/* 40 batches of 10 through the class, each delivered before the next */
static void keep_traffic(sib_ep_t *e)
{
	for (int b = 0; b < 40; b++) {
		keep_send(e, 10, 0);
		for (int k = 0; k < 10; k++)
			sib_worker_progress(kw);
	}
}

static void test_am_keep(void)
{
	sib_context_t *c;
	sib_ep_t *e;
	struct sib_worker_attr a0, a1;
	uint8_t snap[5][100];
	const int held[4] = { 0, 1, 4, 7 };

	am_fixed = 100;
	setenv("SIB_SRQ1_DEPTH", "16", 1);
	CU_ASSERT_EQUAL_FATAL(open_self(&c, &kw, &e), 0);
	unsetenv("SIB_SRQ1_DEPTH");
	CU_ASSERT_EQUAL(sib_am_register(kw, 6, keep_cb, NULL), SIB_OK);
	kn = kmode = kbad = kreused = 0;
	kbuf = 0;
	sib_worker_query(kw, &a0);
	sib_worker_progress(kw);   /* the first of the burst goes alone */
	keep_send(e, KEEP_N, 0);
	for (int k = 0; k < 100 && kn < KEEP_N; k++)
		sib_worker_progress(kw);
	sib_worker_query(kw, &a1);
	CU_ASSERT_EQUAL_FATAL(kn, KEEP_N);
	CU_ASSERT_EQUAL(kbad, 0);
	CU_ASSERT_EQUAL(a1.tx_batched - a0.tx_batched, KEEP_N - 1);
	CU_ASSERT_EQUAL(a1.rx_batches - a0.rx_batches, 1);
	kbuf = (uintptr_t)kept[1] & ~(uintptr_t)2047;
	CU_ASSERT_EQUAL((uintptr_t)kept[7] & ~(uintptr_t)2047, kbuf);
	for (int j = 0; j < 4; j++)
		memcpy(snap[j], kept[held[j]], 100);

	kmode = 1;              /* 40 batches: the held buffer is not used */
	keep_traffic(e);
	CU_ASSERT_EQUAL(kreused, 0);
	for (int j = 0; j < 4; j++)
		CU_ASSERT_EQUAL(memcmp(snap[j], kept[held[j]], 100), 0);
	/* released out of order: 4, then the lone 0, then 7; 1 last */
	sib_am_data_release(kw, kept[4]);
	sib_am_data_release(kw, kept[0]);
	sib_am_data_release(kw, (uint8_t *)kept[7] + 50);   /* any byte of it */
	keep_traffic(e);
	CU_ASSERT_EQUAL(kreused, 0);
	CU_ASSERT_EQUAL(memcmp(snap[1], kept[1], 100), 0);
	sib_am_data_release(kw, kept[1]);
	keep_traffic(e);        /* back in the SRQ: used again */
	CU_ASSERT(kreused > 0);
	sib_worker_query(kw, &a1);
	CU_ASSERT(a1.rx_batches - a0.rx_batches >= 121);
	sib_ep_destroy(e);
	CU_ASSERT_EQUAL(sib_worker_destroy(kw), SIB_OK);
	CU_ASSERT_EQUAL(sib_context_destroy(c), SIB_OK);
	kw = NULL;
	am_fixed = 0;
}

/* SIB_BATCH_MAX=0: every message alone; a bad value (of it, or of
 * SIB_BATCH_MAX_REMOTE) is refused. */
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
	unsetenv("SIB_BATCH_MAX");
	/* the other hosts' ceiling is a checked key too */
	setenv("SIB_BATCH_MAX_REMOTE", "2000000", 1);
	CU_ASSERT_NOT_EQUAL(sib_context_create(NULL, &c), SIB_OK);
	setenv("SIB_BATCH_MAX_REMOTE", "lots", 1);
	CU_ASSERT_NOT_EQUAL(sib_context_create(NULL, &c), SIB_OK);
	unsetenv("SIB_BATCH_MAX_REMOTE");
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
	CU_ASSERT_EQUAL(sib_am_register(x, 2, am_cb, NULL), SIB_OK);
	for (int i = 0; i < 20; i++) {   /* active messages alone too */
		CU_ASSERT_EQUAL_FATAL(sib_am_send_nb(e, 2, &v, 8, &v, 8, NULL, &r),
				      SIB_OK);
		sib_request_free(r);
	}
	for (int i = 0; i < 20; i++)
		sib_worker_progress(x);
	CU_ASSERT_EQUAL(sib_worker_query(x, &a), SIB_OK);
	CU_ASSERT_EQUAL(a.tx_batched, 0);
	CU_ASSERT_EQUAL(a.rx_batches, 0);
	CU_ASSERT_EQUAL(a.rx_msgs[SIB_PROTO_SHORT], 40);
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

static void done_cb(sib_request_t *r, sib_status_t st, void *arg)
{
	(void)r;
	CU_ASSERT_EQUAL(st, SIB_OK);
	(*(int *)arg)++;
}

static void test_noreq(void)
{
	struct sib_op_params nr = { .flags = SIB_OP_NOREQ }, cb = nr;
	struct sib_worker_attr a0 = attr(), a1;
	size_t big = a0.rndv_thresh_local + 1;
	uint8_t *lb = malloc(big), *lr = malloc(big);
	sib_request_t *r = (sib_request_t *)&nr, *f;
	uint64_t v;
	int calls = 0;

	CU_ASSERT_FATAL(lb && lr);
	/* lone: short, inline */
	v = 100;
	CU_ASSERT_EQUAL(sib_tag_send_nb(self, &v, sizeof(v), 5, 5, &nr, &r), SIB_DONE);
	CU_ASSERT_PTR_NULL(r);
	progress(1);
	/* a burst: batched, no requests either */
	for (v = 101; v < 140; v++) {
		r = (sib_request_t *)&nr;
		CU_ASSERT_EQUAL(sib_tag_send_nb(self, &v, sizeof(v), 5, 5, &nr, &r),
				SIB_DONE);
		CU_ASSERT_PTR_NULL(r);
	}
	a1 = attr();
	CU_ASSERT(a1.tx_batched > a0.tx_batched);
	/* with a callback: a request as always */
	cb.send_cb = done_cb;
	cb.cb_arg = &calls;
	v = 140;
	CU_ASSERT_EQUAL(sib_tag_send_nb(self, &v, sizeof(v), 5, 5, &cb, &r), SIB_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(sib_request_wait(r, NULL), SIB_OK);
	sib_request_free(r);
	CU_ASSERT_EQUAL(calls, 1);
	/* above the rendezvous threshold: the buffer is read later */
	memset(lb, 0x5a, big);
	CU_ASSERT_EQUAL(sib_tag_send_nb(self, lb, big, 6, 5, &nr, &r), SIB_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(recv_wait(lr, big, SIB_ANY_SOURCE, 6, ~0ull, 5, NULL), SIB_OK);
	CU_ASSERT_EQUAL(sib_request_wait(r, NULL), SIB_OK);
	sib_request_free(r);
	CU_ASSERT(!memcmp(lb, lr, big));
	for (uint64_t i = 100; i <= 140; i++) {
		CU_ASSERT_EQUAL(recv_wait(&v, sizeof(v), SIB_ANY_SOURCE, 5, ~0ull, 5,
					  NULL), SIB_OK);
		CU_ASSERT_EQUAL(v, i);
	}
	/* flush covers what made no request */
	for (v = 0; v < 5; v++)
		CU_ASSERT_EQUAL(sib_tag_send_nb(self, &v, sizeof(v), 7, 5, &nr, &r),
				SIB_DONE);
	if (sib_ep_flush(self, &f) == SIB_INPROGRESS) {
		CU_ASSERT_EQUAL(sib_request_wait(f, NULL), SIB_OK);
		sib_request_free(f);
	}
	for (uint64_t i = 0; i < 5; i++) {
		CU_ASSERT_EQUAL(recv_wait(&v, sizeof(v), SIB_ANY_SOURCE, 7, ~0ull, 5,
					  NULL), SIB_OK);
		CU_ASSERT_EQUAL(v, i);
	}
	CU_ASSERT_STRING_EQUAL(sib_status_string(SIB_DONE), "done already (no request)");
	free(lb);
	free(lr);
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
	    !CU_add_test(s, "a burst of AMs with tagged ones", test_am_burst) ||
	    !CU_add_test(s, "the sender away: the thread sends", test_away) ||
	    !CU_add_test(s, "SIB_OP_NOREQ: no request when done", test_noreq))
		return -1;
	s = CU_add_suite("sib_batch_workers", NULL, NULL);
	if (!s || !CU_add_test(s, "SIB_BATCH_MAX=0", test_key_off) ||
	    !CU_add_test(s, "destroy with a batch open", test_destroy_open) ||
	    !CU_add_test(s, "AM payloads kept from a batch", test_am_keep))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
