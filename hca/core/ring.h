/*
 * Bounded multi-producer multi-consumer ring in shared memory: the shape
 * of every receive queue, SRQ and CQ of the device.
 *
 * Producers and consumers may be in different processes, and any of them
 * may be killed at any instruction. Each slot starts with a state word
 * that says which position of the ring the slot holds, what state it is
 * in, and who claimed it:
 *
 *     word = pos (47 bits) << 17 | who (14 bits) << 3 | tag (3 bits)
 *
 *   EMPTY(p)      a producer may claim position p
 *   PCLAIM(p,w)   claimed by producer w, body being written
 *   FULL(p)       published: a consumer may claim it
 *   SKIP(p)       published void: consumers pass over it
 *   CCLAIM(p,w)   claimed by consumer w, body being read
 *   then EMPTY(p + cap), the slot's next lap.
 *
 * A slot is claimed by compare-and-swap of its own word, never of head or
 * tail: so the claimer's identity (who, a claim record of its process:
 * claim.c) is stored by the very instruction that claims. A process
 * killed between claim and publish leaves PCLAIM(p, w) or CCLAIM(p, w)
 * naming it, and whoever reclaims the dead process finds its slots
 * without doubt and completes them (publish, SKIP, or hand back) —
 * instead of the ring stalling at that slot for its live owner forever.
 * who 0 (HCA_RING_ANON) is for rings only their own process uses (its
 * own CQ polls, its own posts): they die with it.
 *
 * head and tail are only hints of the next position to claim; whoever
 * sees the slot at head (tail) claimed already moves them on by CAS, so a
 * claimer killed before it moved them stalls nobody. Claims happen in
 * position order, because a claim at p needs head = p and a slot word
 * EMPTY(p), and head passes p only once p is claimed.
 *
 * Ordering:
 *  - a producer's claim CAS is acq_rel: acquire pairs with the previous
 *    consumer's hand-back (its read of the old body is done), release
 *    orders the claim record (claim.c) before the claim;
 *  - it writes the body, then stores FULL(p) with release: a consumer
 *    that loads FULL(p) with acquire sees the whole body;
 *  - a consumer claims FULL(p) by CAS (acq_rel), copies the body out,
 *    then stores EMPTY(p + cap) with release, handing the slot back.
 * No lock, no system call. Positions are compared modulo 2^47, as signed
 * differences, so they may wrap.
 *
 * Who is producer and consumer of which ring:
 *  - RQ and SRQ: the owner produces (post_recv); the process that
 *    executes a request toward the queue — the requester's, on the
 *    shared-memory link — consumes (resp.c take_rwqe), with a claim
 *    record; a reclaimer re-posts a WQE its dead taker held (claim.c).
 *  - CQ: whoever completes work produces: another process with a claim
 *    record (a requester writing the target's receive completions, with
 *    a small payload in the slot's further lines: cq_embed.c), the owner
 *    anonymously (its receive queues' flushes, the UDP link's receive
 *    completions: cq.c push_anon); the owner consumes (hca_cq_poll;
 *    several of its threads at once are fine). The owner's send
 *    completions go to a second ring of the same shape in its private
 *    memory (struct hca_cq.sq_ring), which only its threads touch.
 */
#ifndef HCA_RING_H
#define HCA_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct hca_ring {
	uint32_t cap;              /* power of two */
	uint32_t stride;           /* bytes per slot, state word included */
	uint64_t extra;            /* bytes of the block after the slots (an RQ's
				    * mailbox, mbox.c): written before publish */
	uint64_t pad0[6];
	_Atomic uint64_t head;     /* next position to enqueue (a hint) */
	uint64_t pad1[7];
	_Atomic uint64_t tail;     /* next position to dequeue (a hint) */
	uint64_t pad2[7];
	/* slots follow, each: _Atomic uint64_t word; body[stride - 8] */
};

enum hca_ring_tag {
	HCA_RING_EMPTY = 0,
	HCA_RING_PCLAIM = 1,
	HCA_RING_FULL = 2,
	HCA_RING_SKIP = 3,
	HCA_RING_CCLAIM = 4,
};

#define HCA_RING_ANON     0u
#define HCA_RING_WHO_BITS 14
#define HCA_RING_POS_SHIFT 17

static inline uint64_t hca_ring_word(uint64_t pos, uint32_t who, enum hca_ring_tag tag)
{
	return pos << HCA_RING_POS_SHIFT | (uint64_t)who << 3 | (uint64_t)tag;
}

static inline enum hca_ring_tag hca_ring_tag_of(uint64_t w)
{
	return (enum hca_ring_tag)(w & 7);
}

/* Slot word's position minus pos, modulo 2^47, signed. */
static inline int64_t hca_ring_dpos(uint64_t w, uint64_t pos)
{
	uint64_t mask = ~((1ULL << HCA_RING_POS_SHIFT) - 1);

	return (int64_t)((w & mask) - (pos << HCA_RING_POS_SHIFT)) >> HCA_RING_POS_SHIFT;
}

static inline uint64_t hca_ring_bytes(uint32_t cap, uint32_t body)
{
	uint32_t stride = (body + 8 + 15) & ~15u;

	return sizeof(struct hca_ring) + (uint64_t)cap * stride;
}

static inline _Atomic uint64_t *hca_ring_slot(struct hca_ring *r, uint64_t pos)
{
	return (_Atomic uint64_t *)((char *)(r + 1) +
				    (pos & (r->cap - 1)) * r->stride);
}

static inline void hca_ring_init(struct hca_ring *r, uint32_t cap, uint32_t body)
{
	r->cap = cap;
	r->stride = (body + 8 + 15) & ~15u;
	r->extra = 0;
	atomic_store(&r->head, 0);
	atomic_store(&r->tail, 0);
	for (uint32_t i = 0; i < cap; i++)
		atomic_store_explicit(hca_ring_slot(r, i),
				      hca_ring_word(i, 0, HCA_RING_EMPTY),
				      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

/* Move a hint (head or tail) past pos, unless someone did already. */
static inline void hca_ring_advance(_Atomic uint64_t *hint, uint64_t pos)
{
	atomic_compare_exchange_strong_explicit(hint, &pos, pos + 1,
						memory_order_relaxed,
						memory_order_relaxed);
}

/*
 * Claim a slot to fill, as `who`; NULL when full. *posp gets each
 * position before it is tried (so that a claim record holds it before
 * the claim is made) and the claimed one on return. Publish with
 * hca_ring_publish.
 */
static inline void *hca_ring_reserve(struct hca_ring *r, uint32_t who,
				     uint64_t *posp)
{
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);

	for (;;) {
		_Atomic uint64_t *slot = hca_ring_slot(r, pos);
		uint64_t w = atomic_load_explicit(slot, memory_order_acquire);
		int64_t d = hca_ring_dpos(w, pos);

		if (d == 0 && hca_ring_tag_of(w) == HCA_RING_EMPTY) {
			*posp = pos;
			if (atomic_compare_exchange_strong_explicit(
				    slot, &w, hca_ring_word(pos, who, HCA_RING_PCLAIM),
				    memory_order_acq_rel, memory_order_acquire)) {
				hca_ring_advance(&r->head, pos);
				return (void *)(slot + 1);
			}
			continue; /* another producer took it: look again */
		}
		if (d < 0)
			return NULL; /* the previous lap is still in the slot */
		/* pos is claimed already (d == 0) or long gone (d > 0): its
		 * claimer may be dead before it moved head, so move it */
		hca_ring_advance(&r->head, pos);
		pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	}
}

static inline void hca_ring_publish(struct hca_ring *r, uint64_t pos)
{
	atomic_store_explicit(hca_ring_slot(r, pos),
			      hca_ring_word(pos, 0, HCA_RING_FULL), memory_order_release);
}

/* A claimed slot published void: its consumer passes over it. */
static inline void hca_ring_skip(struct hca_ring *r, uint64_t pos)
{
	atomic_store_explicit(hca_ring_slot(r, pos),
			      hca_ring_word(pos, 0, HCA_RING_SKIP), memory_order_release);
}

/*
 * Claim the oldest entry to read, as `who`, below position lim; NULL when
 * empty (or the oldest is at lim or past it). *posp as for
 * hca_ring_reserve. Hand the slot back with hca_ring_release.
 */
static inline void *hca_ring_take_below(struct hca_ring *r, uint32_t who, uint64_t *posp,
					uint64_t lim)
{
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);

	for (;;) {
		if (pos >= lim)
			return NULL; /* published after the caller's look */

		_Atomic uint64_t *slot = hca_ring_slot(r, pos);
		uint64_t w = atomic_load_explicit(slot, memory_order_acquire);
		int64_t d = hca_ring_dpos(w, pos);
		enum hca_ring_tag tag = hca_ring_tag_of(w);

		if (d < 0 || (d == 0 && (tag == HCA_RING_EMPTY || tag == HCA_RING_PCLAIM)))
			return NULL; /* not yet produced, or not yet published */
		if (d == 0 && tag == HCA_RING_FULL) {
			*posp = pos;
			if (atomic_compare_exchange_strong_explicit(
				    slot, &w, hca_ring_word(pos, who, HCA_RING_CCLAIM),
				    memory_order_acq_rel, memory_order_acquire)) {
				hca_ring_advance(&r->tail, pos);
				return (void *)(slot + 1);
			}
			continue;
		}
		if (d == 0 && tag == HCA_RING_SKIP)
			/* nothing to read: hand it straight back (one of the
			 * consumers that see it wins) */
			atomic_compare_exchange_strong_explicit(
				slot, &w, hca_ring_word(pos + r->cap, 0, HCA_RING_EMPTY),
				memory_order_acq_rel, memory_order_relaxed);
		/* pos is consumed (or being consumed): move tail past it */
		hca_ring_advance(&r->tail, pos);
		pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
	}
}

/* Claim the oldest entry to read (hca_ring_take_below without a bound). */
static inline void *hca_ring_take(struct hca_ring *r, uint32_t who, uint64_t *posp)
{
	return hca_ring_take_below(r, who, posp, UINT64_MAX);
}

/*
 * A look, claiming nothing: the position past the entries published
 * from the tail on (at most max of them). An entry a consumer then takes
 * below it was published before this look's acquire loads, so whatever
 * its producer did before publishing is visible after them too.
 */
static inline uint64_t hca_ring_published_end(struct hca_ring *r, uint32_t max)
{
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);

	for (uint32_t seen = 0, i = 0; seen < max && i < r->cap; i++) {
		uint64_t w = atomic_load_explicit(hca_ring_slot(r, pos), memory_order_acquire);
		int64_t d = hca_ring_dpos(w, pos);
		enum hca_ring_tag tag = hca_ring_tag_of(w);

		if (d < 0 || (d == 0 && (tag == HCA_RING_EMPTY || tag == HCA_RING_PCLAIM)))
			break; /* not yet published */
		if (d == 0 && tag == HCA_RING_FULL)
			seen++;
		pos++; /* consumed, being consumed, skipped or counted */
	}
	return pos;
}

/*
 * Whether an entry is published and not yet taken, from the tail to the
 * head: a consumer's take stops at an entry claimed but not yet
 * published (its producer is between the two), and entries published
 * behind that one wait with it.
 */
static inline bool hca_ring_any_full(struct hca_ring *r)
{
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t end = atomic_load_explicit(&r->head, memory_order_relaxed);

	for (uint32_t i = 0; pos < end && i < r->cap; pos++, i++) {
		uint64_t w = atomic_load_explicit(hca_ring_slot(r, pos), memory_order_acquire);

		if (hca_ring_dpos(w, pos) == 0 && hca_ring_tag_of(w) == HCA_RING_FULL)
			return true;
	}
	return false;
}

static inline void hca_ring_release(struct hca_ring *r, uint64_t pos)
{
	atomic_store_explicit(hca_ring_slot(r, pos),
			      hca_ring_word(pos + r->cap, 0, HCA_RING_EMPTY),
			      memory_order_release);
}

/* Whether `who` holds the slot of pos claimed as `tag` (recovery). */
static inline bool hca_ring_claimed(struct hca_ring *r, uint64_t pos, uint32_t who,
				    enum hca_ring_tag tag)
{
	return atomic_load_explicit(hca_ring_slot(r, pos), memory_order_acquire) ==
	       hca_ring_word(pos, who, tag);
}

/* Unrecorded push and pop: for rings of the caller's own process. */
static inline int hca_ring_push(struct hca_ring *r, const void *body, uint32_t len)
{
	uint64_t pos;
	void *slot = hca_ring_reserve(r, HCA_RING_ANON, &pos);

	if (!slot)
		return -1;
	memcpy(slot, body, len);
	hca_ring_publish(r, pos);
	return 0;
}

/* Copy out the oldest entry (at most len bytes); -1 when empty. */
static inline int hca_ring_pop(struct hca_ring *r, void *body, uint32_t len)
{
	uint64_t pos;
	void *slot = hca_ring_take(r, HCA_RING_ANON, &pos);

	if (!slot)
		return -1;
	memcpy(body, slot, len);
	hca_ring_release(r, pos);
	return 0;
}

/* The heap block of a ring: its slots and what follows them. */
static inline uint64_t hca_ring_block(const struct hca_ring *r)
{
	return hca_ring_bytes(r->cap, r->stride - 8) + r->extra;
}

/* Entries queued (a snapshot: may be stale by the time it is used; a
 * skipped entry counts until a consumer passes it). */
static inline uint32_t hca_ring_count(struct hca_ring *r)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);

	return h > t ? (uint32_t)(h - t) : 0;
}

#endif
