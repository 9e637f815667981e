/*
 * The tag-matching engine: posted receives and unexpected messages of one
 * worker, matched by MPI's rules (docs/matching.md has the full account).
 *
 * Layout, and why:
 *  - Source-specific receives sit in their source's bucket, wildcard-source
 *    receives in one list of their own. An arriving message looks at its
 *    source's bucket and the wildcard list only, so it never walks the
 *    receives other sources are owed. Each receive carries a post-order
 *    stamp: the oldest candidate of the two lists wins, which is MPI's
 *    "oldest posted receive" across specific and wildcard receives.
 *  - Unexpected messages sit in two lists at once: the global arrival list
 *    (what a wildcard-source receive or probe walks) and their source's
 *    bucket (what a source-specific one walks). A source's arrival order
 *    is its send order (the runtime delivers per source in order), so the
 *    first match in either list is the oldest one.
 *  - A bucket is found by s & (nbkt - 1): the runtime's sources are dense
 *    indices, so with the table at least as large as the highest index
 *    each source has a bucket of its own and the lookup is one mask. The
 *    table doubles (up to SIB_MQ_MAX_BUCKETS) when a larger source first
 *    queues an entry; beyond that sources share buckets and scans skip the
 *    other sources' entries, which costs time, not correctness.
 * In the common case (one posted receive per source, messages in order,
 * no wildcard outstanding) every call touches one list head and one entry.
 */
#include "match.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#define mq_entry(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* ---- intrusive circular lists ---- */

static void list_init(struct sib_mq_link *h)
{
	h->prev = h->next = h;
}

static bool list_empty(const struct sib_mq_link *h)
{
	return h->next == h;
}

static void list_append(struct sib_mq_link *h, struct sib_mq_link *n)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}

/* Unlinked nodes read next == NULL: that is how sib_mq_cancel() tells a
 * queued receive from one already matched. */
static void list_unlink(struct sib_mq_link *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

/* ---- matching predicates ---- */

static inline bool tag_match(uint64_t msg_tag, uint64_t tag, uint64_t mask)
{
	return ((msg_tag ^ tag) & mask) == 0;
}

static inline bool recv_accepts(const struct sib_mq_recv *r, uint32_t ctx,
				uint64_t tag)
{
	return r->ctx == ctx && tag_match(tag, r->tag, r->mask);
}

static inline bool msg_fits(const struct sib_mq_msg *m, uint32_t ctx,
			    uint64_t tag, uint64_t mask)
{
	return m->ctx == ctx && tag_match(m->tag, tag, mask);
}

/* ---- the bucket table ---- */

static inline struct sib_mq_bucket *bucket_of(const struct sib_mq *mq,
					      uint32_t src)
{
	return &mq->bkt[src & (mq->nbkt - 1)];
}

static struct sib_mq_bucket *table_new(uint32_t n)
{
	struct sib_mq_bucket *t = malloc((size_t)n * sizeof(*t));

	if (!t)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		list_init(&t[i].posted);
		list_init(&t[i].unexp);
	}
	return t;
}

/*
 * Give src a bucket of its own if the table can still grow. The new size
 * is a multiple of the old, so each new bucket draws its entries from
 * exactly one old bucket; moving that bucket front to back keeps every
 * list's order (post order, arrival order) intact. A failed allocation
 * leaves the old table: sources then share buckets.
 */
static void __attribute__((noinline))
table_grow(struct sib_mq *mq, uint32_t src)
{
	uint32_t n = mq->nbkt;

	if (n >= SIB_MQ_MAX_BUCKETS || src == SIB_ANY_SOURCE)
		return;
	while (n <= src && n < SIB_MQ_MAX_BUCKETS)
		n <<= 1;
	struct sib_mq_bucket *t = table_new(n);

	if (!t)
		return;
	for (uint32_t i = 0; i < mq->nbkt; i++) {
		struct sib_mq_bucket *old = &mq->bkt[i];

		while (!list_empty(&old->posted)) {
			struct sib_mq_link *l = old->posted.next;
			uint32_t s = mq_entry(l, struct sib_mq_recv, link)->src;

			list_unlink(l);
			list_append(&t[s & (n - 1)].posted, l);
		}
		while (!list_empty(&old->unexp)) {
			struct sib_mq_link *l = old->unexp.next;
			uint32_t s = mq_entry(l, struct sib_mq_msg, src_link)->src;

			list_unlink(l);
			list_append(&t[s & (n - 1)].unexp, l);
		}
	}
	free(mq->bkt);
	mq->bkt = t;
	mq->nbkt = n;
}

/* Called before queueing an entry of src: one compare on the hot path,
 * the growth itself out of line. */
static inline void table_fit(struct sib_mq *mq, uint32_t src)
{
	if (__builtin_expect(src >= mq->nbkt, 0))
		table_grow(mq, src);
}

int sib_mq_init(struct sib_mq *mq)
{
	if (!mq)
		return EINVAL;
	mq->bkt = table_new(SIB_MQ_INIT_BUCKETS);
	if (!mq->bkt)
		return ENOMEM;
	mq->nbkt = SIB_MQ_INIT_BUCKETS;
	list_init(&mq->wild);
	list_init(&mq->unexp);
	mq->next_order = 0;
	mq->nposted = mq->nunexp = 0;
	return 0;
}

/*
 * Entries still queued are not touched: the runtime may free its request
 * and descriptor pools before or after this call, so the engine must not
 * write into them here.
 */
void sib_mq_fini(struct sib_mq *mq)
{
	if (!mq)
		return;
	free(mq->bkt);
	mq->bkt = NULL;
	mq->nbkt = 0;
	mq->nposted = mq->nunexp = 0;
}

/* ---- arriving messages against posted receives ---- */

struct sib_mq_recv *sib_mq_arrive(struct sib_mq *mq, uint32_t src, uint32_t ctx,
				  uint64_t tag)
{
	struct sib_mq_recv *best = NULL;
	struct sib_mq_bucket *b;
	struct sib_mq_link *l;

	if (!mq || !mq->bkt)
		return NULL;
	/* The oldest matching receive naming src (the bucket holds other
	 * sources' receives too only once the table is at its cap, or could
	 * not grow). */
	b = bucket_of(mq, src);
	for (l = b->posted.next; l != &b->posted; l = l->next) {
		struct sib_mq_recv *r = mq_entry(l, struct sib_mq_recv, link);

		if (r->src == src && recv_accepts(r, ctx, tag)) {
			best = r;
			break;
		}
	}
	/* A wildcard receive wins only if posted earlier: the list is in post
	 * order, so the walk stops at the first one younger than best. */
	for (l = mq->wild.next; l != &mq->wild; l = l->next) {
		struct sib_mq_recv *r = mq_entry(l, struct sib_mq_recv, link);

		if (best && r->order > best->order)
			break;
		if (recv_accepts(r, ctx, tag)) {
			best = r;
			break;
		}
	}
	if (best) {
		list_unlink(&best->link);
		mq->nposted--;
	}
	return best;
}

void sib_mq_add_unexpected(struct sib_mq *mq, struct sib_mq_msg *m)
{
	if (!mq || !mq->bkt || !m)
		return;
	table_fit(mq, m->src);
	list_append(&mq->unexp, &m->link);
	list_append(&bucket_of(mq, m->src)->unexp, &m->src_link);
	mq->nunexp++;
}

/* ---- new receives and probes against unexpected messages ---- */

/* The oldest unexpected message that a receive (src, ctx, tag, mask)
 * accepts, left in place. */
static inline struct sib_mq_msg *find_msg(const struct sib_mq *mq, uint32_t src,
				   uint32_t ctx, uint64_t tag, uint64_t mask)
{
	const struct sib_mq_link *h, *l;

	if (src == SIB_ANY_SOURCE) {
		h = &mq->unexp;
		for (l = h->next; l != h; l = l->next) {
			struct sib_mq_msg *m = mq_entry(l, struct sib_mq_msg, link);

			if (msg_fits(m, ctx, tag, mask))
				return m;
		}
		return NULL;
	}
	h = &bucket_of(mq, src)->unexp;
	for (l = h->next; l != h; l = l->next) {
		struct sib_mq_msg *m = mq_entry(l, struct sib_mq_msg, src_link);

		if (m->src == src && msg_fits(m, ctx, tag, mask))
			return m;
	}
	return NULL;
}

static void msg_remove(struct sib_mq *mq, struct sib_mq_msg *m)
{
	list_unlink(&m->link);
	list_unlink(&m->src_link);
	mq->nunexp--;
}

struct sib_mq_msg *sib_mq_post(struct sib_mq *mq, struct sib_mq_recv *r)
{
	struct sib_mq_msg *m;

	if (!mq || !mq->bkt || !r)
		return NULL;
	m = find_msg(mq, r->src, r->ctx, r->tag, r->mask);
	if (m) {
		msg_remove(mq, m);
		r->link.prev = r->link.next = NULL;   /* not queued: cancel says ENOENT */
		return m;
	}
	r->order = mq->next_order++;
	if (r->src == SIB_ANY_SOURCE) {
		list_append(&mq->wild, &r->link);
	} else {
		table_fit(mq, r->src);
		list_append(&bucket_of(mq, r->src)->posted, &r->link);
	}
	mq->nposted++;
	return NULL;
}

struct sib_mq_msg *sib_mq_probe(struct sib_mq *mq, uint32_t src, uint32_t ctx,
				uint64_t tag, uint64_t mask, int remove)
{
	struct sib_mq_msg *m;

	if (!mq || !mq->bkt)
		return NULL;
	m = find_msg(mq, src, ctx, tag, mask);
	if (m && remove)
		msg_remove(mq, m);
	return m;
}

/* ---- cancel and failed sources ---- */

int sib_mq_cancel(struct sib_mq *mq, struct sib_mq_recv *r)
{
	if (!mq || !r)
		return EINVAL;
	if (!r->link.next)
		return ENOENT;
	list_unlink(&r->link);
	mq->nposted--;
	return 0;
}

struct sib_mq_recv *sib_mq_take_recv_from(struct sib_mq *mq, uint32_t src)
{
	struct sib_mq_bucket *b;
	struct sib_mq_link *l;

	if (!mq || !mq->bkt || src == SIB_ANY_SOURCE)
		return NULL;
	b = bucket_of(mq, src);
	for (l = b->posted.next; l != &b->posted; l = l->next) {
		struct sib_mq_recv *r = mq_entry(l, struct sib_mq_recv, link);

		if (r->src == src) {
			list_unlink(l);
			mq->nposted--;
			return r;
		}
	}
	return NULL;
}

struct sib_mq_msg *sib_mq_take_msg_from(struct sib_mq *mq, uint32_t src)
{
	struct sib_mq_bucket *b;
	struct sib_mq_link *l;

	if (!mq || !mq->bkt || src == SIB_ANY_SOURCE)
		return NULL;
	b = bucket_of(mq, src);
	for (l = b->unexp.next; l != &b->unexp; l = l->next) {
		struct sib_mq_msg *m = mq_entry(l, struct sib_mq_msg, src_link);

		if (m->src == src) {
			msg_remove(mq, m);
			return m;
		}
	}
	return NULL;
}

size_t sib_mq_posted_count(const struct sib_mq *mq)
{
	return mq ? mq->nposted : 0;
}

size_t sib_mq_unexpected_count(const struct sib_mq *mq)
{
	return mq ? mq->nunexp : 0;
}

/* ---- self-check ---- */

/* Walks a list checking both directions; returns its length or -1. */
static long list_check(const struct sib_mq_link *h)
{
	const struct sib_mq_link *l;
	long n = 0;

	for (l = h->next; l != h; l = l->next) {
		if (!l || !l->next || l->next->prev != l || l->prev->next != l)
			return -1;
		n++;
	}
	return h->prev->next == h ? n : -1;
}

/* Post order must increase along a list of receives. */
static bool recv_list_ordered(const struct sib_mq_link *h, uint64_t limit)
{
	uint64_t last = 0;
	bool first = true;

	for (const struct sib_mq_link *l = h->next; l != h; l = l->next) {
		const struct sib_mq_recv *r = mq_entry(l, struct sib_mq_recv, link);

		if ((!first && r->order <= last) || r->order >= limit)
			return false;
		last = r->order;
		first = false;
	}
	return true;
}

int sib_mq_verify(const struct sib_mq *mq)
{
	long n, posted = 0, unexp = 0;

	if (!mq || !mq->bkt || !mq->nbkt || (mq->nbkt & (mq->nbkt - 1)))
		return EFAULT;
	n = list_check(&mq->wild);
	if (n < 0 || !recv_list_ordered(&mq->wild, mq->next_order))
		return EFAULT;
	posted += n;
	for (const struct sib_mq_link *l = mq->wild.next; l != &mq->wild; l = l->next)
		if (mq_entry(l, struct sib_mq_recv, link)->src != SIB_ANY_SOURCE)
			return EFAULT;
	for (uint32_t i = 0; i < mq->nbkt; i++) {
		const struct sib_mq_bucket *b = &mq->bkt[i];
		long p = list_check(&b->posted), u = list_check(&b->unexp);

		if (p < 0 || u < 0 || !recv_list_ordered(&b->posted, mq->next_order))
			return EFAULT;
		for (const struct sib_mq_link *l = b->posted.next; l != &b->posted;
		     l = l->next) {
			uint32_t s = mq_entry(l, struct sib_mq_recv, link)->src;

			if (s == SIB_ANY_SOURCE || bucket_of(mq, s) != b)
				return EFAULT;
		}
		for (const struct sib_mq_link *l = b->unexp.next; l != &b->unexp;
		     l = l->next)
			if (bucket_of(mq, mq_entry(l, struct sib_mq_msg, src_link)->src) != b)
				return EFAULT;
		posted += p;
		unexp += u;
	}
	n = list_check(&mq->unexp);
	if (n != unexp || (size_t)posted != mq->nposted || (size_t)unexp != mq->nunexp)
		return EFAULT;
	return 0;
}
