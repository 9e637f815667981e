/*
 * The requester's half of a mailbox (hca/core/mbox.c states the protocol
 * and its memory ordering): a small RC SEND toward a QP of this host is
 * stored in the target's mailbox and released, and its WQE stays at the
 * head of the send queue until the receiver's published consumer index
 * passes it; then it completes as the ring path's would have (success,
 * or the NAK status the receiver left). Whatever the mailbox cannot
 * settle goes back to the ring path, which keeps its semantics: a
 * receiver with no receive WQE (it says so: RNR), one that stopped
 * receiving, one that lets a message wait too long, and every WQE behind
 * one the mailbox does not take.
 */
#include <string.h>

#include "engine.h"
#include "env.h"
#include "mbox.h"

#define SQ_SLOT(qp, i) (&(qp)->sq[(i) & ((qp)->cap.max_send_wr - 1)])

/*
 * A message the receiver does not take within this goes by the ring path
 * (SOFTIB_MBOX_STALL_US; the tests make it tiny to exercise retracts).
 */
static _Atomic int stall_env = -1;

static uint64_t mb_stall_ns(void)
{
	return (uint64_t)hca_env_once(&stall_env, "SOFTIB_MBOX_STALL_US", 2000, 0,
				      10000000) * 1000ULL;
}

static bool receives(uint8_t s)
{
	return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD ||
	       s == IBV_QPS_SQE;
}

/*
 * XRC: the lane of the SRQ srqn that is ours (claimed now if none is
 * and nothing of ours waits elsewhere), the XRC receive QP e being of
 * the SRQ's domain; NULL when there is none to have (the ring path goes,
 * and reports what is wrong). *off: the lane's offset, *cq: the SRQ's CQ.
 */
static struct hca_mbox *lane_target(struct hca_qp *qp, struct hca_qp_ent *e, uint32_t srqn,
				    uint64_t *off, uint32_t *cq, struct hca_mb_lanes **lanes,
				    int *lane)
{
	struct hca_seg *seg = qp->dev->seg;
	struct hca_srq_ent *s = hca_srq_lookup(seg, srqn);
	uint64_t me = hca_mb_owner(qp->dev->slot, qp->dev->gen, qp->qpn), none;
	struct hca_mb_lanes *l;
	int k;

	if (!s || s->xrcd != e->xrcd || !s->ring_off)
		return NULL;
	if (srqn == qp->mb_srqn && qp->mb_lanes &&
	    atomic_load_explicit(&qp->mb_lanes->owner[qp->mb_lane], memory_order_relaxed) == me) {
		/* the lane bound, of this very SRQ (its number has a
		 * generation): still ours */
		k = qp->mb_lane;
		l = qp->mb_lanes;
		goto found;
	}
	if (!(l = hca_mb_lanes_of(hca_seg_ptr(seg, s->ring_off))))
		return NULL;
	for (k = 0; k < HCA_MB_LANES; k++)
		if (atomic_load_explicit(&l->owner[k], memory_order_relaxed) == me)
			break;
	if (k == HCA_MB_LANES) {
		if (qp->mb_n)
			return NULL; /* pending elsewhere: settled first */
		for (k = 0; k < HCA_MB_LANES; k++) {
			none = 0;
			if (atomic_load_explicit(&l->lane[k].epoch, memory_order_acquire) &&
			    atomic_compare_exchange_strong(&l->owner[k], &none, me))
				break;
		}
		if (k == HCA_MB_LANES)
			return NULL;
	}
found:
	*off = (uint64_t)((char *)&l->lane[k] - (char *)seg);
	*cq = s->cq;
	*lanes = l;
	*lane = k;
	return &l->lane[k];
}

/*
 * The target's mailbox, if it has one that still belongs to the
 * connection we are bound to (or to a new one, once nothing is pending):
 * the target QP is ours to reach, receives, is connected to us, and its
 * mailbox's epoch is the one bound. An RC QP's own mailbox; for an XRC
 * send QP, our lane of the SRQ srqn. Read-mostly lines only.
 */
static struct hca_mbox *mb_target(struct hca_qp *qp, uint32_t srqn)
{
	uint32_t dest = qp->attr->dest_qp_num, ep, cq;
	struct hca_qp_ent *e = qp->mb_e;
	struct hca_mb_lanes *lanes = NULL;
	struct hca_mbox *mb;
	uint64_t off;
	int lane = 0;

	if (!e || e->num != dest)
		qp->mb_e = e = hca_qp_lookup(qp->dev->seg, dest);
	if (!e || atomic_load_explicit(&e->qpn, memory_order_acquire) != dest ||
	    !receives(atomic_load_explicit(&e->state, memory_order_relaxed)) ||
	    atomic_load_explicit(&e->dest_qpn, memory_order_relaxed) != qp->qpn)
		return NULL;
	if (qp->type == IBV_QPT_XRC_SEND) {
		if (!srqn || !(mb = lane_target(qp, e, srqn, &off, &cq, &lanes, &lane)))
			return NULL;
	} else {
		if (!(off = e->mb_off))
			return NULL;
		mb = hca_seg_ptr(qp->dev->seg, off);
		cq = e->rcq;
	}
	ep = atomic_load_explicit(&mb->epoch, memory_order_acquire);
	if (!ep)
		return NULL;
	if (off == qp->mb_boff && ep == qp->mb_epoch && qp->mb)
		return mb;
	if (qp->mb_n)
		return NULL; /* pending against the old binding: settled first */
	qp->mb = mb;
	qp->mb_boff = off;
	qp->mb_epoch = ep;
	qp->mb_srqn = qp->type == IBV_QPT_XRC_SEND ? srqn : 0;
	qp->mb_lanes = lanes;   /* lane_target's fast path for this binding */
	qp->mb_lane = lane;
	if (lanes) {
		/* the completion's names, at each binding (the QP may have been
		 * connected anew since it claimed the lane), before our first
		 * message's release; nothing of ours waits in the lane now */
		atomic_store_explicit(&lanes->tgt_qpn[lane], dest, memory_order_relaxed);
		atomic_store_explicit(&lanes->src_qpn[lane], qp->qpn, memory_order_relaxed);
	}
	qp->mb_cq = cq;
	qp->mb_cons = atomic_load_explicit(&mb->cons, memory_order_acquire);
	/* an RC mailbox starts over at each connection; a lane goes on
	 * from where its last message was put */
	qp->mb_prod = qp->mb_srqn ? atomic_load_explicit(&mb->prod, memory_order_relaxed)
				  : qp->mb_cons;
	if ((int64_t)(qp->mb_cons - qp->mb_prod) > 0)
		qp->mb_prod = qp->mb_cons; /* one died after its release */
	qp->mb_rnr_seen = atomic_load_explicit(&mb->rnr, memory_order_relaxed);
	return mb;
}

/*
 * WQE w's payload into the slots at pos (they are free: below cons + N).
 * An inline send's bytes are in the WQE: no key to look up, no copy
 * section. Else our lkeys are looked up and the bytes read in one copy
 * section (fence.c). false: a key did not check out (the ring path
 * reports it).
 */
static bool mb_fill(struct hca_qp *qp, struct hca_mbox *mb, uint64_t pos,
		    const struct hca_swqe *w)
{
	struct iovec iov[HCA_MAX_SGE];
	struct hca_fence f;
	uint32_t room;
	uint8_t *d = hca_mb_bytes(mb, pos, &room);
	bool ok;
	int n;

	if (w->wr.send_flags & IBV_SEND_INLINE) {
		hca_mb_run(mb, &d, &room, (uint8_t *)w->inl, w->sge[0].length, true);
		return true;
	}
	hca_fence_enter(qp->dev, &f);
	ok = hca_req_local_iov(qp, w, iov, &n) == IBV_WC_SUCCESS;
	for (int i = 0; ok && i < n; i++)
		hca_mb_run(mb, &d, &room, iov[i].iov_base, iov[i].iov_len, true);
	hca_fence_exit(&f);
	return ok;
}

/*
 * XRC: does this SEND go to the SRQ the one before it went to? A QP that
 * moves between SRQs at every message (an all-to-all) would put each in
 * a lane only to take it back at the next switch (or wait for it to be
 * taken): such a run goes by the ring path, and a lane serves a stream
 * to one SRQ (a ping-pong, a window of sends) from its second message.
 */
static bool xrc_same_srq(struct hca_qp *qp, uint32_t srqn)
{
	bool same = srqn == qp->mb_last_srqn;

	if (qp->type != IBV_QPT_XRC_SEND)
		return true;
	qp->mb_last_srqn = srqn;
	return same;
}

/*
 * May the SEND wr of len bytes, the queue's WQE idx, go into the
 * mailbox, and is there room? The mailbox, and in *need the slots it
 * takes; NULL: by the ring path (*wait: not now, the mailbox is full of
 * ours).
 */
static struct hca_mbox *mb_open(struct hca_qp *qp, const struct ibv_send_wr *wr, uint32_t len,
				uint32_t idx, uint32_t *need, bool *wait)
{
	uint32_t srqn = qp->type == IBV_QPT_XRC_SEND ? wr->qp_type.xrc.remote_srqn : 0;
	struct hca_mbox *mb;

	*wait = false;
	if (!qp->mb_tx_ok || (int32_t)(idx - qp->mb_block) < 0 ||
	    (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) ||
	    !xrc_same_srq(qp, srqn) || len > hca_mb_max() || !(mb = mb_target(qp, srqn)))
		return NULL;
	*need = hca_mb_nslots(len);
	if (qp->mb_prod + *need - qp->mb_cons > HCA_MB_SLOTS) {
		qp->mb_cons = atomic_load_explicit(&mb->cons, memory_order_acquire);
		if (qp->mb_prod + *need - qp->mb_cons > HCA_MB_SLOTS) {
			*wait = qp->mb_n != 0;
			return NULL;
		}
	}
	return mb;
}

/*
 * The message's header into its first slot, released by its word (the
 * bytes are in the slots already), the receiver's CQ woken if it sleeps;
 * then our count of what is in the mailbox. The WQE's mb_pos and
 * mb_slots are the caller's to set (*pos, the slots need).
 */
static void mb_publish(struct hca_qp *qp, struct hca_mbox *mb, const struct ibv_send_wr *wr,
		       uint32_t len, uint32_t need, uint64_t *pos)
{
	struct hca_mb_slot *s = hca_mb_at(mb, qp->mb_prod);

	s->len = len;
	s->imm = wr->imm_data;
	s->nslots = (uint16_t)need;
	s->flags = (wr->opcode == IBV_WR_SEND_WITH_IMM ? HCA_MB_F_IMM : 0) |
		   (wr->send_flags & IBV_SEND_SOLICITED ? HCA_MB_F_SOLICITED : 0) |
		   (qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED) ?
		    HCA_MB_F_SIGNALED : 0);
	s->scq = qp->scq->idx;
	/* release: the bytes and fields above before the word (mbox.c) */
	atomic_store_explicit(&s->word, hca_mb_word(qp->mb_prod, HCA_MB_READY),
			      memory_order_release);
	/* then the armed flag: cq_wake's seq_cst fence, which hca_cq_arm's
	 * pairs with, comes first (and none when the CQ has no channel) */
	hca_cq_wake_at(qp->dev, qp->mb_cq, wr->send_flags & IBV_SEND_SOLICITED);
	*pos = qp->mb_prod;
	qp->mb_prod += need;
	if (qp->mb_srqn)
		atomic_store_explicit(&mb->prod, qp->mb_prod, memory_order_relaxed);
	atomic_fetch_add_explicit(&qp->scq->mb_txp, 1, memory_order_relaxed);
	if (s->flags & HCA_MB_F_SIGNALED) {
		qp->mb_nsig++;
		atomic_fetch_add_explicit(&qp->scq->mb_txsig, 1, memory_order_relaxed);
	}
}

/*
 * The WQE at index idx (every WQE before it complete or in the mailbox):
 * into the mailbox if it can go there. MB_SEND_NO: by the ring path;
 * MB_SEND_WAIT: not now, the mailbox is full of ours.
 */
int hca_mb_send(struct hca_qp *qp, struct hca_swqe *w, uint32_t idx)
{
	struct hca_mbox *mb;
	uint32_t need;
	bool wait;

	if (!(mb = mb_open(qp, &w->wr, w->total_len, idx, &need, &wait)))
		return wait ? HCA_MB_SEND_WAIT : HCA_MB_SEND_NO;
	if (!mb_fill(qp, mb, qp->mb_prod, w))
		return HCA_MB_SEND_NO;
	mb_publish(qp, mb, &w->wr, w->total_len, need, &w->mb_pos);
	w->mb_slots = need;
	return HCA_MB_SEND_SENT;
}

/*
 * An inline SEND of len bytes not yet queued (it is to be WQE idx, and
 * every WQE before it is complete or in the mailbox): its bytes from the
 * caller's buffers straight into the slots and released, before its WQE
 * is written (req.c's direct post). true: sent, at *pos in *slots slots;
 * false: nothing done, the WR goes the general way.
 */
bool hca_mb_send_inline(struct hca_qp *qp, const struct ibv_send_wr *wr, uint32_t len,
			uint32_t idx, uint64_t *pos, uint32_t *slots)
{
	struct hca_mbox *mb;
	uint32_t room;
	uint8_t *d;
	bool wait;

	/* a switch of SRQ is the general path's to note (xrc_same_srq) */
	if (qp->type == IBV_QPT_XRC_SEND && wr->qp_type.xrc.remote_srqn != qp->mb_last_srqn)
		return false;
	if (!(mb = mb_open(qp, wr, len, idx, slots, &wait)))
		return false;
	d = hca_mb_bytes(mb, qp->mb_prod, &room);
	for (int i = 0; i < wr->num_sge; i++)
		hca_mb_run(mb, &d, &room, (uint8_t *)(uintptr_t)wr->sg_list[i].addr,
			   wr->sg_list[i].length, true);
	mb_publish(qp, mb, wr, len, *slots, pos);
	return true;
}

/*
 * Stalled: the receiver has not taken the head message for a while (it
 * does not poll, or cannot: gone, dead, no longer receiving). What it did
 * not take goes by the ring path; what it took and will never finish
 * (it died) too.
 */
static bool mb_receiver_gone(struct hca_qp *qp)
{
	struct hca_qp_ent *e = qp->mb_e;
	struct hca_srq_ent *s;

	if (!e || atomic_load(&e->qpn) != qp->attr->dest_qp_num)
		return true;
	if (!qp->mb_srqn)
		return hca_peer_check(qp->dev, e->owner, e->owner_gen) == HCA_LIVE_DEAD;
	s = hca_srq_lookup(qp->dev->seg, qp->mb_srqn);
	return !s || hca_peer_check(qp->dev, s->owner, s->owner_gen) == HCA_LIVE_DEAD;
}

static void mb_stalled(struct hca_qp *qp)
{
	hca_mb_retract(qp);
	if (qp->mb_n && mb_receiver_gone(qp))
		hca_mb_tx_forget(qp);
	qp->mb_stall = 0;
	qp->mb_stall_ns = 0;
}

/*
 * Retire the mailbox WQEs the receiver has consumed (sq_lock held): each
 * completes with success, or with the NAK status the receiver left for
 * it (the QP then errs as on the ring path). Returns how many retired.
 * HCA_MB_REAP_TIMED: the progress thread's look, which reads the clock
 * every time.
 */
uint32_t hca_mb_reap(struct hca_qp *qp, enum hca_mb_reap_how how)
{
	struct hca_mbox *mb = qp->mb;
	bool timed = how == HCA_MB_REAP_TIMED;
	struct hca_swqe *refused = NULL; /* the head, refused by the receiver */
	uint32_t done = 0;
	uint64_t cons, rnr, nak = 0;

	if (!qp->mb_n)
		return 0;
	/*
	 * A post retires only when the mailbox fills: the polls retire the
	 * rest. While only unsignalled sends wait (libsib's short messages:
	 * no one waits for their completions) the polls look at cons once in
	 * 16 polls (hca_mb_begin), and at an idle queue once in 64 of those
	 * (hca_sq_reap): the consumer line stays the receiver's between
	 * messages, and its store there costs it no invalidation of our
	 * copy (docs/datapath.md).
	 */
	if (how == HCA_MB_REAP_POST && !qp->mb_held && qp->mb_n < HCA_MB_LAZY_N)
		return 0;
	/*
	 * The consumer index first, whatever became of the target since: a
	 * message it took is delivered (acknowledged) even if it has been
	 * destroyed since, as on a wire. Its block stays in the heap's
	 * quarantine for seconds after; a value that is not between what we
	 * saw last and what we wrote is not ours to trust.
	 */
	cons = atomic_load_explicit(&mb->cons, memory_order_acquire);
	if (cons - qp->mb_cons > qp->mb_prod - qp->mb_cons)
		cons = qp->mb_cons;
	qp->mb_cons = cons;
	while (qp->mb_n) {
		struct hca_swqe *w = SQ_SLOT(qp, qp->sq_head);

		if ((int64_t)(cons - (w->mb_pos + w->mb_slots)) < 0)
			break;
		qp->mb_n--;
		if (hca_mb_wqe_sig(qp, w)) {
			qp->mb_nsig--;
			atomic_fetch_sub_explicit(&qp->scq->mb_txsig, 1, memory_order_relaxed);
		}
		done++;
		/* nak was stored before cons: the acquire above covers it */
		nak = atomic_load_explicit(&mb->nak, memory_order_relaxed);
		if (nak && nak >> 8 == w->mb_pos + 1) {
			refused = w;
			break;
		}
		hca_req_complete(qp, w, IBV_WC_SUCCESS);
		qp->sq_head++;
		qp->rnr_left = qp->attr->rnr_retry;
		qp->retry_left = qp->attr->retry_cnt;
	}
	/* the CQ's count of pending mailbox sends, once for all retired (a
	 * locked operation per send was one per message): the polls read it
	 * only to know whether to reap, and a reap holds sq_lock */
	if (done)
		atomic_fetch_sub_explicit(&qp->scq->mb_txp, done, memory_order_relaxed);
	if (refused) {
		hca_req_fail_head(qp, refused, (enum ibv_wc_status)(nak & 0xff));
		return done;
	}
	if (!qp->mb_n || done) {
		qp->mb_stall = 0;
		qp->mb_stall_ns = 0;
		return done;
	}
	/*
	 * Nothing taken since the last look: the receiver is slow, or it
	 * went. A busy poller reaps at every poll, so the target's entry and
	 * its RNR word are looked at once in 16 such reaps (and at every look
	 * of the progress thread), the clock once in 256.
	 */
	uint32_t k = ++qp->mb_stall;

	if ((k & 15) && !timed)
		return done;
	if (mb_target(qp, qp->mb_srqn) != mb) {
		/* it stopped receiving, reset or went: nothing more will be
		 * taken. While its entry names the mailbox, what is left is
		 * taken back; once it does not, the memory is not a mailbox */
		if (hca_mb_still_named(qp)) {
			hca_mb_retract(qp);
		} else {
			hca_mb_tx_forget(qp);
			qp->mb_block = qp->sq_tail;
		}
		return done;
	}
	rnr = atomic_load_explicit(&mb->rnr, memory_order_acquire);
	if (rnr != qp->mb_rnr_seen) {
		qp->mb_rnr_seen = rnr;
		if (rnr && rnr - 1 >= SQ_SLOT(qp, qp->sq_head)->mb_pos) {
			hca_mb_retract(qp); /* the ring path answers RNR */
			return done;
		}
	}
	if ((k & 255) && !timed && mb_stall_ns() >= 1000000)
		return done;
	uint64_t now = hca_now_ns();

	if (!qp->mb_stall_ns)
		qp->mb_stall_ns = now;
	else if (now - qp->mb_stall_ns >= mb_stall_ns())
		mb_stalled(qp);
	return done;
}
