/*
 * Unit tests of transport/match.c, the tag-matching engine of libsib:
 * every MPI matching rule one by one (exact, masked and wildcard tags,
 * wildcard source, contexts, non-overtaking, the oldest posted receive
 * across specific and wildcard receives, arrival order across sources),
 * probe against matched probe, cancel, failed sources, counts, the bucket
 * table growing with entries queued and sources sharing buckets at its
 * cap. The randomized run against a reference model is
 * test_sib_match_model.c.
 */
#include "match.h"
#include "cu_run.h"
#include "match_suite.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Each test starts with an empty engine of its own. */
#define FRESH()                                     \
	do {                                        \
		sib_mq_fini(&mq);                   \
		CU_ASSERT_FATAL(sib_mq_init(&mq) == 0); \
	} while (0)

static void set_recv(struct req *q, uint32_t src, uint32_t ctx, uint64_t tag,
		     uint64_t mask)
{
	memset(q, 0, sizeof(*q));
	q->r.src = src;
	q->r.ctx = ctx;
	q->r.tag = tag;
	q->r.mask = mask;
}

static void set_msg(struct umsg *u, uint32_t src, uint32_t ctx, uint64_t tag,
		    uint64_t len)
{
	memset(u, 0, sizeof(*u));
	u->m.src = src;
	u->m.ctx = ctx;
	u->m.tag = tag;
	u->m.len = len;
}

/* What the runtime does with an arriving message: match it, or queue it. */
static struct sib_mq_recv *deliver(struct umsg *u)
{
	struct sib_mq_recv *r = sib_mq_arrive(&mq, u->m.src, u->m.ctx, u->m.tag);

	if (!r)
		sib_mq_add_unexpected(&mq, &u->m);
	return r;
}

/* ---- basics ---- */

static void test_empty(void)
{
	FRESH();
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 0);
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 0);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 0, 0, 0));
	CU_ASSERT_PTR_NULL(sib_mq_probe(&mq, SIB_ANY_SOURCE, 0, 0, 0, 1));
	CU_ASSERT_PTR_NULL(sib_mq_take_recv_from(&mq, 0));
	CU_ASSERT_PTR_NULL(sib_mq_take_msg_from(&mq, 0));
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
	/* Bad input gives a status, never a crash. */
	CU_ASSERT_EQUAL(sib_mq_init(NULL), EINVAL);
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, NULL), EINVAL);
	CU_ASSERT_PTR_NULL(sib_mq_post(&mq, NULL));
	CU_ASSERT_PTR_NULL(sib_mq_arrive(NULL, 0, 0, 0));
	CU_ASSERT_EQUAL(sib_mq_posted_count(NULL), 0);
}

static void test_exact_match(void)
{
	struct req a, b;
	struct umsg u, v;

	FRESH();
	/* Posted first, then the message. */
	set_recv(&a, 3, 1, 42, ALL);
	CU_ASSERT_PTR_NULL(sib_mq_post(&mq, &a.r));
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 1);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 3, 1, 43));   /* other tag */
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 4, 1, 42));   /* other source */
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 3, 1, 42), &a.r);
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 0);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 3, 1, 42));   /* taken once */

	/* The message first, then the receive. */
	set_msg(&u, 3, 1, 42, 100);
	set_msg(&v, 3, 1, 7, 200);
	CU_ASSERT_PTR_NULL(deliver(&v));
	CU_ASSERT_PTR_NULL(deliver(&u));
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 2);
	set_recv(&b, 3, 1, 42, ALL);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &b.r), &u.m);
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 1);
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 0);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static void test_tag_mask(void)
{
	struct req a, b;
	struct umsg u;

	FRESH();
	/* Only the high 32 bits count: low bits differ, still a match. */
	set_recv(&a, 0, 0, 0x1234567800000000ULL, 0xffffffff00000000ULL);
	sib_mq_post(&mq, &a.r);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 0, 0, 0x1234567900000000ULL));
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 0, 0, 0x12345678deadbeefULL), &a.r);
	/* The receive's own bits outside the mask do not matter either. */
	set_recv(&b, 0, 0, 0xffULL, 0xf0ULL);
	sib_mq_post(&mq, &b.r);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 0, 0, 0x0fULL));
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 0, 0, 0xf3ULL), &b.r);
	/* Full 64 bits: the top bit alone tells tags apart. */
	set_msg(&u, 0, 0, 1ULL << 63, 0);
	deliver(&u);
	set_recv(&a, 0, 0, 0, ALL);
	CU_ASSERT_PTR_NULL(sib_mq_post(&mq, &a.r));
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, &a.r), 0);
	set_recv(&a, 0, 0, 1ULL << 63, ALL);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &a.r), &u.m);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static void test_wildcard_tag(void)
{
	struct req a;
	struct umsg u;

	FRESH();
	set_recv(&a, 5, 0, 0xabc, 0);   /* mask 0: any tag */
	sib_mq_post(&mq, &a.r);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 6, 0, 0xabc));
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 5, 0, 0x999), &a.r);
	set_msg(&u, 5, 0, ALL, 0);
	deliver(&u);
	set_recv(&a, 5, 0, 0, 0);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &a.r), &u.m);
}

static void test_wildcard_source(void)
{
	struct req a, b;
	struct umsg u, v;

	FRESH();
	set_recv(&a, SIB_ANY_SOURCE, 0, 9, ALL);
	sib_mq_post(&mq, &a.r);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 7, 0, 8));
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 7, 0, 9), &a.r);
	/* Unexpected: the one that arrived first, whichever its source. */
	set_msg(&u, 2, 0, 9, 1);
	set_msg(&v, 1, 0, 9, 2);
	deliver(&u);
	deliver(&v);
	set_recv(&b, SIB_ANY_SOURCE, 0, 9, ALL);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &b.r), &u.m);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &b.r), &v.m);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static void test_wildcard_both(void)
{
	struct req a;
	struct umsg u, v;

	FRESH();
	set_recv(&a, SIB_ANY_SOURCE, 4, 0, 0);
	sib_mq_post(&mq, &a.r);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 1, 5, 3));   /* other context */
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 1000, 4, 0x5555), &a.r);
	set_msg(&u, 3, 5, 1, 0);
	set_msg(&v, 8, 4, 2, 0);
	deliver(&u);
	deliver(&v);
	set_recv(&a, SIB_ANY_SOURCE, 4, 0, 0);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &a.r), &v.m);
}

static void test_contexts_never_cross(void)
{
	struct req a, b;
	struct umsg u;

	FRESH();
	set_recv(&a, 2, 1, 10, ALL);
	set_recv(&b, SIB_ANY_SOURCE, 1, 0, 0);
	sib_mq_post(&mq, &a.r);
	sib_mq_post(&mq, &b.r);
	set_msg(&u, 2, 2, 10, 0);
	CU_ASSERT_PTR_NULL(deliver(&u));
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 2);
	CU_ASSERT_PTR_NULL(sib_mq_probe(&mq, 2, 1, 10, ALL, 0));
	CU_ASSERT_PTR_NULL(sib_mq_probe(&mq, SIB_ANY_SOURCE, 1, 0, 0, 0));
	CU_ASSERT_PTR_EQUAL(sib_mq_probe(&mq, SIB_ANY_SOURCE, 2, 0, 0, 0), &u.m);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 2, 1, 10), &a.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 2, 1, 10), &b.r);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

/* ---- ordering ---- */

#define NOVT 1000

static void test_non_overtaking(void)
{
	static struct umsg u[NOVT];
	static struct req q[NOVT];

	FRESH();
	/* Messages first: receives take them in send order. */
	for (int i = 0; i < NOVT; i++) {
		set_msg(&u[i], 6, 0, 77, (uint64_t)i);
		CU_ASSERT_PTR_NULL(deliver(&u[i]));
	}
	for (int i = 0; i < NOVT; i++) {
		set_recv(&q[i], i % 2 ? SIB_ANY_SOURCE : 6, 0, 77, ALL);
		struct sib_mq_msg *m = sib_mq_post(&mq, &q[i].r);

		CU_ASSERT_FATAL(m != NULL);
		CU_ASSERT_EQUAL(m->len, (uint64_t)i);
	}
	/* Receives first: messages fill them in post order. */
	for (int i = 0; i < NOVT; i++) {
		set_recv(&q[i], i % 3 ? 6 : SIB_ANY_SOURCE, 0, 77, ALL);
		q[i].id = i;
		CU_ASSERT_PTR_NULL(sib_mq_post(&mq, &q[i].r));
	}
	for (int i = 0; i < NOVT; i++)
		CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 6, 0, 77), &q[i].r);
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 0);
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 0);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static void test_older_wildcard_wins(void)
{
	struct req w, s, other;

	FRESH();
	set_recv(&other, 9, 0, 1, ALL);      /* another source: not a candidate */
	set_recv(&w, SIB_ANY_SOURCE, 0, 1, ALL);
	set_recv(&s, 4, 0, 1, ALL);
	sib_mq_post(&mq, &other.r);
	sib_mq_post(&mq, &w.r);
	sib_mq_post(&mq, &s.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 4, 0, 1), &w.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 4, 0, 1), &s.r);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 4, 0, 1));
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 1);
}

static void test_older_specific_wins(void)
{
	struct req w, s, wno;

	FRESH();
	set_recv(&wno, SIB_ANY_SOURCE, 0, 2, ALL);  /* older, other tag: no */
	set_recv(&s, 4, 0, 1, ALL);
	set_recv(&w, SIB_ANY_SOURCE, 0, 1, ALL);
	sib_mq_post(&mq, &wno.r);
	sib_mq_post(&mq, &s.r);
	sib_mq_post(&mq, &w.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 4, 0, 1), &s.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 4, 0, 1), &w.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 4, 0, 2), &wno.r);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static void test_unexpected_order_across_sources(void)
{
	/* Arrival: A1 B1 A2 C1 B2 (A=1, B=2, C=3). */
	static const uint32_t srcs[5] = { 1, 2, 1, 3, 2 };
	struct umsg u[5];
	struct req q;

	FRESH();
	for (int i = 0; i < 5; i++) {
		set_msg(&u[i], srcs[i], 0, 0, (uint64_t)i);
		deliver(&u[i]);
	}
	/* A specific receive from B takes B1, though A1 is older. */
	set_recv(&q, 2, 0, 0, ALL);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &q.r), &u[1].m);
	/* Wildcards take the rest in arrival order: A1 A2 C1 B2. */
	static const int rest[4] = { 0, 2, 3, 4 };

	for (int i = 0; i < 4; i++) {
		set_recv(&q, SIB_ANY_SOURCE, 0, 0, 0);
		CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &q.r), &u[rest[i]].m);
	}
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 0);
}

/* ---- probe, cancel, failed sources ---- */

static void test_probe_and_mprobe(void)
{
	struct umsg u, v;
	struct req q;

	FRESH();
	set_msg(&u, 1, 0, 5, 11);
	set_msg(&v, 1, 0, 5, 22);
	deliver(&u);
	deliver(&v);
	/* A probe leaves the message where it is. */
	CU_ASSERT_PTR_EQUAL(sib_mq_probe(&mq, 1, 0, 5, ALL, 0), &u.m);
	CU_ASSERT_PTR_EQUAL(sib_mq_probe(&mq, SIB_ANY_SOURCE, 0, 0, 0, 0), &u.m);
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 2);
	CU_ASSERT_PTR_NULL(sib_mq_probe(&mq, 2, 0, 5, ALL, 0));
	CU_ASSERT_PTR_NULL(sib_mq_probe(&mq, 1, 0, 6, ALL, 1));
	/* A matched probe takes it: nobody else can receive it. */
	CU_ASSERT_PTR_EQUAL(sib_mq_probe(&mq, 1, 0, 5, ALL, 1), &u.m);
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 1);
	set_recv(&q, 1, 0, 5, ALL);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &q.r), &v.m);
	CU_ASSERT_PTR_NULL(sib_mq_probe(&mq, SIB_ANY_SOURCE, 0, 0, 0, 0));
	set_recv(&q, 1, 0, 5, ALL);
	CU_ASSERT_PTR_NULL(sib_mq_post(&mq, &q.r));   /* queued, nothing left */
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 1);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static void test_cancel(void)
{
	struct req a, b, c;
	struct umsg u;

	FRESH();
	/* Still queued: removed, and a message no longer finds it. */
	set_recv(&a, 1, 0, 3, ALL);
	sib_mq_post(&mq, &a.r);
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, &a.r), 0);
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 0);
	CU_ASSERT_PTR_NULL(sib_mq_arrive(&mq, 1, 0, 3));
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, &a.r), ENOENT);   /* twice */
	/* Already matched by an arrival. */
	set_recv(&b, SIB_ANY_SOURCE, 0, 3, ALL);
	sib_mq_post(&mq, &b.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 1, 0, 3), &b.r);
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, &b.r), ENOENT);
	/* Matched at post time: never queued. */
	set_msg(&u, 1, 0, 3, 0);
	deliver(&u);
	set_recv(&c, 1, 0, 3, ALL);
	CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &c.r), &u.m);
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, &c.r), ENOENT);
	/* Never posted (zeroed request). */
	set_recv(&c, 1, 0, 3, ALL);
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, &c.r), ENOENT);
	/* Cancelling the middle one of three keeps the others' order. */
	set_recv(&a, 1, 0, 3, ALL);
	set_recv(&b, 1, 0, 3, ALL);
	set_recv(&c, SIB_ANY_SOURCE, 0, 3, ALL);
	sib_mq_post(&mq, &a.r);
	sib_mq_post(&mq, &b.r);
	sib_mq_post(&mq, &c.r);
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, &b.r), 0);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 1, 0, 3), &a.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 1, 0, 3), &c.r);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static void test_failed_source(void)
{
	struct req s1, w, s2, s3;
	struct umsg u1, u2, u3;

	FRESH();
	set_recv(&s1, 4, 0, 1, ALL);
	set_recv(&w, SIB_ANY_SOURCE, 0, 0, 0);
	set_recv(&s2, 4, 1, 2, ALL);
	set_recv(&s3, 5, 0, 1, ALL);
	sib_mq_post(&mq, &s1.r);
	sib_mq_post(&mq, &w.r);
	sib_mq_post(&mq, &s2.r);
	sib_mq_post(&mq, &s3.r);
	set_msg(&u1, 4, 2, 9, 0);   /* ctx 2: nobody waits for it */
	set_msg(&u2, 5, 2, 9, 0);
	set_msg(&u3, 4, 3, 9, 0);
	deliver(&u1);
	deliver(&u2);
	deliver(&u3);
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 4);
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 3);

	/* Source 4 fails: its specific receives, oldest first, then none. */
	CU_ASSERT_PTR_EQUAL(sib_mq_take_recv_from(&mq, 4), &s1.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_take_recv_from(&mq, 4), &s2.r);
	CU_ASSERT_PTR_NULL(sib_mq_take_recv_from(&mq, 4));
	CU_ASSERT_PTR_EQUAL(sib_mq_take_msg_from(&mq, 4), &u1.m);
	CU_ASSERT_PTR_EQUAL(sib_mq_take_msg_from(&mq, 4), &u3.m);
	CU_ASSERT_PTR_NULL(sib_mq_take_msg_from(&mq, 4));
	CU_ASSERT_PTR_NULL(sib_mq_take_recv_from(&mq, SIB_ANY_SOURCE));
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 2);
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 1);
	/* The wildcard stays and still matches others; source 5 untouched. */
	CU_ASSERT_EQUAL(sib_mq_cancel(&mq, &s1.r), ENOENT);
	CU_ASSERT_PTR_EQUAL(sib_mq_probe(&mq, SIB_ANY_SOURCE, 2, 0, 0, 0), &u2.m);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 5, 0, 1), &w.r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, 5, 0, 1), &s3.r);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static void test_counts(void)
{
	struct req q[10];
	struct umsg u[10];

	FRESH();
	for (int i = 0; i < 10; i++) {
		set_recv(&q[i], i % 2 ? SIB_ANY_SOURCE : (uint32_t)i, 1, (uint64_t)i, ALL);
		sib_mq_post(&mq, &q[i].r);
		CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), (size_t)i + 1);
	}
	for (int i = 0; i < 10; i++) {
		set_msg(&u[i], (uint32_t)i, 2, 0, 0);
		deliver(&u[i]);
		CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), (size_t)i + 1);
	}
	sib_mq_cancel(&mq, &q[3].r);
	sib_mq_probe(&mq, 7, 2, 0, 0, 1);
	sib_mq_probe(&mq, 8, 2, 0, 0, 0);
	sib_mq_take_recv_from(&mq, 0);
	sib_mq_take_msg_from(&mq, 0);
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 8);
	CU_ASSERT_EQUAL(sib_mq_unexpected_count(&mq), 8);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

/* ---- the bucket table ---- */

#define NSRC 1500

/* Entries queued while the table grows keep their order; sources past the
 * table's cap share buckets without ever matching each other's entries. */
static void test_many_sources(void)
{
	static struct req q[2 * NSRC];
	static struct umsg u[2 * NSRC];
	/* Beyond the cap: 7, 7 + cap and 7 + 5 * cap share one bucket. */
	static const uint32_t far[3] = { 7, 7 + SIB_MQ_MAX_BUCKETS,
					 7 + 5 * SIB_MQ_MAX_BUCKETS };

	FRESH();
	/* Two receives per source, posted across growths of the table. */
	for (int i = 0; i < 2 * NSRC; i++) {
		set_recv(&q[i], (uint32_t)(i % NSRC), 0, (uint64_t)(i / NSRC), 0);
		sib_mq_post(&mq, &q[i].r);
	}
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
	for (int s = NSRC - 1; s >= 0; s--) {
		CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, (uint32_t)s, 0, 99), &q[s].r);
		CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, (uint32_t)s, 0, 99),
				    &q[s + NSRC].r);
	}
	/* Unexpected messages from colliding sources, interleaved. */
	for (int i = 0; i < 30; i++) {
		set_msg(&u[i], far[i % 3], 0, 0, (uint64_t)i);
		deliver(&u[i]);
	}
	CU_ASSERT_EQUAL(mq.nbkt, SIB_MQ_MAX_BUCKETS);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
	for (int k = 2; k >= 0; k--)
		for (int i = k; i < 30; i += 3) {
			set_recv(&q[0], far[k], 0, 0, 0);
			CU_ASSERT_PTR_EQUAL(sib_mq_post(&mq, &q[0].r), &u[i].m);
		}
	/* Receives from colliding sources: each goes to its own source. */
	for (int i = 0; i < 3; i++) {
		set_recv(&q[i], far[i], 0, 0, 0);
		sib_mq_post(&mq, &q[i].r);
	}
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, far[2], 0, 0), &q[2].r);
	CU_ASSERT_PTR_NULL(sib_mq_take_recv_from(&mq, far[2]));
	CU_ASSERT_PTR_EQUAL(sib_mq_take_recv_from(&mq, far[1]), &q[1].r);
	CU_ASSERT_PTR_EQUAL(sib_mq_arrive(&mq, far[0], 0, 0), &q[0].r);
	CU_ASSERT_EQUAL(sib_mq_posted_count(&mq), 0);
	CU_ASSERT_EQUAL(sib_mq_verify(&mq), 0);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("sib_match", match_suite_init, match_suite_clean);

	if (!s)
		return -1;
	if (!CU_add_test(s, "empty engine, bad input", test_empty) ||
	    !CU_add_test(s, "exact match", test_exact_match) ||
	    !CU_add_test(s, "tag mask", test_tag_mask) ||
	    !CU_add_test(s, "wildcard tag", test_wildcard_tag) ||
	    !CU_add_test(s, "wildcard source", test_wildcard_source) ||
	    !CU_add_test(s, "wildcard source and tag", test_wildcard_both) ||
	    !CU_add_test(s, "contexts never cross", test_contexts_never_cross) ||
	    !CU_add_test(s, "non-overtaking per source", test_non_overtaking) ||
	    !CU_add_test(s, "older wildcard beats specific", test_older_wildcard_wins) ||
	    !CU_add_test(s, "older specific beats wildcard", test_older_specific_wins) ||
	    !CU_add_test(s, "unexpected order across sources",
			 test_unexpected_order_across_sources) ||
	    !CU_add_test(s, "probe leaves, mprobe takes", test_probe_and_mprobe) ||
	    !CU_add_test(s, "cancel", test_cancel) ||
	    !CU_add_test(s, "failed source", test_failed_source) ||
	    !CU_add_test(s, "counts", test_counts) ||
	    !CU_add_test(s, "many sources, shared buckets", test_many_sources))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
