/*
 * The lanes of an XRC SRQ (struct hca_mb_lanes, mbox.h; mbox.c states the
 * mailbox protocol and its order with the ring path): made with the SRQ
 * when its CQ has room to scan them, claimed by the requester QPs of this
 * host that send to it, consumed by the SRQ owner's polls (mbox.c), given
 * back at a QP's destroy, and freed by the owner's sweep once their QP is
 * gone.
 */
#include <string.h>

#include "env.h"
#include "hca_int.h"
#include "mbox.h"

/* ---- an XRC SRQ's lanes (struct hca_mb_lanes, mbox.h) ---- */

static _Atomic int xrc_env = -1;

/* Whether the CQ's polls have room to scan one more mailbox. */
static bool cq_has_room(struct hca_cq *cq)
{
	for (int i = 0; i < HCA_MB_PER_CQ; i++)
		if (!atomic_load(&cq->mb_rx[i]))
			return true;
	return false;
}

/*
 * Does this SRQ get lanes? XRC, with a CQ that can still scan one (the
 * lanes' memory is not taken for nothing); SOFTIB_MBOX_XRC=0 says no.
 */
bool hca_mb_lanes_want(const struct hca_srq *srq)
{
	return srq->xrcd && srq->cq && hca_mb_max() &&
	       !(srq->cq->flags & HCA_CQ_TIMESTAMPS) && cq_has_room(srq->cq) &&
	       hca_env_once(&xrc_env, "SOFTIB_MBOX_XRC", 1, 0, 1);
}

/* The bytes an SRQ's ring block needs for ring_bytes of ring and lanes. */
uint64_t hca_mb_lanes_block(uint64_t ring_bytes)
{
	return ((ring_bytes + 63) & ~63ULL) + sizeof(struct hca_mb_lanes);
}

/*
 * The SRQ is made (its ring's extra holds the lanes), not yet published:
 * each lane its CQ has room to scan gets an epoch; the others keep 0,
 * and no requester binds them.
 */
void hca_mb_lanes_init(struct hca_srq *srq)
{
	struct hca_mb_lanes *l = hca_mb_lanes_of(srq->ring);
	struct hca_dev *dev = srq->pd->ctx->dev;

	srq->lanes = l;
	for (int k = 0; k < HCA_MB_LANES; k++)
		srq->lane[k] = (struct hca_mb_rx){ .srq = srq, .k = k, .ri = -1 };
	if (!l)
		return;
	memset(l, 0, sizeof(*l));
	for (int k = 0; k < HCA_MB_LANES; k++) {
		struct hca_mb_rx *x = &srq->lane[k];

		x->mb = &l->lane[k];
		x->ri = hca_mb_rx_list_add(srq->cq, x);
		if (x->ri < 0)
			continue;
		hca_mb_rx_publish(srq->cq, x, srq->ring);
		atomic_store_explicit(&x->mb->epoch, hca_mb_new_epoch(dev), memory_order_release);
	}
}

/* Destroy: requesters see the epochs go; no scanner holds a lane after. */
void hca_mb_lanes_fini(struct hca_srq *srq)
{
	for (int k = 0; k < HCA_MB_LANES && srq->lanes; k++) {
		struct hca_mb_rx *x = &srq->lane[k];

		if (x->ri < 0)
			continue;
		atomic_store(&x->mb->epoch, 0);
		hca_mb_rx_unpublish(srq->cq, x);
	}
}

/*
 * The sweep (mb_busy held, the lane just drained): a lane whose QP is
 * gone (its process dead, or the number no longer its) is free again.
 * Its messages were all taken, or are lost with their sender; the next
 * requester goes on from the stored position (or the consumer index, if
 * that is past it).
 */
void hca_mb_lane_sweep(struct hca_dev *dev, struct hca_cq *cq, int i, struct hca_mb_rx *x)
{
	_Atomic uint64_t *ow = &x->srq->lanes->owner[x->k];
	uint64_t o = atomic_load(ow), pos, w;
	uint16_t slot = (uint16_t)(o >> 48);
	uint32_t gen = (uint32_t)(o >> 24) & 0xffffff, qpn = (uint32_t)o & 0xffffff;
	struct hca_qp_ent *e;

	if (!o)
		return;
	e = hca_qp_lookup(dev->seg, qpn);
	if (e && atomic_load(&e->qpn) == qpn && e->owner == slot &&
	    (e->owner_gen & 0xffffff) == gen && hca_peer_check(dev, slot, e->owner_gen) != HCA_LIVE_DEAD)
		return;
	/* freed once every message it put was passed: the next owner puts
	 * its first at the stored position, which a message half written
	 * by a dead one is at (or past, unreleased): it is overwritten */
	pos = atomic_load_explicit(&cq->mb_pos[i], memory_order_relaxed);
	w = atomic_load_explicit(&hca_mb_at(x->mb, pos)->word, memory_order_acquire);
	if ((int64_t)(pos - atomic_load_explicit(&x->mb->prod, memory_order_relaxed)) < 0 ||
	    w == hca_mb_word(pos, HCA_MB_READY))
		return;
	atomic_compare_exchange_strong(ow, &o, 0);
}

/* The SRQ limit event is one-shot: it disarms as it fires (as resp.c's). */
void hca_mb_lane_srq_limit(struct hca_srq *srq)
{
	uint32_t limit = atomic_load(&srq->ent->limit);

	if (limit && hca_ring_count(srq->ring) < limit && atomic_exchange(&srq->ent->limit, 0))
		hca_raise_srq_event(srq->pd->ctx->dev, srq->idx, IBV_EVENT_SRQ_LIMIT_REACHED);
}

/*
 * An XRC receive QP's first message establishes it (the event goes to
 * the QP's owner, as the ring path's responder raises it); a lane
 * remembers which one it did that for.
 */
void hca_mb_lane_est(struct hca_dev *dev, struct hca_mb_rx *x, uint32_t tgt)
{
	struct hca_qp_ent *e;

	if (x->est_qpn == tgt)
		return;
	e = hca_qp_lookup(dev->seg, tgt);
	if (!e)
		return;
	if (atomic_load(&e->state) == IBV_QPS_RTR && !atomic_exchange(&e->comm_est, 1))
		hca_raise_qp_event(dev, e, IBV_EVENT_COMM_EST);
	x->est_qpn = tgt;
}

/*
 * Requester: whether the mailbox bound is still the one its receiver's
 * entry names (an RC QP's, or a lane of the XRC SRQ): while it is, the
 * memory is a mailbox and a retract may write it.
 */
bool hca_mb_still_named(struct hca_qp *qp)
{
	struct hca_qp_ent *e = qp->mb_e;

	if (qp->mb_srqn) {
		struct hca_srq_ent *s = hca_srq_lookup(qp->dev->seg, qp->mb_srqn);
		struct hca_mb_lanes *l = s && s->ring_off ?
			hca_mb_lanes_of(hca_seg_ptr(qp->dev->seg, s->ring_off)) : NULL;

		return l && qp->mb && (char *)qp->mb >= (char *)l->lane &&
		       (char *)qp->mb < (char *)(l->lane + HCA_MB_LANES);
	}
	return e && atomic_load(&e->qpn) == qp->attr->dest_qp_num &&
	       e->mb_off == qp->mb_boff;
}

/*
 * Destroy: an XRC send QP gives its lane back, if every message it put
 * there was passed (else the receiver's sweep frees it once we are gone).
 */
void hca_mb_lane_release(struct hca_qp *qp)
{
	struct hca_srq_ent *s;
	struct hca_mb_lanes *l;
	uint64_t me;

	if (!qp->mb_srqn || !qp->mb || qp->mb_n || !hca_mb_still_named(qp) ||
	    atomic_load(&qp->mb->cons) != qp->mb_prod)
		return;
	s = hca_srq_lookup(qp->dev->seg, qp->mb_srqn);
	l = s ? hca_mb_lanes_of(hca_seg_ptr(qp->dev->seg, s->ring_off)) : NULL;
	if (!l)
		return;
	me = hca_mb_owner(qp->dev->slot, qp->dev->gen, qp->qpn);
	atomic_compare_exchange_strong(&l->owner[qp->mb - l->lane], &me, 0);
	qp->mb = NULL;
	qp->mb_srqn = 0;
}
