/*
 * The requester: posting send WQEs and executing them in order.
 *
 * The send queue is private to the owning process, which is the device
 * for it: post_send validates and queues, then executes from the head as
 * far as it can, inside the call (no thread hop). A WQE that cannot go
 * on — RNR NAK, or no answer from a target that does not exist or cannot
 * receive — stays at the head with a timer; the progress thread (and any
 * poll of this process) retries it when the timer expires, as a real
 * HCA's transport timers would, and turns exhausted retries into the
 * completion statuses the spec names.
 */
#include <errno.h>
#include <string.h>

#include "engine.h"
#include "mbox.h"

/* IB spec encoding of the RNR NAK timer, in microseconds. */
const uint32_t hca_rnr_timer_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960,
	1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

#define SQ_SLOT(qp, i) (&(qp)->sq[(i) & ((qp)->cap.max_send_wr - 1)])

/* ---- posting ---- */

/* 0, with the WR's byte count in *lenp, or the errno ibv_post_send returns. */
static int wr_check(struct hca_qp *qp, const struct ibv_send_wr *wr,
		    const struct hca_ah *ah, uint64_t *lenp)
{
	const struct hca_opcode *op = hca_opcode_get(wr->opcode);
	uint64_t len = 0;

	if (!hca_opcode_allowed(wr->opcode, qp->type))
		return EINVAL;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	if ((op->flags & HCA_OPF_ATOMIC) && wr->num_sge != 1)
		return EINVAL;
	if (qp->type == IBV_QPT_UD && (!wr->wr.ud.ah || !ah))
		return EINVAL;
	for (int i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	/* the port's max_msg_sz, whichever link carries the message: the
	 * UDP link's header (DMA length) and the responders' buffers are
	 * bounded by it, and the host link must not accept more */
	if (len > HCA_MAX_MSG_SIZE)
		return EINVAL;
	if (wr->send_flags & IBV_SEND_INLINE) {
		if (op->flags & (HCA_OPF_READ | HCA_OPF_ATOMIC))
			return EINVAL; /* nothing to send inline */
		if (len > qp->cap.max_inline_data)
			return EINVAL;
	}
	*lenp = len;
	return 0;
}

/* Queue one WR; inline data is copied now, so the buffer is free on return. */
static void wr_queue(struct hca_qp *qp, const struct ibv_send_wr *wr,
		     const struct hca_ah *ah)
{
	struct hca_swqe *w = SQ_SLOT(qp, qp->sq_tail);
	uint64_t total = 0;

	w->wr = *wr;
	w->wr.next = NULL;
	w->wr.sg_list = w->sge;
	w->psn_set = w->done = false;
	w->sent = 0;
	w->rd_pkts = 0;
	w->rd_asked = w->rd_hi = 0;
	w->reasks = 0;
	w->reask_ns = 0;
	w->rd_bytes = 0;
	if (wr->send_flags & IBV_SEND_INLINE) {
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(w->inl + total, (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			total += wr->sg_list[i].length;
		}
		w->wr.num_sge = 1;
		w->sge[0].addr = (uintptr_t)w->inl;
		w->sge[0].length = (uint32_t)total;
		w->sge[0].lkey = 0;
	} else {
		for (int i = 0; i < wr->num_sge; i++) {
			w->sge[i] = wr->sg_list[i];
			total += wr->sg_list[i].length;
		}
	}
	w->total_len = total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
	if (qp->type == IBV_QPT_UD)
		w->ah = *ah;
	qp->sq_tail++;
}

static void sq_progress_locked(struct hca_qp *qp, enum hca_mb_reap_how how);
static bool connected_path_local(struct hca_qp *qp);
static void mb_idle_update(struct hca_qp *qp);

/*
 * The direct post (sq_lock held): a lone inline SEND that finds every
 * WQE before it in the receiver's mailbox or done (a ping-pong's every
 * message) goes into the mailbox before its WQE is written. The release
 * store there is what the receiver waits for; the WQE (kept for a
 * retract) is not. false: nothing done, the general path takes the WR
 * (and reports what is wrong with it).
 */
static bool post_direct(struct hca_qp *qp, struct ibv_send_wr *wr)
{
	uint32_t idx = qp->sq_tail, slots;
	uint64_t len, pos;
	struct hca_swqe *w;

	if (wr->next || !(wr->send_flags & IBV_SEND_INLINE) || qp->type == IBV_QPT_UD ||
	    qp->link || idx != qp->sq_head + qp->mb_n ||
	    idx - qp->sq_head >= qp->cap.max_send_wr || qp->mb_held || qp->sqd_event_due ||
	    atomic_load_explicit(&qp->wait_until_ns, memory_order_relaxed) ||
	    hca_qp_state(qp) != IBV_QPS_RTS || !connected_path_local(qp) ||
	    wr_check(qp, wr, NULL, &len) ||
	    !hca_mb_send_inline(qp, wr, (uint32_t)len, idx, &pos, &slots))
		return false;
	wr_queue(qp, wr, NULL);
	w = SQ_SLOT(qp, idx);
	w->mb_pos = pos;
	w->mb_slots = slots;
	qp->mb_n++;
	/* as a run of the queue after a post: retire what the receiver took
	 * once HCA_MB_LAZY_N wait (hca_mb_reap) */
	hca_mb_reap(qp, HCA_MB_REAP_POST);
	mb_idle_update(qp);
	return true;
}

int hca_qp_post_send(struct hca_qp *qp, struct ibv_send_wr *wr,
		     struct ibv_send_wr **bad)
{
	return hca_qp_post_send_ah(qp, wr, NULL, bad);
}

int hca_qp_post_send_ah(struct hca_qp *qp, struct ibv_send_wr *wr,
			const struct hca_ah *const *ahs, struct ibv_send_wr **bad)
{
	enum ibv_qp_state s = hca_qp_state(qp);
	const struct hca_ah *ah;
	uint64_t len;
	int rc = 0;

	if (s == IBV_QPS_RESET || s == IBV_QPS_INIT || s == IBV_QPS_RTR) {
		*bad = wr;
		return EINVAL;
	}
	pthread_mutex_lock(&qp->sq_lock);
	hca_mb_own_next(qp->mb, qp->mb_prod);
	if (!ahs && post_direct(qp, wr)) {
		pthread_mutex_unlock(&qp->sq_lock);
		return 0;
	}
	for (size_t i = 0; wr; wr = wr->next, i++) {
		ah = ahs ? ahs[i] : NULL;
		rc = wr_check(qp, wr, ah, &len);
		if (!rc && qp->sq_tail - qp->sq_head >= qp->cap.max_send_wr && qp->mb_n)
			hca_mb_reap(qp, HCA_MB_REAP_NOW); /* mailbox sends the receiver took */
		if (!rc && qp->sq_tail - qp->sq_head >= qp->cap.max_send_wr)
			rc = ENOMEM;
		if (rc) {
			*bad = wr;
			break;
		}
		wr_queue(qp, wr, ah);
	}
	sq_progress_locked(qp, HCA_MB_REAP_POST);
	pthread_mutex_unlock(&qp->sq_lock);
	if (qp->udp)
		hca_dev_poller_extend(qp->dev);
	return rc;
}

/* ---- executing ---- */

/* Local SGEs to iovecs: each lkey ours, in our PD, covering the range. */
enum ibv_wc_status hca_req_local_iov(struct hca_qp *qp, const struct hca_swqe *w,
				     struct iovec *iov, int *n)
{
	if (w->wr.send_flags & IBV_SEND_INLINE) { /* no key to look up */
		iov[0].iov_base = (void *)w->inl;
		iov[0].iov_len = w->sge[0].length;
		*n = 1;
		return IBV_WC_SUCCESS;
	}

	const struct hca_opcode *op = hca_opcode_get(w->wr.opcode);
	unsigned need_access = (op->flags & (HCA_OPF_READ | HCA_OPF_ATOMIC)) ?
			       IBV_ACCESS_LOCAL_WRITE : 0;
	struct hca_seg *seg = qp->dev->seg;

	*n = 0;
	for (int i = 0; i < w->wr.num_sge; i++) {
		const struct ibv_sge *s = &w->sge[i];
		struct hca_mr_ent *mr;

		if (!s->length)
			continue;
		mr = hca_mr_lookup(seg, s->lkey);
		if (!mr || mr->owner != qp->dev->slot || mr->owner_gen != qp->dev->gen ||
		    mr->pd != qp->pd->id || (mr->access & need_access) != need_access ||
		    s->addr < mr->iova || s->length > mr->length ||
		    s->addr - mr->iova > mr->length - s->length)
			return IBV_WC_LOC_PROT_ERR;
		iov[*n].iov_base = (void *)(uintptr_t)(mr->addr + (s->addr - mr->iova));
		iov[*n].iov_len = s->length;
		(*n)++;
	}
	return IBV_WC_SUCCESS;
}

/* Does the path lead to this host? (LID, or GID for global routes.) */
static bool route_local(struct hca_qp *qp, uint16_t dlid, bool global,
			const union ibv_gid *dgid)
{
	union ibv_gid mine;

	static const uint8_t zero[16];

	if (global) {
		if (!memcmp(dgid->raw, zero, 16))
			return false;
		for (int i = 0; i < HCA_GID_TBL_LEN; i++)
			if (hca_gid_entry(&qp->dev->net, qp->dev->guid, i, &mine) == 0 &&
			    !memcmp(mine.raw, dgid->raw, 16))
				return true;
		return false;
	}
	return dlid == qp->dev->lid;
}

/*
 * Does a connected QP's path lead to this host? Decided once per address
 * vector (modify resets it), not for every message: matching a GID walks
 * the GID table.
 */
static bool connected_path_local(struct hca_qp *qp)
{
	const struct ibv_ah_attr *ah = &qp->attr->ah_attr;

	if (!qp->path_route)
		qp->path_route = route_local(qp, ah->dlid, ah->is_global,
					     &ah->grh.dgid) ? 1 : -1;
	return qp->path_route > 0;
}

static bool is_mcast_lid(uint16_t lid)
{
	return lid >= 0xc000 && lid != 0xffff;
}

/* UD to a multicast group: one copy to every attached QP of the host. */
static enum hca_resp_status send_mcast(struct hca_qp *qp, struct hca_msg *m,
				       const struct hca_swqe *w)
{
	struct hca_seg *seg = qp->dev->seg;
	uint32_t qpns[HCA_MAX_QP_PER_MCG];
	int n = 0;

	hca_seg_lock(seg);
	for (int g = 0; g < HCA_MAX_MCAST_GRP; g++) {
		struct hca_mcg *mg = &seg->mcgs[g];

		if (mg->nqp && mg->lid == w->ah.dlid &&
		    (!w->ah.is_global || !memcmp(mg->gid, w->ah.dgid.raw, 16))) {
			memcpy(qpns, mg->qpn, mg->nqp * sizeof(uint32_t));
			n = mg->nqp;
			break;
		}
	}
	hca_seg_unlock(seg);
	for (int i = 0; i < n; i++) {
		m->dst_qpn = qpns[i];
		hca_resp_execute(qp->dev, m);
	}
	return HCA_RESP_ACK;
}

/* The path MTU in bytes: the QP's (RC, UC, XRC) within the port's. */
uint32_t hca_path_mtu_bytes(struct hca_qp *qp)
{
	enum ibv_mtu m = qp->dev->mtu;

	if (qp->type != IBV_QPT_UD && qp->attr->path_mtu && qp->attr->path_mtu < m)
		m = qp->attr->path_mtu;
	return 128u << m; /* IBV_MTU_256 == 1 */
}

/* Fill the request from the WQE and the QP's path; status on local error. */
static enum ibv_wc_status build_msg(struct hca_qp *qp, struct hca_swqe *w,
				    struct hca_msg *m, struct iovec *iov)
{
	const struct hca_opcode *op = hca_opcode_get(w->wr.opcode);
	enum ibv_wc_status st;

	memset(m, 0, HCA_MSG_CLEAR);
	st = hca_req_local_iov(qp, w, iov, &m->iovcnt);
	if (st)
		return st;
	m->iov = iov;
	m->op = w->wr.opcode;
	m->type = qp->type;
	m->src_qpn = qp->qpn;
	m->src_slot = qp->dev->slot;
	m->defer_recv_cqe = qp->type != IBV_QPT_UD; /* UD: no answer to wait for */
	m->slid = qp->dev->lid;
	m->len = w->total_len;
	m->imm = w->wr.imm_data;
	m->solicited = w->wr.send_flags & IBV_SEND_SOLICITED;
	if ((op->flags & HCA_OPF_ATOMIC) && w->total_len != 8)
		return IBV_WC_LOC_LEN_ERR;
	if (op->flags & HCA_OPF_ATOMIC) {
		m->raddr = w->wr.wr.atomic.remote_addr;
		m->rkey = w->wr.wr.atomic.rkey;
		m->compare_add = w->wr.wr.atomic.compare_add;
		m->swap = w->wr.wr.atomic.swap;
	} else if (op->flags & (HCA_OPF_WRITE | HCA_OPF_READ)) {
		m->raddr = w->wr.wr.rdma.remote_addr;
		m->rkey = w->wr.wr.rdma.rkey;
	}
	if (qp->type == IBV_QPT_UD) {
		/* an AH serves the QPs of its own PD only (ibv_poll_cq(3):
		 * Local QP Operation Error) */
		if (w->ah.pd_id != qp->pd->id)
			return IBV_WC_LOC_QP_OP_ERR;
		if (w->total_len > hca_path_mtu_bytes(qp))
			return IBV_WC_LOC_LEN_ERR;
		m->dst_qpn = w->wr.wr.ud.remote_qpn;
		/* a Q_Key with the high bit set means: use the QP's own */
		m->qkey = (w->wr.wr.ud.remote_qkey & 0x80000000u) ? qp->attr->qkey
								  : w->wr.wr.ud.remote_qkey;
		m->ah = &w->ah;
		if (hca_gid_entry(&qp->dev->net, qp->dev->guid, 0, &m->sgid))
			memset(&m->sgid, 0, sizeof(m->sgid));
	} else {
		m->dst_qpn = qp->attr->dest_qp_num;
		m->xrc_srqn = w->wr.qp_type.xrc.remote_srqn;
	}
	return IBV_WC_SUCCESS;
}

static enum hca_resp_status deliver(struct hca_qp *qp, struct hca_swqe *w,
				    struct hca_msg *m)
{
	const struct hca_link_ops *net = hca_link_net;
	uint32_t ip, self;

	if (qp->type == IBV_QPT_UD) {
		bool forced = net->forced(qp->dev, &self);

		if (is_mcast_lid(w->ah.dlid))
			return send_mcast(qp, m, w);
		if (w->ah.is_global && net->gid_addr(&w->ah.dgid, &ip) &&
		    (forced || !route_local(qp, 0, true, &w->ah.dgid)))
			return net->send_ud(qp, w, m, ip);
		if (forced && !w->ah.is_global)
			return net->send_ud(qp, w, m, self);
		if (!route_local(qp, w->ah.dlid, w->ah.is_global, &w->ah.dgid))
			return HCA_RESP_DROP;
		if (net->capturing(qp->dev))
			net->capture(qp, w, m);
	} else if (!connected_path_local(qp)) {
		return HCA_RESP_DROP;
	}
	return hca_resp_execute(qp->dev, m);
}

void hca_req_complete(struct hca_qp *qp, struct hca_swqe *w, enum ibv_wc_status st)
{
	/* an unsignalled success (most of libsib's sends) makes nothing:
	 * asked first, before the completion is built */
	if (st == IBV_WC_SUCCESS && !qp->sq_sig_all &&
	    !(w->wr.send_flags & IBV_SEND_SIGNALED))
		return;

	const struct hca_opcode *op = hca_opcode_get(w->wr.opcode);
	struct hca_cqe c = { .wr_id = w->wr.wr_id, .status = st, .qp_num = qp->qpn,
			     .opcode = op ? op->wc_opcode : IBV_WC_SEND };

	if (op && (op->flags & (HCA_OPF_READ | HCA_OPF_ATOMIC)))
		c.byte_len = w->total_len;
	hca_cq_push_sq(qp->scq, &c);
}

/* A requester error: the WQE completes in error, the QP errs and flushes. */
void hca_req_fail_head(struct hca_qp *qp, struct hca_swqe *w, enum ibv_wc_status st)
{
	hca_req_complete(qp, w, st);
	qp->sq_head++;
	atomic_store(&qp->ent->state, IBV_QPS_ERR); /* what query reads */
	hca_qp_flush_sq(qp);
	hca_qp_flush_rq(qp);
	if (qp->srq)
		hca_ctx_queue_event(qp->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp->user, 0);
}

static uint64_t ack_timeout_ns(uint8_t timeout)
{
	return 4096ULL << timeout; /* 4.096 us * 2^timeout */
}

/*
 * No answer (RC): retry after the ACK timeout, retry_cnt times, then
 * IBV_WC_RETRY_EXC_ERR. Timeout 0 means an infinite timer: the WQE waits
 * and is retried at the device's idle period, never failing.
 */
static bool hold_for_retry(struct hca_qp *qp, struct hca_swqe *w)
{
	uint8_t t = qp->attr->timeout;

	if (t && qp->retry_left-- <= 0) {
		hca_req_fail_head(qp, w, IBV_WC_RETRY_EXC_ERR);
		return false;
	}
	atomic_store_explicit(&qp->wait_until_ns,
			      hca_now_ns() + (t ? ack_timeout_ns(t) : 200000000ULL),
			      memory_order_relaxed);
	return true;
}

/* RNR NAK: wait the responder's min_rnr_timer; rnr_retry 7 is infinite. */
static bool hold_for_rnr(struct hca_qp *qp, struct hca_swqe *w, struct hca_msg *m)
{
	struct hca_qp_ent *e = hca_qp_lookup(qp->dev->seg, m->dst_qpn);
	uint8_t timer = e ? atomic_load(&e->min_rnr_timer) : 0;

	if (qp->attr->rnr_retry != 7 && qp->rnr_left-- <= 0) {
		hca_req_fail_head(qp, w, IBV_WC_RNR_RETRY_EXC_ERR);
		return false;
	}
	atomic_store_explicit(&qp->wait_until_ns,
			      hca_now_ns() + hca_rnr_timer_us[timer & 31] * 1000ULL,
			      memory_order_relaxed);
	atomic_store_explicit(&qp->rnr_wait, true, memory_order_relaxed);
	return true;
}

static const enum ibv_wc_status nak_status[] = {
	[HCA_RESP_NAK_INV] = IBV_WC_REM_INV_REQ_ERR,
	[HCA_RESP_NAK_ACCESS] = IBV_WC_REM_ACCESS_ERR,
	[HCA_RESP_NAK_OP] = IBV_WC_REM_OP_ERR,
};

/* The responder's receive completion, once ours is out (see hca_msg). */
static void push_deferred(struct hca_qp *qp, struct hca_msg *m)
{
	if (m->deferred) {
		hca_cq_push_body(qp->dev, m->claim, m->deferred_cq, &m->deferred_cqe,
				 m->deferred_len, m->solicited, true);
		hca_claim_put(qp->dev, m->claim);
		m->claim = NULL;
		m->deferred = false;
	}
}

/* Execute the head WQE. Returns false when it must wait (or the QP erred). */
static bool exec_head_fenced(struct hca_qp *qp)
{
	struct hca_swqe *w = SQ_SLOT(qp, qp->sq_head);
	struct iovec iov[HCA_MAX_SGE];
	enum hca_resp_status rs;
	enum ibv_wc_status st;
	struct hca_msg m;

	st = build_msg(qp, w, &m, iov);
	if (st) {
		hca_req_fail_head(qp, w, st);
		return false;
	}
	m.fenced = true; /* exec_head's section covers the responder */
	rs = deliver(qp, w, &m);
	if (rs == HCA_RESP_ACK && hca_link_net->capturing(qp->dev))
		hca_link_net->capture(qp, w, NULL);
	if (rs == HCA_RESP_DROP && !hca_reliable(qp->type))
		rs = HCA_RESP_ACK; /* unreliable: the loss is silent */
	switch (rs) {
	case HCA_RESP_ACK:
		if (m.op == IBV_WR_ATOMIC_CMP_AND_SWP || m.op == IBV_WR_ATOMIC_FETCH_AND_ADD)
			memcpy(iov[0].iov_base, &m.atomic_orig, 8);
		hca_req_complete(qp, w, IBV_WC_SUCCESS);
		push_deferred(qp, &m);
		qp->sq_head++;
		qp->rnr_left = qp->attr->rnr_retry;
		qp->retry_left = qp->attr->retry_cnt;
		return true;
	case HCA_RESP_DROP:
		hold_for_retry(qp, w);
		return false;
	case HCA_RESP_RNR:
		hold_for_rnr(qp, w, &m);
		return false;
	default:
		push_deferred(qp, &m);
		hca_req_fail_head(qp, w, nak_status[rs]);
		return false;
	}
}

/*
 * Inside a copy section (fence.c): from the lookup of our lkeys to the
 * last byte that lands in our buffers (a READ's data, an atomic's
 * original value) — and the responder we run on the target's behalf, its
 * keys and copies included (hca_msg.fenced) — a dereg waits for us.
 */
static bool exec_head(struct hca_qp *qp)
{
	struct hca_fence f;
	bool more;

	hca_fence_enter(qp->dev, &f);
	more = exec_head_fenced(qp);
	hca_fence_exit(&f);
	return more;
}

/*
 * Wait for the mailbox (full of ours, or holding WQEs the receiver took
 * ahead of one for the ring path): a poll of our send CQ retires them and
 * resumes us, or the progress thread at the time set here.
 */
static void mb_hold(struct hca_qp *qp)
{
	atomic_store_explicit(&qp->wait_until_ns, hca_now_ns() + 50000, memory_order_relaxed);
	qp->mb_held = true;
	hca_dev_wait_add(qp->dev, qp);
}

/*
 * Run the send queue from the first WQE not yet under way: into the
 * receiver's mailbox when it can go there (mbox_send.c), else by the
 * ring path once nothing of ours is in the mailbox, so that the QP's
 * order holds.
 */
static bool sq_run(struct hca_qp *qp)
{
	while (qp->sq_head + qp->mb_n != qp->sq_tail) {
		uint32_t idx = qp->sq_head + qp->mb_n;
		int r = connected_path_local(qp) ? hca_mb_send(qp, SQ_SLOT(qp, idx), idx)
						 : HCA_MB_SEND_NO;

		if (r == HCA_MB_SEND_SENT) {
			qp->mb_n++;
			continue;
		}
		if (r == HCA_MB_SEND_WAIT) {
			mb_hold(qp);
			return false;
		}
		if (qp->mb_n) {
			hca_mb_retract(qp);
			if (qp->mb_n) {
				mb_hold(qp);
				return false;
			}
		}
		if (!exec_head(qp)) {
			if (atomic_load_explicit(&qp->wait_until_ns, memory_order_relaxed))
				hca_dev_wait_add(qp->dev, qp);
			return false;
		}
	}
	return true;
}

/*
 * After each run of the queue: may a poll pass this QP by (hca_sq_reap)?
 * Yes when its queue is empty, or holds only unsignalled mailbox sends,
 * fewer than HCA_MB_LAZY_N, with no wait pending (nobody waits for
 * their completions: hca_mb_reap).
 */
static void mb_idle_update(struct hca_qp *qp)
{
	bool idle = qp->sq_head == qp->sq_tail ||
		    (qp->sq_tail - qp->sq_head == qp->mb_n && qp->mb_n < HCA_MB_LAZY_N &&
		     !qp->mb_nsig && !qp->mb_held &&
		     !atomic_load_explicit(&qp->wait_until_ns, memory_order_relaxed));

	if (atomic_load_explicit(&qp->mb_idle, memory_order_relaxed) != idle)
		atomic_store_explicit(&qp->mb_idle, idle, memory_order_relaxed);
}

static void sq_progress_run(struct hca_qp *qp, enum hca_mb_reap_how how)
{
	enum ibv_qp_state s = hca_qp_state(qp);

	if (s == IBV_QPS_ERR) {
		hca_qp_flush_sq(qp);
		return;
	}
	if (qp->mb_n && hca_mb_reap(qp, how)) {
		if (qp->mb_held) { /* room made, or the way cleared */
			atomic_store_explicit(&qp->wait_until_ns, 0, memory_order_relaxed);
			qp->mb_held = false;
		}
		s = hca_qp_state(qp);
		if (s == IBV_QPS_ERR)
			return; /* a NAK the receiver left: failed and flushed */
	}
	if (s != IBV_QPS_RTS || qp->sq_head == qp->sq_tail)
		goto drained;
	if (qp->link) {
		qp->link->sq_progress(qp);
		goto drained;
	}
	uint64_t until = atomic_load_explicit(&qp->wait_until_ns, memory_order_relaxed);

	if (until) {
		if (hca_now_ns() < until) {
			hca_dev_wait_add(qp->dev, qp);
			return;
		}
		atomic_store_explicit(&qp->wait_until_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&qp->rnr_wait, false, memory_order_relaxed);
		qp->mb_held = false;
	}
	if (!sq_run(qp))
		return;
drained:
	if (qp->sqd_event_due && qp->sq_head == qp->sq_tail) {
		qp->sqd_event_due = false;
		hca_ctx_queue_event(qp->ctx, IBV_EVENT_SQ_DRAINED, qp->user, 0);
	}
}

/* sq_lock held; how: whose look it is (a post's or a poll's, hca_mb_reap) */
static void sq_progress_locked(struct hca_qp *qp, enum hca_mb_reap_how how)
{
	sq_progress_run(qp, how);
	mb_idle_update(qp);
}

void hca_sq_progress(struct hca_qp *qp)
{
	pthread_mutex_lock(&qp->sq_lock);
	sq_progress_locked(qp, HCA_MB_REAP_POLL);
	pthread_mutex_unlock(&qp->sq_lock);
}

/* A poll that retires mailbox sends (mbox.c): never waits for the lock,
 * whoever holds it runs the queue anyway. false: the lock was held, the
 * queue was not looked at. */
bool hca_sq_reap(struct hca_qp *qp, bool timed)
{
	/* an idle queue (the hint above) is looked at once in 64 polls:
	 * the lock and the run were most of a poll that waits for an answer */
	if (!timed && atomic_load_explicit(&qp->mb_idle, memory_order_relaxed)) {
		uint32_t k = atomic_load_explicit(&qp->mb_idle_polls, memory_order_relaxed) + 1;

		atomic_store_explicit(&qp->mb_idle_polls, k, memory_order_relaxed);
		if (k & 63)
			return true;
	}
	if (pthread_mutex_trylock(&qp->sq_lock))
		return false;
	if (timed && qp->mb_n)
		hca_mb_reap(qp, HCA_MB_REAP_TIMED); /* the progress thread: look at the clock */
	sq_progress_locked(qp, HCA_MB_REAP_POLL); /* what was retracted goes by the ring */
	pthread_mutex_unlock(&qp->sq_lock);
	return true;
}
