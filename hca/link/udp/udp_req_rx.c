/*
 * The UDP requester's other half: the responder's answers. ACKs complete
 * WQEs in order; READ responses land in the WQE's buffers in PSN order;
 * atomic ACKs bring the original value; NAKs go back (a sequence error),
 * wait (RNR) or fail the WQE (the spec's error NAKs). Runs with
 * qp->sq_lock held, from the thread that read the packet.
 */
#include <string.h>

#include "udp_link.h"
#include "udp_req.h"

static struct hca_swqe *wqe_of_psn(struct hca_qp *qp, uint32_t psn, uint32_t *index)
{
	uint32_t end = hca_udp_flight_end(qp);

	for (uint32_t i = qp->sq_head; i != end; i++) {
		struct hca_swqe *w = SQ_SLOT(qp, i);

		if (hca_psn_diff(psn, w->first_psn) >= 0 &&
		    hca_psn_diff(psn, w->first_psn) < (int32_t)w->npkts) {
			*index = i;
			return w;
		}
	}
	return NULL;
}

/*
 * An ACK beyond a READ or atomic whose answer has not (all) come: the
 * responder executed it, and its answer was lost or is late. The spec
 * calls this an implicit NAK: ask again from what is missing. Nothing
 * else in flight would time out (everything is acknowledged), so without
 * this the WQE would wait forever.
 */
static void answer_lost(struct hca_qp *qp, struct hca_swqe *w, uint32_t last)
{
	uint64_t now;

	if (!w->psn_set || hca_psn_cmp(qp->acked_psn, last) < 0)
		return;
	/* what is missing is in flight again: the timers watch it */
	qp->acked_psn = hca_psn_add(w->first_psn, (int32_t)w->rd_pkts - 1);
	/* asked again a moment ago: that answer may be on its way (the ACKs
	 * of what followed overtake it) */
	now = hca_now_ns();
	if (w->reask_ns && now - w->reask_ns < hca_udp_probe_wait_ns(qp))
		return;
	w->reask_ns = now;
	/* a responder that ACKs past it and never answers it (it never saw
	 * the request: a forged or broken stream) must not be asked forever */
	if (++w->reasks > HCA_NAK_STALL_MAX) {
		hca_req_fail_head(qp, w, IBV_WC_RETRY_EXC_ERR);
		return;
	}
	if (hca_udp_stalled(qp))
		return;
	qp->rtt_sent_ns = 0;
	hca_udp_rewind(qp);
}

/*
 * After a go-back the requester may be sending again what a later ACK
 * has since acknowledged: the oldest WQE resumes after it, and nothing
 * acknowledged counts as "to be sent" (else in_flight() would see
 * nothing in flight, no timer would run, and the QP would wait forever).
 */
static void skip_acked(struct hca_qp *qp)
{
	struct hca_swqe *head;
	int32_t done;

	if ((int32_t)(qp->sq_next - qp->sq_head) < 0)
		qp->sq_next = qp->sq_head;
	if (hca_psn_cmp(qp->send_psn, hca_psn_add(qp->acked_psn, 1)) >= 0 ||
	    qp->sq_next != qp->sq_head || qp->sq_head == qp->sq_tail)
		return;
	head = SQ_SLOT(qp, qp->sq_head);
	done = hca_psn_diff(hca_psn_add(qp->acked_psn, 1), head->first_psn);
	if (!head->psn_set || hca_udp_needs_response(head) || done <= (int32_t)head->sent ||
	    done >= (int32_t)head->npkts)
		return;
	head->sent = (uint32_t)done;
	qp->send_psn = hca_psn_add(head->first_psn, done);
}

/*
 * Complete, in order, what the acknowledged PSN covers — WQEs a go-back
 * had not yet sent again included: they were sent whole before (their
 * PSNs are set), and the ACK says they arrived.
 */
static bool may_complete(struct hca_qp *qp)
{
	struct hca_swqe *w = SQ_SLOT(qp, qp->sq_head);

	if (qp->sq_head == qp->sq_tail || !w->psn_set)
		return false;
	return qp->sq_head != qp->sq_next || (hca_udp_needs_response(w) && w->done) ||
	       hca_psn_cmp(qp->acked_psn, qp->send_psn) >= 0;
}

static void complete_acked(struct hca_qp *qp)
{
	while (may_complete(qp)) {
		struct hca_swqe *w = SQ_SLOT(qp, qp->sq_head);
		uint32_t last = hca_psn_add(w->first_psn, (int32_t)w->npkts - 1);

		if (hca_udp_needs_response(w)) {
			if (!w->done) {
				answer_lost(qp, w, last);
				break;
			}
			/* its whole answer acknowledges it, whatever a stale
			 * NAK took acked_psn back to */
			if (hca_psn_cmp(last, qp->acked_psn) > 0)
				qp->acked_psn = last;
		} else if (hca_psn_cmp(last, qp->acked_psn) > 0) {
			break;
		}
		if (w->wr.opcode != IBV_WR_RDMA_READ && hca_udp_needs_response(w)) {
			struct iovec iov[HCA_MAX_SGE];
			struct hca_fence f;
			int n;

			/* the lkey checked and the value landed in one copy
			 * section: a dereg of it waits (fence.c) */
			hca_fence_enter(qp->dev, &f);
			if (hca_req_local_iov(qp, w, iov, &n) == IBV_WC_SUCCESS && n)
				memcpy(iov[0].iov_base, &w->atomic_orig, 8);
			hca_fence_exit(&f);
		}
		hca_req_complete(qp, w, IBV_WC_SUCCESS);
		qp->sq_head++;
	}
	skip_acked(qp);
}

/*
 * The responder moved on: the timers start again and the window grows.
 * Only news counts — an ACK re-accepted after the requester went back
 * (answer_lost, a NAK inside the oldest message) is not progress.
 */
static void progressed(struct hca_qp *qp, uint64_t now)
{
	if (hca_udp_window(qp) < hca_udp_window_max(qp))
		qp->cwnd++;
	qp->nak_stall = 0;
	qp->last_progress_ns = now;
	qp->probes = 0;
	qp->retry_left = qp->attr->retry_cnt;
	qp->rnr_left = qp->attr->rnr_retry;
}

static void acked(struct hca_qp *qp, uint32_t psn)
{
	uint64_t now;

	/* an ACK beyond every PSN we have given out is forged or stale */
	if (hca_psn_cmp(psn, hca_psn_add(qp->psn, -1)) > 0 ||
	    hca_psn_cmp(psn, qp->acked_psn) <= 0)
		return;
	now = hca_now_ns();
	qp->acked_psn = psn;
	hca_udp_rtt_sample(qp, psn, now);
	if (hca_psn_cmp(psn, qp->acked_high) > 0) {
		qp->acked_high = psn;
		progressed(qp, now);
	}
}

/* READ response data lands in the WQE's local buffers, in PSN order. */
static void read_response(struct hca_qp *qp, const struct hca_wire_hdr *h,
			  const uint8_t *pl, size_t plen)
{
	uint32_t idx;
	struct hca_swqe *w = wqe_of_psn(qp, h->psn, &idx);
	struct iovec iov[HCA_MAX_SGE];
	struct hca_fence f;
	int n;

	if (!w || w->wr.opcode != IBV_WR_RDMA_READ || w->done ||
	    h->psn != hca_psn_add(w->first_psn, (int32_t)w->rd_pkts))
		return; /* a duplicate, or a gap: the timer re-asks */
	/* the lkeys checked again for every packet, and its bytes landed, in
	 * one copy section: a dereg of them waits for it (fence.c) */
	hca_fence_enter(qp->dev, &f);
	if (hca_req_local_iov(qp, w, iov, &n) || w->rd_bytes + plen > w->total_len) {
		hca_fence_exit(&f);
		return;
	}
	for (int i = 0; i < n && plen; i++) {
		uint64_t off = w->rd_bytes, base = 0;

		for (int k = 0; k < i; k++)
			base += iov[k].iov_len;
		if (off < base || off >= base + iov[i].iov_len)
			continue;
		size_t take = base + iov[i].iov_len - off < plen ? base + iov[i].iov_len - off : plen;

		memcpy((uint8_t *)iov[i].iov_base + (off - base), pl, take);
		pl += take;
		plen -= take;
		w->rd_bytes += take;
	}
	hca_fence_exit(&f);
	w->rd_pkts++;
	w->reasks = 0;
	progressed(qp, hca_now_ns());
	if (w->rd_pkts == w->npkts)
		w->done = true;
	acked(qp, h->psn);
}

static const enum ibv_wc_status nak_wc[] = {
	[HCA_NAK_INV_REQ] = IBV_WC_REM_INV_REQ_ERR,
	[HCA_NAK_REM_ACCESS] = IBV_WC_REM_ACCESS_ERR,
	[HCA_NAK_REM_OP] = IBV_WC_REM_OP_ERR,
	[HCA_NAK_INV_RD_REQ] = IBV_WC_REM_INV_RD_REQ_ERR,
};

/*
 * A sequence NAK: go back to its PSN. A repeat of the NAK just acted on,
 * within a round trip, answers packets sent before that go-back: going
 * back again would only send the same packets twice.
 */
static bool nak_repeated(struct hca_qp *qp, uint32_t psn, uint64_t now)
{
	uint64_t hold = 2 * qp->srtt_ns > HCA_PROBE_MIN_NS ? 2 * qp->srtt_ns :
							      HCA_PROBE_MIN_NS;

	return psn == qp->goback_psn && qp->goback_ns && now - qp->goback_ns < hold;
}

static void nak_seq(struct hca_qp *qp, uint32_t psn, uint64_t now)
{
	qp->goback_psn = psn;
	qp->goback_ns = now;
	hca_udp_go_back(qp);
}

static void nak(struct hca_qp *qp, const struct hca_wire_hdr *h)
{
	uint8_t kind = hca_aeth_kind(h->syndrome), v = hca_aeth_value(h->syndrome);
	uint32_t idx;

	uint32_t before = qp->acked_psn;
	uint64_t now = hca_now_ns();

	/* the same sequence NAK again, soon after going back for it: an
	 * answer to packets sent before that go-back — neither a stall nor
	 * a reason to go back again */
	if (kind == HCA_AETH_NAK && v == HCA_NAK_PSN_SEQ_ERR &&
	    nak_repeated(qp, h->psn, now)) {
		HCA_COUNT(qp->ent, naks_rcvd);
		return;
	}

	acked(qp, hca_psn_add(h->psn, -1));
	complete_acked(qp);
	/*
	 * The responder says where it stands: an RNR at a message's last
	 * packet, or a sequence error, can name a PSN at or below one it had
	 * already ACKed inside an unfinished message (coalesced ACKs). Go back
	 * to that PSN — within the oldest outstanding WQE only: what completed
	 * stays completed.
	 */
	if ((kind == HCA_AETH_RNR_NAK || v == HCA_NAK_PSN_SEQ_ERR) &&
	    qp->sq_head != hca_udp_flight_end(qp)) {
		struct hca_swqe *head = SQ_SLOT(qp, qp->sq_head);
		int32_t at = hca_psn_diff(h->psn, head->first_psn);

		if (head->psn_set && at >= 0 && at < (int32_t)head->npkts &&
		    hca_psn_cmp(h->psn, qp->acked_psn) <= 0)
			qp->acked_psn = hca_psn_add(h->psn, -1);
	}
	if (kind == HCA_AETH_RNR_NAK)
		HCA_COUNT(qp->ent, rnr_rcvd);
	else
		HCA_COUNT(qp->ent, naks_rcvd);
	if (qp->sq_head == hca_udp_flight_end(qp))
		return; /* nothing of ours in flight: a stale or forged NAK */
	/* NAKs that move nothing forward, many in a row, mean a responder and
	 * a requester that disagree (a forged or broken stream): give up as
	 * on retries exhausted rather than go back and forth forever */
	if (qp->acked_psn == before && kind != HCA_AETH_RNR_NAK &&
	    ++qp->nak_stall > HCA_NAK_STALL_MAX) {
		hca_req_fail_head(qp, SQ_SLOT(qp, qp->sq_head), IBV_WC_RETRY_EXC_ERR);
		return;
	}
	if (kind == HCA_AETH_RNR_NAK) {
		if (qp->attr->rnr_retry != 7 && qp->rnr_left-- <= 0) {
			hca_req_fail_head(qp, SQ_SLOT(qp, qp->sq_head), IBV_WC_RNR_RETRY_EXC_ERR);
			return;
		}
		/* an answer: the ACK timer starts again after the RNR wait */
		qp->rnr_until_ns = hca_now_ns() + hca_rnr_timer_us[v & 31] * 1000ULL;
		qp->last_progress_ns = qp->rnr_until_ns;
		qp->probes = 0;
		qp->rtt_sent_ns = 0; /* the RNR wait is no round trip */
		hca_udp_rewind(qp);
	} else if (v == HCA_NAK_PSN_SEQ_ERR) {
		nak_seq(qp, h->psn, now);
	} else if (wqe_of_psn(qp, h->psn, &idx) && idx == qp->sq_head) {
		hca_req_fail_head(qp, SQ_SLOT(qp, qp->sq_head),
				  v < 5 && nak_wc[v] ? nak_wc[v] : IBV_WC_REM_OP_ERR);
	}
}

void hca_udp_req_rx(struct hca_qp *qp, const struct hca_wire_hdr *h,
		    const uint8_t *pl, size_t plen)
{
	uint8_t op = h->opcode & 0x1f;
	uint32_t idx;

	pthread_mutex_lock(&qp->sq_lock);
	HCA_COUNT_1W(qp->ent->cnt.rx_pkts); /* rx_lock held (link_udp.c) */
	if (hca_qp_state(qp) == IBV_QPS_ERR || !qp->udp)
		goto out;
	if (op == HCA_WOP_ACKNOWLEDGE) {
		if (hca_aeth_kind(h->syndrome) == HCA_AETH_ACK)
			acked(qp, h->psn);
		else
			nak(qp, h);
	} else if (op == HCA_WOP_ATOMIC_ACKNOWLEDGE) {
		struct hca_swqe *w = wqe_of_psn(qp, h->psn, &idx);

		if (w && hca_udp_needs_response(w) && !w->done) {
			w->atomic_orig = h->orig;
			w->done = true;
			progressed(qp, hca_now_ns());
		}
		acked(qp, h->psn);
	} else if (op >= HCA_WOP_READ_RESPONSE_FIRST && op <= HCA_WOP_READ_RESPONSE_ONLY) {
		read_response(qp, h, pl, plen);
	}
	complete_acked(qp);
	if (hca_qp_state(qp) == IBV_QPS_RTS)
		hca_udp_sq_progress(qp);
out:
	pthread_mutex_unlock(&qp->sq_lock);
}

