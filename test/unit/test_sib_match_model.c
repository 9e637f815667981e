/*
 * The tag-matching engine of libsib (transport/match.c) against a naive
 * reference model written here (plain arrays walked front to back, MPI's
 * rules read literally), over randomized runs of posts, arrivals, probes
 * and cancels (every other post and arrival through the inline front
 * doors, sib_mq_post_fast / sib_mq_arrive_fast). test_sib_match.c has the
 * rules one by one.
 */
#include "match.h"
#include "cu_run.h"
#include "match_suite.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- randomized, against a reference model ---- */

/*
 * The model: the posted receives in post order and the unexpected
 * messages in arrival order, in plain arrays, each operation a linear
 * walk applying MPI's rules as written.
 */
#define POOL 400

struct model {
	struct req *posted[POOL];
	int nposted;
	struct umsg *unexp[POOL];
	int nunexp;
};

static bool m_recv_takes(const struct sib_mq_recv *r, uint32_t src, uint32_t ctx,
			 uint64_t tag)
{
	return (r->src == SIB_ANY_SOURCE || r->src == src) && r->ctx == ctx &&
	       (tag & r->mask) == (r->tag & r->mask);
}

static struct req *m_arrive(struct model *md, uint32_t src, uint32_t ctx,
			    uint64_t tag)
{
	for (int i = 0; i < md->nposted; i++) {
		struct req *q = md->posted[i];

		if (m_recv_takes(&q->r, src, ctx, tag)) {
			memmove(&md->posted[i], &md->posted[i + 1],
				(size_t)(md->nposted - i - 1) * sizeof(q));
			md->nposted--;
			return q;
		}
	}
	return NULL;
}

static struct umsg *m_find(struct model *md, uint32_t src, uint32_t ctx,
			   uint64_t tag, uint64_t mask, bool remove)
{
	for (int i = 0; i < md->nunexp; i++) {
		struct umsg *u = md->unexp[i];
		struct sib_mq_recv r = { .src = src, .ctx = ctx, .tag = tag,
					 .mask = mask };

		if (m_recv_takes(&r, u->m.src, u->m.ctx, u->m.tag)) {
			if (remove) {
				memmove(&md->unexp[i], &md->unexp[i + 1],
					(size_t)(md->nunexp - i - 1) * sizeof(u));
				md->nunexp--;
			}
			return u;
		}
	}
	return NULL;
}

static int m_index_posted(const struct model *md, const struct req *q)
{
	for (int i = 0; i < md->nposted; i++)
		if (md->posted[i] == q)
			return i;
	return -1;
}

static void m_remove_posted(struct model *md, int i)
{
	memmove(&md->posted[i], &md->posted[i + 1],
		(size_t)(md->nposted - i - 1) * sizeof(md->posted[0]));
	md->nposted--;
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* xorshift64*: fixed seed, the same run every time. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static unsigned rnd_below(unsigned n)
{
	return (unsigned)(rnd() % n);
}

/* Sources: few and dense, with far ones (table growth, shared buckets)
 * allowed only after a while so that growth happens with entries queued. */
static uint32_t rnd_src(bool far_ok)
{
	static const uint32_t near[] = { 0, 1, 2, 3, 5, 63, 64 };
	static const uint32_t far[] = { 1 + SIB_MQ_MAX_BUCKETS, 200000,
					2 + 3 * SIB_MQ_MAX_BUCKETS, 1000 };

	if (far_ok && rnd_below(4) == 0)
		return far[rnd_below(4)];
	return near[rnd_below(7)];
}

static uint64_t rnd_tag(void)
{
	uint64_t t = rnd_below(4);

	if (rnd_below(8) == 0)
		t |= rnd() & 0xffff000000000000ULL;
	return t;
}

static uint64_t rnd_mask(void)
{
	static const uint64_t masks[] = { ALL, ALL, ALL, 0, 0x3, 0x1,
					  0xffff000000000000ULL, ~0x2ULL };

	return masks[rnd_below(8)];
}

static struct req rpool[POOL];
static struct umsg upool[POOL];
static bool rbusy[POOL], ubusy[POOL];   /* queued or held by the model */

static int pick_free(const bool *busy)
{
	int start = (int)rnd_below(POOL);

	for (int k = 0; k < POOL; k++) {
		int i = (start + k) % POOL;

		if (!busy[i])
			return i;
	}
	return -1;
}

/* Run nops random operations; returns the first step that diverged, or -1. */
static long random_run(uint64_t seed, long nops, bool far_sources)
{
	static struct model md;

	memset(&md, 0, sizeof(md));
	memset(rpool, 0, sizeof(rpool));
	memset(upool, 0, sizeof(upool));
	memset(rbusy, 0, sizeof(rbusy));
	memset(ubusy, 0, sizeof(ubusy));
	for (int i = 0; i < POOL; i++) {
		rpool[i].id = i;
		upool[i].id = i;
	}
	rng_state = seed;
	sib_mq_fini(&mq);
	if (sib_mq_init(&mq))
		return 0;

	for (long step = 0; step < nops; step++) {
		bool far_ok = far_sources && step > nops / 3;
		unsigned op = rnd_below(100);
		uint32_t src = rnd_src(far_ok), ctx = rnd_below(3);
		uint64_t tag = rnd_tag(), mask = rnd_mask();

		if (op < 30) {                        /* post a receive */
			int i = pick_free(rbusy);

			if (i < 0)
				continue;
			struct req *q = &rpool[i];

			q->r.src = rnd_below(4) == 0 ? SIB_ANY_SOURCE : src;
			q->r.ctx = ctx;
			q->r.tag = tag;
			q->r.mask = mask;
			struct umsg *want = m_find(&md, q->r.src, ctx, tag, mask, true);
			/* every other step through the inline front door */
			struct sib_mq_msg *got = (step & 1) ?
				sib_mq_post_fast(&mq, &q->r) : sib_mq_post(&mq, &q->r);

			if (got != (want ? &want->m : NULL))
				return step;
			if (want) {
				ubusy[want->id] = false;
			} else {
				md.posted[md.nposted++] = q;
				rbusy[i] = true;
			}
		} else if (op < 62) {                 /* a message arrives */
			int i = pick_free(ubusy);

			if (i < 0)
				continue;
			struct req *want = m_arrive(&md, src, ctx, tag);
			struct sib_mq_recv *got = (step & 1) ?
				sib_mq_arrive_fast(&mq, src, ctx, tag) :
				sib_mq_arrive(&mq, src, ctx, tag);

			if (got != (want ? &want->r : NULL))
				return step;
			if (want) {
				rbusy[want->id] = false;
				continue;
			}
			struct umsg *u = &upool[i];

			u->m.src = src;
			u->m.ctx = ctx;
			u->m.tag = tag;
			u->m.len = (uint64_t)step;
			sib_mq_add_unexpected(&mq, &u->m);
			md.unexp[md.nunexp++] = u;
			ubusy[i] = true;
		} else if (op < 75) {                 /* probe or matched probe */
			bool remove = rnd_below(2);
			uint32_t psrc = rnd_below(3) == 0 ? SIB_ANY_SOURCE : src;
			struct umsg *want = m_find(&md, psrc, ctx, tag, mask, remove);
			struct sib_mq_msg *got =
				sib_mq_probe(&mq, psrc, ctx, tag, mask, remove);

			if (got != (want ? &want->m : NULL))
				return step;
			if (want && remove)
				ubusy[want->id] = false;
		} else if (op < 90) {                 /* cancel any receive */
			int i = (int)rnd_below(POOL);
			int at = m_index_posted(&md, &rpool[i]);
			int got = sib_mq_cancel(&mq, &rpool[i].r);

			if (got != (at >= 0 ? 0 : ENOENT))
				return step;
			if (at >= 0) {
				m_remove_posted(&md, at);
				rbusy[i] = false;
			}
		} else if (op < 95) {                 /* a source fails: receives */
			for (;;) {
				struct req *want = NULL;

				for (int k = 0; k < md.nposted && !want; k++)
					if (md.posted[k]->r.src == src) {
						want = md.posted[k];
						m_remove_posted(&md, k);
					}
				struct sib_mq_recv *got = sib_mq_take_recv_from(&mq, src);

				if (got != (want ? &want->r : NULL))
					return step;
				if (!want)
					break;
				rbusy[want->id] = false;
				if (rnd_below(3) == 0)
					break;   /* sometimes leave some */
			}
		} else {                              /* a source fails: messages */
			for (;;) {
				struct umsg *want = NULL;

				for (int k = 0; k < md.nunexp && !want; k++)
					if (md.unexp[k]->m.src == src) {
						want = md.unexp[k];
						memmove(&md.unexp[k], &md.unexp[k + 1],
							(size_t)(md.nunexp - k - 1) *
								sizeof(want));
						md.nunexp--;
					}
				struct sib_mq_msg *got = sib_mq_take_msg_from(&mq, src);

				if (got != (want ? &want->m : NULL))
					return step;
				if (!want)
					break;
				ubusy[want->id] = false;
				if (rnd_below(3) == 0)
					break;
			}
		}
		if (sib_mq_posted_count(&mq) != (size_t)md.nposted ||
		    sib_mq_unexpected_count(&mq) != (size_t)md.nunexp)
			return step;
		if (step % 997 == 0 && sib_mq_verify(&mq))
			return step;
	}
	return sib_mq_verify(&mq) ? nops : -1;
}

static void test_random_vs_model(void)
{
	static const uint64_t seeds[] = { 0x5eed0001, 0x5eed0002, 0x5eed0003,
					  0x5eed0004 };

	for (unsigned k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
		long bad = random_run(seeds[k], 25000, k % 2 == 1);

		if (bad >= 0)
			fprintf(stderr, "\nseed %#llx diverged at step %ld\n",
				(unsigned long long)seeds[k], bad);
		CU_ASSERT_EQUAL(bad, -1);
	}
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("sib_match_model", match_suite_init, match_suite_clean);

	if (!s)
		return -1;
	if (!CU_add_test(s, "random operations vs reference model",
			 test_random_vs_model))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
