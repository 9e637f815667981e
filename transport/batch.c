/*
 * batch.c: small tagged and active messages packed into one SEND
 * (docs/transport.md "Batching").
 *
 * One ibv_post_send costs more than everything else a small message does
 * (~0.4 us on softib's shared-memory link), so a message rate bounded by
 * one SEND per message stays near 1-2 M msg/s. Here several small tagged
 * and active messages to one endpoint share one SEND: a sib_hdr of type
 * SIB_MSG_BATCH (its ctx the count, its seq one of the endpoint's
 * sequence), then per message a sib_bitem (length, context, tag) and the
 * payload, padded to 8.
 *
 * When: a lone message never waits. The first send to an endpoint after a
 * progress call goes at once, as before; a second one before the next
 * progress call (a window of sends, a burst) opens a batch in a bounce
 * slot, and the ones after it join, until it holds SIB_BATCH_MAX bytes
 * (then it goes and the next opens another). An open batch goes (is
 * submitted to its host, in its endpoint's order) at:
 *   - the next progress call (sib_progress_locked), which every wait and
 *     probe makes, and a test of a request not yet complete; also a wait
 *     on a send already complete (the application waits for something);
 *   - any other send to the endpoint (AM, rendezvous, a long message),
 *     before it: the endpoint's order is the wire's;
 *   - a flush of the endpoint, its failure, the worker's destruction;
 *   - the worker's connection thread (async.c), when the application has
 *     made no libsib call since the thread's last look.
 *
 * Completion: a batched message's bytes are copied into the slot when the
 * call returns, so one without a send callback is complete then (as a
 * short send posted at once: sib.h); one with a callback completes with
 * its batch (delivered, or failed). The batch itself is the library's
 * request: one WR, one sequence number, one tx_issued for flush.
 *
 * The receiver unpacks a batch in order, each message matched on its own
 * (sib_deliver: posted receives, wildcards, truncation, the unexpected
 * queue that probe and mprobe read), so MPI's non-overtaking order holds.
 */
#include <stdlib.h>
#include <string.h>

#include "sib_int.h"

#define pad8 sib_pad8

/* The bytes a batch to ep may hold: the key, the bounce slot, the
 * largest receive buffer of the peer. */
static uint32_t batch_cap(const sib_worker_t *w, const struct sib_ep *ep)
{
	uint32_t cap = sib_ep_remote(ep) ? w->ctx->batch_max_remote : w->ctx->batch_max;

	if (cap > w->slot_size)
		cap = w->slot_size;
	if (ep->addr.nclasses && cap > ep->addr.class_size[ep->addr.nclasses - 1])
		cap = ep->addr.class_size[ep->addr.nclasses - 1];
	return cap;
}

/* A new batch in a bounce slot; NULL when none is free (or no memory):
 * the message then goes alone. */
static struct sib_request *batch_open(sib_worker_t *w, struct sib_ep *ep)
{
	struct sib_request *r;

	if (!w->nfree || !(r = sib_req_new(w, SIB_REQ_SEND, NULL)))
		return NULL;
	r->slot = w->free_slots[--w->nfree];
	r->data = w->sbuf + (size_t)r->slot * w->slot_size;
	r->ep = ep;
	r->proto = SIB_PROTO_EAGER;
	r->is_batch = true;
	r->freed = true;          /* nobody holds it: released at completion */
	r->wire_len = SIB_HDR;    /* the header is written at close */
	r->len = batch_cap(w, ep);   /* a send's len is free: the cap */
	ep->batch = r;
	sib_list_add_tail(&w->batch_eps, &ep->blink);
	w->nbatch++;
	return r;
}

/*
 * The request of a batched message: only what test, wait, free, cancel
 * and completion read is set (the per-message cost is the point here;
 * sib_req_new clears ~270 bytes). It is in no list, has no slot or data
 * of its own, and goes back to the cache at sib_request_free (complete)
 * or at its batch's completion (callback, freed before).
 */
static struct sib_request *batched_req(sib_worker_t *w, struct sib_ep *ep,
				       const struct sib_op_params *op)
{
	struct sib_request *r = sib_req_start(w, SIB_REQ_SEND, ep);

	if (!r)
		return NULL;
	r->send_cb = op ? op->send_cb : NULL;
	r->recv_cb = NULL;
	r->cb_arg = op ? op->cb_arg : NULL;
	r->slot = -1;
	r->data = NULL;
	r->rndv = NULL;
	r->rdma = NULL;
	return r;
}

sib_status_t sib_batch_add(struct sib_ep *ep, const struct sib_hdr *h,
			   const void *a, size_t alen, const void *bp, size_t blen,
			   const struct sib_op_params *op, sib_request_t **out)
{
	sib_worker_t *w = ep->w;
	struct sib_request *b = ep->batch, *r;
	size_t len = alen + blen;
	uint32_t need = SIB_BITEM + pad8((uint32_t)len), lenw;
	bool noreq;

	if (len > sib_batch_item_max(ep) || !w->ctx->batch_max || ep->failed)
		return SIB_INPROGRESS;
	if (b && b->wire_len + need > b->len) {
		sib_batch_close(w, ep);
		b = NULL;
	}
	if (!b) {
		/* the first message since the last progress call goes alone,
		 * unless its host is backed up (it would wait anyway) */
		if (ep->tx_gen != w->pgen && (!ep->host ||
		    sib_list_empty(&ep->host->pending)))
			return SIB_INPROGRESS;
		if (SIB_HDR + need > batch_cap(w, ep) || !(b = batch_open(w, ep)))
			return SIB_INPROGRESS;
	}
	/* copied and asking for nothing more: no request at all */
	noreq = op && (op->flags & SIB_OP_NOREQ) && !op->send_cb;
	r = noreq ? NULL : batched_req(w, ep, op);
	if (!r && !noreq)
		return SIB_ERR_NO_MEMORY;
	lenw = (uint32_t)len | (uint32_t)(len <= w->short_lim ? SIB_PROTO_SHORT :
					  SIB_PROTO_EAGER) << 24;
	if (h->type == SIB_MSG_AM)     /* header length, handler id */
		sib_batch_item(w, b, lenw | SIB_BITEM_AM, h->ctx, h->am_id,
			       a, alen, bp, blen);
	else
		sib_batch_item(w, b, lenw, h->ctx, h->tag, a, alen, bp, blen);
	if (noreq) {
		*out = NULL;
		return SIB_DONE;
	}
	r->st.length = len;
	if (r->send_cb) {         /* completes with the batch */
		r->next_free = b->members;
		b->members = r;
	} else {                  /* copied: complete now (sib.h) */
		r->st.status = SIB_OK;
		atomic_store_explicit(&r->done, true, memory_order_release);
	}
	*out = r;
	return SIB_OK;
}

/* The open batch of ep goes to its host's queue, in ep's order. */
void sib_batch_close(sib_worker_t *w, struct sib_ep *ep)
{
	struct sib_request *b = ep->batch;
	struct sib_hdr hdr = { .type = SIB_MSG_BATCH, .proto = SIB_PROTO_EAGER };

	if (!b)
		return;
	ep->batch = NULL;
	sib_list_del(&ep->blink);
	w->nbatch--;
	hdr.src = w->id;
	hdr.ctx = b->nitems;
	hdr.seq = ep->tx_seq++;
	memcpy(b->data, &hdr, SIB_HDR);
	b->cls = sib_class_for(ep, b->wire_len);   /* fits: batch_cap */
	ep->tx_issued++;
	ep->tx_gen = w->pgen;
	w->c.tx_batches++;
	sib_host_submit(w, ep->host, b);
}

/* The open batch of ep never goes: its endpoint failed, or the worker
 * goes; its messages end with st (callbacks run). */
void sib_batch_drop(sib_worker_t *w, struct sib_ep *ep, sib_status_t st)
{
	struct sib_request *b = ep->batch;

	if (!b)
		return;
	ep->batch = NULL;
	sib_list_del(&ep->blink);
	w->nbatch--;
	ep->tx_issued++;          /* sib_send_finished counts it done */
	sib_send_finished(w, b, st);
}

void sib_batches_close(sib_worker_t *w)
{
	while (!sib_list_empty(&w->batch_eps))
		sib_batch_close(w, SIB_CONTAINER(w->batch_eps.next,
						 struct sib_ep, blink));
}

/* The batch is over (delivered, failed, cancelled): its messages with a
 * callback complete with it. */
void sib_batch_finished(sib_worker_t *w, struct sib_request *r, sib_status_t st)
{
	struct sib_request *m = r->members, *n;

	(void)w;
	r->members = NULL;
	for (; m; m = n) {
		n = m->next_free;
		m->next_free = NULL;
		sib_req_complete(m, st);
	}
}

/*
 * A batch arrived from src in receive buffer idx of class cls: each
 * message delivered in order (tagged: matched or copied; AM: its handler
 * run on the bytes in place). A handler that keeps its payload
 * (SIB_INPROGRESS) keeps the whole buffer out of the SRQ: refs counts the
 * kept items, plus one held here while unpacking, so a handler releasing
 * an earlier item of the same batch cannot repost the buffer under us.
 * Returns true when something was kept (the caller leaves the buffer out
 * of the SRQ; the last sib_am_data_release reposts it). A malformed
 * batch (a length past the end) stops the unpacking, logged.
 */
bool sib_batch_rx(sib_worker_t *w, struct sib_ep *src, uint32_t cls,
		  uint32_t idx, const uint8_t *p, size_t len, uint32_t n)
{
	struct sib_hdr h = { .src = src->id };
	uint32_t *refs = &w->cls[cls].refs[idx];
	size_t off = 0;

	w->c.rx_batches++;
	*refs = 1;
	for (uint32_t i = 0; i < n; i++) {
		struct sib_bitem it;
		uint32_t ilen;
		bool keep = false;

		if (len - off < SIB_BITEM)
			goto bad;
		memcpy(&it, p + off, SIB_BITEM);
		ilen = it.len & SIB_BITEM_LEN_MASK;
		h.proto = (uint8_t)SIB_BITEM_PROTO(it.len);
		if (ilen > len - off - SIB_BITEM || h.proto >= SIB_PROTO_MAX)
			goto bad;
		w->c.rx_msgs[h.proto]++;
		w->c.rx_bytes[h.proto] += ilen;
		if (!(it.len & SIB_BITEM_AM)) {   /* tagged: matched, copied */
			sib_deliver_tag(w, src->id, it.ctx, it.tag,
					p + off + SIB_BITEM, ilen);
		} else {
			h.type = SIB_MSG_AM;
			h.am_id = (uint16_t)it.tag;
			h.tag = 0;
			if (it.tag >= SIB_AM_MAX_ID)
				h.am_id = SIB_AM_MAX_ID;   /* no handler: logged */
			h.ctx = it.ctx;
			sib_deliver(w, src, &h,
				    (uint8_t *)(uintptr_t)(p + off + SIB_BITEM),
				    ilen, cls, idx, &keep);
			if (keep)
				(*refs)++;
		}
		off += SIB_BITEM + pad8(ilen);
		if (off > len)
			off = len;
	}
	goto out;
bad:
	sib_log("malformed batch from %u: message %zu bytes in", src->id, off);
out:
	return --*refs > 0;
}

/* An item kept from a batch's buffer is released: the buffer goes back to
 * the SRQ with its last one. A buffer of one message (refs 0) goes at
 * once. */
bool sib_batch_release(sib_worker_t *w, uint32_t cls, uint32_t idx)
{
	uint32_t *refs = &w->cls[cls].refs[idx];

	if (*refs > 1) {
		(*refs)--;
		return false;
	}
	*refs = 0;
	return true;
}
