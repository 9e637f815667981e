/*
 * The responder over the UDP link, in the target QP's own process.
 *
 * It keeps the spec's responder state per QP: the expected PSN and the
 * MSN. A request at the expected PSN is taken; the packets of a message
 * are gathered in order, and the whole message is executed by the same
 * responder code the shared-memory link uses (resp.c) at its last packet.
 * A PSN ahead of the expected one is a sequence error: one NAK until the
 * gap is filled. A PSN behind it is a duplicate: SENDs and WRITEs are
 * acknowledged again and not executed, READs are executed again, atomics
 * return the saved result of their first execution and are never executed
 * twice. UC drops a message it did not see whole; UD takes single
 * datagrams.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "udp_link.h"

_Static_assert(sizeof(struct hca_wire_hdr) <= HCA_QP_LINK_HDR,
	       "struct hca_qp's msg_hdr must hold a struct hca_wire_hdr");

/* The headers of the message being assembled, kept in the QP. */
static struct hca_wire_hdr *msg_hdr(struct hca_qp *qp)
{
	return (struct hca_wire_hdr *)(void *)qp->msg_hdr;
}

static enum ibv_qp_type requester_type(enum ibv_qp_type t)
{
	return t == IBV_QPT_XRC_RECV ? IBV_QPT_XRC_SEND : t;
}

static void send_answer_in(struct hca_qp *qp, uint32_t daddr, struct hca_wire_hdr *h,
			   const uint8_t *pl, size_t plen, struct hca_link_batch *b)
{
	uint8_t pkt[HCA_PKT_MAX];
	size_t hl;

	h->pkey = HCA_DEFAULT_PKEY;
	h->dqpn = qp->attr->dest_qp_num;
	hl = hca_wire_put_hdrs(pkt, sizeof(pkt), h, plen);
	if (!hl)
		return;
	if (plen)
		memcpy(pkt + hl, pl, plen);
	HCA_COUNT(qp->ent, tx_pkts);
	if (b)
		hca_link_batch_add(qp->dev, b, daddr, pkt, hl, plen);
	else
		hca_link_send(qp->dev, daddr, pkt, hl, plen);
}

void hca_udp_send_answer(struct hca_qp *qp, uint32_t daddr, struct hca_wire_hdr *h,
			 const uint8_t *pl, size_t plen)
{
	send_answer_in(qp, daddr, h, pl, plen, NULL);
}

static void send_ack(struct hca_qp *qp, uint32_t daddr, uint32_t psn, uint8_t kind,
		     uint8_t value)
{
	if (kind == HCA_AETH_NAK)
		HCA_COUNT(qp->ent, naks_sent);
	struct hca_wire_hdr h = { .opcode = hca_wire_transport(qp->type) |
					    HCA_WOP_ACKNOWLEDGE,
				  .psn = psn, .msn = qp->msn,
				  .syndrome = hca_aeth_make(kind, value) };

	hca_udp_send_answer(qp, daddr, &h, NULL, 0);
}

static bool is_first(uint8_t pos) { return pos & HCA_POS_FIRST; }
static bool is_last(uint8_t pos) { return pos & HCA_POS_LAST; }

/* Room for `need` bytes of message in the assembly buffer. */
static int gather_reserve(struct hca_qp *qp, size_t need)
{
	size_t cap = qp->rcap ? qp->rcap : 65536;
	uint8_t *nb;

	if (need <= qp->rcap)
		return 0;
	while (cap < need)
		cap *= 2;
	nb = realloc(qp->rbuf, cap);
	if (!nb)
		return ENOMEM;
	qp->rbuf = nb;
	qp->rcap = cap;
	return 0;
}

/* Append a packet's payload to the message being assembled. */
static int gather_msg(struct hca_qp *qp, const uint8_t *pl, size_t plen)
{
	if (gather_reserve(qp, qp->rlen + plen))
		return ENOMEM;
	if (plen)
		memcpy(qp->rbuf + qp->rlen, pl, plen);
	qp->rlen += plen;
	return 0;
}

/*
 * A message is done with (executed or dropped): the assembly buffer is
 * kept for the next one up to HCA_RBUF_KEEP, and given back above it, so
 * that one large message does not leave its size held by the QP for good
 * (docs/udp.md: messages up to the limit reuse it, larger ones pay a
 * fresh allocation, small beside moving their bytes).
 */
static void gather_done(struct hca_qp *qp)
{
	qp->in_msg = false;
	qp->rlen = 0;
	if (qp->rcap > HCA_RBUF_KEEP) {
		free(qp->rbuf);
		qp->rbuf = NULL;
		qp->rcap = 0;
	}
}

static enum ibv_wr_opcode wr_opcode_of(uint8_t wop)
{
	switch (wop) {
	case HCA_WOP_SEND_LAST_IMM:
	case HCA_WOP_SEND_ONLY_IMM:
		return IBV_WR_SEND_WITH_IMM;
	case HCA_WOP_WRITE_FIRST:
	case HCA_WOP_WRITE_MIDDLE:
	case HCA_WOP_WRITE_LAST:
	case HCA_WOP_WRITE_ONLY:
		return IBV_WR_RDMA_WRITE;
	case HCA_WOP_WRITE_LAST_IMM:
	case HCA_WOP_WRITE_ONLY_IMM:
		return IBV_WR_RDMA_WRITE_WITH_IMM;
	case HCA_WOP_READ_REQUEST:
		return IBV_WR_RDMA_READ;
	case HCA_WOP_COMPARE_SWAP:
		return IBV_WR_ATOMIC_CMP_AND_SWP;
	case HCA_WOP_FETCH_ADD:
		return IBV_WR_ATOMIC_FETCH_AND_ADD;
	default:
		return IBV_WR_SEND;
	}
}

/* The request as resp.c takes it, from the message's first and last packets. */
static void build_msg(struct hca_qp *qp, const struct hca_wire_hdr *first,
		      const struct hca_wire_hdr *last, uint32_t saddr,
		      struct hca_msg *m, struct iovec *iov)
{
	struct hca_host_net peer = { .ipv4 = htonl(saddr) };

	/* not the completion buffer at its end (256 bytes with room for an
	 * embedded payload): written before it is read (engine.h) */
	memset(m, 0, HCA_MSG_CLEAR);
	m->op = wr_opcode_of(last->opcode & 0x1f);
	m->type = requester_type(qp->type);
	m->dst_qpn = qp->qpn;
	m->src_slot = HCA_NONE; /* another host: it keeps to its RNR timer */
	m->src_qpn = qp->type == IBV_QPT_UD ? last->sqpn : qp->attr->dest_qp_num;
	m->slid = hca_host_lid(&peer);
	m->qkey = last->qkey;
	m->imm = htobe32(last->imm);
	m->solicited = last->se;
	m->raddr = first->va;
	m->rkey = first->rkey;
	m->compare_add = m->op == IBV_WR_ATOMIC_CMP_AND_SWP ? first->compare : first->swap_add;
	m->swap = first->swap_add;
	m->xrc_srqn = first->xrc_srqn;
	iov->iov_base = qp->rbuf;
	iov->iov_len = qp->rlen;
	m->iov = iov;
	m->iovcnt = qp->rlen ? 1 : 0;
	m->len = (uint32_t)qp->rlen;
}

static void nak_for(struct hca_qp *qp, uint32_t saddr, uint32_t psn,
		    enum hca_resp_status st)
{
	uint8_t code = st == HCA_RESP_NAK_ACCESS ? HCA_NAK_REM_ACCESS :
		       st == HCA_RESP_NAK_OP ? HCA_NAK_REM_OP : HCA_NAK_INV_REQ;

	send_ack(qp, saddr, psn, HCA_AETH_NAK, code);
}

static bool is_write(uint8_t opcode)
{
	enum ibv_wr_opcode op = wr_opcode_of(opcode & 0x1f);

	return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

/*
 * The spec's length rules for a message being assembled (msg_hdr holds
 * its first packet): FIRST and MIDDLE packets carry exactly one path MTU,
 * LAST and ONLY at most one; a WRITE carries exactly its RETH's DMA
 * length; no message exceeds the largest one. A breach is a malformed
 * request, not a reason to buffer without bound.
 */
static bool length_ok(struct hca_qp *qp, uint8_t pos, size_t plen)
{
	uint64_t total = qp->rlen + plen, mtu = hca_path_mtu_bytes(qp);
	bool write = is_write(msg_hdr(qp)->opcode);

	if (is_last(pos) ? plen > mtu : plen != mtu)
		return false;
	if (total > (write ? msg_hdr(qp)->dmalen : HCA_MAX_MSG_SIZE))
		return false;
	return !is_last(pos) || !write || total == msg_hdr(qp)->dmalen;
}

/*
 * The first packet of a multi-packet WRITE: its RETH names the key, the
 * address and the whole length, so the key and the range are checked now,
 * before a byte is buffered (as hardware checks them before it places
 * any): a WRITE that would be refused at its last packet is refused at
 * its first, and does not make us hold up to 2 GiB first. Admitted, its
 * whole length is reserved at once. The check is repeated when the
 * message executes (the region may go meanwhile).
 */
static enum hca_resp_status write_admit(struct hca_qp *qp, const struct hca_wire_hdr *h,
					uint32_t saddr)
{
	struct hca_msg m;
	struct iovec iov;
	enum hca_resp_status st;

	build_msg(qp, h, h, saddr, &m, &iov);
	m.op = IBV_WR_RDMA_WRITE; /* the key and range only: no immediate yet */
	m.iovcnt = 0;
	m.len = h->dmalen;
	m.range_only = true;
	m.uncounted = true;
	st = hca_engine.deliver(qp->dev, &m);
	if (st == HCA_RESP_ACK && m.refused)
		st = HCA_RESP_DROP; /* UC: refused in silence */
	if (st == HCA_RESP_ACK && gather_reserve(qp, h->dmalen))
		st = HCA_RESP_NAK_OP;
	return st;
}

/* ---- READ: execute, then answer in MTU-sized response packets ---- */

/*
 * A READ is answered packet by packet: each response's payload is read
 * from memory as it is built, so a READ of any length (up to the 2 GiB
 * the spec allows) needs one MTU of buffer. A range that fails the key
 * check NAKs at the PSN where it fails — unless the READ is a duplicate
 * (dup): it was answered once already, and the requester may well have
 * completed it and let the memory go (a sender freeing its buffer after a
 * rendezvous). resp.c then drops it and leaves the QP as it is (m.duplicate,
 * resp_read says why): neither a NAK nor a QP in error for a READ nobody
 * waits for.
 */
static void read_respond(struct hca_qp *qp, const struct hca_wire_hdr *h, uint32_t saddr,
			 bool dup)
{
	uint32_t mtu = hca_path_mtu_bytes(qp), n = h->dmalen ? (h->dmalen + mtu - 1) / mtu : 1;
	uint8_t tr = hca_wire_transport(qp->type), buf[4096];
	struct hca_link_batch batch = { 0 };
	enum hca_resp_status st;
	struct hca_msg m;
	struct iovec iov;

	if (h->dmalen > HCA_MAX_MSG_SIZE || mtu > sizeof(buf)) {
		send_ack(qp, saddr, h->psn, HCA_AETH_NAK, HCA_NAK_INV_REQ);
		return;
	}
	/* the whole range first: a READ that is partly out of bounds is
	 * refused before any of its data leaves */
	build_msg(qp, h, h, saddr, &m, &iov);
	m.iovcnt = 0;
	m.len = h->dmalen;
	m.range_only = true;
	m.duplicate = dup;
	st = hca_engine.deliver(qp->dev, &m);
	if (st != HCA_RESP_ACK) {
		if (st != HCA_RESP_DROP)
			nak_for(qp, saddr, h->psn, st);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct hca_wire_hdr r = { .psn = hca_psn_add(h->psn, (int32_t)i), .msn = qp->msn,
					  .syndrome = hca_aeth_make(HCA_AETH_ACK,
								    HCA_AETH_CREDIT_INVALID) };
		size_t plen = i + 1 < n ? mtu : h->dmalen - (uint64_t)i * mtu;

		if (!h->dmalen)
			plen = 0;
		build_msg(qp, h, h, saddr, &m, &iov);
		m.raddr = h->va + (uint64_t)i * mtu;
		m.uncounted = true;
		m.duplicate = dup;
		iov.iov_base = buf;
		iov.iov_len = plen;
		m.iovcnt = plen ? 1 : 0;
		m.len = (uint32_t)plen;
		st = hca_engine.deliver(qp->dev, &m);
		if (st != HCA_RESP_ACK) {
			/* the memory went away in between (deregistered) */
			hca_link_batch_flush(qp->dev, &batch);
			if (st != HCA_RESP_DROP)
				nak_for(qp, saddr, r.psn, st);
			return;
		}
		r.opcode = tr | (n == 1 ? HCA_WOP_READ_RESPONSE_ONLY :
				 i == 0 ? HCA_WOP_READ_RESPONSE_FIRST :
				 i + 1 < n ? HCA_WOP_READ_RESPONSE_MIDDLE :
					     HCA_WOP_READ_RESPONSE_LAST);
		send_answer_in(qp, saddr, &r, buf, plen, &batch);
	}
	hca_link_batch_flush(qp->dev, &batch);
}

/* ---- atomics: executed once; a duplicate gets the saved result ---- */

static bool replayed(struct hca_qp *qp, uint32_t psn, uint64_t *orig)
{
	for (unsigned i = 0; i < 16; i++)
		if (qp->replay[i].valid && qp->replay[i].psn == psn) {
			*orig = qp->replay[i].orig;
			return true;
		}
	return false;
}

static void atomic_ack(struct hca_qp *qp, uint32_t saddr, uint32_t psn, uint64_t orig)
{
	struct hca_wire_hdr r = { .opcode = hca_wire_transport(qp->type) |
					    HCA_WOP_ATOMIC_ACKNOWLEDGE,
				  .psn = psn, .msn = qp->msn, .orig = orig,
				  .syndrome = hca_aeth_make(HCA_AETH_ACK, HCA_AETH_CREDIT_INVALID) };

	hca_udp_send_answer(qp, saddr, &r, NULL, 0);
}

/* ---- the reliable responder ---- */

/*
 * The last packet of a message: execute it, answer. only: the payload of
 * an ONLY packet, executed straight from the receive buffer (NULL: the
 * message gathered in qp->rbuf).
 */
static void execute_last(struct hca_qp *qp, const struct hca_wire_hdr *h, uint32_t saddr,
			 const uint8_t *only, size_t only_len)
{
	struct hca_msg m;
	struct iovec iov;
	enum hca_resp_status st;
	uint8_t wop = h->opcode & 0x1f;

	build_msg(qp, msg_hdr(qp), h, saddr, &m, &iov);
	if (only) {
		iov.iov_base = (void *)only;
		iov.iov_len = only_len;
		m.iovcnt = only_len ? 1 : 0;
		m.len = (uint32_t)only_len;
	}
	st = hca_engine.deliver(qp->dev, &m);
	gather_done(qp);
	if (st == HCA_RESP_RNR) {
		/* the message is not taken: the requester sends it all again */
		qp->epsn = qp->msg_psn;
		send_ack(qp, saddr, qp->msg_psn, HCA_AETH_RNR_NAK,
			 atomic_load(&qp->ent->min_rnr_timer));
		return;
	}
	if (st == HCA_RESP_DROP)
		return; /* nowhere to put it now (the SRQ's owner is gone) */
	if (st != HCA_RESP_ACK) {
		nak_for(qp, saddr, h->psn, st);
		return;
	}
	qp->msn = (qp->msn + 1) & 0xffffff;
	if (wop == HCA_WOP_COMPARE_SWAP || wop == HCA_WOP_FETCH_ADD) {
		qp->replay[qp->replay_next].psn = h->psn;
		qp->replay[qp->replay_next].orig = m.atomic_orig;
		qp->replay[qp->replay_next].valid = true;
		qp->replay_next = (qp->replay_next + 1) % 16;
		atomic_ack(qp, saddr, h->psn, m.atomic_orig);
	} else {
		/* asked (AckReq): soon; not asked: a coalesced ACK later */
		hca_udp_ack_owe(qp, saddr, h->psn, h->ackreq);
	}
}

static void duplicate(struct hca_qp *qp, const struct hca_wire_hdr *h, uint32_t saddr)
{
	uint8_t wop = h->opcode & 0x1f;
	uint64_t orig;

	if (wop == HCA_WOP_READ_REQUEST) {
		uint32_t mtu = hca_path_mtu_bytes(qp);
		uint32_t end = hca_psn_add(h->psn, h->dmalen ? (int32_t)((h->dmalen + mtu - 1) / mtu) : 1);

		read_respond(qp, h, saddr, true);
		/* a READ asked for in parts (udp_req.c), asked again from a
		 * lost response on, may run past a part whose request was
		 * lost: what it asks beyond our expected PSN is answered now,
		 * so it is taken as received, or the requester's next part
		 * would find a gap behind it and never be answered */
		if (hca_psn_cmp(end, qp->epsn) > 0) {
			qp->epsn = end;
			qp->msn = (qp->msn + 1) & 0xffffff;
		}
	} else if (wop == HCA_WOP_COMPARE_SWAP || wop == HCA_WOP_FETCH_ADD) {
		if (replayed(qp, h->psn, &orig))
			atomic_ack(qp, saddr, h->psn, orig);
	} else if (h->ackreq) {
		/* asked again: say how far we are (once per ACK request) */
		send_ack(qp, saddr, hca_psn_add(qp->epsn, -1), HCA_AETH_ACK,
			 HCA_AETH_CREDIT_INVALID);
	}
}

#define HCA_RENAK_NS 100000ULL

static bool renak_due(struct hca_qp *qp)
{
	uint64_t now = hca_now_ns();

	if (now - qp->nak_ns < HCA_RENAK_NS)
		return false;
	qp->nak_ns = now;
	return true;
}

static void reliable_rx(struct hca_qp *qp, const struct hca_wire_hdr *h,
			const uint8_t *pl, size_t plen, uint32_t saddr)
{
	const struct hca_wire_op_info *oi = hca_wire_op(h->opcode);
	int32_t d = hca_psn_diff(h->psn, qp->epsn);
	uint8_t wop = h->opcode & 0x1f;


	if (d < 0) {
		HCA_COUNT_DROP(qp->ent, HCA_DROP_PSN);
		duplicate(qp, h, saddr);
		return;
	}
	if (d > 0) {
		HCA_COUNT_DROP(qp->ent, HCA_DROP_PSN);
		/* one NAK per gap, as the spec says; and again to a packet
		 * that asks for an answer, since that NAK may have been lost
		 * (the requester's early go-back asks so) — at most once per
		 * HCA_RENAK_NS, or a stream of small messages, each asking,
		 * would answer one loss with a NAK per packet */
		if (!qp->nak_sent || (h->ackreq && renak_due(qp)))
			send_ack(qp, saddr, qp->epsn, HCA_AETH_NAK, HCA_NAK_PSN_SEQ_ERR);
		if (!qp->nak_sent)
			qp->nak_ns = hca_now_ns();
		qp->nak_sent = true;
		return;
	}
	qp->nak_sent = false;
	if (wop == HCA_WOP_READ_REQUEST) {
		uint32_t mtu = hca_path_mtu_bytes(qp);

		read_respond(qp, h, saddr, false);
		qp->epsn = hca_psn_add(qp->epsn, h->dmalen ? (int32_t)((h->dmalen + mtu - 1) / mtu) : 1);
		qp->msn = (qp->msn + 1) & 0xffffff;
		return;
	}
	if (is_first(oi->pos)) {
		qp->in_msg = true;
		qp->msg_psn = h->psn;
		*msg_hdr(qp) = *h;
		qp->rlen = 0;
	} else if (!qp->in_msg) {
		nak_for(qp, saddr, h->psn, HCA_RESP_NAK_INV); /* a MIDDLE out of nowhere */
		return;
	}
	if (!length_ok(qp, oi->pos, plen)) {
		HCA_COUNT_DROP(qp->ent, HCA_DROP_LENGTH);
		gather_done(qp);
		nak_for(qp, saddr, h->psn, HCA_RESP_NAK_INV);
		return;
	}
	if (is_first(oi->pos) && !is_last(oi->pos) && is_write(h->opcode)) {
		enum hca_resp_status st = write_admit(qp, h, saddr);

		if (st != HCA_RESP_ACK) {
			gather_done(qp);
			if (st != HCA_RESP_DROP)
				nak_for(qp, saddr, h->psn, st);
			return;
		}
	}
	qp->epsn = hca_psn_add(qp->epsn, 1);
	if (is_first(oi->pos) && is_last(oi->pos)) {
		/* an ONLY packet: no copy into rbuf, the receive buffer is
		 * the message (most small messages: the latency path) */
		execute_last(qp, h, saddr, pl, plen);
		return;
	}
	if (gather_msg(qp, pl, plen)) {
		gather_done(qp);
		nak_for(qp, saddr, h->psn, HCA_RESP_NAK_OP);
		return;
	}
	if (is_last(oi->pos))
		execute_last(qp, h, saddr, NULL, 0);
	else if (h->ackreq) /* a coalesced ACK inside a long message */
		send_ack(qp, saddr, h->psn, HCA_AETH_ACK, HCA_AETH_CREDIT_INVALID);
}

/* UC: in order or not at all; nothing goes back. */
static void uc_rx(struct hca_qp *qp, const struct hca_wire_hdr *h, const uint8_t *pl,
		  size_t plen, uint32_t saddr)
{
	const struct hca_wire_op_info *oi = hca_wire_op(h->opcode);

	if (is_first(oi->pos)) {
		qp->in_msg = true;
		*msg_hdr(qp) = *h;
		qp->rlen = 0;
	} else if (!qp->in_msg || h->psn != qp->epsn) {
		gather_done(qp); /* a lost packet: the whole message goes */
		HCA_COUNT_DROP(qp->ent, HCA_DROP_PSN);
		return;
	}
	qp->epsn = hca_psn_add(h->psn, 1);
	if (!length_ok(qp, oi->pos, plen)) {
		HCA_COUNT_DROP(qp->ent, HCA_DROP_LENGTH);
		gather_done(qp);
		return;
	}
	/* UC: a refused WRITE is dropped in silence, all of it */
	if (is_first(oi->pos) && !is_last(oi->pos) && is_write(h->opcode) &&
	    write_admit(qp, h, saddr) != HCA_RESP_ACK) {
		gather_done(qp);
		return;
	}
	if (gather_msg(qp, pl, plen)) {
		gather_done(qp);
		return;
	}
	if (is_last(oi->pos)) {
		struct hca_msg m;
		struct iovec iov;

		build_msg(qp, msg_hdr(qp), h, saddr, &m, &iov);
		hca_engine.deliver(qp->dev, &m);
		gather_done(qp);
	}
}

static void ud_rx(struct hca_qp *qp, const struct hca_wire_hdr *h, const uint8_t *pl,
		  size_t plen, uint32_t saddr)
{
	struct hca_ah ah = { .is_global = 1, .hop_limit = 64 };
	struct hca_msg m;
	struct iovec iov = { (void *)pl, plen };

	qp->rlen = 0;
	build_msg(qp, h, h, saddr, &m, &iov);
	iov.iov_base = (void *)pl;
	iov.iov_len = plen;
	m.iov = &iov;
	m.iovcnt = plen ? 1 : 0;
	m.len = (uint32_t)plen;
	/* over RoCE every datagram comes with its GRH: the sender's GID */
	hca_gid_entry(&qp->dev->net, qp->dev->guid, 0, &ah.dgid);
	memset(m.sgid.raw, 0, 10);
	m.sgid.raw[10] = m.sgid.raw[11] = 0xff;
	m.sgid.raw[12] = (uint8_t)(saddr >> 24);
	m.sgid.raw[13] = (uint8_t)(saddr >> 16);
	m.sgid.raw[14] = (uint8_t)(saddr >> 8);
	m.sgid.raw[15] = (uint8_t)saddr;
	m.ah = &ah;
	hca_engine.deliver(qp->dev, &m);
}

void hca_udp_resp_rx(struct hca_qp *qp, const struct hca_wire_hdr *h,
		     const uint8_t *pl, size_t plen, uint32_t saddr)
{
	uint8_t st = atomic_load(&qp->ent->state);

	HCA_COUNT_1W(qp->ent->cnt.rx_pkts); /* rx_lock held (link_udp.c) */
	if (st != IBV_QPS_RTR && st != IBV_QPS_RTS && st != IBV_QPS_SQD) {
		HCA_COUNT_DROP(qp->ent, HCA_DROP_STATE);
		return; /* a QP that cannot receive drops: the requester retries */
	}
	if ((h->opcode & 0xe0) != hca_wire_transport(qp->type))
		return;
	pthread_mutex_lock(&qp->resp_lock);
	if (qp->type == IBV_QPT_UD)
		ud_rx(qp, h, pl, plen, saddr);
	else if (qp->type == IBV_QPT_UC)
		uc_rx(qp, h, pl, plen, saddr);
	else
		reliable_rx(qp, h, pl, plen, saddr);
	pthread_mutex_unlock(&qp->resp_lock);
}
