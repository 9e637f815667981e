/*
 * Payloads embedded in the receive completion: the smallest SENDs travel
 * inside the CQ ring's slot that carries their completion.
 *
 * A CQ's ring slots are HCA_EMB_LINES cache lines wide (SOFTIB_CQE_LINES
 * overrides it; 1 turns embedding off, as SOFTIB_INLINE_MAX=0 does): the
 * first line holds the ring's state word and the completion, the next
 * ones a struct hca_cqe_emb — a state word, the payload's length, the
 * target ranges (each with its lkey) and the payload bytes. A requester
 * that executes a SEND toward another process whose payload and ranges
 * fit writes them into the slot it claims for the receive completion
 * (hca_cqe.inl = HCA_INL_EMBED): no inline-pool slot, no second state
 * word in a line of its own, no system call. Larger payloads go through
 * the CQ's inline pool (cq_inline.c), then CMA.
 *
 * The CQ's owner copies the payload into its receive buffer inside
 * ibv_poll_cq, before it returns the completion, with the inline pool's
 * rules: the ranges are checked against its own memory regions first
 * (a region deregistered meanwhile completes the receive with
 * IBV_WC_LOC_PROT_ERR, nothing written; hca_inl_copy_in). The progress
 * thread's sweep copies payloads that wait in published, unpolled slots,
 * so that a process that never polls still gets its bytes.
 *
 * Memory ordering. The payload is part of the ring entry's body, so the
 * ring's own protocol publishes it (ring.h): the requester writes it
 * between its claim (PCLAIM) and its release store of FULL; whoever
 * loads FULL(p) with acquire sees it whole. What the embedded state word
 * adds is the choice of one copier between the poller and the sweeper,
 * and it names the ring position, so that a sweeper that read an old lap
 * never acts on the next one:
 *
 *   READY(p)   the requester, a relaxed store inside the claimed slot,
 *              before its release publish (hca_claim_push)
 *   READY(p) --(poller or sweeper: CAS, acquire)--> COPYING(p)
 *   COPYING(p) --(sweeper: store, release)--> DONE(p) or REFUSED(p)
 *   then the poller hands the slot back (ring release store); the next
 *   lap's requester writes READY(p + cap).
 *
 * - The sweeper acts only on a slot whose ring word is FULL(p) (acquire
 *   load) and whose state is READY(p) (its CAS): the body of lap p, whole.
 *   The poller holds the slot (CCLAIM) until it is done with it, and it
 *   waits out a sweeper's COPYING(p) before the release: the slot is
 *   never overwritten under a copy.
 * - The sweeper's release store of DONE(p) pairs with the poller's
 *   acquire load: the bytes are in the receive buffer before the poller
 *   returns the completion.
 * A requester killed while it writes leaves PCLAIM with its claim record
 * saying PUSH (published as SKIP by the reclaimer: nothing was seen) or
 * PUSHED (the entry is whole: published), as for any completion
 * (claim.c). No other shared word is involved, so nothing else needs
 * recovering.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hca_int.h"

enum { EMB_READY = 1, EMB_COPYING, EMB_DONE, EMB_REFUSED };

#define EMB_OFF  sizeof(struct hca_cqe) /* the ext's place in a body */
#define EMB_HDR  offsetof(struct hca_cqe_emb, iov)

static _Atomic int emb_lines_env = -1;

/* Lines per slot of the CQs this process creates (1: no embedding). */
static uint32_t emb_lines(void)
{
	if (!hca_inl_max())
		return 1; /* SOFTIB_INLINE_MAX=0: everything by CMA */
	return (uint32_t)hca_env_once(&emb_lines_env, "SOFTIB_CQE_LINES",
				      HCA_EMB_LINES, 1, HCA_EMB_LINES_MAX);
}

static uint64_t emb_word(uint64_t pos, uint32_t kind)
{
	return pos << 8 | kind;
}

uint64_t hca_emb_ready(uint64_t pos)
{
	return emb_word(pos, EMB_READY);
}

/* Ring body bytes (slot minus its state word) for a new CQ of cap slots. */
uint32_t hca_emb_body(uint32_t cap)
{
	uint32_t lines = cap <= HCA_EMB_CAP_MAX ? emb_lines() : 1;

	return lines > 1 ? lines * 64 - 8 : (uint32_t)sizeof(struct hca_cqe);
}

/*
 * Payload bytes that fit in a slot of CQ cq_idx beside ndst target
 * ranges; 0 if none (its owner made narrow slots, or we do not embed).
 */
uint32_t hca_emb_room(struct hca_dev *dev, uint32_t cq_idx, int ndst)
{
	struct hca_cq_ent *e = hca_cq_ent(dev, cq_idx);
	struct hca_ring *r;
	uint32_t ext;

	if (!e || emb_lines() < 2 || !atomic_load_explicit(&e->handle, memory_order_acquire))
		return 0;
	r = hca_seg_ptr(dev->seg, e->ring_off);
	if (!r || r->stride - 8 <= EMB_OFF + EMB_HDR)
		return 0;
	ext = r->stride - 8 - EMB_OFF - EMB_HDR;
	if (ext > HCA_EMB_EXT_MAX - EMB_HDR)
		ext = HCA_EMB_EXT_MAX - EMB_HDR;
	if ((uint32_t)ndst * sizeof(struct hca_inl_iov) >= ext)
		return 0;
	return ext - (uint32_t)ndst * sizeof(struct hca_inl_iov);
}

/*
 * Requester: the ranges and payload after the completion in b (fits:
 * hca_emb_room). Returns the bytes of b to push. The state word is
 * written by the push itself (hca_claim_push's stamp).
 */
uint32_t hca_emb_build(struct hca_cqe_buf *b, const struct iovec *src, int nsrc,
		       const struct iovec *dst, const uint32_t *lkeys, int ndst,
		       uint32_t len)
{
	struct hca_cqe_emb *x = (struct hca_cqe_emb *)b->ext;
	struct iovec to;

	x->len = len;
	x->niov = (uint32_t)ndst;
	for (int j = 0; j < ndst; j++) {
		x->iov[j].addr = (uint64_t)(uintptr_t)dst[j].iov_base;
		x->iov[j].len = (uint32_t)dst[j].iov_len;
		x->iov[j].lkey = lkeys[j];
	}
	to.iov_base = &x->iov[ndst];
	to.iov_len = len;
	hca_iov_copy(&to, 1, src, nsrc);
	return (uint32_t)(EMB_OFF + EMB_HDR + (uint32_t)ndst * sizeof(struct hca_inl_iov) +
			  len);
}

/* The payload of a slot into our memory; false if malformed or refused. */
static bool emb_copy(struct hca_dev *dev, const struct hca_ring *r,
		     const struct hca_cqe_emb *x)
{
	uint64_t room = r->stride - 8 - EMB_OFF - EMB_HDR;
	uint32_t niov = x->niov, len = x->len;

	if (niov > HCA_MAX_SGE || (uint64_t)niov * sizeof(struct hca_inl_iov) + len > room)
		return false;
	return hca_inl_copy_in(dev, x->iov, niov, len, &x->iov[niov]);
}

/*
 * Poller, holding the slot of pos (CCLAIM), body its copy source: the
 * payload lands before c is returned; c's status says if it could not.
 */
void hca_emb_take(struct hca_dev *dev, struct hca_ring *r, uint64_t pos, void *body,
		  struct hca_cqe *c)
{
	struct hca_cqe_emb *x = (struct hca_cqe_emb *)((char *)body + EMB_OFF);
	uint64_t st = atomic_load_explicit(&x->state, memory_order_acquire);

	if (r->stride - 8 < EMB_OFF + EMB_HDR) {
		c->status = IBV_WC_LOC_PROT_ERR; /* narrow slot: not ours to trust */
		return;
	}
	if (st == emb_word(pos, EMB_READY) &&
	    atomic_compare_exchange_strong_explicit(&x->state, &st,
						    emb_word(pos, EMB_COPYING),
						    memory_order_acquire,
						    memory_order_acquire)) {
		if (!emb_copy(dev, r, x))
			c->status = IBV_WC_LOC_PROT_ERR;
		return;
	}
	/* the sweeper copies it: its copy is short */
	while (st == emb_word(pos, EMB_COPYING)) {
		sched_yield();
		st = atomic_load_explicit(&x->state, memory_order_acquire);
	}
	if (st != emb_word(pos, EMB_DONE))
		c->status = IBV_WC_LOC_PROT_ERR; /* refused, or a state not of this lap */
}

/*
 * Progress thread (seg->lock held: the ring is not freed or resized
 * under us): copy the payloads of published, unpolled entries.
 */
void hca_emb_sweep_ring(struct hca_dev *dev, struct hca_ring *r)
{
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);

	if (r->stride - 8 < EMB_OFF + EMB_HDR)
		return;
	for (uint64_t pos = t; pos != h && pos - t < r->cap; pos++) {
		_Atomic uint64_t *slot = hca_ring_slot(r, pos);
		struct hca_cqe_emb *x = (struct hca_cqe_emb *)((char *)(slot + 1) + EMB_OFF);
		uint64_t st;

		if (atomic_load_explicit(slot, memory_order_acquire) !=
		    hca_ring_word(pos, 0, HCA_RING_FULL))
			continue; /* not published, or a poller has it */
		st = emb_word(pos, EMB_READY);
		/* a slot whose completion carries no payload never says
		 * READY(pos): the CAS fails on whatever it holds */
		if (!atomic_compare_exchange_strong_explicit(&x->state, &st,
							     emb_word(pos, EMB_COPYING),
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		atomic_store_explicit(&x->state,
				      emb_word(pos, emb_copy(dev, r, x) ? EMB_DONE : EMB_REFUSED),
				      memory_order_release);
	}
}

/* Resize moved an entry to position pos of the new ring: its state follows. */
void hca_emb_restamp(void *body, uint64_t pos)
{
	struct hca_cqe_emb *x = (struct hca_cqe_emb *)((char *)body + EMB_OFF);
	uint64_t st = atomic_load_explicit(&x->state, memory_order_relaxed);

	atomic_store_explicit(&x->state, emb_word(pos, (uint32_t)(st & 0xff)),
			      memory_order_relaxed);
}
