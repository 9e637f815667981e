/*
 * Bounded multi-producer multi-consumer ring in shared memory: the shape
 * of every receive queue, SRQ and CQ of the device.
 *
 * Producers and consumers may be in different processes. Each slot starts
 * with a sequence word; the ring's head (next enqueue) and tail (next
 * dequeue) are claimed with compare-and-swap. Ordering:
 *  - a producer claims position p by CAS on head, writes the slot body,
 *    then stores seq = p + 1 with release: a consumer that loads seq with
 *    acquire and finds p + 1 sees the whole body;
 *  - a consumer claims p by CAS on tail, copies the body out, then stores
 *    seq = p + capacity with release, handing the slot back to producers.
 * No lock, no system call.
 *
 * Who is producer and consumer of which ring:
 *  - RQ and SRQ: the owner produces (post_recv); the process that
 *    executes a request toward the queue — the requester's, on the
 *    shared-memory link — consumes (resp.c take_rwqe).
 *  - CQ: whoever completes work produces (the requester for its send
 *    completions and for the target's receive completions); the owner
 *    consumes (hca_cq_poll; several of its threads at once are fine).
 * An entry's body is written only between a successful claim and the
 * publishing store, and read only between the consumer's claim and its
 * hand-back store, so the seq word's release/acquire pairs are the only
 * ordering a ring needs.
 *
 * A process killed between claim and publish leaves one slot unpublished,
 * and the ring then stalls at that slot (reads as empty, or full). For a
 * ring its own owner produces into, that is the owner's loss; a requester
 * dying in the few instructions between its claim and its publish in
 * another process's CQ or RQ stalls that queue too (a known limit, not
 * yet repaired: the death would have to publish a skip entry there).
 */
#ifndef HCA_RING_H
#define HCA_RING_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

struct hca_ring {
	uint32_t cap;              /* power of two */
	uint32_t stride;           /* bytes per slot, seq word included */
	uint64_t pad0[7];
	_Atomic uint64_t head;     /* next position to enqueue */
	uint64_t pad1[7];
	_Atomic uint64_t tail;     /* next position to dequeue */
	uint64_t pad2[7];
	/* slots follow, each: _Atomic uint64_t seq; body[stride - 8] */
};

static inline uint64_t hca_ring_bytes(uint32_t cap, uint32_t body)
{
	uint32_t stride = (body + 8 + 15) & ~15u;

	return sizeof(struct hca_ring) + (uint64_t)cap * stride;
}

static inline void hca_ring_init(struct hca_ring *r, uint32_t cap, uint32_t body)
{
	r->cap = cap;
	r->stride = (body + 8 + 15) & ~15u;
	atomic_store(&r->head, 0);
	atomic_store(&r->tail, 0);
	for (uint32_t i = 0; i < cap; i++) {
		_Atomic uint64_t *seq = (_Atomic uint64_t *)
			((char *)(r + 1) + (uint64_t)i * r->stride);
		atomic_store_explicit(seq, i, memory_order_relaxed);
	}
	atomic_thread_fence(memory_order_release);
}

static inline _Atomic uint64_t *hca_ring_slot(struct hca_ring *r, uint64_t pos)
{
	return (_Atomic uint64_t *)((char *)(r + 1) +
				    (pos & (r->cap - 1)) * r->stride);
}

/* Claim a slot to fill; NULL when full. Publish with hca_ring_publish. */
static inline void *hca_ring_reserve(struct hca_ring *r, uint64_t *posp)
{
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);

	for (;;) {
		_Atomic uint64_t *seq = hca_ring_slot(r, pos);
		int64_t diff = (int64_t)(atomic_load_explicit(seq, memory_order_acquire) - pos);

		if (diff == 0) {
			if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				*posp = pos;
				return (void *)(seq + 1);
			}
		} else if (diff < 0) {
			return NULL;
		} else {
			pos = atomic_load_explicit(&r->head, memory_order_relaxed);
		}
	}
}

static inline void hca_ring_publish(struct hca_ring *r, uint64_t pos)
{
	atomic_store_explicit(hca_ring_slot(r, pos), pos + 1, memory_order_release);
}

static inline int hca_ring_push(struct hca_ring *r, const void *body, uint32_t len)
{
	uint64_t pos;
	void *slot = hca_ring_reserve(r, &pos);

	if (!slot)
		return -1;
	memcpy(slot, body, len);
	hca_ring_publish(r, pos);
	return 0;
}

/* Copy out the oldest entry (at most len bytes); -1 when empty. */
static inline int hca_ring_pop(struct hca_ring *r, void *body, uint32_t len)
{
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);

	for (;;) {
		_Atomic uint64_t *seq = hca_ring_slot(r, pos);
		int64_t diff = (int64_t)(atomic_load_explicit(seq, memory_order_acquire) -
					 (pos + 1));

		if (diff == 0) {
			if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				memcpy(body, seq + 1, len);
				atomic_store_explicit(seq, pos + r->cap, memory_order_release);
				return 0;
			}
		} else if (diff < 0) {
			return -1;
		} else {
			pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
		}
	}
}

/* Entries queued (a snapshot: may be stale by the time it is used). */
static inline uint32_t hca_ring_count(struct hca_ring *r)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);

	return h > t ? (uint32_t)(h - t) : 0;
}

#endif
