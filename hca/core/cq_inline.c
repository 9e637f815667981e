/*
 * Inline receive: small payloads of two-sided operations travel through
 * the shared segment instead of a cross-memory-attach call.
 *
 * Each CQ may own a pool of slots in the segment (allocated with it). A
 * requester that executes a SEND toward a QP of another process, with a
 * payload up to the pool's max_len, takes the receive WQE and checks its
 * scatter list as always, then writes the payload and the target ranges
 * into a free slot of the receive CQ's pool and names the slot in the
 * receive completion (hca_cqe.inl). It makes no system call. The CQ's
 * owner copies the payload into its receive buffer before ibv_poll_cq
 * returns that completion, so a completion is never seen before its
 * bytes are in place; the owner's progress thread also copies whatever
 * waits at each of its wakes (hca_inl_sweep), so a process that does not
 * poll still gets its data. One-sided operations never come here: they
 * complete while the target sleeps, through mem.c.
 *
 * A slot's state word is the only synchronisation. Its low byte is the
 * state below; while a requester's claim holds the slot, the upper bits
 * carry that claim's tag (claim.c), kept through every transition until
 * the slot is FREE again, so that whoever reclaims a requester killed
 * before its completion was pushed finds and frees the slots it held:
 *
 *   FREE --(requester: CAS, acquire)--> FILLING
 *        --(requester: store, release)--> READY    then the CQE is pushed
 *   READY --(poller or progress thread: CAS, acquire)--> COPYING
 *   COPYING --(progress thread: store, release)--> DONE (or REFUSED)
 *   COPYING, DONE or REFUSED --(poller: store, release)--> FREE
 *
 * - The requester's acquire CAS pairs with the poller's release store of
 *   FREE: the previous payload was read out before it is overwritten.
 * - Its release store of READY (and, after it, the CQ ring's release
 *   publish) pairs with the acquire CAS of whoever copies: header and
 *   payload are visible to the copier.
 * - The progress thread's release store of DONE pairs with the poller's
 *   acquire load: the bytes are in the receive buffer before the poller
 *   returns the completion.
 * Only the poller of the completion frees the slot, so a slot is never
 * reused while a completion names it. A requester that finds no free
 * slot (a consumer that does not poll) falls back to CMA.
 *
 * The slot's contents come from another process and are checked before
 * use: ranges within the slot, each target range still inside a memory
 * region of ours with local write access (a region deregistered since
 * the send completes the receive with IBV_WC_LOC_PROT_ERR, nothing
 * written).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hca_int.h"

enum { INL_FREE = 0, INL_FILLING, INL_READY, INL_COPYING, INL_DONE, INL_REFUSED };

#define INL_POOL_HDR 128

#define INL_KIND(w) ((uint32_t)((w) & 0xff))
#define INL_TAG(w)  ((w) & ~0xffULL)

static _Atomic int inl_max_env = -1;

bool hca_inl_copying(uint64_t state)
{
	return INL_KIND(state) == INL_COPYING;
}

/* The threshold: SOFTIB_INLINE_MAX if set (0 disables), else measured. */
uint32_t hca_inl_max(void)
{
	return (uint32_t)hca_env_once(&inl_max_env, "SOFTIB_INLINE_MAX",
				      HCA_INL_DEFAULT, 0, HCA_INL_LIMIT);
}

/*
 * The payload starts right after the target ranges in use, not after the
 * whole range array: a small SEND to one buffer (state, niov, len, one
 * range and up to 32 bytes) fills a single cache line, one line for the
 * requester to own and the poller to read instead of two.
 */
static uint8_t *inl_data(const struct hca_inl_slot *s, uint32_t niov)
{
	return (uint8_t *)&s->iov[niov < HCA_MAX_SGE ? niov : HCA_MAX_SGE];
}

static uint32_t inl_stride(uint32_t max_len)
{
	return (uint32_t)((sizeof(struct hca_inl_slot) + max_len + 63) & ~63ul);
}

uint64_t hca_inl_pool_bytes(uint32_t cq_cap, uint32_t *nslots, uint32_t *max_len)
{
	uint32_t n = cq_cap < HCA_INL_SLOTS ? cq_cap : HCA_INL_SLOTS;

	*max_len = hca_inl_max();
	*nslots = *max_len ? n : 0;
	if (!*nslots)
		return 0;
	return INL_POOL_HDR + (uint64_t)n * inl_stride(*max_len);
}

void hca_inl_pool_init(struct hca_inl_pool *p, uint32_t nslots, uint32_t max_len)
{
	p->nslots = nslots;
	p->max_len = max_len;
	p->stride = inl_stride(max_len);
	atomic_store_explicit(&p->hint, 0, memory_order_relaxed);
	for (uint32_t i = 0; i < nslots; i++)
		atomic_store_explicit(&hca_inl_slot(p, i)->state, INL_FREE,
				      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static struct hca_inl_pool *pool_of(struct hca_dev *dev, uint32_t cq_idx)
{
	struct hca_cq_ent *e = hca_cq_ent(dev, cq_idx);

	if (!e || !atomic_load_explicit(&e->handle, memory_order_acquire))
		return NULL;
	return hca_seg_ptr(dev->seg, e->inl_off);
}

/* The slot a put will try first, asked for ahead of it (hca_cq_prefetch). */
void hca_inl_prefetch(struct hca_dev *dev, uint32_t cq_idx)
{
	struct hca_inl_pool *p = pool_of(dev, cq_idx);
	uint32_t h;

	if (!p || !p->nslots)
		return;
	h = atomic_load_explicit(&p->hint, memory_order_relaxed) % p->nslots;
	hca_prefetchw(hca_inl_slot(p, h));
}

/*
 * Requester: the payload (src) and where it goes in the CQ owner's
 * memory (dst, with the lkey of each range) into a free slot. Returns
 * the slot number + 1 for the CQE, or 0 (no pool, too long, none free).
 */
uint16_t hca_inl_put(struct hca_dev *dev, struct hca_claim *cl, uint32_t cq_idx,
		     const struct iovec *src, int nsrc,
		     const struct iovec *dst, const uint32_t *lkeys, int ndst,
		     uint32_t len)
{
	struct hca_cq_ent *e = hca_cq_ent(dev, cq_idx);
	struct hca_inl_pool *p = pool_of(dev, cq_idx);
	struct hca_inl_slot *s = NULL;
	struct iovec to;
	uint64_t tag;
	uint32_t i, h;

	if (!p || len > p->max_len || ndst > HCA_MAX_SGE)
		return 0;
	/* the claim record names the pool and each slot before it is tried */
	tag = hca_claim_inl_begin(dev->seg, cl, cq_idx, atomic_load(&e->handle),
				  e->inl_off);
	h = atomic_load_explicit(&p->hint, memory_order_relaxed);
	for (i = 0; i < p->nslots; i++) {
		uint32_t k = (h + i) % p->nslots;
		uint64_t want = INL_FREE;

		s = hca_inl_slot(p, k);
		if (atomic_load_explicit(&s->state, memory_order_relaxed) != INL_FREE)
			continue;
		hca_claim_inl_try(cl, k);
		if (atomic_compare_exchange_strong_explicit(&s->state, &want,
							    tag | INL_FILLING,
							    memory_order_acq_rel,
							    memory_order_relaxed)) {
			atomic_store_explicit(&p->hint, (k + 1) % p->nslots,
					      memory_order_relaxed);
			break;
		}
	}
	if (i == p->nslots)
		return 0;
	hca_die_at(HCA_DIE_INL_FILLING);
	s->niov = (uint32_t)ndst;
	s->len = len;
	for (int j = 0; j < ndst; j++) {
		s->iov[j].addr = (uint64_t)(uintptr_t)dst[j].iov_base;
		s->iov[j].len = (uint32_t)dst[j].iov_len;
		s->iov[j].lkey = lkeys[j];
	}
	to.iov_base = inl_data(s, (uint32_t)ndst);
	to.iov_len = len;
	hca_iov_copy(&to, 1, src, nsrc);
	atomic_store_explicit(&s->state, tag | INL_READY, memory_order_release);
	hca_die_at(HCA_DIE_INL_READY);
	return (uint16_t)((h + i) % p->nslots + 1);
}

/*
 * Target ranges (from another process) as iovecs in our memory, each
 * checked against our memory regions; false if they are malformed, do
 * not add up to len, or one is no longer registered for local write.
 */
static bool inl_targets(struct hca_dev *dev, const struct hca_inl_iov *v, uint32_t niov,
			uint32_t len, struct iovec *iov)
{
	uint64_t total = 0;

	if (niov > HCA_MAX_SGE)
		return false;
	for (uint32_t j = 0; j < niov; j++) {
		struct hca_mr_ent *mr = hca_mr_lookup(dev->seg, v[j].lkey);

		if (!mr || mr->owner != dev->slot || mr->owner_gen != dev->gen ||
		    !(mr->access & IBV_ACCESS_LOCAL_WRITE) || v[j].addr < mr->addr ||
		    v[j].len > mr->length || v[j].addr - mr->addr > mr->length - v[j].len)
			return false;
		iov[j].iov_base = (void *)(uintptr_t)v[j].addr;
		iov[j].iov_len = v[j].len;
		total += v[j].len;
	}
	return total == len;
}

/*
 * Copy len bytes at data into the target ranges v (their sizes already
 * checked against what holds them); false if refused. The lkeys are
 * checked and the bytes land inside one copy section: a dereg of the
 * receive buffer waits for it, or refuses it (fence.c). Also the copy of
 * payloads embedded in a completion (cq_embed.c).
 */
bool hca_inl_copy_in(struct hca_dev *dev, const struct hca_inl_iov *v, uint32_t niov,
		     uint32_t len, const void *data)
{
	struct iovec to[HCA_MAX_SGE], from;
	struct hca_fence f;
	bool ok;

	hca_fence_enter(dev, &f);
	ok = inl_targets(dev, v, niov, len, to);
	if (ok) {
		from.iov_base = (void *)data;
		from.iov_len = len;
		hca_iov_copy(to, (int)niov, &from, 1);
	}
	hca_fence_exit(&f);
	return ok;
}

/* A slot's payload out (COPYING held); false if it was refused. */
static bool slot_copy(struct hca_dev *dev, const struct hca_inl_pool *p,
		      const struct hca_inl_slot *s)
{
	if (s->niov > HCA_MAX_SGE || s->len > p->max_len)
		return false;
	return hca_inl_copy_in(dev, s->iov, s->niov, s->len, inl_data(s, s->niov));
}

/*
 * Poller (the CQ's owner): the payload of completion c into its receive
 * buffer, then the slot back to the pool. Called before c is returned.
 */
void hca_inl_take(struct hca_dev *dev, struct hca_cq *cq, struct hca_cqe *c)
{
	struct hca_inl_pool *p = hca_seg_ptr(dev->seg, cq->ent->inl_off);
	struct hca_inl_slot *s;
	uint64_t st;

	if (!p || c->inl > p->nslots) {
		c->status = IBV_WC_LOC_PROT_ERR; /* a slot that cannot be ours */
		return;
	}
	s = hca_inl_slot(p, c->inl - 1u);
	st = atomic_load_explicit(&s->state, memory_order_acquire);
	if (INL_KIND(st) == INL_READY &&
	    atomic_compare_exchange_strong_explicit(&s->state, &st,
						    INL_TAG(st) | INL_COPYING,
						    memory_order_acquire,
						    memory_order_acquire)) {
		if (!slot_copy(dev, p, s))
			c->status = IBV_WC_LOC_PROT_ERR;
	} else if (INL_KIND(st) == INL_COPYING || INL_KIND(st) == INL_DONE ||
		   INL_KIND(st) == INL_REFUSED) {
		/* the progress thread copies it: its copy is short */
		while (INL_KIND(st = atomic_load_explicit(&s->state, memory_order_acquire)) ==
		       INL_COPYING)
			sched_yield();
		if (INL_KIND(st) == INL_REFUSED)
			c->status = IBV_WC_LOC_PROT_ERR;
	} else {
		c->status = IBV_WC_LOC_PROT_ERR; /* FREE or FILLING: not ours */
		return;
	}
	atomic_store_explicit(&s->state, INL_FREE, memory_order_release);
}

/*
 * A completion naming slot `inl` could not be pushed (its CQ overran):
 * nobody will poll it, so the slot is given back here.
 */
void hca_inl_drop(struct hca_dev *dev, uint32_t cq_idx, uint16_t inl)
{
	struct hca_inl_pool *p = pool_of(dev, cq_idx);
	struct hca_inl_slot *s;

	if (!p || !inl || inl > p->nslots)
		return;
	s = hca_inl_slot(p, inl - 1u);
	while (INL_KIND(atomic_load_explicit(&s->state, memory_order_acquire)) ==
	       INL_COPYING)
		sched_yield();
	atomic_store_explicit(&s->state, INL_FREE, memory_order_release);
}

/*
 * Progress thread: copy every payload that waits in the pools of our
 * CQs, or in their rings' slots (cq_embed.c), so that data lands even in
 * a process that does not poll. Under the segment lock, which CQ
 * creation, resize and destruction take: no pool or ring is freed under
 * us. At most once in HCA_INL_SWEEP_NS: the thread's timer
 * also fires for every retransmission deadline of the UDP link.
 */
void hca_inl_sweep(struct hca_dev *dev)
{
	struct hca_seg *seg = dev->seg;
	uint32_t hi = atomic_load_explicit(&dev->inl_cq_hi, memory_order_relaxed);
	uint64_t now;

	if (!atomic_load_explicit(&dev->inl_cqs, memory_order_relaxed) &&
	    !atomic_load_explicit(&dev->emb_cqs, memory_order_relaxed))
		return;
	now = hca_now_ns();
	if (now - dev->inl_swept_ns < HCA_INL_SWEEP_NS)
		return;
	dev->inl_swept_ns = now;
	hca_seg_lock(seg);
	for (uint32_t i = 1; i < hi && i < HCA_MAX_CQ; i++) {
		struct hca_cq *cq = dev->cq_tab[i];
		struct hca_inl_pool *p;

		if (cq && cq->ring->stride > 64)
			hca_emb_sweep_ring(dev, cq->ring);
		if (!cq || !(p = hca_seg_ptr(seg, cq->ent->inl_off)))
			continue;
		for (uint32_t k = 0; k < p->nslots; k++) {
			struct hca_inl_slot *s = hca_inl_slot(p, k);
			uint64_t st = atomic_load_explicit(&s->state, memory_order_relaxed);

			if (INL_KIND(st) != INL_READY ||
			    !atomic_compare_exchange_strong_explicit(&s->state, &st,
								     INL_TAG(st) | INL_COPYING,
								     memory_order_acquire,
								     memory_order_relaxed))
				continue;
			/* a refused copy is reported by the poller */
			atomic_store_explicit(&s->state, INL_TAG(st) |
					      (slot_copy(dev, p, s) ? INL_DONE : INL_REFUSED),
					      memory_order_release);
		}
	}
	hca_seg_unlock(seg);
}
