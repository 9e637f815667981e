/*
 * Completion queues. The ring lives in the segment: any process that
 * completes work for one of this CQ's QPs pushes the entry itself
 * (hca_cq_push), and wakes the owner's channel when the CQ is armed.
 * Polling is the owner's and takes no lock: the ring's pop is safe for
 * several threads at once (ring.h). The owner's own send completions go
 * to a private ring (hca_cq_push_sq), so that the shared one is written
 * by the remote producers only. A CQ also owns the pool through which
 * small payloads arrive (cq_inline.c), and its slots carry the smallest
 * ones (cq_embed.c): poll copies them out.
 *
 * Arming and waking (the fields of hca_cq_ent):
 *  - armed: stored by the owner (hca_cq_arm), swapped to 0 by the
 *    producer that sends the wake. It is the store-buffer pattern — the
 *    producer publishes an entry then loads armed, the consumer stores
 *    armed then loads the ring — so both sides have a seq_cst fence
 *    between their store and their load; without them both could miss
 *    (the producer sees armed = 0, the consumer an empty ring) and the
 *    consumer sleep with a completion queued.
 *  - ev_pending: the event this CQ owes its channel. 0 -> 1 by the
 *    producer that swapped armed to 0 (exchange: one sender per edge),
 *    which then sends the channel one datagram; back to 0 by the reader
 *    of the channel that delivers the event (hca_cq_event_take). It is
 *    never undone: the event stays owed until delivered, whatever
 *    becomes of the datagram (chan.c: readers look at every CQ's word on
 *    any wake; wake.c: a send that fails is sent again). Before, a
 *    failed send put both words back "for the next completion to retry"
 *    — and when none came, the CQ never signalled again.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "hca_int.h"
#include "progress.h"
#include "mbox.h"

struct hca_cq_ent *hca_cq_ent(struct hca_dev *dev, uint32_t idx)
{
	return idx < HCA_MAX_CQ ? &dev->seg->cqs[idx] : NULL;
}

static uint32_t cq_cap_for(int cqe)
{
	return 1u << hca_ilog2_ceil((uint32_t)cqe + 1);
}

/* Allocate a directory index and ring (seg->lock held). */
static int cq_publish(struct hca_dev *dev, struct hca_cq *cq, uint32_t cap)
{
	struct hca_seg *seg = dev->seg;
	uint32_t body = hca_emb_body(cap);
	uint64_t bytes = hca_ring_bytes(cap, body);
	uint64_t off, inl_bytes, inl_off = 0;
	uint32_t idx, nslots, max_len;

	/* an entry holding a ring is not free even without a handle: its
	 * maker died before publishing it, and the reclaim of its slot frees
	 * it (hca_reclaim_slot) */
	for (idx = 1; idx < HCA_MAX_CQ; idx++)
		if (!atomic_load(&seg->cqs[idx].handle) && !seg->cqs[idx].ring_off &&
		    !seg->cqs[idx].inl_off)
			break;
	if (idx == HCA_MAX_CQ)
		return ENOMEM;
	struct hca_cq_ent *e = &seg->cqs[idx];
	e->owner = dev->slot;
	e->owner_gen = dev->gen;
	off = hca_dev_heap_alloc(dev, bytes);
	if (!off)
		return ENOMEM;
	/* heap blocks come zeroed: no stale embedded state says READY */
	hca_ring_init(hca_seg_ptr(seg, off), cap, body);
	e->ring_off = off; /* from here a death leaves it to the reclaim */
	/* the inline pool is an accelerator: without room for it the CQ
	 * still works, its payloads all going by CMA. Pools never take the
	 * upper half of the heap, nor more than HCA_INL_PROC_POOLS per
	 * process, so that they never starve rings */
	inl_bytes = hca_inl_pool_bytes(cap, &nslots, &max_len);
	if (inl_bytes && atomic_load(&dev->inl_cqs) < HCA_INL_PROC_POOLS &&
	    seg->heap_bump + inl_bytes < seg->heap_size / 2 &&
	    (e->inl_bytes = inl_bytes, inl_off = hca_dev_heap_alloc(dev, inl_bytes)))
		hca_inl_pool_init(hca_seg_ptr(seg, inl_off), nslots, max_len);
	e->inl_bytes = inl_off ? inl_bytes : 0;
	e->inl_off = inl_off;
	atomic_store(&e->ev_pending, 0);
	if (inl_off)
		atomic_fetch_add(&dev->inl_cqs, 1);
	if (body > sizeof(struct hca_cqe))
		atomic_fetch_add(&dev->emb_cqs, 1);
	if ((inl_off || body > sizeof(struct hca_cqe)) &&
	    idx + 1 > atomic_load(&dev->inl_cq_hi))
		atomic_store(&dev->inl_cq_hi, idx + 1);
	e->chan = cq->chan ? cq->chan->id : 0;
	e->stamp = !!(cq->flags & HCA_CQ_TIMESTAMPS);
	atomic_store(&e->armed, 0);
	atomic_store(&e->overrun, 0);
	cq->handle = seg->next_handle++;
	if (!seg->next_handle)
		seg->next_handle = 1;
	cq->idx = idx;
	cq->ent = e;
	cq->ring = hca_seg_ptr(seg, off);
	cq->ring_size = bytes;
	hca_cq_tab_set(dev, idx, cq);
	atomic_store_explicit(&e->handle, cq->handle, memory_order_release);
	return 0;
}

/* The directory entry, ring and pool go (through the quarantine). */
static void cq_unpublish(struct hca_dev *dev, struct hca_cq *cq)
{
	struct hca_seg *seg = dev->seg;

	hca_seg_lock(seg);
	atomic_store_explicit(&cq->ent->handle, 0, memory_order_release);
	hca_cq_tab_set(dev, cq->idx, NULL);
	if (cq->ent->inl_off)
		atomic_fetch_sub(&dev->inl_cqs, 1);
	if (cq->ring->stride - 8 > sizeof(struct hca_cqe))
		atomic_fetch_sub(&dev->emb_cqs, 1);
	hca_cq_ent_free(seg, cq->ent);
	hca_seg_unlock(seg);
}

/* The private ring of our send queues' completions (hca_cq_push_sq). */
static struct hca_ring *sq_ring_new(uint32_t cap)
{
	struct hca_ring *r = aligned_alloc(64, hca_ring_bytes(cap, sizeof(struct hca_cqe)));

	if (r)
		hca_ring_init(r, cap, sizeof(struct hca_cqe));
	return r;
}

/* Entries queued in both rings (a snapshot). */
uint32_t hca_cq_count(struct hca_cq *cq)
{
	/* mailboxes (mbox.c): sends the receivers took are retired into the
	 * private ring now, and a message a poll would take counts as one */
	uint32_t mb = hca_mb_count(cq);

	return hca_ring_count(atomic_load_explicit(&cq->ring, memory_order_acquire)) +
	       hca_ring_count(atomic_load_explicit(&cq->sq_ring, memory_order_acquire)) + mb;
}

struct hca_cq *hca_cq_create(struct hca_ctx *ctx, int cqe, struct hca_chan *chan,
			     int flags, void *user)
{
	struct hca_dev *dev = ctx->dev;
	struct hca_cq *cq;
	int rc;

	if (cqe < 1 || cqe > HCA_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	cq->sq_ring = sq_ring_new(cq_cap_for(cqe));
	if (!cq->sq_ring) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	cq->ctx = ctx;
	cq->chan = chan;
	cq->flags = flags;
	cq->user = user;
	rc = hca_mutex_init(&cq->poll_lock);
	if (rc) {
		free(cq->sq_ring);
		free(cq);
		errno = rc;
		return NULL;
	}
	hca_seg_lock(dev->seg);
	rc = cq_publish(dev, cq, cq_cap_for(cqe));
	hca_dev_heap_done(dev);
	hca_seg_unlock(dev->seg);
	/* on the channel's list once whole (readers look at cq->ent); it
	 * can owe no event before: it is not armed until create returns */
	if (!rc && chan && (rc = hca_chan_add_cq(chan, cq)) != 0)
		cq_unpublish(dev, cq);
	if (rc) {
		pthread_mutex_destroy(&cq->poll_lock);
		free(cq->sq_ring);
		free(cq);
		errno = rc;
		return NULL;
	}
	cq->cqe = (int)cq->ring->cap - 1;
	return cq;
}

int hca_cq_size(struct hca_cq *cq)
{
	return cq->cqe;
}

/* Resize: every entry of ring `from` into `to` (of the same body size). */
static void cq_move(struct hca_ring *from, struct hca_ring *to)
{
	uint32_t body = from->stride - 8;
	uint64_t pos, npos;
	void *src, *dst;

	while ((src = hca_ring_take(from, HCA_RING_ANON, &pos))) {
		dst = hca_ring_reserve(to, HCA_RING_ANON, &npos);
		if (dst) { /* there is room: the count was checked */
			memcpy(dst, src, body);
			if (((struct hca_cqe *)dst)->inl == HCA_INL_EMBED)
				hca_emb_restamp(dst, npos);
			hca_ring_publish(to, npos);
		}
		hca_ring_release(from, pos);
	}
}

/*
 * Resize: a new ring, the pending entries moved over under the poll lock
 * (which only resizes take: polls are lock-free). Producers in other
 * processes may hold the old ring for a moment: it is freed through the
 * heap's quarantine, and entries they push into it after the move are
 * lost — resize while traffic flows into the CQ is racy on hardware too,
 * and the man page asks for a quiescent CQ. A thread polling during the
 * move pops each entry it gets exactly once (the ring's CAS), but may
 * return it before older ones already moved: the order of a CQ resized
 * while it is polled is not kept.
 */
int hca_cq_resize(struct hca_cq *cq, int cqe)
{
	struct hca_dev *dev = cq->ctx->dev;
	struct hca_seg *seg = dev->seg;
	uint32_t cap = cq_cap_for(cqe);
	struct hca_ring *nr;
	uint32_t body = cq->ring->stride - 8; /* payloads embedded stay so */
	struct hca_ring *nsq, **old;
	uint64_t off, bytes = hca_ring_bytes(cap, body);

	if (cqe < 1 || cqe > HCA_MAX_CQE)
		return EINVAL;
	pthread_mutex_lock(&cq->poll_lock);
	if (hca_cq_count(cq) > cap - 1) {
		pthread_mutex_unlock(&cq->poll_lock);
		return EINVAL;
	}
	nsq = sq_ring_new(cap);
	old = realloc(cq->sq_old, (size_t)(cq->nsq_old + 1) * sizeof(*old));
	if (old)
		cq->sq_old = old;
	hca_seg_lock(seg);
	off = nsq && old ? hca_dev_heap_alloc(dev, bytes) : 0;
	if (!off) {
		hca_seg_unlock(seg);
		pthread_mutex_unlock(&cq->poll_lock);
		free(nsq);
		return ENOMEM;
	}
	cq_move(cq->sq_ring, nsq);
	cq->sq_old[cq->nsq_old++] = cq->sq_ring;
	atomic_store_explicit(&cq->sq_ring, nsq, memory_order_release);
	nr = hca_seg_ptr(seg, off);
	hca_ring_init(nr, cap, body); /* zeroed, as above */
	cq_move(cq->ring, nr);
	/* the entry names the new ring before the old goes: a death between
	 * loses the old block rather than have it freed twice */
	uint64_t old_off = cq->ent->ring_off;
	cq->ent->ring_off = off;
	hca_dev_heap_done(dev);
	hca_heap_free(seg, old_off, cq->ring_size);
	atomic_store_explicit(&cq->ring, nr, memory_order_release);
	cq->ring_size = bytes;
	cq->cqe = (int)cap - 1;
	hca_seg_unlock(seg);
	pthread_mutex_unlock(&cq->poll_lock);
	return 0;
}

/*
 * Free a CQ entry's blocks (seg->lock held, its handle already 0): each
 * offset is cleared before its block is freed, so that a death between
 * the two loses the block instead of having a reclaim free it twice, and
 * the entry is free again once both are clear.
 */
void hca_cq_ent_free(struct hca_seg *seg, struct hca_cq_ent *e)
{
	uint64_t off = e->ring_off, inl = e->inl_off;

	if (off) {
		struct hca_ring *r = hca_seg_ptr(seg, off);
		uint64_t bytes = hca_ring_bytes(r->cap, r->stride - 8);

		e->ring_off = 0;
		hca_heap_free(seg, off, bytes);
	}
	if (inl) {
		e->inl_off = 0;
		hca_heap_free(seg, inl, e->inl_bytes);
	}
}

int hca_cq_destroy(struct hca_cq *cq)
{
	if (atomic_load(&cq->refs))
		return EBUSY;
	/* off the channel's list first: its readers look at cq->ent */
	if (cq->chan)
		hca_chan_del_cq(cq->chan, cq);
	cq_unpublish(cq->ctx->dev, cq);
	hca_pin_wait(&cq->pin); /* a doorbell dispatch acting on it */
	while (atomic_load(&cq->mb_busy)) /* the progress thread's sweep (mbox.c) */
		sched_yield();
	pthread_mutex_destroy(&cq->poll_lock);
	for (int i = 0; i < cq->nsq_old; i++)
		free(cq->sq_old[i]);
	free(cq->sq_old);
	free(cq->sq_ring);
	free(cq);
	return 0;
}

int hca_cq_arm(struct hca_cq *cq, int solicited_only)
{
	if (!cq->chan)
		return 0; /* no channel: nothing to wake, as hardware shrugs */
	cq->arm_solicited = solicited_only;
	/* "next completion" wins over "solicited only" if both are asked */
	uint32_t want = solicited_only ? 2 : 1, cur = atomic_load(&cq->ent->armed);

	if (cur != 1)
		atomic_store(&cq->ent->armed, want);
	/* store armed, then (in the caller's next poll or event read) load
	 * the ring: see the head of this file */
	atomic_thread_fence(memory_order_seq_cst);
	/* a mailbox message that came before the arm, which its requester
	 * saw unarmed (mbox.c): the event is owed now */
	if (atomic_load_explicit(&cq->mb_nrx, memory_order_relaxed) && hca_mb_waiting(cq))
		hca_cq_wake_at(cq->ctx->dev, cq->idx, true);
	/* the application is going to sleep: the progress thread takes the
	 * UDP socket now, not after a busy poller's grace */
	if (atomic_load_explicit(&cq->ctx->dev->udp_qps, memory_order_relaxed))
		hca_dev_link_handover(cq->ctx->dev);
	return 0;
}

/*
 * A push into a CQ of our own process needs no claim record: were we
 * killed half-way, the CQ would die with us, and the other producers
 * pass over a slot claimed for good (ring.h). It saves the claim cell's
 * bookkeeping on every send completion (docs/datapath.md).
 */
static int push_anon(struct hca_ring *r, const struct hca_cqe *c)
{
	uint64_t pos;
	void *slot = hca_ring_reserve(r, HCA_RING_ANON, &pos);

	if (!slot)
		return -1;
	memcpy(slot, c, sizeof(*c));
	hca_ring_publish(r, pos);
	return 0;
}

/* The entry c is published in CQ e: wake its channel if it is armed. */
static void cq_wake(struct hca_dev *dev, struct hca_cq_ent *e, uint32_t cq_idx,
		    uint32_t handle, const struct hca_cqe *c, bool solicited)
{
	uint32_t armed;

	if (!e->chan)
		return; /* no channel, nothing to wake: no fence to pay */
	/* publish the entry, then load armed: see the head of this file */
	atomic_thread_fence(memory_order_seq_cst);
	armed = atomic_load_explicit(&e->armed, memory_order_relaxed);
	if (armed == 1 || (armed == 2 && (solicited || c->status != IBV_WC_SUCCESS))) {
		/* the event is owed (ev_pending) before the datagram goes:
		 * a reader that finds no datagram finds the word (chan.c).
		 * The datagram cannot be lost (wake.c); an error here says
		 * the channel is gone, and no one is left to wake */
		if (atomic_exchange(&e->armed, 0) && !atomic_exchange(&e->ev_pending, 1))
			hca_chan_signal(dev, e->owner, e->owner_gen, e->chan, cq_idx, handle);
	}
}

/* CQ cq_idx was given work another way (a mailbox, mbox.c): wake it if armed. */
void hca_cq_wake_at(struct hca_dev *dev, uint32_t cq_idx, bool solicited)
{
	struct hca_cq_ent *e = hca_cq_ent(dev, cq_idx);
	struct hca_cqe c = { .status = IBV_WC_SUCCESS };
	uint32_t handle;

	if (!e || !e->chan || !(handle = atomic_load_explicit(&e->handle, memory_order_acquire)))
		return;
	cq_wake(dev, e, cq_idx, handle, &c, solicited);
}

/*
 * Push a completion into CQ cq_idx, from any process, in claim cell cl
 * (NULL: the CQ is our own, see push_anon)
 * (claim.c: a death half-way leaves the CQ flowing). With releases, the
 * completion is that of the receive WQE cl holds. On overrun the CQ is
 * marked in error and its owner told (IBV_EVENT_CQ_ERR); the entry is
 * not written over an unread one. Returns 0 or ENOSPC.
 */
int hca_cq_push_claim(struct hca_dev *dev, struct hca_claim *cl, uint32_t cq_idx,
		      const struct hca_cqe *c, bool solicited, bool releases)
{
	return hca_cq_push_body(dev, cl, cq_idx, (const struct hca_cqe_buf *)c,
				sizeof(*c), solicited, releases);
}

/*
 * The same, for a completion followed by len - sizeof(struct hca_cqe)
 * bytes of what it carries (cq_embed.c: b->c.inl is HCA_INL_EMBED).
 */
int hca_cq_push_body(struct hca_dev *dev, struct hca_claim *cl, uint32_t cq_idx,
		     const struct hca_cqe_buf *b, uint32_t len, bool solicited,
		     bool releases)
{
	struct hca_cq_ent *e = hca_cq_ent(dev, cq_idx);
	struct hca_claim_ring ref = { .kind = HCA_CLAIM_CQ, .idx = cq_idx };
	const struct hca_cqe *c = &b->c;
	uint32_t handle;

	struct hca_cqe_buf stamped;
	struct hca_ring *r;

	if (!e || !(handle = atomic_load_explicit(&e->handle, memory_order_acquire))) {
		if (releases)
			hca_claim_drop(cl);
		return ENOENT;
	}
	ref.handle = handle;
	ref.off = e->ring_off;
	r = hca_seg_ptr(dev->seg, ref.off);
	if (len > sizeof(*c) && (!cl || len > r->stride - 8)) {
		/* the CQ was made again with narrow slots since the sender
		 * looked: its payload cannot go with it */
		memcpy(&stamped.c, c, sizeof(*c));
		stamped.c.inl = 0;
		stamped.c.status = IBV_WC_LOC_PROT_ERR;
		b = &stamped;
		c = &b->c;
		len = sizeof(*c);
	}
	if (e->stamp) { /* only then: a clock read per completion is not free */
		if (b != &stamped)
			memcpy(&stamped, b, len);
		stamped.c.ts = hca_now_ns();
		b = &stamped;
		c = &b->c;
	}
	if (atomic_load_explicit(&e->overrun, memory_order_relaxed) ||
	    (cl ? hca_claim_push(dev->seg, cl, r, &ref, b, len, releases,
				 c->inl == HCA_INL_EMBED ? sizeof(*c) : 0)
		: push_anon(r, c))) {
		if (releases)
			hca_claim_drop(cl);
		if (c->inl && c->inl != HCA_INL_EMBED)
			hca_inl_drop(dev, cq_idx, c->inl);
		if (!atomic_exchange(&e->overrun, 1))
			hca_raise_cq_event(dev, cq_idx, IBV_EVENT_CQ_ERR);
		return ENOSPC;
	}
	cq_wake(dev, e, cq_idx, handle, c, solicited);
	return 0;
}

/*
 * A completion of our own send queue (hca_req_complete, the SQ's flush):
 * into the CQ's private ring (struct hca_cq.sq_ring), not the shared
 * one. The shared ring's head hint and slots are then written only by
 * the remote producers (and handed back by our polls), instead of
 * bouncing between the requester that pushes our receive completions and
 * our own send completions (docs/datapath.md). Each queue's completions
 * keep their order (one ring each; a receive queue's flush goes to the
 * shared ring, where its other completions are); a poll returns the
 * private ring's first. A ring of our process: no claim record, and the
 * wake is the same as any producer's.
 */
int hca_cq_push_sq(struct hca_cq *cq, const struct hca_cqe *c)
{
	struct hca_dev *dev = cq->ctx->dev;
	struct hca_cq_ent *e = cq->ent;
	struct hca_cqe stamped;

	if (e->stamp) {
		stamped = *c;
		stamped.ts = hca_now_ns();
		c = &stamped;
	}
	if (atomic_load_explicit(&e->overrun, memory_order_relaxed) ||
	    hca_ring_push(atomic_load_explicit(&cq->sq_ring, memory_order_acquire), c,
			  sizeof(*c))) {
		if (!atomic_exchange(&e->overrun, 1))
			hca_raise_cq_event(dev, cq->idx, IBV_EVENT_CQ_ERR);
		return ENOSPC;
	}
	cq_wake(dev, e, cq->idx, cq->handle, c, false);
	return 0;
}

/*
 * Ask for the lines a push into CQ cq_idx will write, ahead of the push:
 * its head hint and the slot at head were last written by the other
 * process of a conversation (the owner pops and hands slots back, other
 * requesters push), so each is a cache miss; asked for together, early,
 * they arrive in parallel with the rest of the post instead of one after
 * the other inside it (docs/datapath.md). A hint only: nothing is read
 * that the push relies on.
 */
void hca_cq_prefetch(struct hca_dev *dev, uint32_t cq_idx)
{
	struct hca_cq_ent *e = hca_cq_ent(dev, cq_idx);
	struct hca_ring *r;
	uint64_t pos;

	if (!e || !atomic_load_explicit(&e->handle, memory_order_acquire))
		return;
	r = hca_seg_ptr(dev->seg, e->ring_off);
	if (!r)
		return;
	hca_prefetchw(&r->head);
	pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	hca_prefetchw(hca_ring_slot(r, pos));
	if (r->stride > 64) /* the line a payload embedded in it goes to */
		hca_prefetchw((char *)hca_ring_slot(r, pos) + 64);
}

/* A completion of our own QP into our own CQ (send completions, flushes). */
int hca_cq_push(struct hca_dev *dev, uint32_t cq_idx, const struct hca_cqe *c,
		bool solicited)
{
	return hca_cq_push_claim(dev, NULL, cq_idx, c, solicited, false);
}

/* A reader of the channel takes this CQ's owed event: true if it was. */
bool hca_cq_event_take(struct hca_cq *cq)
{
	return atomic_exchange(&cq->ent->ev_pending, 0) != 0;
}

void hca_cqe_to_wc(const struct hca_cqe *c, struct ibv_wc *wc)
{
	wc->wr_id = c->wr_id;
	wc->status = c->status;
	wc->opcode = c->opcode;
	wc->vendor_err = c->vendor_err;
	wc->byte_len = c->byte_len;
	wc->imm_data = c->imm;
	wc->qp_num = c->qp_num;
	wc->src_qp = c->src_qp;
	wc->wc_flags = c->wc_flags;
	wc->pkey_index = c->pkey_index;
	wc->slid = c->slid;
	wc->sl = c->sl;
	wc->dlid_path_bits = c->dlid_path_bits;
}

/*
 * The next message of a ping-pong lands in the buffer the receive queue's
 * next WQE names. The queue is a FIFO ring cycling through all its
 * buffers (libsib's class 0: 1,024 of 256 B), so that buffer was last
 * touched a thousand messages ago, and the responder's copy into it
 * missed the cache: ~140 ns of the ~700 between a datagram's read and
 * the application's answer (cycle stamps, two namespace hosts). The
 * responder notes the queue (hca_rx_prefetch_note, for our own memory
 * only: another process's buffer is written by that process), and the
 * first poll that finds nothing — the application waiting for its next
 * message — prefetches the line, for writing. Everything is re-checked
 * (the queue may be gone, the WQE taken meanwhile): a wrong guess costs a
 * prefetch, nothing else.
 */
void hca_rx_prefetch_note(struct hca_dev *dev, const struct hca_claim_ring *ref)
{
	if (atomic_load_explicit(&dev->rx_pf_off, memory_order_relaxed) == ref->off &&
	    atomic_load_explicit(&dev->rx_pf_idx, memory_order_relaxed) == ref->idx)
		return; /* the same queue as last time: noted already */
	/* relaxed: a torn note fails rx_prefetch_next's checks */
	atomic_store_explicit(&dev->rx_pf_srq, ref->kind == HCA_CLAIM_SRQ, memory_order_relaxed);
	atomic_store_explicit(&dev->rx_pf_idx, ref->idx, memory_order_relaxed);
	atomic_store_explicit(&dev->rx_pf_handle, ref->handle, memory_order_relaxed);
	atomic_store_explicit(&dev->rx_pf_off, ref->off, memory_order_relaxed);
}

static void rx_prefetch_next(struct hca_dev *dev, uint64_t off)
{
	struct hca_seg *seg = dev->seg;
	struct hca_ring *r;
	const struct hca_rwqe *q;
	struct hca_mr_ent *mr;
	_Atomic uint64_t *slot;
	uint64_t pos, w, addr;
	uint32_t idx = atomic_load_explicit(&dev->rx_pf_idx, memory_order_relaxed);

	if (atomic_load_explicit(&dev->rx_pf_srq, memory_order_relaxed)) {
		struct hca_srq_ent *s;

		if (idx >= HCA_MAX_SRQ)
			return;
		s = &seg->srqs[idx];
		if (atomic_load_explicit(&s->handle, memory_order_acquire) !=
		    atomic_load_explicit(&dev->rx_pf_handle, memory_order_relaxed) ||
		    s->ring_off != off)
			return;
	} else {
		struct hca_qp_ent *e = hca_qp_ent_at(seg, idx);

		if (!e || atomic_load(&e->qpn) != idx || e->rq_off != off)
			return;
	}
	r = hca_seg_ptr(seg, off);
	pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
	slot = hca_ring_slot(r, pos);
	w = atomic_load_explicit(slot, memory_order_acquire);
	if (hca_ring_dpos(w, pos) || hca_ring_tag_of(w) != HCA_RING_FULL)
		return;
	q = (const struct hca_rwqe *)(slot + 1);
	if (!q->num_sge || r->stride < 8 + sizeof(*q) + sizeof(q->sge[0]))
		return;
	addr = q->sge[0].addr;
	mr = hca_mr_lookup(seg, q->sge[0].lkey);
	if (!mr || mr->owner != dev->slot || mr->owner_gen != dev->gen ||
	    addr < mr->iova || addr - mr->iova >= mr->length)
		return;
	hca_prefetchw((const void *)(uintptr_t)(mr->addr + (addr - mr->iova)));
}

/* Busy polls read the UDP link only on CQs some UDP-path QP completes
 * to (udp_qps, kept by qp.c): a shared-memory-only CQ never pays the
 * recvfrom, nor claims the socket from the progress thread. */
static void poll_link(struct hca_dev *dev, struct hca_cq *cq, uint32_t k)
{
	if (!atomic_load_explicit(&cq->udp_qps, memory_order_relaxed))
		return;
	/* the polls right after arming a CQ are the application's
	 * last look before it sleeps: they do not make it a poller. The
	 * mark is renewed every 8 polls: at every 64 (before 2026-11-25),
	 * a poller on a loaded 2-core machine took longer than the thread's
	 * grace (200 us) for 64 polls, so the thread took the socket back
	 * and woke for datagrams (~1 context switch per round trip of an
	 * 8 B ping-pong; docs/udp-link-performance.md). A clock read (vDSO)
	 * is ~1 % of a poll's recvmsg. */
	if (!(k & 7) && k - atomic_load_explicit(&dev->polls_at_arm,
						  memory_order_relaxed) > 64) {
		atomic_store_explicit(&dev->poll_ns, hca_now_ns(),
				      memory_order_relaxed);
	}
	hca_progress(dev, HCA_PROGRESS_RX);
}

static int cq_poll_once(struct hca_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts)
{
	struct hca_dev *dev = cq->ctx->dev;
	struct hca_ring *ring;
	struct hca_cqe c;
	uint64_t pos;
	void *slot;
	int got = 0;
	unsigned mbm = 0;
	bool mbh = false;
	uint64_t rx_end = UINT64_MAX;

	/*
	 * Requests held back by RNR or retry timers make progress here too
	 * (every 16th poll: the progress thread runs them on time anyway),
	 * and a busy poller reads its own UDP answers without a thread hop.
	 * The clock is read once in 64 polls: a busy loop of polls is what
	 * the ping-pong latency is made of.
	 */
	uint32_t k = atomic_load_explicit(&dev->polls, memory_order_relaxed) + 1;

	atomic_store_explicit(&dev->polls, k, memory_order_relaxed);
	if (!(k & 15))
		hca_progress(dev, HCA_PROGRESS_WAITING | HCA_PROGRESS_ACKS_SWEEP);
	poll_link(dev, cq, k);
	/* mailboxes (mbox.c): peek before the rings, consume after them, so
	 * that what the ring path delivered before a mailbox message comes
	 * out first; mailbox sends taken by now are retired here, and what
	 * answers them comes out after their completions (rx_end) */
	/* no lock: threads polling at once each pop whole entries (ring.h);
	 * resize swaps the ring under poll_lock (see hca_cq_resize) */
	ring = atomic_load_explicit(&cq->ring, memory_order_acquire);
	if (atomic_load_explicit(&cq->mb_nrx, memory_order_relaxed) ||
	    atomic_load_explicit(&cq->mb_txp, memory_order_relaxed))
		mbh = hca_mb_begin(cq, ring, (uint32_t)n, &mbm, &rx_end);
	struct hca_ring *own = atomic_load_explicit(&cq->sq_ring, memory_order_acquire);

	while (got < n && hca_ring_pop(own, &c, sizeof(c)) == 0) {
		hca_cqe_to_wc(&c, &wc[got]);
		if (ts)
			ts[got] = c.ts;
		got++;
	}
	while (got < n && (slot = hca_ring_take_below(ring, HCA_RING_ANON, &pos, rx_end))) {
		memcpy(&c, slot, sizeof(c));
		/* the payload lands before the completion is seen: from the
		 * slot itself while we hold it (cq_embed.c), or from the
		 * inline pool (cq_inline.c) */
		if (c.inl == HCA_INL_EMBED)
			hca_emb_take(dev, ring, pos, slot, &c);
		hca_ring_release(ring, pos);
		if (c.inl && c.inl != HCA_INL_EMBED)
			hca_inl_take(dev, cq, &c);
		hca_cqe_to_wc(&c, &wc[got]);
		if (ts)
			ts[got] = c.ts;
		got++;
	}
	if (mbh)
		got = hca_mb_end(cq, mbm, n, wc, ts, got, rx_end != UINT64_MAX);
	if (!got) { /* nothing new for the application: owed ACKs go now */
		uint64_t pf = atomic_load_explicit(&dev->rx_pf_off, memory_order_relaxed);

		if (pf) { /* and the next message's buffer comes in (once) */
			atomic_store_explicit(&dev->rx_pf_off, 0, memory_order_relaxed);
			rx_prefetch_next(dev, pf);
		}
		hca_progress(dev, HCA_PROGRESS_ACKS_ASKED);
	}
	return got;
}

int hca_cq_poll(struct hca_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts)
{
	int got;

	if (n < 0) {
		errno = EINVAL;
		return -1;
	}
	got = cq_poll_once(cq, n, wc, ts);
	/*
	 * An empty poll looks at the bound mailboxes once more as it ends,
	 * and polls again at once if a message came meanwhile: a busy
	 * poller's looks are then about half a poll apart, not a whole
	 * poll and its caller's loop, and a message waits for the next
	 * look half as long (docs/datapath.md, "Lines asked for early, the late
	 * look, the direct post").
	 */
	if (!got && n && atomic_load_explicit(&cq->mb_nrx, memory_order_relaxed) &&
	    hca_mb_late(cq))
		got = cq_poll_once(cq, n, wc, ts);
	return got;
}
