/*
 * test_sib_api: libsib through its public API, one process (a worker that
 * sends to itself through its own XRC send QP and SRQs, so every path of
 * the runtime but the cross-host handshake runs):
 *   - status strings; parameters (params struct and named environment keys,
 *     every bad value refused); argument validation of every call;
 *   - the protocol table: which row carries which size, from the counters;
 *   - matching through the runtime: tag and mask, contexts, wildcard
 *     source, per-sender order, truncation, probe, matched probe, cancel;
 *   - active messages (payload released at return, or kept and released
 *     later), flush, several threads on one worker (SIB_THREAD_MULTI).
 * Needs SOFTIB_SEG_TAG of its own when run beside other tests.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu_run.h"
#include "transport/sib.h"   /* installed as build/include/sib.h */

static sib_context_t *ctx;
static sib_worker_t *w;
static sib_ep_t *self;

static int setup(void)
{
	void *a;
	size_t len;

	if (sib_context_create(NULL, &ctx) || sib_worker_create(ctx, NULL, &w) ||
	    sib_worker_get_address(w, &a, &len) || sib_ep_create(w, a, len, &self))
		return 1;
	sib_address_free(a);
	return 0;
}

static int teardown(void)
{
	sib_ep_destroy(self);
	sib_worker_destroy(w);
	return sib_context_destroy(ctx) != SIB_OK;
}

static sib_status_t send_wait(sib_ep_t *ep, const void *b, size_t n, uint64_t tag,
			      uint32_t c)
{
	sib_request_t *r;
	sib_status_t st = sib_tag_send_nb(ep, b, n, tag, c, NULL, &r);

	if (st)
		return st;
	st = sib_request_wait(r, NULL);
	sib_request_free(r);
	return st;
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

/* ---- statuses and parameters ---- */

static void test_status_strings(void)
{
	for (int s = SIB_STATUS_LAST + 1; s <= SIB_INPROGRESS; s++) {
		CU_ASSERT_PTR_NOT_NULL(sib_status_string(s));
		CU_ASSERT_STRING_NOT_EQUAL(sib_status_string(s), "unknown status");
		for (int t = s + 1; t <= SIB_INPROGRESS; t++)
			CU_ASSERT_STRING_NOT_EQUAL(sib_status_string(s),
						   sib_status_string(t));
	}
	CU_ASSERT_STRING_EQUAL(sib_status_string(SIB_STATUS_LAST), "unknown status");
	CU_ASSERT_STRING_EQUAL(sib_status_string(42), "unknown status");
}

static sib_status_t ctx_try(const struct sib_context_params *p)
{
	sib_context_t *c = NULL;
	sib_status_t st = sib_context_create(p, &c);

	if (!st)
		sib_context_destroy(c);
	else
		CU_ASSERT_PTR_NULL(c);
	return st;
}

static sib_status_t env_try(const char *key, const char *val)
{
	sib_status_t st;

	setenv(key, val, 1);
	st = ctx_try(NULL);
	unsetenv(key);
	return st;
}

static void test_params(void)
{
	struct sib_context_params p = { .nclasses = 2,
		.classes = { { 512, 64 }, { 256, 64 } } };   /* decreasing */

	setenv("SIB_QUIET", "1", 1);
	CU_ASSERT_EQUAL(sib_context_create(NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(ctx_try(&p), SIB_ERR_INVALID_PARAM);
	p.classes[1].size = 4096;
	CU_ASSERT_EQUAL(ctx_try(&p), SIB_OK);
	p.classes[1].depth = 3;       /* below 16 */
	CU_ASSERT_EQUAL(ctx_try(&p), SIB_ERR_INVALID_PARAM);
	p.classes[1].depth = 64;
	p.nclasses = SIB_MAX_CLASSES + 1;
	CU_ASSERT_EQUAL(ctx_try(&p), SIB_ERR_INVALID_PARAM);
	p.nclasses = 2;
	p.short_max = 100000;
	CU_ASSERT_EQUAL(ctx_try(&p), SIB_ERR_INVALID_PARAM);
	p.short_max = 0;
	p.thread_mode = 7;
	CU_ASSERT_EQUAL(ctx_try(&p), SIB_ERR_INVALID_PARAM);
	p.thread_mode = SIB_THREAD_SINGLE;
	p.progress_mode = 9;
	p.progress_mode_set = 1;
	CU_ASSERT_EQUAL(ctx_try(&p), SIB_ERR_INVALID_PARAM);
	/* named environment keys, each checked */
	CU_ASSERT_EQUAL(env_try("SIB_SRQ_CLASSES", "0"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_SRQ_CLASSES", "9"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_SRQ_CLASSES", "2"), SIB_OK);
	CU_ASSERT_EQUAL(env_try("SIB_SRQ0_SIZE", "abc"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_SRQ0_SIZE", "100000"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_SRQ1_DEPTH", "5"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_SRQ1_DEPTH", "128"), SIB_OK);
	CU_ASSERT_EQUAL(env_try("SIB_SHORT_MAX", "-1"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_PROGRESS", "sometimes"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_PROGRESS", "blocking"), SIB_OK);
	CU_ASSERT_EQUAL(env_try("SIB_SIGNAL_EVERY", "0"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_SIGNAL_EVERY", "65"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_SIGNAL_EVERY", "1"), SIB_OK);
	CU_ASSERT_EQUAL(env_try("SIB_SPIN_US", "x"), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(env_try("SIB_SPIN_US", "0"), SIB_OK);
	unsetenv("SIB_QUIET");
}

static void test_custom_classes(void)
{
	struct sib_context_params p = { .nclasses = 2,
		.classes = { { 128, 32 }, { 1024, 16 } }, .short_max = 64 };
	struct sib_worker_attr a;
	sib_context_t *c;
	sib_worker_t *x;

	CU_ASSERT_FATAL(sib_context_create(&p, &c) == SIB_OK);
	CU_ASSERT_FATAL(sib_worker_create(c, NULL, &x) == SIB_OK);
	CU_ASSERT_EQUAL(sib_context_destroy(c), SIB_ERR_BUSY);
	CU_ASSERT_EQUAL(sib_worker_query(x, &a), SIB_OK);
	CU_ASSERT_EQUAL(a.nclasses, 2);
	CU_ASSERT_EQUAL(a.classes[1].size, 1024);
	CU_ASSERT_EQUAL(a.short_max, 64);
	CU_ASSERT_EQUAL(a.eager_max, 1024 - 24);
	CU_ASSERT_EQUAL(sib_worker_destroy(x), SIB_OK);
	CU_ASSERT_EQUAL(sib_context_destroy(c), SIB_OK);
}

/* A process with only remote peers: a fifth, 128 KiB class; classes the
 * caller names win over it. */
static void test_remote_class(void)
{
	struct sib_context_params p = { .remote_peers_only = 1 };
	struct sib_worker_attr a;
	sib_context_t *c;
	sib_worker_t *x;

	CU_ASSERT_FATAL(sib_context_create(&p, &c) == SIB_OK);
	CU_ASSERT_FATAL(sib_worker_create(c, NULL, &x) == SIB_OK);
	CU_ASSERT_EQUAL(sib_worker_query(x, &a), SIB_OK);
	CU_ASSERT_EQUAL(a.nclasses, 5);
	CU_ASSERT_EQUAL(a.classes[3].size, 32768 + 512);
	CU_ASSERT_EQUAL(a.classes[4].size, 131072 + 512);
	CU_ASSERT_EQUAL(a.classes[4].depth, 16);
	CU_ASSERT_EQUAL(a.eager_max, 131072 + 512 - 24);
	CU_ASSERT_EQUAL(sib_worker_destroy(x), SIB_OK);
	CU_ASSERT_EQUAL(sib_context_destroy(c), SIB_OK);

	p.nclasses = 1;
	p.classes[0] = (struct sib_class_param){ 4096, 16 };
	CU_ASSERT_FATAL(sib_context_create(&p, &c) == SIB_OK);
	CU_ASSERT_FATAL(sib_worker_create(c, NULL, &x) == SIB_OK);
	CU_ASSERT_EQUAL(sib_worker_query(x, &a), SIB_OK);
	CU_ASSERT_EQUAL(a.nclasses, 1);
	CU_ASSERT_EQUAL(a.eager_max, 4096 - 24);
	CU_ASSERT_EQUAL(sib_worker_destroy(x), SIB_OK);
	CU_ASSERT_EQUAL(sib_context_destroy(c), SIB_OK);
}

/* ---- argument validation ---- */

static void test_bad_args(void)
{
	sib_request_t *r = (void *)1;
	sib_ep_t *ep = (void *)1;
	struct sib_tag_status st;
	struct sib_worker_attr a;
	sib_message_t *m;
	uint8_t junk[64] = { 0 }, b[8];
	void *addr;
	size_t len;
	int fd;

	CU_ASSERT_EQUAL(sib_context_destroy(NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_create(NULL, NULL, &w), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_create(ctx, NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_create(ctx, &(struct sib_worker_params){
		.id = SIB_ANY_SOURCE, .id_set = 1 }, (sib_worker_t **)&r),
		SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_destroy(NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_progress(NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_fd(NULL, &fd), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_fd(w, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_wait(w, -5), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_arm(NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_get_address(w, NULL, &len), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_get_address(w, &addr, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_query(w, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_query(NULL, &a), SIB_ERR_INVALID_PARAM);
	setenv("SIB_QUIET", "1", 1);
	CU_ASSERT_EQUAL(sib_ep_create(w, junk, sizeof(junk), &ep), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_PTR_NULL(ep);
	CU_ASSERT_EQUAL(sib_ep_create(w, NULL, 10, &ep), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_worker_get_address(w, &addr, &len), SIB_OK);
	CU_ASSERT_EQUAL(sib_ep_create(w, addr, len - 1, &ep), SIB_ERR_INVALID_PARAM);
	((uint8_t *)addr)[0] ^= 0xff;   /* the magic */
	CU_ASSERT_EQUAL(sib_ep_create(w, addr, len, &ep), SIB_ERR_INVALID_PARAM);
	sib_address_free(addr);
	unsetenv("SIB_QUIET");
	CU_ASSERT_EQUAL(sib_ep_destroy(NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_ep_flush(NULL, &r), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_ep_flush(self, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_tag_send_nb(NULL, b, 1, 0, 0, NULL, &r), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_PTR_NULL(r);
	CU_ASSERT_EQUAL(sib_tag_send_nb(self, NULL, 1, 0, 0, NULL, &r), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_tag_send_nb(self, b, 1, 0, 0, NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_tag_recv_nb(NULL, b, 1, 0, 0, 0, 0, NULL, &r), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_tag_recv_nb(w, NULL, 1, 0, 0, 0, 0, NULL, &r), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_tag_recv_nb(w, b, 1, 0, 0, 0, 0, NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_tag_probe_nb(NULL, 0, 0, 0, 0, &st, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_tag_probe_nb(w, 0, 0, 0, 0, NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_tag_mrecv_nb(w, b, 1, NULL, NULL, &r), SIB_ERR_INVALID_PARAM);
	m = (void *)1;
	CU_ASSERT_EQUAL(sib_tag_mrecv_nb(w, b, 1, m, NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_request_test(NULL, &st), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_request_wait(NULL, &st), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_request_cancel(NULL), SIB_ERR_INVALID_PARAM);
	sib_request_free(NULL);
	CU_ASSERT_EQUAL(sib_am_register(NULL, 0, NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_am_register(w, SIB_AM_MAX_ID, NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_am_send_nb(self, SIB_AM_MAX_ID, NULL, 0, NULL, 0, NULL, &r),
			SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_am_send_nb(self, 1, NULL, 4, NULL, 0, NULL, &r),
			SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_am_send_nb(NULL, 1, NULL, 0, NULL, 0, NULL, &r),
			SIB_ERR_INVALID_PARAM);
	sib_am_data_release(NULL, b);
	sib_am_data_release(w, NULL);
	CU_ASSERT_EQUAL(sib_worker_id(NULL), SIB_ANY_SOURCE);
	CU_ASSERT_EQUAL(sib_ep_peer_id(NULL), SIB_ANY_SOURCE);
	CU_ASSERT_EQUAL(sib_ep_status(NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_init_pmix(NULL, NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_fini_pmix(NULL), SIB_ERR_INVALID_PARAM);
	CU_ASSERT_EQUAL(sib_job_fence(NULL), SIB_ERR_INVALID_PARAM);
}

/* ---- the protocol table ---- */

static void test_protocol_table(void)
{
	struct sib_worker_attr a, b;
	size_t sizes[4];
	uint8_t *buf;
	const int want[4] = { SIB_PROTO_SHORT, SIB_PROTO_SHORT, SIB_PROTO_EAGER,
			      SIB_PROTO_EAGER };
	sib_request_t *r;

	CU_ASSERT_FATAL(sib_worker_query(w, &a) == SIB_OK);
	CU_ASSERT(a.short_max > 0);
	CU_ASSERT(a.eager_max > a.short_max);
	CU_ASSERT_EQUAL(a.eager_max + 24, a.classes[a.nclasses - 1].size);
	sizes[0] = 0;
	sizes[1] = a.short_max;
	sizes[2] = a.short_max + 1;
	sizes[3] = a.rndv_thresh_local;   /* the largest eager one here */
	buf = calloc(1, a.eager_max + 1);
	CU_ASSERT_FATAL(buf != NULL);
	for (int i = 0; i < 4; i++) {
		sib_worker_query(w, &a);
		CU_ASSERT_EQUAL(send_wait(self, buf, sizes[i], 77, 3), SIB_OK);
		CU_ASSERT_EQUAL(recv_wait(buf, a.eager_max, SIB_ANY_SOURCE, 77, ~0ull, 3,
					  NULL), SIB_OK);
		sib_worker_query(w, &b);
		CU_ASSERT_EQUAL(b.tx_msgs[want[i]], a.tx_msgs[want[i]] + 1);
		CU_ASSERT_EQUAL(b.rx_msgs[want[i]], a.rx_msgs[want[i]] + 1);
		CU_ASSERT_EQUAL(b.tx_bytes[want[i]], a.tx_bytes[want[i]] + sizes[i]);
	}
	/* longer: the rendezvous row (test_sib_rma covers it in depth) */
	{	/* the send completes once the receive has read it */
		sib_request_t *rr, *sr;

		CU_ASSERT_FATAL(sib_tag_recv_nb(w, buf, a.eager_max + 1, SIB_ANY_SOURCE,
						0, ~0ull, 0, NULL, &rr) == SIB_OK);
		CU_ASSERT_FATAL(sib_tag_send_nb(self, buf, a.eager_max + 1, 0, 0,
						NULL, &sr) == SIB_OK);
		CU_ASSERT_EQUAL(sib_request_wait(sr, NULL), SIB_OK);
		CU_ASSERT_EQUAL(sib_request_wait(rr, NULL), SIB_OK);
		sib_request_free(sr);
		sib_request_free(rr);
	}
	sib_worker_query(w, &b);
	CU_ASSERT_EQUAL(b.tx_msgs[SIB_PROTO_RNDV], 1);
	CU_ASSERT_EQUAL(b.rx_msgs[SIB_PROTO_RNDV], 1);
	CU_ASSERT_EQUAL(b.regs_active, 0);
	CU_ASSERT_EQUAL(b.rndv_tx_active + b.rndv_rx_active, 0);
	(void)r;
	CU_ASSERT_EQUAL(b.send_qps, 1);
	CU_ASSERT_EQUAL(b.hosts_sent_to, 1);
	free(buf);
}

/* ---- matching through the runtime ---- */

static void test_match_rules(void)
{
	struct sib_tag_status st;
	uint8_t out[64], in[64];

	for (int i = 0; i < 64; i++)
		out[i] = (uint8_t)i;
	/* order: three with one tag, received in sending order */
	for (int i = 0; i < 3; i++) {
		out[0] = (uint8_t)i;
		CU_ASSERT_EQUAL(send_wait(self, out, 8, 0x500, 1), SIB_OK);
	}
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(recv_wait(in, 8, sib_worker_id(w), 0x500, ~0ull, 1, &st),
				SIB_OK);
		CU_ASSERT_EQUAL(in[0], i);
		CU_ASSERT_EQUAL(st.source, sib_worker_id(w));
	}
	/* a mask: the low byte ignored; contexts never cross */
	CU_ASSERT_EQUAL(send_wait(self, out, 4, 0x1234, 2), SIB_OK);
	CU_ASSERT_EQUAL(send_wait(self, out, 5, 0x12ff, 1), SIB_OK);
	CU_ASSERT_EQUAL(recv_wait(in, 64, SIB_ANY_SOURCE, 0x1200, ~0xffull, 1, &st), SIB_OK);
	CU_ASSERT_EQUAL(st.tag, 0x12ff);
	CU_ASSERT_EQUAL(st.length, 5);
	CU_ASSERT_EQUAL(st.ctx_id, 1);
	CU_ASSERT_EQUAL(recv_wait(in, 64, SIB_ANY_SOURCE, 0, 0, 2, &st), SIB_OK);
	CU_ASSERT_EQUAL(st.tag, 0x1234);
	/* truncation: the buffer holds what fits, the status the true length */
	memset(in, 0xee, sizeof(in));
	CU_ASSERT_EQUAL(send_wait(self, out, 40, 9, 1), SIB_OK);
	CU_ASSERT_EQUAL(recv_wait(in, 16, SIB_ANY_SOURCE, 9, ~0ull, 1, &st),
			SIB_ERR_TRUNCATED);
	CU_ASSERT_EQUAL(st.length, 40);
	CU_ASSERT_EQUAL(memcmp(in + 1, out + 1, 15), 0);
	CU_ASSERT_EQUAL(in[16], 0xee);
	/* a receive from a source that never sends stays posted; cancel */
	sib_request_t *r;

	CU_ASSERT_EQUAL(sib_tag_recv_nb(w, in, 8, 4242, 0, 0, 1, NULL, &r), SIB_OK);
	CU_ASSERT_EQUAL(sib_request_test(r, &st), SIB_INPROGRESS);
	CU_ASSERT_EQUAL(sib_request_cancel(r), SIB_OK);
	CU_ASSERT_EQUAL(sib_request_test(r, &st), SIB_ERR_CANCELED);
	sib_request_free(r);
}

static void test_probe(void)
{
	struct sib_tag_status st;
	sib_message_t *m;
	sib_request_t *r;
	uint8_t out[32] = "probe me", in[32];

	CU_ASSERT_EQUAL(sib_tag_probe_nb(w, SIB_ANY_SOURCE, 0, 0, 5, &st, NULL),
			SIB_ERR_NO_MESSAGE);
	CU_ASSERT_EQUAL(send_wait(self, out, 9, 31, 5), SIB_OK);
	CU_ASSERT_EQUAL(send_wait(self, out, 3, 32, 5), SIB_OK);
	/* a probe leaves the message; a matched probe takes it */
	CU_ASSERT_EQUAL(sib_tag_probe_nb(w, SIB_ANY_SOURCE, 0, 0, 5, &st, NULL), SIB_OK);
	CU_ASSERT_EQUAL(st.tag, 31);
	CU_ASSERT_EQUAL(st.length, 9);
	CU_ASSERT_EQUAL(sib_tag_probe_nb(w, SIB_ANY_SOURCE, 0, 0, 5, &st, &m), SIB_OK);
	CU_ASSERT_EQUAL(st.tag, 31);
	CU_ASSERT_FATAL(m != NULL);
	/* taken: a receive now gets the next one */
	CU_ASSERT_EQUAL(recv_wait(in, 32, SIB_ANY_SOURCE, 0, 0, 5, &st), SIB_OK);
	CU_ASSERT_EQUAL(st.tag, 32);
	CU_ASSERT_EQUAL(sib_tag_mrecv_nb(w, in, sizeof(in), m, NULL, &r), SIB_OK);
	CU_ASSERT_EQUAL(sib_request_wait(r, &st), SIB_OK);
	CU_ASSERT_EQUAL(st.tag, 31);
	CU_ASSERT_STRING_EQUAL((char *)in, "probe me");
	sib_request_free(r);
}

/* ---- active messages ---- */

static int am_calls;
static void *am_kept;

static sib_status_t am_handler(void *arg, uint32_t source, const void *hdr,
			       size_t hlen, void *data, size_t dlen)
{
	int keep = *(int *)arg;

	am_calls++;
	CU_ASSERT_EQUAL(source, sib_worker_id(w));
	CU_ASSERT_EQUAL(hlen, 4);
	CU_ASSERT_EQUAL(memcmp(hdr, "HDR", 4), 0);
	CU_ASSERT_EQUAL(dlen, 100);
	CU_ASSERT_EQUAL(((uint8_t *)data)[99], 99);
	if (keep) {
		am_kept = data;
		return SIB_INPROGRESS;
	}
	return SIB_OK;
}

static void test_am(void)
{
	static int keep;
	uint8_t payload[100];
	sib_request_t *r;

	for (int i = 0; i < 100; i++)
		payload[i] = (uint8_t)i;
	CU_ASSERT_EQUAL(sib_am_register(w, 3, am_handler, &keep), SIB_OK);
	for (keep = 0; keep < 2; keep++) {
		am_calls = 0;
		CU_ASSERT_EQUAL(sib_am_send_nb(self, 3, "HDR", 4, payload, 100, NULL, &r),
				SIB_OK);
		CU_ASSERT_EQUAL(sib_request_wait(r, NULL), SIB_OK);
		sib_request_free(r);
		for (int i = 0; i < 1000 && !am_calls; i++)
			sib_worker_progress(w);
		CU_ASSERT_EQUAL(am_calls, 1);
	}
	/* the kept payload is intact until released */
	CU_ASSERT_PTR_NOT_NULL_FATAL(am_kept);
	CU_ASSERT_EQUAL(((uint8_t *)am_kept)[42], 42);
	sib_am_data_release(w, am_kept);
	CU_ASSERT_EQUAL(sib_am_register(w, 3, NULL, NULL), SIB_OK);
}

static void test_flush(void)
{
	sib_request_t *s[8], *f;
	uint8_t b[300] = { 0 };

	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(sib_tag_send_nb(self, b, sizeof(b), 600 + i, 6, NULL, &s[i]),
				SIB_OK);
	for (int i = 0; i < 8; i++)
		sib_request_free(s[i]);   /* released when they complete */
	sib_status_t st = sib_ep_flush(self, &f);

	CU_ASSERT(st == SIB_OK || st == SIB_INPROGRESS);
	if (st == SIB_INPROGRESS) {
		CU_ASSERT_EQUAL(sib_request_wait(f, NULL), SIB_OK);
		sib_request_free(f);
	}
	CU_ASSERT_EQUAL(sib_ep_flush(self, &f), SIB_OK);
	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(recv_wait(b, sizeof(b), SIB_ANY_SOURCE, 600 + i, ~0ull, 6,
					  NULL), SIB_OK);
}

/*
 * A short or eager send without a callback completes when posted (its
 * bytes are copied); the library keeps the request until the work
 * completion. Freed before, after, or while still held; with a callback
 * it completes from progress, once; the caller's buffer is reused at once;
 * a flush still waits for the work completions. ASan sees the lifetimes.
 */
static int cb_calls;
static sib_status_t cb_status;

static void count_cb(sib_request_t *r, sib_status_t st, void *arg)
{
	(void)r;
	(void)arg;
	cb_calls++;
	cb_status = st;
}

static void test_send_lifetime(void)
{
	size_t sizes[] = { 8, 200, 5000 };   /* short, eager, eager (class 2) */
	uint8_t *b = malloc(5000), *in = malloc(5000);
	struct sib_op_params op = { .send_cb = count_cb };
	sib_request_t *s[16], *f;
	struct sib_tag_status ts;

	CU_ASSERT_FATAL(b && in);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];

		for (int i = 0; i < 16; i++) {
			memset(b, 'a' + i, n);
			CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(self, b, n, 700 + i, 7, NULL,
							      &s[i]), SIB_OK);
			/* completed at once: the buffer is the caller's again */
			CU_ASSERT_EQUAL(sib_request_test(s[i], NULL), SIB_OK);
			memset(b, 'z', n);
			if (i % 2)   /* freed while the library may hold it */
				sib_request_free(s[i]);
		}
		sib_status_t st = sib_ep_flush(self, &f);

		CU_ASSERT(st == SIB_OK || st == SIB_INPROGRESS);
		if (st == SIB_INPROGRESS) {   /* the work completions */
			CU_ASSERT_EQUAL(sib_request_wait(f, NULL), SIB_OK);
			sib_request_free(f);
		}
		for (int i = 0; i < 16; i += 2)   /* freed after the completion */
			sib_request_free(s[i]);
		for (int i = 0; i < 16; i++) {
			memset(in, 0, n);
			CU_ASSERT_EQUAL(recv_wait(in, n, SIB_ANY_SOURCE, 700 + i, ~0ull, 7,
						  &ts), SIB_OK);
			CU_ASSERT_EQUAL(ts.length, n);
			CU_ASSERT(in[0] == 'a' + i && in[n - 1] == 'a' + i);
		}
		/* with a callback: completed from progress, the callback once */
		cb_calls = 0;
		cb_status = SIB_ERR_IO;
		CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(self, b, n, 799, 7, &op, &s[0]),
				      SIB_OK);
		CU_ASSERT_EQUAL(sib_request_wait(s[0], NULL), SIB_OK);
		for (int i = 0; i < 50; i++)
			sib_worker_progress(w);
		CU_ASSERT_EQUAL(cb_calls, 1);
		CU_ASSERT_EQUAL(cb_status, SIB_OK);
		sib_request_free(s[0]);
		CU_ASSERT_EQUAL(recv_wait(in, n, SIB_ANY_SOURCE, 799, ~0ull, 7, NULL), SIB_OK);
	}
	free(b);
	free(in);
}

/*
 * Short sends that completed when posted go unsignalled (at most 15 in a
 * row): they complete with the next signalled WR, and when none follows a
 * flush sends a NOP behind them (counted, never delivered). A callback
 * asked lazy (SIB_OP_LAZY_CB) lets its send go unsignalled too: the
 * callback still runs once, from progress (the timer closes the tail).
 */
/* Receive buffers go back to the SRQ in batches (worker.c): never more
 * than an eighth of the class waits, nothing is lost or reordered over
 * three laps of the class, and an idle progress call posts what waits. */
static void test_srq_giveback(void)
{
	struct sib_worker_attr a;
	struct sib_tag_status ts;
	sib_request_t *s;
	uint64_t v, got = 0;
	uint32_t most = 0;

	CU_ASSERT_EQUAL_FATAL(sib_worker_query(w, &a), SIB_OK);
	uint32_t depth = a.classes[0].depth, n = 3 * depth;

	for (v = 0; v < n; v++) {
		CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(self, &v, sizeof(v), 901, 9,
						      NULL, &s), SIB_OK);
		sib_request_free(s);
		CU_ASSERT_EQUAL_FATAL(recv_wait(&got, sizeof(got), SIB_ANY_SOURCE, 901,
						~0ull, 9, &ts), SIB_OK);
		CU_ASSERT_EQUAL(got, v);
		CU_ASSERT_EQUAL_FATAL(sib_worker_query(w, &a), SIB_OK);
		CU_ASSERT(a.srq_waiting[0] <= depth / 8);
		if (a.srq_waiting[0] > most)
			most = a.srq_waiting[0];
	}
	CU_ASSERT(most > 0); /* they did wait */
	for (int i = 0; i < 8; i++)
		sib_worker_progress(w);
	CU_ASSERT_EQUAL(sib_worker_query(w, &a), SIB_OK);
	CU_ASSERT_EQUAL(a.srq_waiting[0], 0);
	CU_ASSERT_EQUAL(a.srq_posted[0], depth);
}

static void test_unsignaled(void)
{
	struct sib_worker_attr a0, a1;
	struct sib_op_params op = { .send_cb = count_cb, .flags = SIB_OP_LAZY_CB };
	struct sib_tag_status ts;
	sib_request_t *s, *f;
	uint64_t v;

	CU_ASSERT_EQUAL_FATAL(sib_worker_query(w, &a0), SIB_OK);
	uint64_t rx0 = a0.rx_msgs[SIB_PROTO_SHORT];

	/* a progress call between sends: each goes alone (a burst would
	 * be batched: test_sib_batch) */
	for (v = 0; v < 40; v++) {
		CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(self, &v, sizeof(v), 900, 9,
						      NULL, &s), SIB_OK);
		sib_request_free(s);
		sib_worker_progress(w);
	}
	CU_ASSERT_EQUAL(sib_worker_query(w, &a1), SIB_OK);
	CU_ASSERT(a1.unsignaled - a0.unsignaled >= 30);
	/* the last sends are unsignalled: the flush needs the NOP */
	sib_status_t st = sib_ep_flush(self, &f);

	CU_ASSERT_EQUAL(st, SIB_INPROGRESS);
	if (st == SIB_INPROGRESS) {
		CU_ASSERT_EQUAL(sib_request_wait(f, NULL), SIB_OK);
		sib_request_free(f);
	}
	CU_ASSERT_EQUAL(sib_worker_query(w, &a1), SIB_OK);
	CU_ASSERT_EQUAL(a1.tail_nops - a0.tail_nops, 1);
	for (uint64_t i = 0; i < 40; i++) {
		CU_ASSERT_EQUAL(recv_wait(&v, sizeof(v), SIB_ANY_SOURCE, 900, ~0ull, 9,
					  &ts), SIB_OK);
		CU_ASSERT_EQUAL(v, i);   /* in order, nothing lost */
	}
	for (int i = 0; i < 50; i++)
		sib_worker_progress(w);
	/* the NOP reached nobody */
	CU_ASSERT_EQUAL(sib_tag_probe_nb(w, SIB_ANY_SOURCE, 0, 0, 9, &ts, NULL),
			SIB_ERR_NO_MESSAGE);
	/* 40 messages counted, the NOP not */
	CU_ASSERT_EQUAL(sib_worker_query(w, &a0), SIB_OK);
	CU_ASSERT_EQUAL(a0.rx_msgs[SIB_PROTO_SHORT], rx0 + 40);
	/* lazy callback: unsignalled, completed by the timer's NOP */
	cb_calls = 0;
	cb_status = SIB_ERR_IO;
	CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(self, &v, sizeof(v), 901, 9, &op, &s),
			      SIB_OK);
	CU_ASSERT_EQUAL(sib_request_wait(s, NULL), SIB_OK);
	CU_ASSERT_EQUAL(cb_calls, 1);
	CU_ASSERT_EQUAL(cb_status, SIB_OK);
	sib_request_free(s);
	CU_ASSERT_EQUAL(sib_worker_query(w, &a1), SIB_OK);
	CU_ASSERT(a1.unsignaled > a0.unsignaled);
	CU_ASSERT(a1.tail_nops > a0.tail_nops);
	CU_ASSERT_EQUAL(recv_wait(&v, sizeof(v), SIB_ANY_SOURCE, 901, ~0ull, 9, NULL),
			SIB_OK);
	/* a tail nobody waits on (sent, freed) stays: no NOP from the
	 * timer (it would fail toward a peer that has since exited) */
	for (v = 0; v < 3; v++) {
		CU_ASSERT_EQUAL_FATAL(sib_tag_send_nb(self, &v, sizeof(v), 902, 9,
						      NULL, &s), SIB_OK);
		sib_request_free(s);
		sib_worker_progress(w);
	}
	CU_ASSERT_EQUAL(sib_worker_query(w, &a0), SIB_OK);
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {   /* three timer ticks and more */
		sib_worker_progress(w);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 80);
	CU_ASSERT_EQUAL(sib_worker_query(w, &a1), SIB_OK);
	CU_ASSERT_EQUAL(a1.tail_nops, a0.tail_nops);
	for (uint64_t i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(recv_wait(&v, sizeof(v), SIB_ANY_SOURCE, 902, ~0ull, 9,
					  NULL), SIB_OK);
	/* a flush still closes it */
	CU_ASSERT_EQUAL(sib_ep_flush(self, &f), SIB_INPROGRESS);
	CU_ASSERT_EQUAL(sib_request_wait(f, NULL), SIB_OK);
	sib_request_free(f);
	CU_ASSERT_EQUAL(sib_worker_query(w, &a1), SIB_OK);
	CU_ASSERT_EQUAL(a1.tail_nops, a0.tail_nops + 1);
}

/* ---- one worker, several threads ---- */

struct thr {
	sib_worker_t *w;
	sib_ep_t *ep;
	uint32_t ctx;
	int errors;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;

	for (uint64_t i = 0; i < 300; i++) {
		uint64_t v = i, got = ~0ull;
		sib_request_t *s, *r;

		if (sib_tag_send_nb(t->ep, &v, sizeof(v), i, t->ctx, NULL, &s) ||
		    sib_tag_recv_nb(t->w, &got, sizeof(got), SIB_ANY_SOURCE, i, ~0ull,
				    t->ctx, NULL, &r)) {
			t->errors++;
			continue;
		}
		if (sib_request_wait(s, NULL) || sib_request_wait(r, NULL) || got != i)
			t->errors++;
		sib_request_free(s);
		sib_request_free(r);
	}
	return NULL;
}

static void test_threads(void)
{
	struct sib_context_params p = { .thread_mode = SIB_THREAD_MULTI };
	struct thr t[3];
	pthread_t th[3];
	sib_context_t *c;
	sib_worker_t *x;
	sib_ep_t *ep;
	void *a;
	size_t len;

	CU_ASSERT_FATAL(sib_context_create(&p, &c) == SIB_OK);
	CU_ASSERT_FATAL(sib_worker_create(c, NULL, &x) == SIB_OK);
	CU_ASSERT_FATAL(sib_worker_get_address(x, &a, &len) == SIB_OK);
	CU_ASSERT_FATAL(sib_ep_create(x, a, len, &ep) == SIB_OK);
	sib_address_free(a);
	for (int i = 0; i < 3; i++) {
		t[i] = (struct thr){ x, ep, (uint32_t)(10 + i), 0 };
		pthread_create(&th[i], NULL, thr_main, &t[i]);
	}
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(t[i].errors, 0);
	}
	CU_ASSERT_EQUAL(sib_ep_destroy(ep), SIB_OK);
	CU_ASSERT_EQUAL(sib_worker_destroy(x), SIB_OK);
	CU_ASSERT_EQUAL(sib_context_destroy(c), SIB_OK);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("sib_params", NULL, NULL);

	if (!s || !CU_add_test(s, "status strings", test_status_strings) ||
	    !CU_add_test(s, "parameters and named keys", test_params) ||
	    !CU_add_test(s, "custom size classes", test_custom_classes) ||
	    !CU_add_test(s, "a class for remote peers only", test_remote_class))
		return -1;
	s = CU_add_suite("sib_self", setup, teardown);
	if (!s || !CU_add_test(s, "argument validation", test_bad_args) ||
	    !CU_add_test(s, "protocol table", test_protocol_table) ||
	    !CU_add_test(s, "matching rules", test_match_rules) ||
	    !CU_add_test(s, "probe and matched probe", test_probe) ||
	    !CU_add_test(s, "active messages", test_am) ||
	    !CU_add_test(s, "flush", test_flush) ||
	    !CU_add_test(s, "send request lifetime", test_send_lifetime) ||
	    !CU_add_test(s, "unsignalled short sends", test_unsignaled) ||
	    !CU_add_test(s, "receive buffers go back in batches", test_srq_giveback))
		return -1;
	s = CU_add_suite("sib_threads", NULL, NULL);
	if (!s || !CU_add_test(s, "three threads on one worker", test_threads))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
