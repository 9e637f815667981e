/*
 * proto.c: the protocol table and the receive path.
 *
 * A protocol is a row of sib_protos[], indexed by enum sib_proto_id:
 *   short - header and message in one inline SEND (no bounce copy, no
 *           lkey): the smallest messages;
 *   eager - the message copied into a registered bounce slot and SENT into
 *           the receiver's XRC SRQ of the smallest size class that holds it;
 *   rndv  - above the eager row (or the path's threshold): an RTS names
 *           the sender's buffer, the receiver reads it with RDMA READ and
 *           answers FIN (rndv.c); its post sends one-sided WRs (rma.c).
 * sib_proto_select walks the table in order and takes the first row whose
 * max_payload holds the message; a new protocol is a new row.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sib_int.h"

size_t sib_short_max(const sib_worker_t *w)
{
	size_t m = w->ctx->short_max;

	if (w->max_inline < SIB_HDR)
		return 0;
	if (m > w->max_inline - SIB_HDR)
		m = w->max_inline - SIB_HDR;
	if (m > w->cls[0].size - SIB_HDR)
		m = w->cls[0].size - SIB_HDR;
	return m;
}

size_t sib_eager_max(const sib_worker_t *w)
{
	size_t m = w->cls[w->nclasses - 1].size - SIB_HDR;

	return m < w->slot_size - SIB_HDR ? m : w->slot_size - SIB_HDR;
}

/* Any length: the receiver reads it (rndv.c).  The row's post sends the
 * one-sided WRs (RDMA READ / WRITE, atomics) of rendezvous and RMA. */
static size_t rndv_max(const sib_worker_t *w)
{
	(void)w;
	return SIZE_MAX;
}

/*
 * Signalled or not. A signalled SEND asks the responder for its ACK at
 * once; on the UDP link an XRC receive QP sends nothing else, so each one
 * costs a datagram of its own: a send() on one side, a receive on the
 * other, per message (an RC QP's ACK rides with its reply). A short send
 * that completed when posted needs no completion of its own: up to
 * SIB_SIGNAL_EVERY - 1 (the key; default 16) go unsignalled in a row, and complete with the
 * next signalled WR of the QP (host.c sib_host_send_done); the responder
 * coalesces their ACKs.
 */
static int post_send(sib_worker_t *w, struct sib_host *h, struct sib_request *r,
		     uint64_t addr, uint32_t lkey, unsigned flags)
{
	struct ibv_sge sge = { .addr = addr, .length = r->wire_len, .lkey = lkey };
	bool unsig = r->unsig_ok && h->unsig + 1 < w->ctx->signal_every;
	struct ibv_send_wr wr, *bad;
	int rc;

	/* the fields a SEND reads, set one by one: a designated
	 * initialiser clears all ~120 bytes of the WR first (24 of a lone
	 * message's instructions); the rdma / atomic / ud unions are not
	 * read for a SEND on an XRC QP */
	wr.wr_id = (uintptr_t)r;
	wr.next = NULL;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = (unsig ? 0 : IBV_SEND_SIGNALED) | flags;
	wr.imm_data = 0;
	wr.qp_type.xrc.remote_srqn = r->ep->addr.srqn[r->cls];
	rc = ibv_post_send(h->sqp, &wr, &bad);
	if (!rc) {
		h->unsig = unsig ? h->unsig + 1 : 0;
		r->unsig = unsig;
		h->tail_posts++;
		w->c.unsignaled += unsig;
		/* hdr.type: a NOP is no message; a batch's were counted
		 * as they joined it (batch.c) */
		if (r->data[0] == SIB_MSG_NOP || r->data[0] == SIB_MSG_BATCH)
			return 0;
		w->c.tx_msgs[r->proto]++;
		w->c.tx_bytes[r->proto] += r->wire_len - SIB_HDR;
	}
	return rc;
}

static int short_post(sib_worker_t *w, struct sib_host *h, struct sib_request *r)
{
	return post_send(w, h, r, (uintptr_t)r->data, 0, IBV_SEND_INLINE);
}

static int eager_post(sib_worker_t *w, struct sib_host *h, struct sib_request *r)
{
	if (r->slot < 0) {
		uint8_t *p;

		if (!w->nfree)
			return EAGAIN;   /* a completion frees one */
		r->slot = w->free_slots[--w->nfree];
		p = w->sbuf + (size_t)r->slot * w->slot_size;
		memcpy(p, r->data, r->wire_len);
		if (r->data != r->inl)
			free(r->data);
		r->data = p;
	}
	return post_send(w, h, r, (uintptr_t)r->data, w->smr->lkey, 0);
}

const struct sib_proto sib_protos[SIB_PROTO_MAX] = {
	[SIB_PROTO_SHORT] = { "short", sib_short_max, short_post },
	[SIB_PROTO_EAGER] = { "eager", sib_eager_max, eager_post },
	[SIB_PROTO_RNDV] = { "rndv", rndv_max, sib_rdma_post },
};

sib_status_t sib_proto_select(const sib_worker_t *w, size_t len,
			      enum sib_proto_id *id)
{
	for (int i = 0; i < SIB_PROTO_MAX; i++)
		if (len <= sib_protos[i].max_payload(w)) {
			*id = (enum sib_proto_id)i;
			return SIB_OK;
		}
	return SIB_ERR_MSG_TOO_LONG;
}

/* Sequence numbers wrap: a is before b when b - a is "positive". */
static int seq_diff(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b);
}

void sib_rx(sib_worker_t *w, struct ibv_wc *wc)
{
	uint32_t cls = (uint32_t)(wc->wr_id >> 32) & 0xff, idx = (uint32_t)wc->wr_id;
	struct sib_srq_class *c = &w->cls[cls];
	uint8_t *p = c->buf + (size_t)idx * c->size;
	struct sib_hdr h;
	struct sib_ep *ep;
	bool keep = false;
	int d;

	c->posted--;
	if (wc->status != IBV_WC_SUCCESS)   /* flushed: the SRQ is going */
		return;
	if (wc->byte_len < SIB_HDR)
		goto repost;
	memcpy(&h, p, SIB_HDR);
	ep = w->rx_ep;
	if (!ep || ep->id != h.src) {   /* not the last one's sender */
		ep = sib_ep_get(w, h.src);
		w->rx_ep = ep;
	}
	if (!ep || h.proto >= SIB_PROTO_MAX)
		goto repost;
	d = seq_diff(h.seq, ep->rx_seq);
	if (d < 0) {            /* sent again after a QP failure: had it */
		w->c.dup_dropped++;
		goto repost;
	}
	if (d > 0)              /* never expected: counted for the tests */
		w->c.seq_gaps++;
	ep->rx_seq = h.seq + 1;
	if (h.type == SIB_MSG_NOP)   /* it only closed the sender's tail */
		goto repost;
	if (h.type == SIB_MSG_BATCH) {   /* counted per message there */
		if (sib_batch_rx(w, ep, cls, idx, p + SIB_HDR,
				 wc->byte_len - SIB_HDR, h.ctx)) {
			c->held++;   /* an AM handler kept part of it */
			return;
		}
		goto repost;
	}
	w->c.rx_msgs[h.proto]++;
	w->c.rx_bytes[h.proto] += wc->byte_len - SIB_HDR;
	if (h.type == SIB_MSG_TAG)   /* the common one, without the dispatch */
		sib_deliver_tag(w, ep->id, h.ctx, h.tag, p + SIB_HDR,
				wc->byte_len - SIB_HDR);
	else
		sib_deliver(w, ep, &h, p + SIB_HDR, wc->byte_len - SIB_HDR,
			    cls, idx, &keep);
	if (keep) {
		c->held++;
		return;
	}
repost:
	sib_srq_repost(w, cls, idx);
}
