/*
 * Taking one message out of a receive mailbox (mbox.c states the
 * protocol and its memory ordering): the receive WQE from the receiver's
 * own queue (an RC QP's RQ, or an XRC SRQ for a lane), the scatter list
 * checked against its own memory keys as the responder would, the bytes
 * copied straight from the slots, the completion made; the slots go back
 * when the caller has put the completion out (hca_mb_commit).
 */
#include <string.h>

#include "hca_int.h"
#include "mbox.h"

/* ---- the receiver ---- */

static bool state_receives(uint8_t s)
{
	return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD ||
	       s == IBV_QPS_SQE;
}

struct mb_rwqe {
	struct hca_rwqe h;
	struct hca_rsge sge[HCA_MAX_SGE];
};

/* The receive WQE's ranges for len bytes, checked as the responder does. */
static enum ibv_wc_status mb_ranges(struct hca_dev *dev, uint32_t pd, const struct mb_rwqe *w,
				    uint32_t len, struct hca_inl_iov *v, uint32_t *nv)
{
	uint64_t room = 0;

	*nv = 0;
	for (uint32_t i = 0; i < w->h.num_sge && i < HCA_MAX_SGE && room < len; i++) {
		const struct hca_rsge *s = &w->sge[i];
		struct hca_mr_ent *mr;
		uint64_t take;

		if (!s->length)
			continue;
		mr = hca_mr_lookup(dev->seg, s->lkey);
		if (!mr || mr->owner != dev->slot || mr->owner_gen != dev->gen ||
		    mr->pd != pd || !(mr->access & IBV_ACCESS_LOCAL_WRITE) ||
		    s->addr < mr->iova || s->length > mr->length ||
		    s->addr - mr->iova > mr->length - s->length)
			return IBV_WC_LOC_PROT_ERR;
		take = s->length < len - room ? s->length : len - room;
		v[*nv] = (struct hca_inl_iov){ .addr = mr->addr + (s->addr - mr->iova),
					       .len = (uint32_t)take, .lkey = s->lkey };
		(*nv)++;
		room += take;
	}
	return room < len ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS;
}

/*
 * The message's bytes out of its slots into the ranges mb_ranges found
 * (inside the same copy section): straight from the slots, around the
 * ring's end when they wrap.
 */
static void mb_copy(struct hca_mbox *mb, uint64_t pos, uint32_t len,
		    const struct hca_inl_iov *v, uint32_t nv)
{
	uint32_t room;
	uint8_t *src = hca_mb_bytes(mb, pos, &room);

	for (uint32_t i = 0; i < nv && len; i++) {
		hca_mb_run(mb, &src, &room, (uint8_t *)(uintptr_t)v[i].addr, v[i].len, false);
		len -= v[i].len;
	}
}

/*
 * The receive WQE's ranges checked and the bytes copied in one copy
 * section (a dereg of the receive buffer waits for it, or the lookup
 * finds the key gone: fence.c), one lookup per range.
 */
static enum ibv_wc_status mb_deliver(struct hca_dev *dev, uint32_t pd, const struct mb_rwqe *w,
				     struct hca_mbox *mb, uint64_t pos, uint32_t len)
{
	struct hca_inl_iov v[HCA_MAX_SGE];
	enum ibv_wc_status st;
	struct hca_fence f;
	uint32_t nv;

	hca_fence_enter(dev, &f);
	st = mb_ranges(dev, pd, w, len, v, &nv);
	if (st == IBV_WC_SUCCESS)
		mb_copy(mb, pos, len, v, nv);
	hca_fence_exit(&f);
	return st;
}

/*
 * Whether the mailbox's receiver takes messages now: an RC QP in a
 * receiving state (*qs: that state), an SRQ not in error.
 */
static bool rx_receives(const struct hca_mb_rx *x, uint8_t *qs)
{
	if (x->qp) {
		*qs = atomic_load(&x->qp->ent->state);
		return state_receives(*qs);
	}
	*qs = IBV_QPS_RTS;
	return !atomic_load(&x->srq->ent->error);
}

static struct hca_ring *rx_ring(const struct hca_mb_rx *x, uint32_t *body)
{
	if (x->qp) {
		*body = hca_rwqe_body(x->qp->cap.max_recv_sge);
		return x->qp->rq;
	}
	*body = hca_rwqe_body(x->srq->max_sge);
	return x->srq->ring;
}

/* The completion's fields that name the connection. */
static void rx_names(const struct hca_mb_rx *x, struct hca_cqe *c)
{
	if (x->qp) {
		c->qp_num = x->qp->qpn;
		c->src_qp = x->qp->attr->dest_qp_num;
		return;
	}
	c->qp_num = atomic_load_explicit(&x->srq->lanes->tgt_qpn[x->k], memory_order_relaxed);
	c->src_qp = atomic_load_explicit(&x->srq->lanes->src_qpn[x->k], memory_order_relaxed);
}

/* The queue's next buffer comes in while we wait (cq.c): the queue is
 * our own, and a FIFO through all its buffers (the last use of the next
 * one was a queue's length of messages ago). */
static void rx_prefetch_note(struct hca_dev *dev, const struct hca_mb_rx *x)
{
	struct hca_claim_ring ref;

	if (x->qp)
		ref = (struct hca_claim_ring){ .kind = HCA_CLAIM_RQ, .idx = x->qp->qpn,
					       .off = x->qp->ent->rq_off };
	else
		ref = (struct hca_claim_ring){ .kind = HCA_CLAIM_SRQ, .idx = x->srq->idx,
					       .handle = x->srq->handle,
					       .off = x->srq->ent->ring_off };
	hca_rx_prefetch_note(dev, &ref);
}

/* An RC QP counts what it received and establishes on the first. */
static void rx_count(struct hca_mb_rx *x, uint8_t qs, uint32_t len, uint32_t tgt)
{
	struct hca_qp *qp = x->qp;

	if (!qp) {
		hca_mb_lane_est(x->srq->pd->ctx->dev, x, tgt);
		return;
	}
	atomic_fetch_add_explicit(&qp->ent->rx_msgs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&qp->ent->rx_bytes, len, memory_order_relaxed);
	if (qs == IBV_QPS_RTR && !atomic_exchange(&qp->ent->comm_est, 1))
		hca_raise_qp_event(qp->dev, qp->ent, IBV_EVENT_COMM_EST);
}

/*
 * The message at the head of mailbox i (mb_busy held): MB_GOT with its
 * completion in *c (*err: the receiving QP must go to the error state),
 * MB_NONE when there is none to take now, MB_SKIPPED when retracted ones
 * were passed over (the caller stops: their replacements go by the ring).
 */
/*
 * The message is out (in the application's completions, or pushed into
 * the CQ's ring): its slots go back, and a requester that waits for them
 * may go on — with a ring-path message, say, which must come after it.
 */
void hca_mb_commit(struct hca_cq *cq, int i, struct hca_mb_rx *x, const struct mb_done *d)
{
	atomic_store_explicit(&cq->mb_pos[i], d->pos, memory_order_relaxed);
	atomic_store_explicit(&x->mb->cons, d->pos, memory_order_release);
	/* a requester asleep on its send CQ learns that its send is done:
	 * cons out, then its CQ's armed flag (its arm fences too) */
	if (d->flags & HCA_MB_F_SIGNALED) {
		atomic_thread_fence(memory_order_seq_cst);
		hca_cq_wake_at(cq->ctx->dev, d->scq, false);
	}
}

enum mb_take hca_mb_take(struct hca_cq *cq, int i, struct hca_mb_rx *x, uint64_t lim,
			  struct hca_cqe *c, bool *err, struct mb_done *d)
{
	struct hca_mbox *mb = x->mb;
	struct hca_dev *dev = cq->ctx->dev;
	uint64_t pos = atomic_load_explicit(&cq->mb_pos[i], memory_order_relaxed);
	struct hca_mb_slot *s = hca_mb_at(mb, pos);
	uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
	enum ibv_wc_status st;
	struct hca_ring *rq;
	struct mb_rwqe rw;
	uint32_t len, n, flags, scq, body;
	uint8_t qs;

	if (w >> 8 != pos || !atomic_load_explicit(&mb->epoch, memory_order_relaxed))
		return MB_NONE;
	if ((w & 0xff) == HCA_MB_RETRACTED) {
		do { /* nslots was written before the word: the acquire covers it */
			n = s->nslots;
			pos += n && n <= HCA_MB_SLOTS ? n : 1;
			s = hca_mb_at(mb, pos);
			w = atomic_load_explicit(&s->word, memory_order_acquire);
		} while (w == hca_mb_word(pos, HCA_MB_RETRACTED));
		atomic_store_explicit(&cq->mb_pos[i], pos, memory_order_relaxed);
		atomic_store_explicit(&mb->cons, pos, memory_order_release);
		return MB_SKIPPED;
	}
	if ((w & 0xff) != HCA_MB_READY || (int64_t)(pos - lim) >= 0 || !rx_receives(x, &qs))
		return MB_NONE;
	rq = rx_ring(x, &body);
	if (!hca_ring_count(rq)) {
		/* RNR: the requester retracts, and the ring path answers */
		if (atomic_load_explicit(&mb->rnr, memory_order_relaxed) != pos + 1)
			atomic_store_explicit(&mb->rnr, pos + 1, memory_order_release);
		return MB_NONE;
	}
	if (!atomic_compare_exchange_strong_explicit(&s->word, &w,
						     hca_mb_word(pos, HCA_MB_TAKEN),
						     memory_order_acquire, memory_order_relaxed))
		return MB_NONE; /* retracted meanwhile: the next look skips it */
	if (hca_ring_pop(rq, &rw, body)) {
		/* flushed (or, an SRQ, taken by the ring path) meanwhile: give
		 * it back, the requester may retract it */
		atomic_store_explicit(&s->word, hca_mb_word(pos, HCA_MB_READY),
				      memory_order_release);
		return MB_NONE;
	}
	if (x->srq)
		hca_mb_lane_srq_limit(x->srq);
	rx_prefetch_note(dev, x);
	n = s->nslots;
	len = s->len;
	flags = s->flags;
	scq = s->scq;
	if (!n || n > HCA_MB_SLOTS || len > HCA_MB_LIMIT || hca_mb_nslots(len) != n) {
		n = n && n <= HCA_MB_SLOTS ? n : 1;
		st = IBV_WC_LOC_PROT_ERR; /* not what a requester writes */
	} else {
		st = mb_deliver(dev, x->qp ? x->qp->pd->id : x->srq->pd->id, &rw, mb, pos, len);
	}
	*c = (struct hca_cqe){ .wr_id = rw.h.wr_id, .status = st, .opcode = IBV_WC_RECV,
			       .byte_len = len, .slid = dev->lid };
	rx_names(x, c);
	if (flags & HCA_MB_F_IMM) {
		c->imm = s->imm;
		c->wc_flags = IBV_WC_WITH_IMM;
	}
	*err = st != IBV_WC_SUCCESS;
	if (*err) /* the requester's answer: as the ring path's NAK classes */
		atomic_store_explicit(&mb->nak, (pos + 1) << 8 |
				      (st == IBV_WC_LOC_LEN_ERR ? IBV_WC_REM_INV_REQ_ERR
								: IBV_WC_REM_OP_ERR),
				      memory_order_relaxed);
	*d = (struct mb_done){ .pos = pos + n, .flags = flags, .scq = scq };
	rx_count(x, qs, len, c->qp_num);
	return MB_GOT;
}
