/*
 * Shared receive queues, and the posting of receive WQEs into any
 * receive ring (a QP's RQ or an SRQ): the ring is in the segment, the
 * owner produces, whichever process delivers a message consumes.
 */
#include <errno.h>
#include <stdlib.h>

#include "hca_int.h"
#include "mbox.h"

uint32_t hca_rwqe_body(uint32_t max_sge)
{
	return (uint32_t)(sizeof(struct hca_rwqe) + max_sge * sizeof(struct hca_rsge));
}

int hca_ring_post_recv(struct hca_ring *r, uint32_t max_sge,
		       struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		struct hca_rwqe *q;
		uint64_t pos;

		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge) {
			*bad = wr;
			return EINVAL;
		}
		q = hca_ring_reserve(r, HCA_RING_ANON, &pos);
		if (!q) {
			*bad = wr;
			return ENOMEM;
		}
		q->wr_id = wr->wr_id;
		q->num_sge = (uint32_t)wr->num_sge;
		for (int i = 0; i < wr->num_sge; i++) {
			q->sge[i].addr = wr->sg_list[i].addr;
			q->sge[i].length = wr->sg_list[i].length;
			q->sge[i].lkey = wr->sg_list[i].lkey;
		}
		hca_ring_publish(r, pos);
	}
	return 0;
}

static int srq_publish(struct hca_dev *dev, struct hca_srq *srq)
{
	struct hca_seg *seg = dev->seg;
	uint32_t cap = 1u << hca_ilog2_ceil(srq->max_wr);
	uint64_t ring = hca_ring_bytes(cap, hca_rwqe_body(srq->max_sge)), off;
	bool lanes = hca_mb_lanes_want(srq);
	uint64_t bytes = lanes ? hca_mb_lanes_block(ring) : ring;
	uint32_t idx = HCA_NONE;

	/* next fit from the hint, as memory keys: a freed number's index
	 * comes back only after the others; an entry holding a ring without
	 * a handle is one whose maker died (the reclaim of its slot frees it) */
	for (uint32_t n = 0; n < HCA_MAX_SRQ; n++) {
		uint32_t i = (seg->srq_hint + n) & (HCA_MAX_SRQ - 1);

		if (i && !atomic_load(&seg->srqs[i].handle) && !seg->srqs[i].ring_off) {
			idx = i;
			break;
		}
	}
	if (idx == HCA_NONE)
		return ENOMEM;
	struct hca_srq_ent *e = &seg->srqs[idx];
	e->owner = dev->slot;
	e->owner_gen = dev->gen;
	if (!(off = hca_dev_heap_alloc(dev, bytes)))
		return ENOMEM;
	hca_ring_init(hca_seg_ptr(seg, off), cap, hca_rwqe_body(srq->max_sge));
	((struct hca_ring *)hca_seg_ptr(seg, off))->extra = bytes - ring;
	e->ring_off = off; /* from here a death leaves it to the reclaim */
	seg->srq_hint = idx + 1;
	e->pd = srq->pd->id;
	e->max_sge = srq->max_sge;
	e->xrcd = srq->xrcd ? srq->xrcd->idx : HCA_NONE;
	e->cq = srq->cq ? srq->cq->idx : HCA_NONE;
	atomic_store(&e->limit, 0);
	atomic_store(&e->error, 0);
	for (int i = 0; i < HCA_MAX_PROCS / 64; i++)
		atomic_store(&e->rnr_waiters[i], 0);
	srq->handle = seg->next_handle++;
	if (!seg->next_handle)
		seg->next_handle = 1;
	srq->idx = idx;
	srq->ent = e;
	srq->ring = hca_seg_ptr(seg, off);
	srq->ring_size = bytes;
	srq->max_wr = cap;
	if (lanes)
		hca_mb_lanes_init(srq); /* before its number is published */
	hca_srq_tab_set(dev, idx, srq);
	if (++seg->srq_gen[idx] >= 1u << (24 - HCA_SRQ_IDX_BITS))
		seg->srq_gen[idx] = 1;
	srq->num = (uint32_t)seg->srq_gen[idx] << HCA_SRQ_IDX_BITS | idx;
	atomic_store_explicit(&e->handle, srq->handle, memory_order_release);
	atomic_store_explicit(&e->srqn, srq->num, memory_order_release);
	return 0;
}

struct hca_srq *hca_srq_create(struct hca_pd *pd, struct ibv_srq_attr *attr,
			       void *user)
{
	return hca_srq_make(pd, NULL, NULL, attr, user);
}

struct hca_srq *hca_srq_make(struct hca_pd *pd, struct hca_xrcd *xrcd,
			     struct hca_cq *cq, struct ibv_srq_attr *attr, void *user)
{
	struct hca_dev *dev = pd->ctx->dev;
	struct hca_srq *srq;
	int rc;

	if (!attr->max_wr || attr->max_wr > HCA_MAX_SRQ_WR ||
	    attr->max_sge > HCA_MAX_SRQ_SGE || attr->srq_limit > attr->max_wr) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	srq->pd = pd;
	srq->user = user;
	srq->xrcd = xrcd;
	srq->cq = cq;
	srq->max_wr = attr->max_wr;
	srq->max_sge = attr->max_sge ? attr->max_sge : 1;
	hca_seg_lock(dev->seg);
	rc = srq_publish(dev, srq);
	hca_dev_heap_done(dev);
	hca_seg_unlock(dev->seg);
	if (rc) {
		free(srq);
		errno = rc;
		return NULL;
	}
	/* the ring's capacity is what the SRQ really holds */
	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->max_sge;
	atomic_fetch_add(&pd->refs, 1);
	if (xrcd)
		atomic_fetch_add(&xrcd->refs, 1);
	if (cq)
		atomic_fetch_add(&cq->refs, 1);
	return srq;
}

/*
 * IBV_SRQ_LIMIT arms the limit event (one-shot: it fires once when the
 * number of queued WQEs drops below the limit, then disarms). Resizing
 * (IBV_SRQ_MAX_WR) is not supported: the device does not advertise
 * IBV_DEVICE_SRQ_RESIZE.
 */
int hca_srq_modify(struct hca_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	if (mask & IBV_SRQ_MAX_WR)
		return EINVAL;
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > srq->max_wr)
			return EINVAL;
		atomic_store(&srq->ent->limit, attr->srq_limit);
	}
	return 0;
}

int hca_srq_query(struct hca_srq *srq, struct ibv_srq_attr *attr)
{
	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = atomic_load(&srq->ent->limit);
	return 0;
}

/*
 * Free an SRQ entry (seg->lock held): its number first (a requester that
 * names it finds nothing from then on), then its handle; the ring's
 * offset is cleared before the block is freed, so that a death between
 * loses the block rather than have a reclaim free it twice.
 */
void hca_srq_ent_free(struct hca_seg *seg, struct hca_srq_ent *e)
{
	uint64_t off = e->ring_off;

	atomic_store_explicit(&e->srqn, 0, memory_order_release);
	atomic_store_explicit(&e->handle, 0, memory_order_release);
	if (off) {
		struct hca_ring *r = hca_seg_ptr(seg, off);
		uint64_t bytes = hca_ring_block(r);

		e->ring_off = 0;
		hca_heap_free(seg, off, bytes);
	}
}

/* The SRQ an XRC request names by number (NULL: none such now). */
struct hca_srq_ent *hca_srq_lookup(struct hca_seg *seg, uint32_t srqn)
{
	struct hca_srq_ent *e = &seg->srqs[srqn & (HCA_MAX_SRQ - 1)];

	if (!srqn || srqn > HCA_QPN_MASK ||
	    atomic_load_explicit(&e->srqn, memory_order_acquire) != srqn ||
	    !atomic_load_explicit(&e->handle, memory_order_acquire))
		return NULL;
	return e;
}

int hca_srq_destroy(struct hca_srq *srq)
{
	struct hca_dev *dev = srq->pd->ctx->dev;
	struct hca_seg *seg = dev->seg;

	if (atomic_load(&srq->refs))
		return EBUSY;
	hca_mb_lanes_fini(srq);
	hca_seg_lock(seg);
	hca_srq_tab_set(dev, srq->idx, NULL);
	hca_srq_ent_free(seg, srq->ent);
	hca_seg_unlock(seg);
	hca_pin_wait(&srq->pin); /* a doorbell dispatch acting on it */
	atomic_fetch_sub(&srq->pd->refs, 1);
	if (srq->xrcd)
		atomic_fetch_sub(&srq->xrcd->refs, 1);
	if (srq->cq)
		atomic_fetch_sub(&srq->cq->refs, 1);
	free(srq);
	return 0;
}

int hca_srq_post_recv(struct hca_srq *srq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad)
{
	if (atomic_load(&srq->ent->error)) {
		*bad = wr;
		return EINVAL;
	}
	int rc = hca_ring_post_recv(srq->ring, srq->max_sge, wr, bad);

	hca_rnr_kick(srq->pd->ctx->dev, srq->ent->rnr_waiters);
	return rc;
}

/*
 * The SRQ number peers name it by (XRC): a 12-bit generation of its
 * entry above the 12-bit index, so that a number of a destroyed SRQ —
 * or of a dead process's — names nothing for the next 4,094 SRQs made
 * on that entry (and entries are taken next-fit, docs/shared-segment.md).
 */
uint32_t hca_srq_num(struct hca_srq *srq)
{
	return srq->num;
}
