/*
 * Claim records: a process killed in the middle of an operation on
 * another process's rings leaves nothing wedged.
 *
 * On the shared-memory link a requester acts as the device for its
 * target: it takes a receive WQE from the target's RQ or SRQ, moves the
 * payload (by CMA, the bounce path, or the CQ's inline pool), and pushes
 * the receive completion into the target's CQ; it also pushes completions
 * into CQs of its own. Every such operation runs in a claim cell of its
 * process slot (seg.h, struct hca_claim), whose state word says how far
 * it got:
 *
 *   op bits (the ring claim in flight, its ring and position in c->op):
 *     NONE    nothing claimed
 *     POP     taking a WQE: the position is stored before the claim
 *     PUSH    pushing an entry: claimed (or trying), body being written
 *     PUSHED  the body is whole: only the publishing store is missing
 *   HELD      a WQE taken (its copy in c->wqe, its ring and position in
 *             c->from) whose completion is not yet made
 *   INL       an inline slot tried or claimed for the held WQE's payload
 *   RELEASES  the push in flight is the held WQE's completion
 *
 * Each transition is one release store of the state word by the thread
 * holding the cell, made after the fields it names are written; a push
 * that RELEASES goes from PUSH|HELD(|INL) to PUSHED in one store, so the
 * WQE is accounted for by exactly one of "its completion" or "it is
 * still held".
 *
 * The ring's slot word names its claimer (ring.h), so a reclaimer, once
 * the process is dead, tells its claims from anyone else's without doubt
 * and completes each cell (hca_claims_recover):
 *   POP      slot still CCLAIM by us: copy the WQE out, now HELD
 *   PUSH     slot still PCLAIM by us: publish it as SKIP
 *   PUSHED   slot still PCLAIM by us: publish it (the entry is whole)
 *   HELD     hand the WQE's slot back if that was not done, free the
 *            inline slot if it still carries our tag, and post the WQE
 *            again at the end of its queue: the message that was taking
 *            it never arrived, as if lost on a wire, and the receiver
 *            keeps its buffer (its order among the queued WQEs changes).
 *            An RQ whose QP is in error by now was flushed: the WQE
 *            completes with IBV_WC_WR_FLUSH_ERR instead.
 * The re-post runs as the dead cell itself (same who, same state
 * machine), so a reclaimer that dies half-way leaves a cell the next one
 * completes the same way. Recovery runs under seg->lock, from the
 * reclaim of the dead slot, before its own objects are freed.
 *
 * Memory ordering across a death: a process killed by a signal stops at
 * an instruction boundary; every store it executed before that reaches
 * coherent memory (the kernel's exit path, which the reclaimer's proof of
 * death — pidfd or /proc — comes after, is full of barriers), and none
 * after it happens. So the reclaimer sees a prefix, in program order, of
 * the dead thread's stores, which is exactly what the state machine
 * above assumes. Against live threads the reclaimer's stores are the
 * same release stores a live claimer would make.
 *
 * Rings are named by object and checked under seg->lock before they are
 * touched (a CQ or SRQ by index and handle, an RQ by QPN, and each by its
 * heap offset): a ring destroyed or resized since is left alone.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "hca_int.h"

enum { CL_NONE = 0, CL_POP = 1, CL_PUSH = 2, CL_PUSHED = 3 };
#define CL_OP       3u
#define CL_HELD     4u
#define CL_INL      8u
#define CL_RELEASES 16u

static void cell_state(struct hca_claim *c, uint32_t st)
{
	atomic_store_explicit(&c->state, st, memory_order_release);
}

uint32_t hca_claim_who(struct hca_seg *seg, const struct hca_claim *c)
{
	return (uint32_t)(c - &seg->claims[0][0]) + 1;
}

/*
 * The cell this thread works in, and how many of its calls use it: a
 * completion pushed while the thread holds a WQE (its own send completion,
 * between taking the target's WQE and pushing the target's completion)
 * goes through the cell it already holds — its state keeps the HELD bits
 * — so that a thread never waits for a second cell while holding one (32
 * threads each holding one would wait forever).
 */
/* The default TLS model, not initial-exec: the library is also dlopen()ed
 * (Open MPI's plug-ins, Python's ctypes), where static TLS may be used up
 * ("cannot allocate memory in static TLS block": test_cheap_sysfs). */
static __thread struct hca_claim *tls_cell;
static __thread struct hca_dev *tls_dev;
static __thread uint32_t tls_depth;

/*
 * A cell of our slot. Cells are few (HCA_CLAIM_CELLS) and held for one
 * operation: a thread that finds none waits for one.
 */
struct hca_claim *hca_claim_get(struct hca_dev *dev)
{
	uint32_t bits;

	if (tls_cell && tls_dev == dev) {
		tls_depth++;
		return tls_cell;
	}
	bits = atomic_load_explicit(&dev->claim_bits, memory_order_relaxed);
	for (;;) {
		if (bits == ~0u) {
			sched_yield();
			bits = atomic_load_explicit(&dev->claim_bits, memory_order_relaxed);
			continue;
		}
		uint32_t i = (uint32_t)__builtin_ctz(~bits);

		if (atomic_compare_exchange_weak_explicit(&dev->claim_bits, &bits,
							  bits | 1u << i,
							  memory_order_acquire,
							  memory_order_relaxed)) {
			tls_cell = &dev->seg->claims[dev->slot][i];
			tls_dev = dev;
			tls_depth = 1;
			return tls_cell;
		}
	}
}

/* The operation is done with c: the cell goes back with its last use. */
void hca_claim_put(struct hca_dev *dev, struct hca_claim *c)
{
	uint32_t i = (uint32_t)(c - dev->seg->claims[dev->slot]);

	if (c == tls_cell && --tls_depth)
		return; /* an outer operation of this thread still holds it */
	tls_cell = NULL;
	cell_state(c, CL_NONE);
	atomic_fetch_and_explicit(&dev->claim_bits, ~(1u << i), memory_order_release);
}

/* The held WQE is consumed without a completion (its target is gone). */
void hca_claim_drop(struct hca_claim *c)
{
	cell_state(c, CL_NONE);
}

/* Take the oldest WQE of ring r (named by ref) into c->wqe: c HELD. */
bool hca_claim_take_wqe(struct hca_seg *seg, struct hca_claim *c, struct hca_ring *r,
			const struct hca_claim_ring *ref)
{
	uint32_t body = r->stride - 8;
	void *slot;

	if (body > sizeof(c->wqe))
		return false;
	c->op = *ref;
	c->op.body = body;
	cell_state(c, CL_POP);
	slot = hca_ring_take(r, hca_claim_who(seg, c), &c->op.pos);
	if (!slot) {
		cell_state(c, CL_NONE);
		return false;
	}
	hca_die_at(HCA_DIE_RQ_CLAIMED);
	memcpy(c->wqe, slot, body);
	c->from = c->op;
	cell_state(c, CL_HELD);
	hca_ring_release(r, c->from.pos);
	hca_die_at(HCA_DIE_RQ_HELD);
	return true;
}

/*
 * Push body into ring r (named by ref) as c. With releases, this entry is
 * the held WQE's completion: once it is whole, the WQE is accounted for.
 * With stamp_at, the body's word at that offset is an embedded payload's
 * state (cq_embed.c): it is written as READY at the claimed position, by
 * an atomic store of its own (a sweeper may CAS it), before PUSHED.
 * -1 when the ring is full (the WQE, with releases, is then consumed).
 */
int hca_claim_push(struct hca_seg *seg, struct hca_claim *c, struct hca_ring *r,
		   const struct hca_claim_ring *ref, const void *body, uint32_t len,
		   bool releases, uint32_t stamp_at)
{
	uint32_t keep = atomic_load_explicit(&c->state, memory_order_relaxed) &
			(CL_HELD | CL_INL);
	void *slot;

	c->op = *ref;
	c->op.body = len;
	cell_state(c, keep | CL_PUSH | (releases ? CL_RELEASES : 0));
	slot = hca_ring_reserve(r, hca_claim_who(seg, c), &c->op.pos);
	if (!slot) {
		cell_state(c, releases ? CL_NONE : keep);
		return -1;
	}
	hca_die_at(HCA_DIE_CQ_CLAIMED);
	if (stamp_at) {
		const char *b = body;

		memcpy(slot, b, stamp_at);
		atomic_store_explicit((_Atomic uint64_t *)((char *)slot + stamp_at),
				      hca_emb_ready(c->op.pos), memory_order_relaxed);
		memcpy((char *)slot + stamp_at + 8, b + stamp_at + 8, len - stamp_at - 8);
	} else {
		memcpy(slot, body, len);
	}
	cell_state(c, (releases ? 0 : keep) | CL_PUSHED);
	hca_die_at(HCA_DIE_CQ_WRITTEN);
	hca_ring_publish(r, c->op.pos);
	cell_state(c, releases ? CL_NONE : keep);
	return 0;
}

/*
 * Inline slots (cq_inline.c): the tag a slot's state word carries while
 * this cell's current claim holds it — who, and a count of the cell's
 * inline claims, so that a slot of an earlier claim, not yet polled, is
 * never taken for this one's.
 */
uint64_t hca_claim_inl_begin(struct hca_seg *seg, struct hca_claim *c, uint32_t cq,
			     uint32_t handle, uint64_t pool_off)
{
	c->inl_seq++;
	c->inl_cq = cq;
	c->inl_handle = handle;
	c->inl_pool = pool_off;
	c->inl_tag = (uint64_t)hca_claim_who(seg, c) << 8 | (uint64_t)c->inl_seq << 24;
	return c->inl_tag;
}

/* Slot k is about to be tried: recorded before the CAS that claims it. */
void hca_claim_inl_try(struct hca_claim *c, uint32_t k)
{
	c->inl_k = k;
	cell_state(c, atomic_load_explicit(&c->state, memory_order_relaxed) | CL_INL);
}

/* ---- recovery ---- */

static struct hca_ring *ring_of(struct hca_seg *seg, const struct hca_claim_ring *ref)
{
	uint64_t off = 0;

	if (ref->kind == HCA_CLAIM_CQ && ref->idx < HCA_MAX_CQ) {
		struct hca_cq_ent *e = &seg->cqs[ref->idx];

		if (ref->handle && atomic_load(&e->handle) == ref->handle)
			off = e->ring_off;
	} else if (ref->kind == HCA_CLAIM_SRQ && ref->idx < HCA_MAX_SRQ) {
		struct hca_srq_ent *e = &seg->srqs[ref->idx];

		if (ref->handle && atomic_load(&e->handle) == ref->handle)
			off = e->ring_off;
	} else if (ref->kind == HCA_CLAIM_RQ) {
		struct hca_qp_ent *e = hca_qp_ent_at(seg, ref->idx);

		if (e && ref->idx && atomic_load(&e->qpn) == ref->idx)
			off = e->rq_off;
	}
	if (!off || off != ref->off)
		return NULL;
	struct hca_ring *r = hca_seg_ptr(seg, off);

	return r->stride - 8 >= ref->body ? r : NULL;
}

/* The op bits: finish or void the ring claim in flight. */
static uint32_t recover_op(struct hca_seg *seg, struct hca_claim *c, uint32_t who,
			   uint32_t st)
{
	struct hca_ring *r = ring_of(seg, &c->op);
	uint64_t pos = c->op.pos;

	switch (st & CL_OP) {
	case CL_POP:
		if (r && hca_ring_claimed(r, pos, who, HCA_RING_CCLAIM)) {
			memcpy(c->wqe, hca_ring_slot(r, pos) + 1, c->op.body);
			c->from = c->op;
			st = CL_HELD;
			cell_state(c, st);
		}
		break;
	case CL_PUSH:
		if (r && hca_ring_claimed(r, pos, who, HCA_RING_PCLAIM)) {
			hca_ring_skip(r, pos);
			hca_ring_advance(&r->head, pos);
		}
		break;
	case CL_PUSHED:
		if (r && hca_ring_claimed(r, pos, who, HCA_RING_PCLAIM)) {
			hca_ring_publish(r, pos);
			hca_ring_advance(&r->head, pos);
		}
		break;
	}
	st &= ~(CL_OP | CL_RELEASES);
	cell_state(c, st);
	return st;
}

/* The inline slot of a held WQE whose completion was never made. */
static void recover_inl(struct hca_seg *seg, struct hca_claim *c)
{
	struct hca_cq_ent *e = c->inl_cq < HCA_MAX_CQ ? &seg->cqs[c->inl_cq] : NULL;
	struct hca_inl_pool *p;
	struct hca_inl_slot *s;
	uint64_t w;

	if (!e || !c->inl_handle || atomic_load(&e->handle) != c->inl_handle ||
	    !e->inl_off || e->inl_off != c->inl_pool)
		return;
	p = hca_seg_ptr(seg, e->inl_off);
	if (c->inl_k >= p->nslots)
		return;
	s = hca_inl_slot(p, c->inl_k);
	/* the owner's sweep copies READY slots out under seg->lock, which we
	 * hold, and its poller never sees a slot whose completion was not
	 * published: COPYING here is a sweeper killed in its copy, and that
	 * slot stays (a slot lost from the pool, no more) */
	do {
		w = atomic_load_explicit(&s->state, memory_order_acquire);
		if ((w & ~0xffULL) != c->inl_tag || hca_inl_copying(w))
			return; /* not ours (never claimed, or freed already) */
	} while (!atomic_compare_exchange_strong_explicit(&s->state, &w, 0,
							   memory_order_release,
							   memory_order_relaxed));
}

/*
 * A held WQE of an RQ whose QP is in error by now: its owner flushed the
 * queue already (or is flushing it), so the WQE completes with
 * IBV_WC_WR_FLUSH_ERR into the QP's receive CQ, as the flush would have
 * done, rather than wait in a queue nobody flushes again. Returns false
 * if the WQE is not such a one.
 */
static bool flush_held(struct hca_seg *seg, struct hca_claim *c)
{
	struct hca_qp_ent *e = hca_qp_ent_at(seg, c->from.idx);
	struct hca_cqe cqe = { .status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV,
			       .qp_num = c->from.idx };
	struct hca_claim_ring ref = { .kind = HCA_CLAIM_CQ };
	struct hca_ring *r;

	if (c->from.kind != HCA_CLAIM_RQ || !e ||
	    atomic_load(&e->state) != IBV_QPS_ERR)
		return false;
	ref.idx = e->rcq;
	if (ref.idx < HCA_MAX_CQ) {
		ref.handle = atomic_load(&seg->cqs[ref.idx].handle);
		ref.off = seg->cqs[ref.idx].ring_off;
	}
	ref.body = sizeof(cqe);
	r = ring_of(seg, &ref);
	if (!r) {
		cell_state(c, CL_NONE);
		return true;
	}
	memcpy(&cqe.wr_id, c->wqe, sizeof(cqe.wr_id)); /* struct hca_rwqe's first field */
	if (hca_claim_push(seg, c, r, &ref, &cqe, sizeof(cqe), true, 0))
		atomic_fetch_add(&seg->claims_lost, 1); /* the CQ overran */
	return true;
}

/* The held WQE goes back to its queue, as the dead cell would have. */
static void recover_held(struct hca_seg *seg, struct hca_claim *c, uint32_t who,
			 uint32_t st)
{
	struct hca_ring *r = ring_of(seg, &c->from);

	if (r && hca_ring_claimed(r, c->from.pos, who, HCA_RING_CCLAIM)) {
		hca_ring_release(r, c->from.pos);
		hca_ring_advance(&r->tail, c->from.pos);
	}
	if (st & CL_INL)
		recover_inl(seg, c);
	if (!r) {
		cell_state(c, CL_NONE); /* its queue is gone, and the WQE with it */
		return;
	}
	cell_state(c, CL_HELD);
	if (flush_held(seg, c))
		return;
	if (hca_claim_push(seg, c, r, &c->from, c->wqe, c->from.body, true, 0))
		/* full: its owner posted past what it is owed meanwhile */
		atomic_fetch_add(&seg->claims_lost, 1);
}

/*
 * Complete or undo every claim of dead slot `slot` (seg->lock held, the
 * slot's process proven dead). Idempotent: a cell done is NONE.
 */
void hca_claims_recover(struct hca_seg *seg, uint16_t slot)
{
	if (slot >= HCA_MAX_PROCS)
		return;
	for (uint32_t i = 0; i < HCA_CLAIM_CELLS; i++) {
		struct hca_claim *c = &seg->claims[slot][i];
		uint32_t st = atomic_load_explicit(&c->state, memory_order_acquire);
		uint32_t who = hca_claim_who(seg, c);

		if (st == CL_NONE)
			continue;
		st = recover_op(seg, c, who, st);
		if (st & CL_HELD)
			recover_held(seg, c, who, st);
		cell_state(c, CL_NONE);
	}
}
