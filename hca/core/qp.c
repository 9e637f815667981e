/*
 * Queue pairs: creation, the state machine (its attribute rules are the
 * table of qp_modify.c), query, destruction, receive posting, and the
 * error state's flush.
 *
 * A QP has a directory entry in the segment (what a responder in another
 * process needs: type, state, PD, receive ring, Q_Key, access flags, RNR
 * timer) and a private part (the send queue, which only this process
 * executes, and the attributes query_qp returns).
 *
 * The numbers and the directory's pages are qp_num.c's: a QP takes its
 * number and entry from there when it is published, and gives them back
 * there when it is destroyed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hca_int.h"
#include "link_ops.h"
#include "mbox.h"
#include "qp_modify.h"

static int qp_caps_ok(const struct hca_qp_init *in)
{
	const struct ibv_qp_cap *c = &in->cap;

	if (c->max_send_wr > HCA_MAX_QP_WR || c->max_send_sge > HCA_MAX_SGE ||
	    c->max_inline_data > HCA_MAX_INLINE)
		return 0;
	if (!in->srq && (c->max_recv_wr > HCA_MAX_QP_WR || c->max_recv_sge > HCA_MAX_SGE))
		return 0;
	return 1;
}

static int qp_type_ok(const struct hca_qp_init *in)
{
	switch (in->type) {
	case IBV_QPT_RC:
	case IBV_QPT_UD:
		return in->send_cq && in->recv_cq && !in->xrcd;
	case IBV_QPT_UC:
		/* ibv_create_qp(3): an SRQ only with RC or UD */
		return in->send_cq && in->recv_cq && !in->srq && !in->xrcd;
	case IBV_QPT_XRC_SEND:
		/* the send half of XRC: no receive queue of its own */
		return in->send_cq && !in->srq && !in->xrcd;
	case IBV_QPT_XRC_RECV:
		/* owned by its domain: no queues, no CQs */
		return in->xrcd && !in->srq;
	default:
		return 0;
	}
}

static bool has_rq(const struct hca_qp *qp)
{
	return !qp->srq && qp->type != IBV_QPT_XRC_SEND && qp->type != IBV_QPT_XRC_RECV;
}

/* Grant at least what was asked (create_qp(3)) and write it back. */
static void qp_grant_caps(struct hca_qp *qp, struct ibv_qp_cap *c)
{
	c->max_send_wr = 1u << hca_ilog2_ceil(c->max_send_wr ? c->max_send_wr : 1);
	c->max_send_sge = c->max_send_sge ? c->max_send_sge : 1;
	if (qp->type == IBV_QPT_XRC_RECV) {
		memset(c, 0, sizeof(*c));
	} else if (!has_rq(qp)) {
		c->max_recv_wr = 0;
		c->max_recv_sge = 0;
	} else {
		c->max_recv_wr = 1u << hca_ilog2_ceil(c->max_recv_wr ? c->max_recv_wr : 1);
		c->max_recv_sge = c->max_recv_sge ? c->max_recv_sge : 1;
	}
	qp->cap = *c;
}

static int qp_alloc_sq(struct hca_qp *qp)
{
	uint32_t n = qp->cap.max_send_wr;

	qp->sq = calloc(n, sizeof(*qp->sq));
	qp->sq_sge = calloc((size_t)n * qp->cap.max_send_sge, sizeof(struct ibv_sge));
	qp->sq_inl = qp->cap.max_inline_data ?
		     malloc((size_t)n * qp->cap.max_inline_data) : NULL;
	if (!qp->sq || !qp->sq_sge || (qp->cap.max_inline_data && !qp->sq_inl))
		return ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		qp->sq[i].sge = qp->sq_sge + (size_t)i * qp->cap.max_send_sge;
		qp->sq[i].inl = qp->sq_inl ? qp->sq_inl + (size_t)i * qp->cap.max_inline_data : NULL;
	}
	return 0;
}

/* Directory entry and receive ring (seg->lock held). */
static int qp_publish(struct hca_dev *dev, struct hca_qp *qp, bool mbox)
{
	struct hca_seg *seg = dev->seg;
	uint64_t off = 0, bytes = 0, ring = 0;
	struct hca_qp_ent *e;
	uint32_t idx;
	int rc;

	/* the number first, marked ours: a death from here on leaves an
	 * unpublished entry of our (slot, gen) holding its ring in rq_off,
	 * which the reclaim of our slot frees (reclaim.c) */
	e = hca_qp_num_alloc(seg, dev->slot, &rc);
	if (!e)
		return rc;
	idx = e->num;
	e->owner = dev->slot;
	e->owner_gen = dev->gen;
	e->rq_off = 0;
	e->mb_off = 0;
	if (has_rq(qp)) {
		/* a mailbox (mbox.c) follows the ring in its block */
		ring = bytes = hca_ring_bytes(qp->cap.max_recv_wr,
					      hca_rwqe_body(qp->cap.max_recv_sge));
		if (mbox) {
			ring = (ring + 63) & ~63ULL;
			bytes = ring + sizeof(struct hca_mbox);
		}
		off = hca_dev_heap_alloc(dev, bytes);
		if (!off) {
			hca_qp_num_unalloc(seg, e);
			return ENOMEM;
		}
		hca_ring_init(hca_seg_ptr(seg, off), qp->cap.max_recv_wr,
			      hca_rwqe_body(qp->cap.max_recv_sge));
		((struct hca_ring *)hca_seg_ptr(seg, off))->extra = bytes -
			hca_ring_bytes(qp->cap.max_recv_wr, hca_rwqe_body(qp->cap.max_recv_sge));
		e->mb_off = mbox ? off + ring : 0;
		e->rq_off = off; /* a ring whose header gives its size */
	}
	e->type = (uint8_t)qp->type;
	atomic_store(&e->state, IBV_QPS_RESET);
	atomic_store(&e->comm_est, 0);
	e->sq_sig_all = (uint8_t)qp->sq_sig_all;
	e->pd = qp->pd ? qp->pd->id : HCA_NONE;
	e->rcq = qp->rcq ? qp->rcq->idx : HCA_NONE;
	e->srq = qp->srq ? qp->srq->idx : HCA_NONE;
	e->rq_max_sge = qp->cap.max_recv_sge;
	atomic_store(&e->qkey, 0);
	atomic_store(&e->access, 0);
	atomic_store(&e->min_rnr_timer, 0);
	atomic_store(&e->port_lid, dev->lid);
	atomic_store(&e->rx_msgs, 0);
	atomic_store(&e->rx_bytes, 0);
	memset(&e->cnt, 0, sizeof(e->cnt));
	e->xrcd = qp->xrcd ? qp->xrcd->idx : HCA_NONE;
	for (int i = 0; i < HCA_MAX_PROCS / 64; i++) {
		atomic_store(&e->regs[i], 0);
		atomic_store(&e->rnr_waiters[i], 0);
	}
	if (qp->xrcd)
		hca_xrc_reg(seg, e, dev->slot, true);
	e->attr_set = 0;
	memset(&e->attr, 0, sizeof(e->attr));
	qp->idx = idx;
	qp->qpn = idx;
	qp->ent = e;
	qp->attr = &e->attr;
	qp->rq = off ? hca_seg_ptr(seg, off) : NULL;
	qp->rq_size = bytes;
	hca_qp_tab_set(dev, idx, qp);
	if (qp->xrcd)
		dev->xrc_local[idx] = 1;
	atomic_store_explicit(&e->qpn, qp->qpn, memory_order_release);
	return 0;
}

/* The objects a QP holds busy (EBUSY on their destroy while it lives). */
static void qp_refs(struct hca_qp *qp, int d)
{
	if (qp->pd)
		atomic_fetch_add(&qp->pd->refs, d);
	if (qp->scq)
		atomic_fetch_add(&qp->scq->refs, d);
	if (qp->rcq)
		atomic_fetch_add(&qp->rcq->refs, d);
	if (qp->srq)
		atomic_fetch_add(&qp->srq->refs, d);
	if (qp->xrcd)
		atomic_fetch_add(&qp->xrcd->refs, d);
}

static void qp_free_private(struct hca_qp *qp)
{
	if (qp->udp) {
		atomic_fetch_sub(&qp->dev->udp_qps, 1);
		if (qp->scq)
			atomic_fetch_sub(&qp->scq->udp_qps, 1);
		if (qp->rcq)
			atomic_fetch_sub(&qp->rcq->udp_qps, 1);
	}
	free(qp->rbuf);
	free(qp->rdbuf);
	pthread_mutex_destroy(&qp->resp_lock);
	pthread_mutex_destroy(&qp->state_lock);
	free(qp->sq);
	free(qp->sq_sge);
	free(qp->sq_inl);
	pthread_mutex_destroy(&qp->sq_lock);
	free(qp);
}

struct hca_qp *hca_qp_create(struct hca_pd *pd, struct hca_qp_init *init, void *user)
{
	struct hca_ctx *ctx = pd ? pd->ctx : init->xrcd ? init->xrcd->ctx : NULL;
	struct hca_dev *dev;
	struct hca_qp *qp;
	bool mbox;
	int rc;

	if (!ctx || !qp_type_ok(init) || !qp_caps_ok(init) ||
	    (!pd && init->type != IBV_QPT_XRC_RECV)) {
		errno = EINVAL;
		return NULL;
	}
	dev = ctx->dev;
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->ctx = ctx;
	qp->pd = init->type == IBV_QPT_XRC_RECV ? NULL : pd;
	qp->xrcd = init->xrcd;
	qp->dev = dev;
	qp->type = init->type;
	qp->scq = init->send_cq;
	qp->rcq = init->recv_cq;
	qp->srq = init->srq;
	qp->sq_sig_all = init->sq_sig_all;
	qp->user = user;
	rc = hca_mutex_init(&qp->sq_lock);
	if (!rc)
		rc = hca_mutex_init(&qp->resp_lock);
	if (!rc)
		rc = hca_mutex_init(&qp->state_lock);
	if (rc)
		goto err; /* destroying a zeroed mutex is harmless */
	qp_grant_caps(qp, &init->cap);
	rc = qp_alloc_sq(qp);
	if (rc)
		goto err;
	mbox = hca_mb_rx_want(qp);
	hca_seg_lock(dev->seg);
	rc = qp_publish(dev, qp, mbox && has_rq(qp));
	hca_dev_heap_done(dev);
	hca_seg_unlock(dev->seg);
	if (rc) {
		hca_mb_detach(qp);
		goto err;
	}
	hca_mb_attach(qp, qp->ent->mb_off);
	qp->attr->qp_state = IBV_QPS_RESET;
	qp->attr->cap = qp->cap;
	qp_refs(qp, 1);
	return qp;
err:
	qp_free_private(qp);
	errno = rc;
	return NULL;
}

uint32_t hca_qp_num(struct hca_qp *qp)
{
	return qp->qpn;
}

enum ibv_qp_state hca_qp_state(struct hca_qp *qp)
{
	return atomic_load(&qp->ent->state);
}

/* ---- error state and flush ---- */

/* A send queue's flush goes where its completions go (hca_cq_push_sq),
 * a receive queue's where the remote producers put its completions: each
 * queue's completions stay in order. */
static void push_flush(struct hca_qp *qp, struct hca_cq *cq, uint64_t wr_id,
		       enum ibv_wc_opcode op, bool sq)
{
	struct hca_cqe c = { .wr_id = wr_id, .status = IBV_WC_WR_FLUSH_ERR,
			     .opcode = op, .qp_num = qp->qpn };

	if (sq)
		hca_cq_push_sq(cq, &c);
	else
		hca_cq_push(qp->dev, cq->idx, &c, false);
}

void hca_qp_flush_rq(struct hca_qp *qp)
{
	uint8_t buf[sizeof(struct hca_rwqe)];

	if (!qp->rq)
		return;
	/* only the header is needed: copy that much of each WQE */
	while (hca_ring_pop(qp->rq, buf, sizeof(buf)) == 0)
		push_flush(qp, qp->rcq, ((struct hca_rwqe *)buf)->wr_id, IBV_WC_RECV, false);
}

/* Every WQE still in the SQ completes with IBV_WC_WR_FLUSH_ERR (sq_lock held). */
void hca_qp_flush_sq(struct hca_qp *qp)
{
	hca_mb_tx_drop(qp); /* what the receiver took completes flushed too */
	while (qp->sq_head != qp->sq_tail) {
		struct hca_swqe *w = &qp->sq[qp->sq_head & (qp->cap.max_send_wr - 1)];

		push_flush(qp, qp->scq, w->wr.wr_id, hca_engine.wc_opcode(w->wr.opcode), true);
		qp->sq_head++;
	}
	qp->sq_next = qp->sq_head;
}

void hca_qp_flush(struct hca_qp *qp)
{
	pthread_mutex_lock(&qp->sq_lock);
	hca_qp_flush_sq(qp);
	pthread_mutex_unlock(&qp->sq_lock);
	hca_qp_flush_rq(qp);
}

/* To ERR: flush both queues; a QP on an SRQ reports its last WQE. */
void hca_qp_to_error(struct hca_qp *qp)
{
	/* the state is the entry's (hca_qp_state, which query reads): not
	 * attr's copy, which only the application's own calls write */
	uint8_t prev = atomic_exchange(&qp->ent->state, IBV_QPS_ERR);

	hca_qp_flush(qp);
	if (prev != IBV_QPS_ERR && qp->srq)
		hca_ctx_queue_event(qp->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp->user, 0);
}

static void qp_reset(struct hca_qp *qp)
{
	uint8_t buf[sizeof(struct hca_rwqe)];

	hca_mb_close(qp);
	pthread_mutex_lock(&qp->sq_lock);
	hca_mb_tx_drop(qp);
	qp->mb_held = false;
	qp->sq_head = qp->sq_next = qp->sq_tail;
	atomic_store_explicit(&qp->wait_until_ns, 0, memory_order_relaxed);
	qp->rnr_until_ns = 0;
	qp->path_route = 0;
	pthread_mutex_unlock(&qp->sq_lock);
	/* the UDP responder forgets the old connection too */
	pthread_mutex_lock(&qp->resp_lock);
	qp->in_msg = qp->nak_sent = false;
	qp->rlen = 0;
	qp->msn = 0;
	atomic_store(&qp->ack_owed, 0);
	memset(qp->replay, 0, sizeof(qp->replay));
	pthread_mutex_unlock(&qp->resp_lock);
	if (qp->rq)
		while (hca_ring_pop(qp->rq, buf, sizeof(buf)) == 0)
			;
	atomic_store(&qp->ent->comm_est, 0);
	atomic_store(&qp->ent->state, IBV_QPS_RESET);
	memset(qp->attr, 0, sizeof(*qp->attr));
	qp->attr->cap = qp->cap;
	qp->ent->attr_set = 0;
}

/* ---- modify ---- */

#define QP_ACCESS_ALL (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
		       IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE)

static int ah_attr_ok(const struct ibv_ah_attr *ah)
{
	if (ah->port_num != 1)
		return 0;
	if (ah->is_global && ah->grh.sgid_index >= HCA_GID_TBL_LEN)
		return 0;
	return ah->is_global || ah->dlid != 0;
}

/* The values, once the table has said which attributes may be given. */
static int modify_values_ok(struct hca_qp *qp, const struct ibv_qp_attr *a, int mask)
{
	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return 0;
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= HCA_PKEY_TBL_LEN)
		return 0;
	if ((mask & IBV_QP_ACCESS_FLAGS) && (a->qp_access_flags & ~(unsigned)QP_ACCESS_ALL))
		return 0;
	if ((mask & IBV_QP_PATH_MTU) &&
	    (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
		return 0;
	if ((mask & IBV_QP_AV) && !ah_attr_ok(&a->ah_attr))
		return 0;
	if ((mask & IBV_QP_ALT_PATH) && !ah_attr_ok(&a->alt_ah_attr))
		return 0;
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return 0;
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return 0;
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return 0;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return 0;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > HCA_MAX_RD_ATOM)
		return 0;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > HCA_MAX_RD_ATOM)
		return 0;
	if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != hca_qp_state(qp))
		return 0;
	return 1;
}

#define COPY_IF(bit, field) \
	do { if (mask & (bit)) qp->attr->field = a->field; } while (0)

static void modify_apply(struct hca_qp *qp, const struct ibv_qp_attr *a, int mask)
{
	struct hca_qp_ent *e = qp->ent;

	COPY_IF(IBV_QP_PKEY_INDEX, pkey_index);
	COPY_IF(IBV_QP_PORT, port_num);
	COPY_IF(IBV_QP_QKEY, qkey);
	COPY_IF(IBV_QP_AV, ah_attr);
	COPY_IF(IBV_QP_PATH_MTU, path_mtu);
	COPY_IF(IBV_QP_TIMEOUT, timeout);
	COPY_IF(IBV_QP_RETRY_CNT, retry_cnt);
	COPY_IF(IBV_QP_RNR_RETRY, rnr_retry);
	COPY_IF(IBV_QP_RQ_PSN, rq_psn);
	COPY_IF(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
	COPY_IF(IBV_QP_ALT_PATH, alt_ah_attr);
	COPY_IF(IBV_QP_ALT_PATH, alt_pkey_index);
	COPY_IF(IBV_QP_ALT_PATH, alt_port_num);
	COPY_IF(IBV_QP_ALT_PATH, alt_timeout);
	COPY_IF(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
	COPY_IF(IBV_QP_SQ_PSN, sq_psn);
	COPY_IF(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
	COPY_IF(IBV_QP_PATH_MIG_STATE, path_mig_state);
	COPY_IF(IBV_QP_DEST_QPN, dest_qp_num);
	COPY_IF(IBV_QP_ACCESS_FLAGS, qp_access_flags);
	COPY_IF(IBV_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
	qp->attr->rq_psn &= 0xffffff;
	qp->attr->sq_psn &= 0xffffff;
	qp->ent->attr_set |= mask;
	if (mask & IBV_QP_AV)
		qp->path_route = 0; /* a new address vector: decide again */
	qp->rnr_left = qp->attr->rnr_retry;
	qp->retry_left = qp->attr->retry_cnt;

	atomic_store(&e->qkey, qp->attr->qkey);
	atomic_store(&e->access, qp->attr->qp_access_flags);
	atomic_store(&e->min_rnr_timer, qp->attr->min_rnr_timer);
	atomic_store(&e->path_mtu, qp->attr->path_mtu);
	atomic_store(&e->max_dest_rd_atomic, qp->attr->max_dest_rd_atomic);
	atomic_store(&e->dest_qpn, qp->attr->dest_qp_num);
}

static int qp_modify(struct hca_qp *qp, struct ibv_qp_attr *a, int mask);
static void qp_path_set(struct hca_qp *qp);

/*
 * An XRC target QP may be modified by any process that holds it. The
 * state lock keeps a flush a responder asked for (event.c) off a QP the
 * application is resetting.
 */
int hca_qp_modify(struct hca_qp *qp, struct ibv_qp_attr *a, int mask)
{
	int rc;

	pthread_mutex_lock(&qp->state_lock);
	if (qp->type != IBV_QPT_XRC_RECV) {
		rc = qp_modify(qp, a, mask);
	} else {
		hca_seg_lock(qp->dev->seg);
		rc = atomic_load(&qp->ent->qpn) == qp->qpn ? qp_modify(qp, a, mask) : EINVAL;
		hca_seg_unlock(qp->dev->seg);
	}
	pthread_mutex_unlock(&qp->state_lock);
	return rc;
}

static int qp_modify(struct hca_qp *qp, struct ibv_qp_attr *a, int mask)
{
	enum ibv_qp_state cur = hca_qp_state(qp);
	enum ibv_qp_state next = (mask & IBV_QP_STATE) ? a->qp_state : cur;

	if (hca_qp_modify_check(qp->type, cur, next, mask, NULL) ||
	    !modify_values_ok(qp, a, mask))
		return EINVAL;
	if (next == IBV_QPS_RESET) {
		qp_reset(qp);
		return 0;
	}
	modify_apply(qp, a, mask);
	if (next == IBV_QPS_ERR) {
		hca_qp_to_error(qp);
		return 0;
	}
	if (mask & IBV_QP_RQ_PSN)
		qp->epsn = qp->attr->rq_psn;
	if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT) {
		qp_path_set(qp);
		hca_mb_open(qp);
	}
	if (next == IBV_QPS_RTS && cur == IBV_QPS_RTR) {
		qp->psn = qp->send_psn = qp->attr->sq_psn;
		qp->acked_psn = qp->acked_high = qp->high_psn = (qp->psn - 1) & 0xffffff;
	}
	qp->attr->qp_state = next;
	atomic_store(&qp->ent->state, next);
	if (next == IBV_QPS_SQD) {
		/* the SQ drains inside post/poll: drained when nothing is held */
		pthread_mutex_lock(&qp->sq_lock);
		bool drained = qp->sq_head == qp->sq_tail;
		qp->sqd_event_due = !drained && qp->attr->en_sqd_async_notify;
		pthread_mutex_unlock(&qp->sq_lock);
		if (drained && qp->attr->en_sqd_async_notify)
			hca_ctx_queue_event(qp->ctx, IBV_EVENT_SQ_DRAINED, qp->user, 0);
	} else if (next == IBV_QPS_RTS) {
		hca_engine.sq_progress(qp); /* SQD -> RTS resumes held WQEs */
	}
	return 0;
}

/* Connected: over the UDP link or the host's shared memory? */
static void qp_path_set(struct hca_qp *qp)
{
	bool was = qp->udp;

	qp->link = NULL;
	HCA_LINKS_EACH(l)
		if (l->attach && l->attach(qp)) {
			qp->link = l;
			break;
		}
	if (qp->udp != was) {
		int d = qp->udp ? 1 : -1;

		atomic_fetch_add(&qp->dev->udp_qps, d);
		/* which CQs' busy polls read the link (cq.c poll_link) */
		if (qp->scq)
			atomic_fetch_add(&qp->scq->udp_qps, d);
		if (qp->rcq)
			atomic_fetch_add(&qp->rcq->udp_qps, d);
	}
}

int hca_qp_query(struct hca_qp *qp, struct ibv_qp_attr *attr, int mask,
		 struct ibv_qp_init_attr *init)
{
	(void)mask; /* every attribute is returned: cheap, and always valid */
	*attr = *qp->attr;
	attr->qp_state = hca_qp_state(qp);
	attr->cur_qp_state = attr->qp_state;
	attr->cap = qp->cap;
	attr->sq_draining = 0;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_type = qp->type;
		init->cap = qp->cap;
		init->sq_sig_all = qp->sq_sig_all;
		/* the verbs layer fills the object pointers it owns */
	}
	return 0;
}

/* ---- destroy ---- */

/*
 * An XRC target QP handle goes; the QP itself goes with the last holder
 * on the host (every process that created, opened or registered it).
 */
static void xrc_target_release(struct hca_qp *qp)
{
	struct hca_dev *dev = qp->dev;

	hca_seg_lock(dev->seg);
	pthread_mutex_lock(&dev->lock);
	if (dev->xrc_local[qp->idx] && --dev->xrc_local[qp->idx] == 0) {
		if (dev->qp_tab[qp->idx] == qp)
			atomic_store(&dev->qp_tab[qp->idx], NULL);
		if (atomic_load(&qp->ent->qpn) == qp->qpn)
			hca_xrc_unreg_last(dev->seg, qp->ent, dev->slot);
	} else if (dev->qp_tab[qp->idx] == qp) {
		/* another handle of ours remains */
		atomic_store(&dev->qp_tab[qp->idx], NULL);
	}
	pthread_mutex_unlock(&dev->lock);
	hca_seg_unlock(dev->seg);
}

/*
 * Every link lets go of the QP: a packet being handled for it finishes,
 * what it owes goes while its directory entry (the path) is there (pay),
 * and the link forgets it (the UDP link's detach says how).
 */
static void qp_link_barrier(struct hca_dev *dev, struct hca_qp *qp, bool pay)
{
	HCA_LINKS_EACH(l)
		if (l->detach)
			l->detach(qp, pay);
}

int hca_qp_destroy(struct hca_qp *qp)
{
	struct hca_dev *dev = qp->dev;
	struct hca_seg *seg = dev->seg;

	if (qp->mcast_count)
		return EBUSY; /* ibv_destroy_qp(3): attached to a multicast group */
	/* the order matters: no timer or packet may take it up again once it
	 * is off a list, and its shared entry goes last */
	atomic_store(&qp->dying, true);
	if (qp->type != IBV_QPT_XRC_RECV) {
		hca_seg_lock(seg);
		hca_qp_tab_set(dev, qp->idx, NULL); /* packets no longer find it */
		hca_seg_unlock(seg);
	}
	qp_link_barrier(dev, qp, true);
	if (qp->type == IBV_QPT_XRC_RECV) {
		xrc_target_release(qp);
		qp_link_barrier(dev, qp, false); /* reachable until released */
		hca_pin_wait(&qp->pin); /* a doorbell dispatch acting on it */
	} else {
		hca_dev_wait_remove(dev, qp); /* waits for its pins too */
		hca_mb_detach(qp);
		hca_seg_lock(seg);
		hca_qp_ent_free(seg, qp->ent, qp->rq_size);
		hca_seg_unlock(seg);
	}
	qp_refs(qp, -1);
	qp_free_private(qp);
	return 0;
}

/* ---- receive posting ---- */

int hca_qp_post_recv(struct hca_qp *qp, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad)
{
	enum ibv_qp_state s = hca_qp_state(qp);
	int rc;

	if (qp->srq || !qp->rq || s == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL; /* no receive queue of its own (SRQ, XRC) */
	}
	rc = hca_ring_post_recv(qp->rq, qp->cap.max_recv_sge, wr, bad);
	/* in the error state, posted receives complete flushed at once */
	if (s == IBV_QPS_ERR)
		hca_qp_flush_rq(qp);
	else
		hca_rnr_kick(qp->dev, qp->ent->rnr_waiters);
	return rc;
}
