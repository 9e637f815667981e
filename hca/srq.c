/*
 * Shared receive queues, and the posting of receive WQEs into any
 * receive ring (a QP's RQ or an SRQ): the ring is in the segment, the
 * owner produces, whichever process delivers a message consumes.
 */
#include <errno.h>
#include <stdlib.h>

#include "hca_int.h"

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
	uint64_t bytes = hca_ring_bytes(cap, hca_rwqe_body(srq->max_sge)), off;
	uint32_t idx;

	for (idx = 1; idx < HCA_MAX_SRQ; idx++)
		if (!atomic_load(&seg->srqs[idx].handle))
			break;
	if (idx == HCA_MAX_SRQ || !(off = hca_heap_alloc(seg, bytes)))
		return ENOMEM;
	hca_ring_init(hca_seg_ptr(seg, off), cap, hca_rwqe_body(srq->max_sge));
	struct hca_srq_ent *e = &seg->srqs[idx];
	e->owner = dev->slot;
	e->owner_gen = dev->gen;
	e->ring_off = off;
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
	hca_srq_tab_set(dev, idx, srq);
	atomic_store_explicit(&e->handle, srq->handle, memory_order_release);
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

int hca_srq_destroy(struct hca_srq *srq)
{
	struct hca_dev *dev = srq->pd->ctx->dev;
	struct hca_seg *seg = dev->seg;

	if (atomic_load(&srq->refs))
		return EBUSY;
	hca_seg_lock(seg);
	atomic_store_explicit(&srq->ent->handle, 0, memory_order_release);
	hca_srq_tab_set(dev, srq->idx, NULL);
	hca_heap_free(seg, srq->ent->ring_off, srq->ring_size);
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

uint32_t hca_srq_num(struct hca_srq *srq)
{
	return srq->idx;
}
