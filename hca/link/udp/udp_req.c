/*
 * The requester over the UDP link: send WQEs become packets, and complete
 * when the responder's answers come back — the IB spec's reliable
 * connection, with its timers.
 *
 * Each WQE gets its PSNs when first sent (a READ takes one per response
 * packet, as the spec counts them). Up to a window of packets are in
 * flight (hca_udp_window_max). ACKs complete WQEs in order; READ and atomic WQEs complete when
 * their response has arrived whole. A NAK for a sequence error, an RNR
 * NAK (after its timer) or the ACK timeout (4.096 us * 2^timeout) rewinds
 * to the oldest unacknowledged WQE and sends again from it (go-back-N):
 * the responder drops what it already has as duplicates, re-executes
 * READs and replays atomics. Retries are counted against retry_cnt and
 * rnr_retry, ending in the completion statuses the spec names. UC and UD
 * WQEs complete as soon as they are sent: nothing comes back.
 * This file sends and runs the timers; udp_req_rx.c takes the answers.
 * Runs with qp->sq_lock held.
 */
#include <errno.h>
#include <string.h>

#include "udp_link.h"
#include "udp_req.h"


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


/* A READ or an atomic: answered with data, not only ACKed. */
bool hca_udp_needs_response(const struct hca_swqe *w)
{
	return w->wr.opcode == IBV_WR_RDMA_READ ||
	       w->wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       w->wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

/* Request packets WQE w takes (a READ or atomic: one request). */
static uint32_t request_pkts(struct hca_qp *qp, const struct hca_swqe *w)
{
	return hca_udp_needs_response(w) ? 1 : pkts_for(w->total_len, hca_path_mtu_bytes(qp));
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
	if (!hca_udp_needs_response(w) || w->wr.opcode != IBV_WR_RDMA_READ)
		w->npkts = request_pkts(qp, w);
	qp->psn = hca_psn_add(qp->psn, (int32_t)w->npkts);
}

/*
 * The ACK that may ride with a packet of this QP to its peer host, into
 * ack (its header bytes returned, 0: none), and where it goes (*adaddr):
 * this QP's own, when it is due enough to ride (udp_ack.c: asked for,
 * owed for a while, or the application sleeps for completions), else the
 * one another QP owes that host (an XRC receive QP's, which sends
 * nothing itself). One not yet due stays owed, to cover the messages
 * that follow: a datagram less per message.
 */
static size_t ride_ack(struct hca_qp *qp, uint8_t *ack, size_t cap, uint32_t *adaddr)
{
	struct hca_wire_hdr ah;

	*adaddr = qp->udp_daddr;
	if (hca_udp_ack_rides(qp) && hca_udp_ack_take(qp, false, &ah, adaddr)) {
		ah.pkey = HCA_DEFAULT_PKEY;
		ah.dqpn = qp->attr->dest_qp_num;
		HCA_COUNT(qp->ent, tx_pkts);
	} else if (!hca_udp_ack_take_host(qp, qp->udp_daddr, &ah)) {
		return 0;
	}
	return hca_wire_put_hdrs(ack, cap, &ah, 0);
}

/*
 * A lone packet (most small messages) goes straight from pkt, not through
 * the GSO buffer, with the ACK that rides (ride_ack) in the same system
 * call (sendmmsg), behind it: the peer's poll finds the request first,
 * and the ACK costs no call of its own.
 */
static void send_one(struct hca_qp *qp, uint8_t *pkt, size_t hl, size_t plen)
{
	uint32_t adaddr;
	uint8_t ack[128];
	size_t ahl = ride_ack(qp, ack, sizeof(ack), &adaddr);

	if (ahl && adaddr == qp->udp_daddr) {
		hca_link_send_pair(qp->dev, qp->udp_daddr, pkt, hl, plen, ack, ahl);
		return;
	}
	hca_link_send(qp->dev, qp->udp_daddr, pkt, hl, plen);
	if (ahl)
		hca_link_send(qp->dev, adaddr, ack, ahl, 0);
}

/*
 * The end of a run of packets (a message longer than the path MTU, or
 * several): the ACK that rides goes in the same system call too
 * (link_gso.c), as with a lone packet — the reply of a ping-pong of
 * 1 KiB and more carries the ACK its request asked for, instead of the
 * responder sending it alone.
 */
static void send_run_end(struct hca_qp *qp, struct hca_link_batch *b)
{
	uint32_t adaddr;
	uint8_t ack[128];
	size_t ahl;

	if (!b->n)
		return;
	ahl = ride_ack(qp, ack, sizeof(ack), &adaddr);
	if (ahl && adaddr == b->daddr) {
		hca_link_batch_flush_ack(qp->dev, b, ack, ahl);
		return;
	}
	hca_link_batch_flush(qp->dev, b);
	if (ahl)
		hca_link_send(qp->dev, adaddr, ack, ahl, 0);
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
	if (hca_udp_needs_response(w) && w->wr.opcode != IBV_WR_RDMA_READ && w->total_len != 8)
		return IBV_WC_LOC_LEN_ERR;
	assign_psns(qp, w);
	if (!capture_only && hca_udp_needs_response(w) && w->done) {
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
	if (w->wr.opcode == IBV_WR_RDMA_READ) {
		/*
		 * A READ asks for its responses a window at a time: each
		 * request asks, at the PSN of the first response not yet
		 * asked for (or, asked again, not yet arrived — the spec
		 * allows asking for the rest only) and from that offset
		 * (whole MTUs before it), for no more packets than the
		 * window has room for. The responder's packets in flight
		 * are then bounded by our window as our own are; one
		 * request for a whole 2 GiB READ would have it send 2 M
		 * packets at once, into a socket buffer of a few thousand.
		 */
		uint32_t ask, left;

		uint32_t half = hca_udp_window(qp) / 2;

		if (w->rd_asked < w->rd_pkts)
			w->rd_asked = w->rd_pkts;
		resume = w->rd_asked;
		/* asked again, not past what was asked before: the responder
		 * answers a repeat without moving its expected PSN, and a
		 * request past it would find a sequence gap */
		left = (resume < w->rd_hi ? w->rd_hi : w->npkts) - resume;
		ask = left < budget ? left : budget;
		/* with part of it still arriving, the next part is asked for
		 * once half a window is free (or the rest fits): not one
		 * request per response */
		if (!capture_only && resume > w->rd_pkts && ask < half && ask < left)
			return IBV_WC_SUCCESS;
		h.va += (uint64_t)resume * mtu;
		h.dmalen -= resume * mtu;
		if (h.dmalen > (uint64_t)ask * mtu)
			h.dmalen = ask * mtu;
		if (!capture_only) {
			w->rd_asked = resume + ask;
			if (w->rd_hi < w->rd_asked)
				w->rd_hi = w->rd_asked;
		}
	}
	for (uint32_t i = w->sent; i < end; i++) {
		size_t plen = hca_udp_needs_response(w) ? 0 :
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
		if (end - start == 1)
			send_one(qp, pkt, hl, plen);
		else
			hca_link_batch_add(qp->dev, &batch, qp->udp_daddr, pkt, hl, plen);
	}
	send_run_end(qp, &batch);
	if (!capture_only && w->wr.opcode == IBV_WR_RDMA_READ) {
		/* asked in full: the WQEs after it may go */
		w->sent = w->rd_asked == w->npkts ? 1 : 0;
		qp->send_psn = hca_psn_add(w->first_psn, (int32_t)w->rd_asked);
	} else if (!capture_only) {
		w->sent = end;
		/* an atomic's response takes the PSN after its request */
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
		n += hca_udp_needs_response(SQ_SLOT(qp, i));
	return n;
}

/*
 * The window's ceiling: HCA_UDP_WINDOW packets, or 512 KiB's worth where
 * the path MTU is smaller (1024-byte packets on a 1500-byte Ethernet:
 * 512 of them). A window is what the sender may push before the
 * receiving process has run; on a machine where the peer process waits
 * its turn for a CPU, each window more that a message needs is one more
 * wait for it — a 1 MiB READ over 256 packets of 1 KiB was asked in 5-8
 * parts, each answered only when the responder was scheduled again
 * (docs/udp-link-performance.md, "Across hosts, 1 KiB - 1 MiB"). Not
 * more: go-back-N resends up to a window at each spurious timeout, and
 * with 1 MiB (1,024 packets) test_hca_datapath's 2 MiB READ under TSan
 * never completed (retries exhausted, 3 runs of 3), with 512 KiB it did.
 */
uint32_t hca_udp_window_max(struct hca_qp *qp)
{
	uint32_t mtu = hca_path_mtu_bytes(qp), w = mtu ? HCA_UDP_WINDOW_BYTES / mtu : 0;

	if (w < HCA_UDP_WINDOW)
		w = HCA_UDP_WINDOW;
	return w > HCA_UDP_WINDOW_MAX ? HCA_UDP_WINDOW_MAX : w;
}

/*
 * The window adapts to loss, as TCP's does: halved by each go-back (a NAK
 * or a timeout), grown by one per acknowledged advance. Go-back-N resends
 * all that is in flight after a loss, so on a lossy path a smaller window
 * is what lets messages through.
 */
uint32_t hca_udp_window(struct hca_qp *qp)
{
	uint32_t max = hca_udp_window_max(qp);

	if (qp->cwnd < HCA_UDP_WINDOW_MIN || qp->cwnd > max)
		qp->cwnd = max;
	return qp->cwnd;
}

static void window_shrink(struct hca_qp *qp)
{
	uint32_t w = hca_udp_window(qp) / 2;

	qp->cwnd = w < HCA_UDP_WINDOW_MIN ? HCA_UDP_WINDOW_MIN : w;
}

/* Room to send w's next packets: the window, and max_rd_atomic. */
static uint32_t budget_for(struct hca_qp *qp, struct hca_swqe *w)
{
	uint32_t pk = in_flight(qp), win = hca_udp_window(qp);
	uint32_t max_rd = qp->attr->max_rd_atomic ? qp->attr->max_rd_atomic : 1;

	if (pk >= win)
		return 0;
	if (hca_udp_needs_response(w) && !w->sent && rd_atomic_in_flight(qp) >= max_rd)
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
void hca_udp_rewind(struct hca_qp *qp)
{
	struct hca_swqe *head;
	int32_t done;

	for (uint32_t i = qp->sq_head; i != qp->sq_tail; i++) {
		SQ_SLOT(qp, i)->sent = 0;
		SQ_SLOT(qp, i)->rd_asked = SQ_SLOT(qp, i)->rd_pkts; /* the rest again */
	}
	qp->sq_next = qp->sq_head;
	if (qp->sq_head == qp->sq_tail || !SQ_SLOT(qp, qp->sq_head)->psn_set)
		return;
	head = SQ_SLOT(qp, qp->sq_head);
	qp->send_psn = hca_psn_add(head->first_psn, (int32_t)head->rd_pkts);
	/* the READ responses that arrived are acknowledged, whatever a stale
	 * NAK said: the READ is asked again from after them; and those that
	 * did not, are not, whatever a NAK or ACK inside its PSNs said (a
	 * READ asked for in parts: a part's request lost, the responder NAKs
	 * at it) — or nothing would be in flight, no timer would run */
	if (head->wr.opcode == IBV_WR_RDMA_READ && !head->done &&
	    (head->rd_pkts || hca_psn_cmp(qp->acked_psn, hca_psn_add(qp->send_psn, -1)) > 0))
		qp->acked_psn = hca_psn_add(qp->send_psn, -1);
	done = hca_psn_diff(hca_psn_add(qp->acked_psn, 1), head->first_psn);
	if (!hca_udp_needs_response(head) && done > 0 && done < (int32_t)head->npkts) {
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
uint64_t hca_udp_probe_wait_ns(struct hca_qp *qp)
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

	return since + hca_udp_probe_wait_ns(qp);
}

/* A round-trip sample: an ACK request's answer (RFC 6298's estimator). */
void hca_udp_rtt_sample(struct hca_qp *qp, uint32_t psn, uint64_t now)
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
bool hca_udp_stalled(struct hca_qp *qp)
{
	if (++qp->nak_stall <= HCA_NAK_STALL_MAX)
		return false;
	hca_req_fail_head(qp, SQ_SLOT(qp, qp->sq_head), IBV_WC_RETRY_EXC_ERR);
	return true;
}

void hca_udp_go_back(struct hca_qp *qp)
{
	qp->rtt_sent_ns = 0; /* Karn: no sample across a retransmission */
	window_shrink(qp);
	hca_udp_rewind(qp);
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
		hca_udp_go_back(qp);
	} else if (spec && now >= probe_due_ns(qp)) {
		if (hca_udp_stalled(qp))
			return false;
		qp->last_probe_ns = now;
		qp->probes++;
		hca_udp_go_back(qp);
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
	if (!when || (atomic_load_explicit(&qp->waiting, memory_order_relaxed) &&
		      atomic_load_explicit(&qp->wait_until_ns, memory_order_relaxed) <= when))
		return;
	atomic_store_explicit(&qp->wait_until_ns, when, memory_order_relaxed);
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
		/* UC: nothing comes back to open the window again; a packet
		 * sent is done with (else the QP stalls once a window's worth
		 * of packets has gone: 256 one-packet messages, 64 of 4) */
		if (!reliable)
			qp->acked_psn = hca_psn_add(qp->send_psn, -1);
		if (st) {
			if (qp->sq_next == qp->sq_head)
				hca_req_fail_head(qp, w, st);
			break; /* fails when it reaches the head */
		}
		if (w->sent < request_pkts(qp, w)) {
			if (!reliable)
				continue; /* UC: its next window at once */
			break; /* the window is full: more when ACKs come */
		}
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
