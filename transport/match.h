/*
 * The tag-matching engine of libsib: one per worker, it pairs arriving
 * messages with posted receives by MPI's rules (docs/matching.md).
 *
 * The engine owns no memory on the hot path: the runtime embeds a
 * struct sib_mq_recv in each receive request and a struct sib_mq_msg in
 * each unexpected-message descriptor, and the engine only links and
 * unlinks them. The one table it allocates (per-source buckets) grows
 * only when a source beyond its size first queues something; if that
 * allocation fails the engine keeps working with the smaller table
 * (sources share buckets: slower, never wrong).
 *
 * Not thread-safe: the worker serialises every call (its lock in
 * multi-thread mode).
 */
#ifndef SIB_MATCH_H
#define SIB_MATCH_H

#include <stddef.h>
#include <stdint.h>

/* Receive from any source. Not a valid source index of a message. */
#define SIB_ANY_SOURCE UINT32_MAX

/*
 * Tags are 64-bit; a receive matches a message when
 * (msg_tag & mask) == (tag & mask). mask 0 accepts any tag.
 */

/* Intrusive doubly-linked list node. Lists are circular around a head
 * node owned by the engine; a node not in any list has next == NULL. */
struct sib_mq_link {
	struct sib_mq_link *prev, *next;
};

/* A posted receive, embedded in the runtime's request. The runtime fills
 * tag, mask, src and ctx before sib_mq_post(); the engine owns link and
 * order. */
struct sib_mq_recv {
	struct sib_mq_link link;  /* in its source's bucket, or the wildcard list */
	uint64_t tag, mask;
	uint32_t src;             /* source index or SIB_ANY_SOURCE */
	uint32_t ctx;             /* context id (communicator): must be equal */
	uint64_t order;           /* set by the engine: post order */
};

/* An arrived message nobody was waiting for, embedded in the runtime's
 * unexpected descriptor. The runtime fills tag, src, ctx and len before
 * sib_mq_add_unexpected(); the engine owns the two links. */
struct sib_mq_msg {
	struct sib_mq_link link;      /* in the global arrival-ordered list */
	struct sib_mq_link src_link;  /* in its source's bucket */
	uint64_t tag;
	uint32_t src, ctx;
	uint64_t len;                 /* payload length (for probe's status) */
};

/* The entries of the sources that hash to one bucket, each list in its
 * own order (post order, arrival order). With dense source indices
 * below the table size a bucket holds exactly one source. */
struct sib_mq_bucket {
	struct sib_mq_link posted;   /* source-specific receives */
	struct sib_mq_link unexp;    /* unexpected messages (src_link) */
};

/* Table sizes: the initial one, and the cap beyond which sources share
 * buckets rather than grow memory (2^16 buckets = 2 MiB). */
#define SIB_MQ_INIT_BUCKETS 64u
#define SIB_MQ_MAX_BUCKETS  (1u << 16)

struct sib_mq {
	struct sib_mq_bucket *bkt;   /* nbkt buckets; source s lives in s & (nbkt-1) */
	uint32_t nbkt;               /* power of two */
	struct sib_mq_link wild;     /* SIB_ANY_SOURCE receives, post order */
	struct sib_mq_link unexp;    /* every unexpected message, arrival order */
	uint64_t next_order;         /* post-order stamp of the next receive */
	size_t nposted, nunexp;
};

/* 0, or ENOMEM (nothing to release then). */
int sib_mq_init(struct sib_mq *mq);
/* Releases the engine's table. Entries still queued belong to the caller
 * and are not touched (they may already be freed); none of them may be
 * passed to the engine afterwards, sib_mq_cancel() included. */
void sib_mq_fini(struct sib_mq *mq);

/* A message arrived (per source in send order). Returns the oldest posted
 * receive that matches, removed from the posted queue, or NULL: then the
 * caller queues the message with sib_mq_add_unexpected(). */
struct sib_mq_recv *sib_mq_arrive(struct sib_mq *mq, uint32_t src, uint32_t ctx,
				  uint64_t tag);
void sib_mq_add_unexpected(struct sib_mq *mq, struct sib_mq_msg *m);

/* Post a receive: returns the oldest matching unexpected message, removed
 * from the unexpected queue (r is then NOT queued), or NULL (r is appended
 * to the posted queue). */
struct sib_mq_msg *sib_mq_post(struct sib_mq *mq, struct sib_mq_recv *r);

/* The oldest matching unexpected message; remove != 0 takes it out of the
 * queue (MPI_Mprobe), 0 leaves it (MPI_Iprobe). NULL if none. */
struct sib_mq_msg *sib_mq_probe(struct sib_mq *mq, uint32_t src, uint32_t ctx,
				uint64_t tag, uint64_t mask, int remove);

/* 0 if r was still queued (now removed), ENOENT if it is not in the posted
 * queue (already matched, cancelled, or never queued), EINVAL on NULL. */
int sib_mq_cancel(struct sib_mq *mq, struct sib_mq_recv *r);

/* A source failed: one per call, the posted receives naming that source
 * exactly (wildcards stay), and the unexpected messages from it, each
 * removed; NULL when none is left. Oldest first. */
struct sib_mq_recv *sib_mq_take_recv_from(struct sib_mq *mq, uint32_t src);
struct sib_mq_msg *sib_mq_take_msg_from(struct sib_mq *mq, uint32_t src);

/*
 * Inline front doors of sib_mq_arrive and sib_mq_post for the common
 * cases (one call each per message: the call and its prologue were a
 * third of their cost), falling back to the full functions:
 *  - arrive: no receive of the source's bucket queued, and the oldest
 *    wildcard receive accepts the message; or no wildcard receive
 *    queued and the bucket's oldest is the source's and accepts it;
 *  - post: no unexpected message queued, a wildcard receive, or a
 *    source whose bucket exists.
 * Same results as the full functions (test_sib_match_model runs both
 * against its reference model).
 */
static inline void sib_mq_unlink_(struct sib_mq_link *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

static inline void sib_mq_append_(struct sib_mq_link *h, struct sib_mq_link *n)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}

static inline struct sib_mq_recv *sib_mq_arrive_fast(struct sib_mq *mq,
						     uint32_t src, uint32_t ctx,
						     uint64_t tag)
{
	struct sib_mq_link *bl = &mq->bkt[src & (mq->nbkt - 1)].posted, *l;
	struct sib_mq_recv *r;

	if (bl->next == bl)
		l = mq->wild.next;   /* the wildcard list's oldest, or none */
	else if (mq->wild.next == &mq->wild)
		l = bl->next;
	else
		return sib_mq_arrive(mq, src, ctx, tag);
	if (l == &mq->wild || l == bl)
		return NULL;         /* nothing posted that could take it */
	r = (struct sib_mq_recv *)((char *)l - offsetof(struct sib_mq_recv, link));
	if ((r->src != src && r->src != SIB_ANY_SOURCE) || r->ctx != ctx ||
	    ((tag ^ r->tag) & r->mask))
		return sib_mq_arrive(mq, src, ctx, tag);
	sib_mq_unlink_(l);
	mq->nposted--;
	return r;
}

static inline struct sib_mq_msg *sib_mq_post_fast(struct sib_mq *mq,
						  struct sib_mq_recv *r)
{
	if (mq->nunexp || (r->src != SIB_ANY_SOURCE && r->src >= mq->nbkt))
		return sib_mq_post(mq, r);
	r->order = mq->next_order++;
	sib_mq_append_(r->src == SIB_ANY_SOURCE ? &mq->wild :
		       &mq->bkt[r->src & (mq->nbkt - 1)].posted, &r->link);
	mq->nposted++;
	return NULL;
}

size_t sib_mq_posted_count(const struct sib_mq *mq);
size_t sib_mq_unexpected_count(const struct sib_mq *mq);

/* Walks every list and checks the engine's invariants (links consistent,
 * each entry in its source's bucket, post order increasing, counts).
 * 0 if sound, EFAULT otherwise. O(n): for tests and debug builds. */
int sib_mq_verify(const struct sib_mq *mq);

#endif
