/*
 * The requester over the UDP link: send WQEs become packets, and complete
 * when the responder's answers come back — the IB spec's reliable
 * connection, with its timers.
 *
 * Each WQE gets its PSNs when first sent (a READ takes one per response
 * packet, as the spec counts them). Up to HCA_UDP_WINDOW packets are in
 * flight. ACKs complete WQEs in order; READ and atomic WQEs complete when
 * their response has arrived whole. A NAK for a sequence error, an RNR
 * NAK (after its timer) or the ACK timeout (4.096 us * 2^timeout) rewinds
 * to the oldest unacknowledged WQE and sends again from it (go-back-N):
 * the responder drops what it already has as duplicates, re-executes
 * READs and replays atomics. Retries are counted against retry_cnt and
 * rnr_retry, ending in the completion statuses the spec names. UC and UD
 * WQEs complete as soon as they are sent: nothing comes back.
 * Runs with qp->sq_lock held.
 */
#include <errno.h>
#include <string.h>

#include "hca_int.h"

#define HCA_UDP_WINDOW 256          /* packets in flight per QP, at most */
#define HCA_UDP_WINDOW_MIN 8        /* ... and at least, after losses */
#define HCA_NAK_STALL_MAX 64        /* NAKs in a row without progress */

#define SQ_SLOT(qp, i) (&(qp)->sq[(i) & ((qp)->cap.max_send_wr - 1)])

uint8_t hca_wire_transport(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_UC:
		return HCA_WT_UC;
	case IBV_QPT_UD:
		return HCA_WT_UD;
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		return HCA_WT_XRC;
	default:
		return HCA_WT_RC;
	}
}

/* Decided when the QP is connected (RTR): does its path leave the host? */
void hca_udp_path_set(struct hca_qp *qp)
{
	struct hca_link *l = &qp->dev->link;
	const struct ibv_ah_attr *ah = &qp->attr->ah_attr;
	union ibv_gid mine;
	uint32_t ip;

	qp->udp = false;
	if (qp->type == IBV_QPT_UD || qp->type == IBV_QPT_XRC_RECV)
		return;
	if (ah->is_global && hca_link_gid_ip(&ah->grh.dgid, &ip)) {
		hca_gid_entry(&qp->dev->net, qp->dev->guid, 0, &mine);
		qp->udp = l->force_udp || memcmp(mine.raw, ah->grh.dgid.raw, 16);
		qp->udp_daddr = ip;
	} else if (l->force_udp) {
		qp->udp = true;
		qp->udp_daddr = l->ip;
	}
	qp->psn = qp->attr->sq_psn;
	qp->acked_psn = qp->acked_high = hca_psn_add(qp->psn, -1);
	/* a new connection: nothing learnt on an old one carries over */
	qp->srtt_ns = qp->rttvar_ns = qp->rtt_sent_ns = 0;
	qp->last_probe_ns = qp->goback_ns = 0;
	qp->probes = qp->nak_stall = qp->cwnd = 0;
}

static uint32_t pkts_for(uint64_t len, uint32_t mtu)
{
	return len ? (uint32_t)((len + mtu - 1) / mtu) : 1;
}

/* Which wire opcode packet i of n of this WQE is. */
static uint8_t pkt_opcode(const struct hca_swqe *w, uint32_t i, uint32_t n, uint8_t tr)
{
	bool imm = w->wr.opcode == IBV_WR_SEND_WITH_IMM ||
		   w->wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	bool send = w->wr.opcode == IBV_WR_SEND || w->wr.opcode == IBV_WR_SEND_WITH_IMM;
	uint8_t op;

	switch (w->wr.opcode) {
	case IBV_WR_RDMA_READ:
		return tr | HCA_WOP_READ_REQUEST;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return tr | HCA_WOP_COMPARE_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return tr | HCA_WOP_FETCH_ADD;
	default:
		break;
	}
	if (n == 1)
		op = send ? (imm ? HCA_WOP_SEND_ONLY_IMM : HCA_WOP_SEND_ONLY)
			  : (imm ? HCA_WOP_WRITE_ONLY_IMM : HCA_WOP_WRITE_ONLY);
	else if (i == 0)
		op = send ? HCA_WOP_SEND_FIRST : HCA_WOP_WRITE_FIRST;
	else if (i + 1 < n)
		op = send ? HCA_WOP_SEND_MIDDLE : HCA_WOP_WRITE_MIDDLE;
	else
		op = send ? (imm ? HCA_WOP_SEND_LAST_IMM : HCA_WOP_SEND_LAST)
			  : (imm ? HCA_WOP_WRITE_LAST_IMM : HCA_WOP_WRITE_LAST);
	return tr | op;
}

/* Gather len bytes at offset off of the local scatter list into dst. */
static void gather(const struct iovec *iov, int n, uint64_t off, uint8_t *dst, size_t len)
{
	for (int i = 0; i < n && len; i++) {
		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		size_t take = iov[i].iov_len - off < len ? iov[i].iov_len - off : len;

		memcpy(dst, (uint8_t *)iov[i].iov_base + off, take);
		dst += take;
		len -= take;
		off = 0;
	}
}

static void fill_request_hdr(struct hca_qp *qp, const struct hca_swqe *w,
			     struct hca_wire_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->pkey = HCA_DEFAULT_PKEY;
	h->dqpn = qp->attr->dest_qp_num;
	h->xrc_srqn = w->wr.qp_type.xrc.remote_srqn;
	h->imm = be32toh(w->wr.imm_data);
	if (w->wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	    w->wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		h->va = w->wr.wr.atomic.remote_addr;
		h->rkey = w->wr.wr.atomic.rkey;
		h->swap_add = w->wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ?
			      w->wr.wr.atomic.swap : w->wr.wr.atomic.compare_add;
		h->compare = w->wr.wr.atomic.compare_add;
	} else {
		h->va = w->wr.wr.rdma.remote_addr;
		h->rkey = w->wr.wr.rdma.rkey;
		h->dmalen = w->total_len;
	}
}

#define HCA_ACKREQ_EVERY 64          /* a coalesced ACK per this many packets */

static bool needs_response(const struct hca_swqe *w);

/* Request packets WQE w takes (a READ or atomic: one request). */
static uint32_t request_pkts(struct hca_qp *qp, const struct hca_swqe *w)
{
	return needs_response(w) ? 1 : pkts_for(w->total_len, hca_path_mtu_bytes(qp));
}

/*
 * Does the requester want this message's ACK soon? When its completion
 * will be reported (signaled), or the send queue is half full (its slots
 * come back only with ACKs). An unsignaled message in a stream can wait
 * for a coalesced ACK.
 */
static bool wants_ack(struct hca_qp *qp, const struct hca_swqe *w)
{
	return qp->sq_sig_all || (w->wr.send_flags & IBV_SEND_SIGNALED) ||
	       qp->sq_tail - qp->sq_head >= qp->cap.max_send_wr / 2;
}

static void assign_psns(struct hca_qp *qp, struct hca_swqe *w)
{
	if (w->psn_set)
		return;
	w->psn_set = true;
	w->first_psn = qp->psn;
	w->npkts = pkts_for(w->total_len, hca_path_mtu_bytes(qp));
	if (!needs_response(w) || w->wr.opcode != IBV_WR_RDMA_READ)
		w->npkts = request_pkts(qp, w);
	qp->psn = hca_psn_add(qp->psn, (int32_t)w->npkts);
}

/*
 * Send up to `budget` more packets of WQE w, from w->sent on (again, when
 * rewound). capture_only: the shared-memory link moved the message
 * already; record all its packets in the pcap file and send nothing.
 */
static enum ibv_wc_status packetize(struct hca_qp *qp, struct hca_swqe *w,
				    bool capture_only, uint32_t budget)
{
	uint8_t tr = hca_wire_transport(qp->type), pkt[HCA_PKT_MAX];
	uint32_t mtu = hca_path_mtu_bytes(qp), n, start, end, resume = 0;
	struct iovec iov[HCA_MAX_SGE];
	struct hca_link_batch batch = { 0 };
	struct hca_wire_hdr h;
	enum ibv_wc_status st;
	int niov;

	st = hca_req_local_iov(qp, w, iov, &niov);
	if (st)
		return st;
	if (needs_response(w) && w->wr.opcode != IBV_WR_RDMA_READ && w->total_len != 8)
		return IBV_WC_LOC_LEN_ERR;
	assign_psns(qp, w);
	if (!capture_only && needs_response(w) && w->done) {
		/* gone back over a READ or atomic whose answer is whole:
		 * nothing to ask again */
		w->sent = 1;
		qp->send_psn = hca_psn_add(w->first_psn, (int32_t)w->npkts);
		return IBV_WC_SUCCESS;
	}
	n = request_pkts(qp, w);
	start = w->sent;
	end = start + budget < n ? start + budget : n;
	fill_request_hdr(qp, w, &h);
	if (w->wr.opcode == IBV_WR_RDMA_READ && w->rd_pkts) {
		/* a READ asked again asks only for what has not arrived, as
		 * the spec allows: at the PSN of its first missing response,
		 * from that offset (whole MTUs arrived before it) */
		resume = w->rd_pkts;
		h.va += w->rd_bytes;
		h.dmalen -= (uint32_t)w->rd_bytes;
	}
	for (uint32_t i = w->sent; i < end; i++) {
		size_t plen = needs_response(w) ? 0 :
			      (i + 1 < n ? mtu : w->total_len - (uint64_t)i * mtu);
		size_t hl;

		h.opcode = pkt_opcode(w, i, n, tr);
		/* ACK requested: a message's last packet when its completion
		 * is wanted, every 64th, and the last one sent now if the
		 * window is then full or it is sent again (else the requester
		 * would wait for its timer); other ACKs may come coalesced
		 * (udp_ack.c) */
		h.psn = hca_psn_add(w->first_psn, (int32_t)(i + resume));
		h.ackreq = (i + 1 == n && wants_ack(qp, w)) ||
			   (i + 1 == end && (end - start == budget ||
					     hca_psn_cmp(h.psn, qp->high_psn) <= 0)) ||
			   i % HCA_ACKREQ_EVERY == HCA_ACKREQ_EVERY - 1;
		h.se = i + 1 == n && (w->wr.send_flags & IBV_SEND_SOLICITED);
		hl = hca_wire_put_hdrs(pkt, sizeof(pkt), &h, plen);
		if (!hl) {
			hca_link_batch_flush(qp->dev, &batch);
			return IBV_WC_LOC_QP_OP_ERR;
		}
		gather(iov, niov, (uint64_t)i * mtu, pkt + hl, plen);
		if (capture_only) {
			hca_link_capture(qp->dev, qp->dev->link.ip, pkt, hl, plen);
			continue;
		}
		HCA_COUNT(qp->ent, tx_pkts);
		if (hca_psn_cmp(h.psn, qp->high_psn) <= 0) {
			HCA_COUNT(qp->ent, retrans);
		} else {
			qp->high_psn = h.psn;
			if (h.ackreq && !qp->rtt_sent_ns) {
				qp->rtt_psn = h.psn;
				qp->rtt_sent_ns = hca_now_ns();
			}
		}
		hca_link_batch_add(qp->dev, &batch, qp->udp_daddr, pkt, hl, plen);
	}
	hca_link_batch_flush(qp->dev, &batch);
	if (!capture_only) {
		w->sent = end;
		/* a READ's responses take the PSNs after its request */
		qp->send_psn = hca_psn_add(w->first_psn,
					   (int32_t)(end == n ? w->npkts : end));
	}
	return IBV_WC_SUCCESS;
}

/* SOFTIB_PCAP on the shared-memory link: the packets a message stands for. */
void hca_udp_capture(struct hca_qp *qp, struct hca_swqe *w)
{
	if (qp->type == IBV_QPT_UD)
		return; /* datagrams: build_ud records them (hca_udp_capture_ud) */
	w->psn_set = false;
	packetize(qp, w, true, UINT32_MAX);
}

/*
 * Packets sent and not yet acknowledged (READ responses included): the
 * window protects the receiver's socket buffer, and bounds a go-back-N.
 */
static uint32_t in_flight(struct hca_qp *qp)
{
	int32_t d = hca_psn_diff(qp->send_psn, qp->acked_psn) - 1;

	return d > 0 ? (uint32_t)d : 0;
}

static uint32_t rd_atomic_in_flight(struct hca_qp *qp)
{
	uint32_t n = 0;

	for (uint32_t i = qp->sq_head; i != qp->sq_next; i++)
		n += needs_response(SQ_SLOT(qp, i));
	return n;
}

/*
 * The window adapts to loss, as TCP's does: halved by each go-back (a NAK
 * or a timeout), grown by one per acknowledged advance. Go-back-N resends
 * all that is in flight after a loss, so on a lossy path a smaller window
 * is what lets messages through.
 */
static uint32_t window(struct hca_qp *qp)
{
	if (qp->cwnd < HCA_UDP_WINDOW_MIN || qp->cwnd > HCA_UDP_WINDOW)
		qp->cwnd = HCA_UDP_WINDOW;
	return qp->cwnd;
}

static void window_shrink(struct hca_qp *qp)
{
	uint32_t w = window(qp) / 2;

	qp->cwnd = w < HCA_UDP_WINDOW_MIN ? HCA_UDP_WINDOW_MIN : w;
}

/* Room to send w's next packets: the window, and max_rd_atomic. */
static uint32_t budget_for(struct hca_qp *qp, struct hca_swqe *w)
{
	uint32_t pk = in_flight(qp), win = window(qp);
	uint32_t max_rd = qp->attr->max_rd_atomic ? qp->attr->max_rd_atomic : 1;

	if (pk >= win)
		return 0;
	if (needs_response(w) && !w->sent && rd_atomic_in_flight(qp) >= max_rd)
		return 0;
	return win - pk;
}

/* UC: sent is done (unsignaled WQEs complete silently). */
static void complete_sent_uc(struct hca_qp *qp)
{
	while (qp->sq_head != qp->sq_next) {
		hca_req_complete(qp, SQ_SLOT(qp, qp->sq_head), IBV_WC_SUCCESS);
		qp->sq_head++;
	}
}

/*
 * Go back N: everything from the first unacknowledged packet goes again
 * (the oldest WQE's remaining packets; a READ or atomic is asked again
 * whole: its responses say what already arrived).
 */
static void rewind_to_head(struct hca_qp *qp)
{
	struct hca_swqe *head;
	int32_t done;

	for (uint32_t i = qp->sq_head; i != qp->sq_tail; i++)
		SQ_SLOT(qp, i)->sent = 0;
	qp->sq_next = qp->sq_head;
	if (qp->sq_head == qp->sq_tail || !SQ_SLOT(qp, qp->sq_head)->psn_set)
		return;
	head = SQ_SLOT(qp, qp->sq_head);
	qp->send_psn = hca_psn_add(head->first_psn, (int32_t)head->rd_pkts);
	/* the READ responses that arrived are acknowledged, whatever a stale
	 * NAK said: the READ is asked again from after them */
	if (head->rd_pkts && hca_psn_cmp(qp->acked_psn, hca_psn_add(qp->send_psn, -1)) < 0)
		qp->acked_psn = hca_psn_add(qp->send_psn, -1);
	done = hca_psn_diff(hca_psn_add(qp->acked_psn, 1), head->first_psn);
	if (!needs_response(head) && done > 0 && done < (int32_t)head->npkts) {
		head->sent = (uint32_t)done;
		qp->send_psn = hca_psn_add(head->first_psn, done);
	}
}

/* The spec's ACK timer: 4.096 us * 2^timeout (0: none). */
static uint64_t spec_timeout_ns(struct hca_qp *qp)
{
	return qp->attr->timeout ? 4096ULL << qp->attr->timeout : 0;
}

/*
 * Early retransmission. On a lossy path the last packets the window lets
 * out are lost often, and then nothing comes back to say so: a NAK needs
 * a later packet, and the spec's timer is long (tens of ms for the usual
 * timeouts). So the requester also goes back once a few measured round
 * trips pass without progress, doubling that wait each time. Such a go
 * back costs no retry: only the spec's timer counts against retry_cnt,
 * so a dead peer is declared exactly when the spec says. With timeout 0
 * (the spec's infinite timer) nothing is sent again on time alone.
 */
#define HCA_PROBE_MIN_NS 200000ULL

static uint64_t probe_wait_ns(struct hca_qp *qp)
{
	uint64_t rto = qp->srtt_ns ? qp->srtt_ns + 4 * qp->rttvar_ns : 1000000ULL;
	uint64_t spec = spec_timeout_ns(qp);

	if (rto < HCA_PROBE_MIN_NS)
		rto = HCA_PROBE_MIN_NS;
	rto <<= qp->probes < 16 ? qp->probes : 16;
	return spec && rto > spec ? spec : rto;
}

static uint64_t probe_due_ns(struct hca_qp *qp)
{
	uint64_t since = qp->last_probe_ns > qp->last_progress_ns ?
			 qp->last_probe_ns : qp->last_progress_ns;

	return since + probe_wait_ns(qp);
}

/* A round-trip sample: an ACK request's answer (RFC 6298's estimator). */
static void rtt_sample(struct hca_qp *qp, uint32_t psn, uint64_t now)
{
	uint64_t r, d;

	if (!qp->rtt_sent_ns || hca_psn_cmp(psn, qp->rtt_psn) < 0)
		return;
	r = now - qp->rtt_sent_ns;
	qp->rtt_sent_ns = 0;
	if (!qp->srtt_ns) {
		qp->srtt_ns = r;
		qp->rttvar_ns = r / 2;
		return;
	}
	d = r > qp->srtt_ns ? r - qp->srtt_ns : qp->srtt_ns - r;
	qp->rttvar_ns = (3 * qp->rttvar_ns + d) / 4;
	qp->srtt_ns = (7 * qp->srtt_ns + r) / 8;
}

/*
 * Going back again and again with nothing acknowledged between means a
 * responder and a requester that disagree (a forged or broken stream):
 * after HCA_NAK_STALL_MAX such go-backs or NAKs the head fails as on
 * retries exhausted, rather than go back and forth forever. Real loss
 * lets something through between go-backs, and that resets the count.
 */
static bool stalled(struct hca_qp *qp)
{
	if (++qp->nak_stall <= HCA_NAK_STALL_MAX)
		return false;
	hca_req_fail_head(qp, SQ_SLOT(qp, qp->sq_head), IBV_WC_RETRY_EXC_ERR);
	return true;
}

static void go_back(struct hca_qp *qp)
{
	qp->rtt_sent_ns = 0; /* Karn: no sample across a retransmission */
	window_shrink(qp);
	rewind_to_head(qp);
}

static bool check_timeout(struct hca_qp *qp, uint64_t now)
{
	uint64_t spec = spec_timeout_ns(qp);

	if (!in_flight(qp))
		return true;
	if (spec && now > qp->last_progress_ns && now - qp->last_progress_ns >= spec) {
		if (qp->retry_left-- <= 0) {
			hca_req_fail_head(qp, SQ_SLOT(qp, qp->sq_head), IBV_WC_RETRY_EXC_ERR);
			return false;
		}
		qp->last_progress_ns = now;
		go_back(qp);
	} else if (spec && now >= probe_due_ns(qp)) {
		if (stalled(qp))
			return false;
		qp->last_probe_ns = now;
		qp->probes++;
		go_back(qp);
	}
	return true;
}

/* When next to look at this QP: RNR wait, or the ACK timer. */
static void arm_timer(struct hca_qp *qp, uint64_t now)
{
	uint64_t when = 0, spec = spec_timeout_ns(qp);

	if (qp->rnr_until_ns > now) {
		when = qp->rnr_until_ns;
	} else if (in_flight(qp)) {
		/* timeout 0: the spec's infinite timer, and no early go-back */
		when = spec ? probe_due_ns(qp) : qp->last_progress_ns + 200000000ULL;
		if (spec && qp->last_progress_ns + spec < when)
			when = qp->last_progress_ns + spec;
	}
	/* already on the waiting list for no later: that look re-arms (a
	 * racy read, but a QP being taken off the list is run right after,
	 * under the send lock we hold) */
	if (!when || (qp->waiting && qp->wait_until_ns <= when))
		return;
	qp->wait_until_ns = when;
	hca_dev_wait_add(qp->dev, qp); /* the UDP path reads its own timers */
}

void hca_udp_sq_progress(struct hca_qp *qp)
{
	uint64_t now = hca_now_ns();
	bool reliable = hca_reliable(qp->type);

	if (qp->rnr_until_ns && now < qp->rnr_until_ns) {
		arm_timer(qp, now);
		return;
	}
	qp->rnr_until_ns = 0;
	if (reliable && !check_timeout(qp, now))
		return;
	if (!in_flight(qp))
		qp->last_progress_ns = now;
	while (qp->sq_next != qp->sq_tail) {
		struct hca_swqe *w = SQ_SLOT(qp, qp->sq_next);
		uint32_t budget = budget_for(qp, w);
		enum ibv_wc_status st;

		if (!budget)
			break;
		st = packetize(qp, w, false, budget);
		if (st) {
			if (qp->sq_next == qp->sq_head)
				hca_req_fail_head(qp, w, st);
			break; /* fails when it reaches the head */
		}
		if (w->sent < request_pkts(qp, w))
			break; /* the window is full: more when ACKs come */
		qp->sq_next++;
	}
	if (!reliable)
		complete_sent_uc(qp);
	else
		arm_timer(qp, now);
	/* an ACK this QP's responder was asked for goes after what we just
	 * sent (one not asked for waits to be coalesced: udp_ack.c) */
	if (atomic_load_explicit(&qp->ack_owed, memory_order_relaxed))
		hca_udp_ack_flush_asked(qp);
}

/* ---- answers from the responder ---- */

static struct hca_swqe *wqe_of_psn(struct hca_qp *qp, uint32_t psn, uint32_t *index)
{
	for (uint32_t i = qp->sq_head; i != qp->sq_next; i++) {
		struct hca_swqe *w = SQ_SLOT(qp, i);

		if (hca_psn_diff(psn, w->first_psn) >= 0 &&
		    hca_psn_diff(psn, w->first_psn) < (int32_t)w->npkts) {
			*index = i;
			return w;
		}
	}
	return NULL;
}

static bool needs_response(const struct hca_swqe *w)
{
	return w->wr.opcode == IBV_WR_RDMA_READ ||
	       w->wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       w->wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
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
	if (w->reask_ns && now - w->reask_ns < probe_wait_ns(qp))
		return;
	w->reask_ns = now;
	/* a responder that ACKs past it and never answers it (it never saw
	 * the request: a forged or broken stream) must not be asked forever */
	if (++w->reasks > HCA_NAK_STALL_MAX) {
		hca_req_fail_head(qp, w, IBV_WC_RETRY_EXC_ERR);
		return;
	}
	if (stalled(qp))
		return;
	qp->rtt_sent_ns = 0;
	rewind_to_head(qp);
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
	if (!head->psn_set || needs_response(head) || done <= (int32_t)head->sent ||
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
	return qp->sq_head != qp->sq_next || (needs_response(w) && w->done) ||
	       hca_psn_cmp(qp->acked_psn, qp->send_psn) >= 0;
}

static void complete_acked(struct hca_qp *qp)
{
	while (may_complete(qp)) {
		struct hca_swqe *w = SQ_SLOT(qp, qp->sq_head);
		uint32_t last = hca_psn_add(w->first_psn, (int32_t)w->npkts - 1);

		if (needs_response(w)) {
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
		if (w->wr.opcode != IBV_WR_RDMA_READ && needs_response(w)) {
			struct iovec iov[HCA_MAX_SGE];
			int n;

			if (hca_req_local_iov(qp, w, iov, &n) == IBV_WC_SUCCESS && n)
				memcpy(iov[0].iov_base, &w->atomic_orig, 8);
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
	if (window(qp) < HCA_UDP_WINDOW)
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
	rtt_sample(qp, psn, now);
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
	int n;

	if (!w || w->wr.opcode != IBV_WR_RDMA_READ || w->done ||
	    h->psn != hca_psn_add(w->first_psn, (int32_t)w->rd_pkts))
		return; /* a duplicate, or a gap: the timer re-asks */
	if (hca_req_local_iov(qp, w, iov, &n) || w->rd_bytes + plen > w->total_len)
		return;
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
	go_back(qp);
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
	    qp->sq_head != qp->sq_next) {
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
	if (qp->sq_head == qp->sq_next)
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
		rewind_to_head(qp);
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
	HCA_COUNT(qp->ent, rx_pkts);
	if (hca_qp_state(qp) == IBV_QPS_ERR || !qp->udp)
		goto out;
	if (op == HCA_WOP_ACKNOWLEDGE) {
		if (hca_aeth_kind(h->syndrome) == HCA_AETH_ACK)
			acked(qp, h->psn);
		else
			nak(qp, h);
	} else if (op == HCA_WOP_ATOMIC_ACKNOWLEDGE) {
		struct hca_swqe *w = wqe_of_psn(qp, h->psn, &idx);

		if (w && needs_response(w) && !w->done) {
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

/* One UD SEND_ONLY datagram: sent, or only recorded (shared memory). */
static void ud_packet(struct hca_qp *qp, struct hca_swqe *w, struct hca_msg *m,
		      uint32_t daddr, bool capture_only)
{
	uint8_t pkt[HCA_PKT_MAX];
	struct hca_wire_hdr h = { .pkey = HCA_DEFAULT_PKEY, .dqpn = m->dst_qpn,
				  .qkey = m->qkey, .sqpn = qp->qpn,
				  .imm = be32toh(w->wr.imm_data),
				  .se = !!(w->wr.send_flags & IBV_SEND_SOLICITED) };
	size_t hl;

	h.opcode = HCA_WT_UD | (w->wr.opcode == IBV_WR_SEND_WITH_IMM ?
				HCA_WOP_SEND_ONLY_IMM : HCA_WOP_SEND_ONLY);
	h.psn = qp->psn;
	qp->psn = hca_psn_add(qp->psn, 1);
	hl = hca_wire_put_hdrs(pkt, sizeof(pkt), &h, m->len);
	if (!hl)
		return;
	gather(m->iov, m->iovcnt, 0, pkt + hl, m->len);
	if (capture_only) {
		hca_link_capture(qp->dev, daddr, pkt, hl, m->len);
	} else {
		HCA_COUNT(qp->ent, tx_pkts);
		hca_link_send(qp->dev, daddr, pkt, hl, m->len);
	}
}

/* UD over the link: complete once sent (a datagram is not answered). */
enum hca_resp_status hca_udp_send_ud(struct hca_qp *qp, struct hca_swqe *w,
				     struct hca_msg *m, uint32_t daddr)
{
	ud_packet(qp, w, m, daddr, false);
	return HCA_RESP_ACK;
}

void hca_udp_capture_ud(struct hca_qp *qp, struct hca_swqe *w, struct hca_msg *m)
{
	ud_packet(qp, w, m, qp->dev->link.ip, true);
}
