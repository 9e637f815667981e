/*
 * The QP number space: which numbers exist, which are taken, and the
 * directory that maps a number to its QP's entry in the segment.
 *
 * A number is (owner's process slot + 1) << 16 | k, k handed out
 * round-robin over the slot's 65,536 numbers. The slot in the number is
 * how a remote host finds the UDP port of the QP's process (link_udp.c);
 * the round-robin means a freed number comes back only after the slot's
 * others, so a late packet for a dead QP never reaches a new one. The
 * directory is indexed by the number itself, in pages made when the
 * slot's cursor first reaches them and freed once their last QP has gone
 * and the cursor has moved on (docs/shared-segment.md). Freeing an entry
 * also lets go of what the segment holds for it: its receive ring and its
 * multicast memberships. What a QP is and does is qp.c's.
 */
#include <errno.h>

#include "hca_int.h"

/* O(1) and lock-free: two acquire loads (the page, the entry's number). */
struct hca_qp_ent *hca_qp_lookup(struct hca_seg *seg, uint32_t qpn)
{
	struct hca_qp_ent *e = hca_qp_ent_at(seg, qpn);

	if (!qpn || !e || atomic_load_explicit(&e->qpn, memory_order_acquire) != qpn)
		return NULL;
	return e;
}

static uint32_t qpn_of(uint16_t slot, uint32_t k)
{
	return ((uint32_t)slot + 1) << HCA_QPN_K_BITS | k;
}

/* A directory page for qpn's page, made if absent (seg->lock held). */
static struct hca_qp_ent *qp_page_get(struct hca_seg *seg, uint32_t qpn)
{
	uint32_t pg = qpn >> HCA_QP_PAGE_BITS;
	struct hca_qp_ent *p = hca_qp_page(seg, pg);
	uint64_t off;

	if (p)
		return p;
	/* recorded in the slot while it is being made (reclaim.c) */
	off = hca_heap_alloc_rec(seg, (uint64_t)HCA_QP_PAGE * sizeof(*p),
				 &seg->procs[hca_qpn_slot(qpn)].alloc);
	if (!off)
		return NULL;
	p = hca_seg_ptr(seg, off);
	for (uint32_t i = 0; i < HCA_QP_PAGE; i++)
		p[i].num = (pg << HCA_QP_PAGE_BITS) | i;
	seg->qp_page_live[pg] = 0;
	atomic_store_explicit(&seg->qp_pages[pg], off, memory_order_release);
	return p;
}

/*
 * A page with no live entry goes (into the heap's quarantine: a reader
 * that loaded its offset just before may still look at it), unless the
 * slot's cursor is in it — the next QPs come from there.
 */
static void qp_page_maybe_free(struct hca_seg *seg, uint32_t pg)
{
	uint64_t off = atomic_load(&seg->qp_pages[pg]);
	uint32_t slot = hca_qpn_slot(pg << HCA_QP_PAGE_BITS);

	if (!off || seg->qp_page_live[pg])
		return;
	if (slot != HCA_NONE &&
	    qpn_of((uint16_t)slot, seg->qp_next[slot]) >> HCA_QP_PAGE_BITS == pg)
		return;
	atomic_store_explicit(&seg->qp_pages[pg], 0, memory_order_release);
	hca_heap_free(seg, off, (uint64_t)HCA_QP_PAGE * sizeof(struct hca_qp_ent));
}

/*
 * A free number of our slot, round-robin from the one after the last
 * handed out (seg->lock held), and its entry. A freed number thus comes
 * back only after the slot's 65,535 others have been tried: that is what
 * makes a late packet for a dead QP find no QP rather than a new one.
 * NULL: all 65,536 are in use (ENOMEM), or no memory for a page.
 */
struct hca_qp_ent *hca_qp_num_alloc(struct hca_seg *seg, uint16_t slot, int *err)
{
	uint32_t left_pg = qpn_of(slot, seg->qp_next[slot]) >> HCA_QP_PAGE_BITS;

	*err = ENOMEM;
	if (seg->qp_live[slot] >= HCA_QP_PER_PROC)
		return NULL;
	for (uint32_t n = 0; n < HCA_QP_PER_PROC; n++) {
		uint32_t k = (seg->qp_next[slot] + n) & (HCA_QP_PER_PROC - 1);
		uint32_t qpn = qpn_of(slot, k);
		struct hca_qp_ent *e = hca_qp_ent_at(seg, qpn);

		if (e && atomic_load(&e->qpn))
			continue;
		if (!e) {
			struct hca_qp_ent *page = qp_page_get(seg, qpn);

			if (!page)
				return NULL;
			e = page + (qpn & (HCA_QP_PAGE - 1));
		}
		seg->qp_next[slot] = (uint16_t)(k + 1);
		seg->qp_page_live[qpn >> HCA_QP_PAGE_BITS]++;
		seg->qp_live[slot]++;
		if (left_pg != qpn >> HCA_QP_PAGE_BITS)
			qp_page_maybe_free(seg, left_pg); /* the cursor left it */
		*err = 0;
		return e;
	}
	return NULL;
}

/* Give back a number hca_qp_num_alloc handed out and nothing published. */
void hca_qp_num_unalloc(struct hca_seg *seg, struct hca_qp_ent *e)
{
	uint32_t pg = e->num >> HCA_QP_PAGE_BITS, slot = hca_qpn_slot(e->num);

	if (slot != HCA_NONE && seg->qp_live[slot])
		seg->qp_live[slot]--;
	if (seg->qp_page_live[pg])
		seg->qp_page_live[pg]--;
	qp_page_maybe_free(seg, pg);
}

/* Free a directory entry (seg->lock held): its number queues for reuse. */
void hca_qp_ent_free(struct hca_seg *seg, struct hca_qp_ent *e, uint64_t rq_bytes)
{
	uint32_t qpn = atomic_load(&e->qpn), slot = hca_qpn_slot(e->num);

	if (!qpn)
		return;
	atomic_store(&e->state, IBV_QPS_ERR);
	atomic_store_explicit(&e->qpn, 0, memory_order_release);
	if (e->rq_off) {
		uint64_t off = e->rq_off;
		struct hca_ring *r = hca_seg_ptr(seg, off);

		/* unrecorded before it is freed: a death between the two
		 * loses the block rather than have a reclaim free it twice */
		e->rq_off = 0;
		e->mb_off = 0;
		hca_heap_free(seg, off, rq_bytes ? rq_bytes : hca_ring_block(r));
	}
	for (int g = 0; g < HCA_MAX_MCAST_GRP; g++) {
		struct hca_mcg *m = &seg->mcgs[g];

		for (int k = 0; k < m->nqp; k++)
			if (m->qpn[k] == qpn)
				m->qpn[k--] = m->qpn[--m->nqp];
	}
	if (slot != HCA_NONE && seg->qp_live[slot])
		seg->qp_live[slot]--;
	if (seg->qp_page_live[e->num >> HCA_QP_PAGE_BITS]) {
		seg->qp_page_live[e->num >> HCA_QP_PAGE_BITS]--;
		qp_page_maybe_free(seg, e->num >> HCA_QP_PAGE_BITS);
	}
}

/* Every live entry of the directory, page by page (seg->lock held). */
void hca_qp_ent_each(struct hca_seg *seg, uint32_t first_pg, uint32_t npg,
		     void (*fn)(struct hca_seg *, struct hca_qp_ent *, void *), void *arg)
{
	for (uint32_t pg = first_pg; pg < first_pg + npg && pg < HCA_QP_PAGES; pg++) {
		struct hca_qp_ent *p = hca_qp_page(seg, pg);

		for (uint32_t i = 0; p && i < HCA_QP_PAGE; i++) {
			if (atomic_load(&p[i].qpn))
				fn(seg, &p[i], arg);
			/* fn may have freed the page with its last entry */
			p = hca_qp_page(seg, pg);
		}
	}
}
