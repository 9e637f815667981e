/*
 * test_sib_rma: rendezvous and RMA through libsib's public API, in one
 * process with two workers (A and B: two SRQ owners of one host, so every
 * WR crosses softib's host link between them) and under ASan:
 *   - tagged messages across every protocol boundary up to 9 MiB,
 *     contiguous and iovec on either side, posted before and after the
 *     send, every byte checked; truncation; cancel of a matched receive
 *     still reading; a sender worker destroyed before its receiver reads;
 *   - active messages above the eager limit (rendezvous), kept and released;
 *   - put / get / fetch-add / compare-swap at random offsets checked
 *     against a model; accesses outside the region and through an
 *     unmapped key fail with SIB_ERR_REMOTE_ACCESS and the connection
 *     still works afterwards; worker flush;
 *   - after each test the runtime's counters show nothing held
 *     (registrations, rendezvous in flight).
 * Needs SOFTIB_SEG_TAG of its own when run beside other tests.
 */
#include <stdlib.h>
#include <string.h>

#include "cu_run.h"
#include "sib.h"

static sib_context_t *ctx;
static sib_worker_t *wa, *wb;
static sib_ep_t *ab, *ba;          /* A -> B, B -> A */
static struct sib_worker_attr attr;

static sib_ep_t *ep_to(sib_worker_t *from, sib_worker_t *to)
{
	void *a;
	size_t len;
	sib_ep_t *ep = NULL;

	if (sib_worker_get_address(to, &a, &len))
		return NULL;
	sib_ep_create(from, a, len, &ep);
	sib_address_free(a);
	return ep;
}

static int setup(void)
{
	/* small pieces: a 9 MiB message is read in several */
	setenv("SIB_RNDV_CHUNK", "1m", 1);
	if (sib_context_create(NULL, &ctx) ||
	    sib_worker_create(ctx, &(struct sib_worker_params){ .id = 1, .id_set = 1 }, &wa) ||
	    sib_worker_create(ctx, &(struct sib_worker_params){ .id = 2, .id_set = 1 }, &wb))
		return 1;
	ab = ep_to(wa, wb);
	ba = ep_to(wb, wa);
	return !ab || !ba || sib_worker_query(wa, &attr);
}

static int teardown(void)
{
	sib_ep_destroy(ab);
	sib_ep_destroy(ba);
	sib_worker_destroy(wa);
	sib_worker_destroy(wb);
	return sib_context_destroy(ctx) != SIB_OK;
}

/* Progress both workers until both requests are done. */
static void wait2(sib_request_t *x, sib_request_t *y, sib_status_t *sx,
		  struct sib_tag_status *sy)
{
	struct sib_tag_status t;

	for (;;) {
		sib_status_t a = x ? sib_request_test(x, NULL) : SIB_OK;
		sib_status_t b = y ? sib_request_test(y, &t) : SIB_OK;

		sib_worker_progress(wa);
		sib_worker_progress(wb);
		if (a != SIB_INPROGRESS && b != SIB_INPROGRESS) {
			if (sx)
				*sx = a;
			if (sy && y)
				*sy = t;
			break;
		}
	}
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)(x >> 16);
	}
}

static void no_leaks(void)
{
	struct sib_worker_attr a, b;

	sib_worker_query(wa, &a);
	sib_worker_query(wb, &b);
	CU_ASSERT_EQUAL(a.regs_active + b.regs_active, 0);
	CU_ASSERT_EQUAL(a.rndv_tx_active + b.rndv_tx_active, 0);
	CU_ASSERT_EQUAL(a.rndv_rx_active + b.rndv_rx_active, 0);
}

/* iovec of n pieces over buf (uneven sizes), total len */
static size_t make_iov(struct sib_iov *v, int n, uint8_t *buf, size_t len)
{
	size_t off = 0;

	for (int i = 0; i < n; i++) {
		size_t l = i == n - 1 ? len - off : (len / (size_t)n) + (size_t)(i % 3) - 1;

		if (len < (size_t)n * 4)
			l = i == n - 1 ? len - off : 0;
		v[i].base = buf + off;
		v[i].len = l;
		off += l;
	}
	return off;
}

/* one message A -> B of n bytes; flags: 1 sender iovec, 2 receiver iovec,
 * 4 receive posted after the send */
static void one_msg(size_t n, int flags, uint64_t tag)
{
	uint8_t *src = malloc(n + 1), *dst = malloc(n + 1);
	struct sib_iov sv[5], rv[7];
	struct sib_op_params so = { .flags = SIB_OP_IOV }, ro = so;
	sib_request_t *s = NULL, *r = NULL;
	struct sib_tag_status st;
	sib_status_t ss;

	fill(src, n, (uint32_t)n);
	memset(dst, 0xee, n + 1);
	make_iov(sv, 5, src, n);
	make_iov(rv, 7, dst, n);
	if (!(flags & 4))
		CU_ASSERT_FATAL(sib_tag_recv_nb(wb, flags & 2 ? (void *)rv : dst,
						flags & 2 ? 7 : n, 1, tag, ~0ull, 0,
						flags & 2 ? &ro : NULL, &r) == SIB_OK);
	CU_ASSERT_FATAL(sib_tag_send_nb(ab, flags & 1 ? (void *)sv : src,
					flags & 1 ? 5 : n, tag, 0,
					flags & 1 ? &so : NULL, &s) == SIB_OK);
	if (flags & 4) {
		for (int i = 0; i < 50; i++) {   /* let it arrive unexpected */
			sib_worker_progress(wa);
			sib_worker_progress(wb);
		}
		CU_ASSERT_FATAL(sib_tag_recv_nb(wb, flags & 2 ? (void *)rv : dst,
						flags & 2 ? 7 : n, 1, tag, ~0ull, 0,
						flags & 2 ? &ro : NULL, &r) == SIB_OK);
	}
	wait2(s, r, &ss, &st);
	CU_ASSERT_EQUAL(ss, SIB_OK);
	CU_ASSERT_EQUAL(st.status, SIB_OK);
	CU_ASSERT_EQUAL(st.length, n);
	CU_ASSERT_EQUAL(st.source, 1);
	CU_ASSERT(memcmp(src, dst, n) == 0);
	CU_ASSERT_EQUAL(dst[n], 0xee);
	if (memcmp(src, dst, n))
		fprintf(stderr, "size %zu flags %d: bytes differ\n", n, flags);
	sib_request_free(s);
	sib_request_free(r);
	free(src);
	free(dst);
}

static void test_sizes(void)
{
	size_t t = attr.rndv_thresh_local, e = attr.eager_max;
	size_t sizes[] = { 0, 1, attr.short_max, attr.short_max + 1, t, t + 1,
			   e, e + 1, 65536, (1u << 20) + 3, (9u << 20) + 7 };
	struct sib_worker_attr a0, a1;
	uint64_t above = 0;

	CU_ASSERT(t > attr.short_max && t <= e);
	sib_worker_query(wa, &a0);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		above += sizes[i] > t;
		for (int f = 0; f < 8; f++)
			one_msg(sizes[i], f, 100 + i);
	}
	sib_worker_query(wa, &a1);
	/* every size above the threshold went by rendezvous, 8 variants */
	CU_ASSERT_EQUAL(a1.rndv_tx - a0.rndv_tx, above * 8);
	CU_ASSERT_EQUAL(a1.tx_msgs[SIB_PROTO_RNDV] - a0.tx_msgs[SIB_PROTO_RNDV],
			above * 8);
	no_leaks();
}

static void test_truncate(void)
{
	size_t n = 200000, m = 70001;
	uint8_t *src = malloc(n), *dst = calloc(1, n);
	sib_request_t *s, *r;
	struct sib_tag_status st;
	sib_status_t ss;

	fill(src, n, 9);
	CU_ASSERT_FATAL(sib_tag_recv_nb(wb, dst, m, 1, 7, ~0ull, 0, NULL, &r) == SIB_OK);
	CU_ASSERT_FATAL(sib_tag_send_nb(ab, src, n, 7, 0, NULL, &s) == SIB_OK);
	wait2(s, r, &ss, &st);
	CU_ASSERT_EQUAL(ss, SIB_OK);
	CU_ASSERT_EQUAL(st.status, SIB_ERR_TRUNCATED);
	CU_ASSERT_EQUAL(st.length, n);
	CU_ASSERT(memcmp(src, dst, m) == 0);
	CU_ASSERT_EQUAL(dst[m], 0);
	sib_request_free(s);
	sib_request_free(r);
	free(src);
	free(dst);
	no_leaks();
}

static void test_cancel(void)
{
	size_t n = 16u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	sib_request_t *s, *r;
	struct sib_worker_attr b;
	struct sib_tag_status st;
	sib_status_t ss;
	sib_worker_t *keep = wb;
	sib_ep_t *keep_ab = ab;
	int i;

	/* a receiver reading in 4 KiB pieces: thousands, more than a send
	 * QP takes at once, so the read is still going when it is cancelled */
	setenv("SIB_RNDV_CHUNK", "4096", 1);
	CU_ASSERT_FATAL(sib_worker_create(ctx, &(struct sib_worker_params){ .id = 3, .id_set = 1 },
					  &wb) == SIB_OK);
	ab = ep_to(wa, wb);
	memset(src, 1, n);
	CU_ASSERT_FATAL(sib_tag_send_nb(ab, src, n, 8, 0, NULL, &s) == SIB_OK);
	/* until the RTS waits at B, unexpected */
	for (i = 0; i < 100000; i++) {
		sib_worker_progress(wa);
		sib_worker_progress(wb);
		sib_worker_query(wb, &b);
		if (b.unexpected_now)
			break;
	}
	CU_ASSERT_FATAL(b.unexpected_now == 1);
	/* the receive matches it and starts reading at once: the pieces it
	 * could not post yet are still waiting when it is cancelled */
	CU_ASSERT_FATAL(sib_tag_recv_nb(wb, dst, n, 1, 8, ~0ull, 0, NULL, &r) == SIB_OK);
	sib_worker_query(wb, &b);
	CU_ASSERT_FATAL(b.rndv_rx_active == 1);
	CU_ASSERT_EQUAL(sib_request_cancel(r), SIB_OK);
	wait2(s, r, &ss, &st);
	CU_ASSERT_EQUAL(st.status, SIB_ERR_CANCELED);
	/* read variant: the FIN says cancelled; write variant: the sender
	 * wrote it all before the receiver's FIN_W-wait ended */
	CU_ASSERT(ss == SIB_ERR_CANCELED || ss == SIB_OK);
	sib_request_free(s);
	sib_request_free(r);
	free(src);
	free(dst);
	no_leaks();
	sib_ep_destroy(ab);
	CU_ASSERT_EQUAL(sib_worker_destroy(wb), SIB_OK);
	wb = keep;
	ab = keep_ab;
	/* the pair still works */
	one_msg(100000, 0, 9);
}

/* ---- active messages by rendezvous ---- */

static void *am_kept;
static int am_calls;
static size_t am_len;
static int am_ok;

static sib_status_t am_handler(void *arg, uint32_t source, const void *hdr,
			       size_t hlen, void *data, size_t dlen)
{
	uint8_t *want = malloc(dlen + 1);

	(void)arg;
	fill(want, dlen, 77);
	am_ok = source == 1 && hlen == 5 && !memcmp(hdr, "head", 5) &&
		!memcmp(data, want, dlen);
	free(want);
	am_calls++;
	am_len = dlen;
	if (am_calls == 2) {
		am_kept = data;
		return SIB_INPROGRESS;
	}
	return SIB_OK;
}

static void test_am(void)
{
	size_t n = 3u << 20;
	uint8_t *src = malloc(n);
	sib_request_t *s;
	sib_status_t ss;

	fill(src, n, 77);
	CU_ASSERT_FATAL(sib_am_register(wb, 3, am_handler, NULL) == SIB_OK);
	for (int k = 0; k < 2; k++) {
		CU_ASSERT_FATAL(sib_am_send_nb(ab, 3, "head", 5, src, n, NULL, &s) == SIB_OK);
		wait2(s, NULL, &ss, NULL);
		CU_ASSERT_EQUAL(ss, SIB_OK);
		sib_request_free(s);
		while (am_calls < k + 1) {
			sib_worker_progress(wa);
			sib_worker_progress(wb);
		}
		CU_ASSERT(am_ok);
		CU_ASSERT_EQUAL(am_len, n);
	}
	CU_ASSERT_PTR_NOT_NULL_FATAL(am_kept);
	sib_am_data_release(wb, am_kept);
	free(src);
	no_leaks();
}

/* ---- RMA ---- */

static void rma_wait(sib_request_t *r, sib_status_t want)
{
	sib_status_t st;

	wait2(r, NULL, &st, NULL);
	CU_ASSERT_EQUAL(st, want);
	if (st != want)
		fprintf(stderr, "rma: %s, wanted %s\n", sib_status_string(st),
			sib_status_string(want));
	sib_request_free(r);
}

static void test_rma(void)
{
	size_t len = 4u << 20, sizes[] = { 1, 8, 100, 200, 4096, 40000, 1u << 20 };
	sib_mem_t *mem;
	sib_rkey_t *k;
	void *blob;
	size_t blen;
	uint8_t *reg, *model = calloc(1, len), *buf = malloc(1u << 20);
	uint64_t old = 0, base;
	sib_request_t *r;
	struct sib_worker_attr a;

	CU_ASSERT_FATAL(sib_mem_map(wb, NULL, len, &mem) == SIB_OK);
	reg = sib_mem_addr(mem);
	base = (uintptr_t)reg;
	CU_ASSERT_EQUAL(sib_mem_length(mem), len);
	CU_ASSERT_FATAL(sib_rkey_pack(mem, &blob, &blen) == SIB_OK);
	CU_ASSERT_EQUAL(sib_rkey_unpack(ba, blob, blen, &k), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_FATAL(sib_rkey_unpack(ab, blob, blen, &k) == SIB_OK);
	srand(5);
	for (int it = 0; it < 60; it++) {
		size_t n = sizes[it % 7], off = (size_t)rand() % (len - n);

		fill(buf, n, (uint32_t)it);
		memcpy(model + off, buf, n);
		CU_ASSERT_FATAL(sib_put_nb(ab, buf, n, base + off, k, NULL, &r) == SIB_OK);
		rma_wait(r, SIB_OK);
		off = (size_t)rand() % (len - n);
		memset(buf, 0, n);
		CU_ASSERT_FATAL(sib_get_nb(ab, buf, n, base + off, k, NULL, &r) == SIB_OK);
		rma_wait(r, SIB_OK);
		CU_ASSERT(memcmp(buf, model + off, n) == 0);
	}
	CU_ASSERT(memcmp(reg, model, len) == 0);
	/* atomics */
	memset(reg, 0, 64);
	for (int i = 0; i < 10; i++) {
		CU_ASSERT_FATAL(sib_atomic_fadd64_nb(ab, base + 8, k, 3, &old, NULL, &r) == SIB_OK);
		rma_wait(r, SIB_OK);
		CU_ASSERT_EQUAL(old, (uint64_t)i * 3);
	}
	CU_ASSERT_EQUAL(((uint64_t *)reg)[1], 30);
	CU_ASSERT_FATAL(sib_atomic_cswap64_nb(ab, base + 8, k, 30, 99, &old, NULL, &r) == SIB_OK);
	rma_wait(r, SIB_OK);
	CU_ASSERT_EQUAL(old, 30);
	CU_ASSERT_FATAL(sib_atomic_cswap64_nb(ab, base + 8, k, 30, 7, &old, NULL, &r) == SIB_OK);
	rma_wait(r, SIB_OK);
	CU_ASSERT_EQUAL(old, 99);
	CU_ASSERT_EQUAL(((uint64_t *)reg)[1], 99);
	CU_ASSERT_EQUAL(sib_atomic_fadd64_nb(ab, base + 4, k, 1, NULL, NULL, &r),
			SIB_ERR_INVALID_PARAM);
	CU_ASSERT_PTR_NULL(r);
	/* many in flight, then one worker flush */
	for (int i = 0; i < 100; i++) {
		CU_ASSERT_FATAL(sib_atomic_fadd64_nb(ab, base + 16, k, 1, NULL, NULL, &r) == SIB_OK);
		sib_request_free(r);
	}
	if (sib_worker_flush(wa, &r) == SIB_INPROGRESS)
		rma_wait(r, SIB_OK);
	CU_ASSERT_EQUAL(((uint64_t *)reg)[2], 100);
	/* outside the region: refused, and the connection recovers */
	CU_ASSERT_FATAL(sib_put_nb(ab, buf, 64, base + len - 32, k, NULL, &r) == SIB_OK);
	rma_wait(r, SIB_ERR_REMOTE_ACCESS);
	CU_ASSERT_FATAL(sib_get_nb(ab, buf, 100000, base - 4096, k, NULL, &r) == SIB_OK);
	rma_wait(r, SIB_ERR_REMOTE_ACCESS);
	CU_ASSERT_FATAL(sib_put_nb(ab, "x", 1, base + 100, k, NULL, &r) == SIB_OK);
	rma_wait(r, SIB_OK);
	CU_ASSERT_EQUAL(reg[100], 'x');
	CU_ASSERT_EQUAL(sib_ep_status(ab), SIB_OK);
	one_msg(1000, 0, 11);
	one_msg(100000, 0, 12);
	/* through a key whose region was unmapped */
	CU_ASSERT_EQUAL(sib_mem_unmap(mem), SIB_OK);
	CU_ASSERT_FATAL(sib_get_nb(ab, buf, 8, base, k, NULL, &r) == SIB_OK);
	rma_wait(r, SIB_ERR_REMOTE_ACCESS);
	CU_ASSERT_FATAL(sib_atomic_fadd64_nb(ab, base, k, 1, NULL, NULL, &r) == SIB_OK);
	rma_wait(r, SIB_ERR_REMOTE_ACCESS);
	one_msg(100000, 0, 13);
	sib_worker_query(wa, &a);
	CU_ASSERT(a.rma_access_errors >= 4);
	CU_ASSERT_EQUAL(a.rkeys, 1);
	sib_rkey_destroy(k);
	sib_rkey_buffer_free(blob);
	sib_worker_query(wa, &a);
	CU_ASSERT_EQUAL(a.rkeys, 0);
	sib_worker_query(wb, &a);
	CU_ASSERT_EQUAL(a.mem_maps, 0);
	free(model);
	free(buf);
	no_leaks();
}

/*
 * SIB_MEM_CACHED: a user buffer mapped from the registration cache, as the
 * MPI component maps each rendezvous buffer. Puts and gets work through
 * its key; mapping the same buffer again is a cache hit (no registration);
 * unmapping gives the registration back without revoking it; bad flags
 * and a cached mapping of no buffer are refused.
 */
static void test_mem_cached(void)
{
	size_t len = 256u << 10;
	uint8_t *user = aligned_alloc(4096, len), *buf = malloc(len);
	struct sib_worker_attr a0, a1;
	sib_mem_t *mem = NULL;
	sib_rkey_t *k;
	sib_request_t *r;
	void *blob;
	size_t blen;
	uint64_t base = (uintptr_t)user;

	memset(user, 0, len);
	CU_ASSERT_EQUAL(sib_mem_map_flags(wb, NULL, len, SIB_MEM_CACHED, &mem),
			SIB_ERR_INVALID_PARAM);
	CU_ASSERT_PTR_NULL(mem);
	CU_ASSERT_EQUAL(sib_mem_map_flags(wb, user, len, 2u, &mem), SIB_ERR_INVALID_PARAM);
	for (int round = 0; round < 3; round++) {
		sib_worker_query(wb, &a0);
		CU_ASSERT_FATAL(sib_mem_map_flags(wb, user, len, SIB_MEM_CACHED, &mem) == SIB_OK);
		sib_worker_query(wb, &a1);
		if (round) /* the first registered; the others found it */
			CU_ASSERT_EQUAL(a1.reg_hits, a0.reg_hits + 1);
		CU_ASSERT_EQUAL(a1.mem_maps, a0.mem_maps + 1);
		CU_ASSERT_EQUAL(sib_mem_addr(mem), user);
		CU_ASSERT_FATAL(sib_rkey_pack(mem, &blob, &blen) == SIB_OK);
		CU_ASSERT_FATAL(sib_rkey_unpack(ab, blob, blen, &k) == SIB_OK);
		fill(buf, len, (uint32_t)round);
		CU_ASSERT_FATAL(sib_put_nb(ab, buf, len, base, k, NULL, &r) == SIB_OK);
		rma_wait(r, SIB_OK);
		CU_ASSERT(memcmp(user, buf, len) == 0);
		memset(buf, 0, len);
		CU_ASSERT_FATAL(sib_get_nb(ab, buf, 4096, base + 8192, k, NULL, &r) == SIB_OK);
		rma_wait(r, SIB_OK);
		CU_ASSERT(memcmp(buf, user + 8192, 4096) == 0);
		/* outside the mapped range: still refused */
		CU_ASSERT_FATAL(sib_get_nb(ab, buf, 64, base + len, k, NULL, &r) == SIB_OK);
		rma_wait(r, SIB_ERR_REMOTE_ACCESS);
		sib_rkey_destroy(k);
		sib_rkey_buffer_free(blob);
		CU_ASSERT_EQUAL(sib_mem_unmap(mem), SIB_OK);
	}
	sib_worker_query(wb, &a1);
	CU_ASSERT_EQUAL(a1.mem_maps, 0);
	CU_ASSERT_EQUAL(a1.regs_active, 0);
	one_msg(100000, 0, 15);
	free(user);
	free(buf);
	no_leaks();
}

/* The sender's worker goes away before the receiver reads: the receive
 * fails with a clear status and nothing stays held. */
static void test_sender_gone(void)
{
	sib_context_t *c;
	sib_worker_t *x;
	sib_ep_t *xb;
	size_t n = 1u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	sib_request_t *s, *r;
	struct sib_tag_status st;
	struct sib_worker_attr b;

	memset(src, 3, n);
	CU_ASSERT_FATAL(sib_context_create(NULL, &c) == SIB_OK);
	CU_ASSERT_FATAL(sib_worker_create(c, &(struct sib_worker_params){ .id = 9, .id_set = 1 }, &x) == SIB_OK);
	xb = ep_to(x, wb);
	CU_ASSERT_FATAL(sib_tag_send_nb(xb, src, n, 5, 0, NULL, &s) == SIB_OK);
	for (int i = 0; i < 200; i++) {   /* the RTS reaches B, unexpected */
		sib_worker_progress(x);
		sib_worker_progress(wb);
	}
	sib_worker_query(wb, &b);
	CU_ASSERT_FATAL(b.unexpected_now >= 1);
	CU_ASSERT_EQUAL(sib_request_test(s, NULL), SIB_INPROGRESS);
	sib_request_free(s);
	sib_ep_destroy(xb);
	CU_ASSERT_EQUAL(sib_worker_destroy(x), SIB_OK);
	sib_context_destroy(c);
	CU_ASSERT_FATAL(sib_tag_recv_nb(wb, dst, n, 9, 5, ~0ull, 0, NULL, &r) == SIB_OK);
	CU_ASSERT(sib_request_wait(r, &st) != SIB_OK);
	fprintf(stderr, "receive from a destroyed sender: %s\n",
		sib_status_string(st.status));
	CU_ASSERT(st.status == SIB_ERR_PEER_FAILED || st.status == SIB_ERR_REMOTE_ACCESS);
	sib_request_free(r);
	free(src);
	free(dst);
	no_leaks();
	one_msg(100000, 0, 14);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("sib_rndv_rma", setup, teardown);

	if (!s || !CU_add_test(s, "tagged sizes, contiguous and iovec", test_sizes) ||
	    !CU_add_test(s, "truncation", test_truncate) ||
	    !CU_add_test(s, "cancel while reading", test_cancel) ||
	    !CU_add_test(s, "active messages by rendezvous", test_am) ||
	    !CU_add_test(s, "put, get, atomics, access errors", test_rma) ||
	    !CU_add_test(s, "a mapping from the registration cache", test_mem_cached) ||
	    !CU_add_test(s, "sender gone before the read", test_sender_gone))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
