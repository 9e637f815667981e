/*
 * Reclaiming what a process held, when it is proven dead (live.c, dev.c)
 * or closes its device: its QPs, XRC registrations and domain opens, CQs,
 * SRQs, memory keys, its bounce mailbox, its QP directory pages, then its
 * slot. Everything of the host's segment that a process owns records its
 * owner as (slot, generation), and everything is freed here by that pair.
 *
 * Whoever notices a death first reclaims; the others find it done: the
 * whole reclaim runs under seg->lock and acts only while the slot still
 * holds that generation, LIVE, or DEAD (a reclaimer that died half-way —
 * every step skips what is already freed, so the next one finishes).
 *
 * Objects a process was making when it died (under seg->lock, unpublished)
 * are found by their owner fields: their entries are marked ours and hold
 * their blocks' offsets before anything is published (qp.c, cq.c, srq.c),
 * and an entry holding a block is not free for another maker until the
 * reclaim of its slot has freed it.
 */
#include "hca_int.h"

struct reclaim_arg {
	uint16_t slot;
	uint32_t gen;
};

static void reclaim_qp(struct hca_seg *seg, struct hca_qp_ent *e, void *arg)
{
	const struct reclaim_arg *a = arg;

	/* XRC targets are the domain's: hca_xrc_reclaim drops the bit */
	if (e->owner == a->slot && e->owner_gen == a->gen && e->type != IBV_QPT_XRC_RECV)
		hca_qp_ent_free(seg, e, 0);
}

/*
 * The QP numbers of a slot whose process is gone (seg->lock held, after
 * its QPs were freed): its counts made again from the entries — a death
 * inside qp_publish leaves a number counted and unpublished — the ring of
 * an entry it was making freed, and every page left without a QP freed,
 * the cursor's too (the next process on the slot makes it again).
 */
static void qp_slot_tidy(struct hca_seg *seg, uint16_t slot, uint32_t gen)
{
	uint32_t first = ((uint32_t)slot + 1) << (HCA_QPN_K_BITS - HCA_QP_PAGE_BITS), live = 0;

	for (uint32_t pg = first; pg < first + HCA_QP_PER_PROC / HCA_QP_PAGE; pg++) {
		struct hca_qp_ent *p = hca_qp_page(seg, pg);
		uint32_t n = 0;

		for (uint32_t i = 0; p && i < HCA_QP_PAGE; i++) {
			struct hca_qp_ent *e = &p[i];

			if (atomic_load(&e->qpn)) {
				n++;
			} else if (e->rq_off && e->owner == slot && e->owner_gen == gen) {
				uint64_t off = e->rq_off;
				struct hca_ring *r = hca_seg_ptr(seg, off);

				e->rq_off = 0;
				e->mb_off = 0;
				hca_heap_free(seg, off, hca_ring_block(r));
			}
		}
		if (!p)
			continue;
		seg->qp_page_live[pg] = (uint16_t)n;
		live += n;
		if (!n) {
			uint64_t off = atomic_load(&seg->qp_pages[pg]);

			atomic_store_explicit(&seg->qp_pages[pg], 0, memory_order_release);
			hca_heap_free(seg, off, (uint64_t)HCA_QP_PAGE * sizeof(*p));
		}
	}
	seg->qp_live[slot] = live;
}

static void reclaim_qps(struct hca_seg *seg, uint16_t slot, uint32_t gen)
{
	struct reclaim_arg a = { slot, gen };

	/* a process's QPs are in its slot's pages only */
	hca_qp_ent_each(seg, ((uint32_t)slot + 1) << (HCA_QPN_K_BITS - HCA_QP_PAGE_BITS),
			HCA_QP_PER_PROC / HCA_QP_PAGE, reclaim_qp, &a);
	hca_xrc_reclaim(seg, slot);
	qp_slot_tidy(seg, slot, gen);
}

static bool ours(uint16_t owner, uint32_t owner_gen, uint16_t slot, uint32_t gen)
{
	return owner == slot && owner_gen == gen;
}

static void reclaim_rest(struct hca_seg *seg, uint16_t slot, uint32_t gen)
{
	for (uint32_t i = 0; i < HCA_MAX_CQ; i++) {
		struct hca_cq_ent *e = &seg->cqs[i];

		if ((atomic_load(&e->handle) || e->ring_off || e->inl_off) &&
		    ours(e->owner, e->owner_gen, slot, gen)) {
			atomic_store_explicit(&e->handle, 0, memory_order_release);
			hca_cq_ent_free(seg, e);
		}
	}
	for (uint32_t i = 0; i < HCA_MAX_SRQ; i++) {
		struct hca_srq_ent *e = &seg->srqs[i];

		if ((atomic_load(&e->handle) || e->ring_off) &&
		    ours(e->owner, e->owner_gen, slot, gen))
			hca_srq_ent_free(seg, e);
	}
	for (uint32_t i = 0; i < HCA_MAX_MR; i++) {
		struct hca_mr_ent *e = &seg->mrs[i];

		if (atomic_load(&e->key) && ours(e->owner, e->owner_gen, slot, gen))
			atomic_store_explicit(&e->key, 0, memory_order_release);
	}
}

/* Does an object of the host hold the block at off? (seg->lock held) */
static bool block_held(struct hca_seg *seg, uint16_t slot, uint64_t off)
{
	uint32_t first = ((uint32_t)slot + 1) << (HCA_QPN_K_BITS - HCA_QP_PAGE_BITS);

	for (uint32_t i = 0; i < HCA_MAX_PROCS; i++)
		if (seg->procs[i].bounce_off == off)
			return true;
	for (uint32_t i = 0; i < HCA_MAX_CQ; i++)
		if (seg->cqs[i].ring_off == off || seg->cqs[i].inl_off == off)
			return true;
	for (uint32_t i = 0; i < HCA_MAX_SRQ; i++)
		if (seg->srqs[i].ring_off == off)
			return true;
	/* rings of QPs and directory pages: the slot's own only */
	for (uint32_t pg = first; pg < first + HCA_QP_PER_PROC / HCA_QP_PAGE; pg++) {
		struct hca_qp_ent *p = hca_qp_page(seg, pg);

		if (atomic_load(&seg->qp_pages[pg]) == off)
			return true;
		for (uint32_t i = 0; p && i < HCA_QP_PAGE; i++)
			if (p[i].rq_off == off)
				return true;
	}
	return false;
}

/*
 * A block the dead process was taking when it died (struct hca_heap_rec):
 * freed unless an object holds it — it was recorded in its object, which
 * the reclaim frees in its turn, or it is someone's. Before anything else
 * is freed, so that "held" still means held.
 */
static void reclaim_taking(struct hca_seg *seg, uint16_t slot)
{
	struct hca_heap_rec *rec = &seg->procs[slot].alloc;
	uint64_t off = rec->off;

	rec->off = 0;
	if (off && !block_held(seg, slot, off))
		hca_heap_free(seg, off, 1ULL << rec->order);
}

void hca_reclaim_slot(struct hca_seg *seg, uint16_t slot, uint32_t gen)
{
	struct hca_proc *p = &seg->procs[slot];
	uint32_t st;

	hca_seg_lock(seg);
	st = atomic_load(&p->state);
	if (p->gen == gen && (st == HCA_PROC_LIVE || st == HCA_PROC_DEAD)) {
		uint64_t bounce = p->bounce_off;

		atomic_store(&p->state, HCA_PROC_DEAD);
		reclaim_taking(seg, slot);
		hca_claims_recover(seg, slot); /* its half-done ring claims */
		reclaim_qps(seg, slot, gen);
		reclaim_rest(seg, slot, gen);
		p->bounce_off = 0; /* cleared first: never freed twice */
		hca_heap_free(seg, bounce, seg->bounce_bytes);
		p->freed_ns = hca_now_ns();
		p->pid = 0;
		atomic_store(&p->state, HCA_PROC_FREE);
		atomic_fetch_add(&seg->members, 1);
	}
	hca_seg_unlock(seg);
}
