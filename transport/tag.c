/*
 * tag.c: endpoints, tagged send / receive / probe / matched probe,
 * flush, and active messages (request.c: the requests themselves).  Matching itself is the engine's
 * (sib_mq_*); this file moves bytes and completes requests.
 *
 * Callbacks run exactly once per request, from progress or from inside the
 * call that starts the operation when it completes at once (a receive that
 * finds its message already there).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sib_int.h"

/* ---------------- endpoints ---------------- */

struct sib_ep *sib_ep_find(sib_worker_t *w, uint32_t id)
{
	sib_link_t *b = &w->ep_hash[id & (SIB_EP_BUCKETS - 1)];

	for (sib_link_t *e = b->next; e != b; e = e->next) {
		struct sib_ep *ep = SIB_CONTAINER(e, struct sib_ep, hlink);

		if (ep->id == id)
			return ep;
	}
	return NULL;
}

/* The state of worker `id`, made on first sight (a sender I have no
 * address for still needs its receive sequence). */
struct sib_ep *sib_ep_get(sib_worker_t *w, uint32_t id)
{
	struct sib_ep *ep = sib_ep_find(w, id);

	if (ep || id == SIB_ANY_SOURCE)
		return ep;
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return NULL;
	ep->w = w;
	ep->id = id;
	sib_list_init(&ep->flushes);
	sib_list_init(&ep->blink);
	sib_list_add_tail(&w->eps, &ep->link);
	sib_list_add_head(&w->ep_hash[id & (SIB_EP_BUCKETS - 1)], &ep->hlink);
	return ep;
}

static sib_status_t addr_check(const void *addr, size_t len)
{
	const struct sib_addr *a = addr;

	if (!addr || len != sizeof(*a) || a->magic != SIB_ADDR_MAGIC ||
	    a->id == SIB_ANY_SOURCE || !a->nclasses ||
	    a->nclasses > SIB_MAX_CLASSES)
		return SIB_ERR_INVALID_PARAM;
	for (uint32_t i = 1; i < a->nclasses; i++)
		if (a->class_size[i] <= a->class_size[i - 1])
			return SIB_ERR_INVALID_PARAM;
	return SIB_OK;
}

SIB_API sib_status_t sib_ep_create(sib_worker_t *w, const void *addr,
				   size_t len, sib_ep_t **out)
{
	const struct sib_addr *a = addr;
	struct sib_ep *ep;
	sib_status_t st;

	if (!w || !out)
		return SIB_ERR_INVALID_PARAM;
	*out = NULL;
	if ((st = addr_check(addr, len)))
		return st;
	if (a->job != w->ctx->job_hash) {
		/* its SRQs are in another XRC domain: my receive QPs could
		 * not reach them */
		sib_log("address of worker %u is of another job (job key): "
			"give every process the same SIB_JOB_KEY", a->id);
		return SIB_ERR_INVALID_PARAM;
	}
	sib_lock(w);
	ep = sib_ep_get(w, a->id);
	if (!ep) {
		sib_unlock(w);
		return SIB_ERR_NO_MEMORY;
	}
	/* a new incarnation under a failed id (a process started again) */
	if (ep->has_addr && ep->failed &&
	    (ep->addr.pid != a->pid || ep->addr.ud_qpn != a->ud_qpn)) {
		ep->failed = false;
		ep->rx_seq = ep->tx_seq = 0;
		ep->ping_missed = 0;
	}
	if (!ep->has_addr || memcmp(&ep->addr, a, sizeof(*a))) {
		ep->host = sib_host_get(w, a);
		if (!ep->host) {
			sib_unlock(w);
			return SIB_ERR_NO_MEMORY;
		}
		ep->addr = *a;
		ep->has_addr = true;
	}
	ep->refs++;
	*out = ep;
	sib_unlock(w);
	return SIB_OK;
}

SIB_API sib_status_t sib_ep_status(const sib_ep_t *ep)
{
	if (!ep)
		return SIB_ERR_INVALID_PARAM;
	return ep->failed ? SIB_ERR_PEER_FAILED : SIB_OK;
}

SIB_API uint32_t sib_ep_peer_id(const sib_ep_t *ep)
{
	return ep ? ep->id : SIB_ANY_SOURCE;
}

static void flushes_check(struct sib_ep *ep)
{
	while (!sib_list_empty(&ep->flushes)) {
		struct sib_request *f = SIB_CONTAINER(ep->flushes.next,
						      struct sib_request, qlink);

		if (ep->tx_done < f->flush_target)
			return;
		sib_list_del(&f->qlink);
		sib_req_complete(f, ep->failed ? SIB_ERR_PEER_FAILED : SIB_OK);
	}
}

void sib_slot_release(sib_worker_t *w, int slot)
{
	w->free_slots[w->nfree++] = slot;
}

/* A send is over (delivered, failed, cancelled): its resources go back. */
void sib_send_finished(sib_worker_t *w, struct sib_request *r, sib_status_t st)
{
	if (r->is_batch)
		sib_batch_finished(w, r, st);
	if (r->slot >= 0) {
		sib_slot_release(w, r->slot);
		/* a slot came free: hosts waiting for one may post again */
		if (w->nfree == 1)
			w->next_timer_ms = 0;
	} else if (r->data && r->data != r->inl) {
		free(r->data);
	}
	struct sib_ep *ep = r->ep;   /* r may be gone after completion */

	r->slot = -1;
	r->data = NULL;
	ep->tx_done++;
	if (r->early) {
		/* completed when posted: what was held is released; a failure
		 * now shows in the endpoint's status, and in its flush */
		r->early = false;
		if (r->freed)
			sib_req_put(w, r);
	} else {
		sib_req_complete(r, st);
	}
	flushes_check(ep);
}

/* inline: once per arrival, the one copy from the receive buffer into
 * the user's */
static inline __attribute__((always_inline)) void
recv_finish(sib_worker_t *w, struct sib_request *r, uint32_t src,
	    uint32_t ctx, uint64_t tag, const uint8_t *data, size_t len)
{
	size_t n = len < r->len ? len : r->len;

	if (__builtin_expect(r->iov != NULL, 0)) {
		if (n)
			sib_iov_copy(r->iov, r->niov, 0, data, n);
	} else {
		sib_copy(r->buf, data, n);
	}
	if (r->ep && r->ep->rx_named)
		r->ep->rx_named--;
	if (r->wild && w->rx_wild)
		w->rx_wild--;
	r->st.source = src;
	r->st.ctx_id = ctx;
	r->st.tag = tag;
	r->st.length = len;
	r->st.status = len > r->len ? SIB_ERR_TRUNCATED : SIB_OK;
	/* sib_req_complete's receive half, inline */
	atomic_store_explicit(&r->done, true, memory_order_release);
	if (r->recv_cb)
		r->recv_cb(r, &r->st, r->cb_arg);
	if (r->freed)       /* a receive is never early */
		sib_req_put(w, r);
}

/*
 * A peer has failed: what waits on it completes SIB_ERR_PEER_FAILED. The
 * log says so when something did wait (or under SIB_DEBUG): a peer that
 * simply ended (a spawned job's children at their finalize) is no news.
 */
void sib_ep_fail(sib_worker_t *w, struct sib_ep *ep, const char *why)
{
	struct sib_mq_recv *mr;
	sib_link_t *lists[2], *e, *n;
	unsigned failed = 0;
	bool waited = ep->tx_issued != ep->tx_done || ep->rndv_wait || ep->batch;

	if (ep->failed)
		return;
	ep->failed = true;
	/* its messages fail with the rest (submitting it would connect) */
	sib_batch_drop(w, ep, SIB_ERR_PEER_FAILED);
	if (ep->host) {
		lists[0] = &ep->host->pending;
		lists[1] = &ep->host->retry;
		for (int i = 0; i < 2; i++)
			for (e = lists[i]->next; e != lists[i]; e = n) {
				struct sib_request *r = SIB_CONTAINER(e, struct sib_request,
								      qlink);
				n = e->next;
				if (r->ep != ep)
					continue;
				sib_list_del(e);
				sib_send_finished(w, r, SIB_ERR_PEER_FAILED);
				failed++;
			}
	}
	while ((mr = sib_mq_take_recv_from(&w->mq, ep->id))) {
		struct sib_request *r = SIB_CONTAINER(mr, struct sib_request, mrecv);

		if (ep->rx_named)
			ep->rx_named--;
		r->st.source = ep->id;
		sib_req_complete(r, SIB_ERR_PEER_FAILED);
		failed++;
	}
	if (failed || waited || getenv("SIB_DEBUG"))
		sib_log("peer %u failed: %s (%u requests failed)", ep->id, why,
			failed);
	sib_rndv_ep_failed(w, ep);
	flushes_check(ep);
}

/* ---------------- sending ---------------- */

uint32_t sib_class_for(const struct sib_ep *ep, uint32_t wire)
{
	for (uint32_t i = 0; i < ep->addr.nclasses; i++)
		if (wire <= ep->addr.class_size[i])
			return i;
	return UINT32_MAX;
}

sib_status_t sib_send_start(struct sib_ep *ep, struct sib_hdr *h,
			    const void *a, size_t alen,
			    const void *b, size_t blen,
			    const struct sib_op_params *op,
			    sib_request_t **out)
{
	sib_worker_t *w = ep->w;
	size_t len = alen + blen;
	struct sib_request *r;
	enum sib_proto_id proto;
	uint32_t cls;

	if (ep->failed)
		return SIB_ERR_PEER_FAILED;
	/* a burst of tagged or active messages: batched (batch.c); the
	 * first send of one goes alone */
	if ((h->type == SIB_MSG_TAG || h->type == SIB_MSG_AM) &&
	    (ep->batch || ep->tx_gen == w->pgen ||
	     !sib_list_empty(&ep->host->pending))) {
		sib_status_t bst = sib_batch_add(ep, h, a, alen, b, blen, op, out);

		if (bst != SIB_INPROGRESS)
			return bst;
	}
	if (ep->batch)            /* what was batched goes first */
		sib_batch_close(w, ep);
	if (len <= w->short_lim)   /* the common case, without the walk */
		proto = SIB_PROTO_SHORT;
	else if (sib_proto_select(w, len, &proto))
		return SIB_ERR_MSG_TOO_LONG;
	if (len > w->short_lim && (proto == SIB_PROTO_RNDV ||
	    (h->type < SIB_MSG_RTS && len > sib_rndv_thresh(ep)))) {
		/* above the path's threshold: the receiver reads it */
		struct sib_iov v = { (void *)(uintptr_t)b, blen };

		if (h->type == SIB_MSG_TAG) {
			v.base = (void *)(uintptr_t)a;
			v.len = alen;
		}
		return sib_rndv_send(ep, h, h->type == SIB_MSG_AM ? a : NULL,
				     h->type == SIB_MSG_AM ? alen : 0, &v, 1,
				     op, out);
	}
	cls = sib_class_for(ep, (uint32_t)(SIB_HDR + len));
	if (cls == UINT32_MAX)
		return SIB_ERR_MSG_TOO_LONG;   /* the peer's buffers are smaller */
	r = sib_req_new_send(w, op);
	if (!r)
		return SIB_ERR_NO_MEMORY;
	r->ep = ep;
	r->proto = proto;
	r->cls = cls;
	r->wire_len = (uint32_t)(SIB_HDR + len);
	r->data = r->wire_len <= sizeof(r->inl) ? r->inl : malloc(r->wire_len);
	if (!r->data) {
		sib_req_put(w, r);
		return SIB_ERR_NO_MEMORY;
	}
	h->proto = (uint8_t)proto;
	h->src = w->id;
	h->seq = ep->tx_seq++;
	memcpy(r->data, h, SIB_HDR);
	sib_copy(r->data + SIB_HDR, a, alen);
	if (blen)
		sib_copy(r->data + SIB_HDR + alen, b, blen);
	r->st.length = len;
	ep->tx_issued++;
	/* only this call's own post may leave it unsignalled: a send that
	 * waits (connection, QP room) is posted later, signalled */
	r->unsig_ok = proto == SIB_PROTO_SHORT && h->type < SIB_MSG_RTS &&
		      (!r->send_cb || (op && (op->flags & SIB_OP_LAZY_CB)));
	sib_host_submit(w, ep->host, r);
	r->unsig_ok = false;
	ep->tx_gen = w->pgen;
	/* Posted, with its bytes copied (inline, or into a bounce slot):
	 * the caller's buffer is free, so a send that asked for no callback
	 * completes now, as a short or eager send does in UCX. Waiting for
	 * the work completion would put the link's acknowledgement (deferred
	 * and coalesced on the UDP link) on every ping-pong's critical path.
	 * The library keeps the request until that completion (early); a
	 * send that waits for a connection or a slot, a control message, or
	 * one with a callback (which reports delivery failures) completes
	 * then, as before. */
	if (r->posted && !r->send_cb && h->type < SIB_MSG_RTS) {
		r->early = true;
		r->st.status = SIB_OK;
		atomic_store_explicit(&r->done, true, memory_order_release);
		if (op && (op->flags & SIB_OP_NOREQ)) {
			/* the caller takes "done" for an answer: the request
			 * is the library's alone (released at completion) */
			r->freed = true;
			*out = NULL;
			return SIB_DONE;
		}
	}
	*out = r;
	return SIB_OK;
}

static bool ep_usable(const struct sib_ep *ep)
{
	return ep && ep->has_addr && ep->refs > 0;
}

SIB_API sib_status_t sib_tag_send_nb(sib_ep_t *ep, const void *buf,
				     size_t len, uint64_t tag, uint32_t ctx_id,
				     const struct sib_op_params *op,
				     sib_request_t **req)
{
	struct sib_hdr h = { .type = SIB_MSG_TAG, .ctx = ctx_id, .tag = tag };
	struct sib_request *b;
	sib_status_t st;

	if (req)
		*req = NULL;
	if (!ep_usable(ep) || !req || (!buf && len))
		return SIB_ERR_INVALID_PARAM;
	if (op && (op->flags & SIB_OP_IOV))
		return sib_tag_send_iov(ep, buf, len, tag, ctx_id, op, req);
	sib_lock(ep->w);
	b = ep->batch;
	if (b && op && (op->flags & SIB_OP_NOREQ) && !op->send_cb &&
	    len <= sib_batch_item_max(ep) &&
	    b->wire_len + SIB_BITEM + sib_pad8((uint32_t)len) <= b->len) {
		/* the burst's fast path: a batch open (so its endpoint is
		 * up and batching on), room in it, and nothing to give back */
		sib_batch_item(ep->w, b, (uint32_t)len |
			       (uint32_t)(len <= ep->w->short_lim ?
					  SIB_PROTO_SHORT : SIB_PROTO_EAGER) << 24,
			       ctx_id, tag, buf, len, NULL, 0);
		sib_unlock(ep->w);
		return SIB_DONE;
	}
	/* a batch open: straight into it (sib_send_start would get there) */
	st = b ? sib_batch_add(ep, &h, buf, len, NULL, 0, op, req) :
		 SIB_INPROGRESS;
	if (st == SIB_INPROGRESS)
		st = sib_send_start(ep, &h, buf, len, NULL, 0, op, req);
	if (st == SIB_OK) {
		(*req)->st.tag = tag;
		(*req)->st.ctx_id = ctx_id;
		(*req)->st.source = ep->w->id;
	}
	sib_unlock(ep->w);
	return st;
}

SIB_API sib_status_t sib_ep_flush(sib_ep_t *ep, sib_request_t **req)
{
	struct sib_request *f;

	if (req)
		*req = NULL;
	if (!ep_usable(ep) || !req)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(ep->w);
	sib_batch_close(ep->w, ep);
	if (ep->tx_done >= ep->tx_issued) {
		sib_unlock(ep->w);
		return ep->failed ? SIB_ERR_PEER_FAILED : SIB_OK;
	}
	f = sib_req_new(ep->w, SIB_REQ_FLUSH, NULL);
	if (!f) {
		sib_unlock(ep->w);
		return SIB_ERR_NO_MEMORY;
	}
	f->ep = ep;
	f->flush_target = ep->tx_issued;
	sib_list_add_tail(&ep->flushes, &f->qlink);
	/* unsignalled sends complete with a later signalled WR: send one */
	if (ep->host)
		sib_host_close_tail(ep->w, ep->host);
	*req = f;
	sib_unlock(ep->w);
	return SIB_INPROGRESS;
}

SIB_API sib_status_t sib_ep_destroy(sib_ep_t *ep)
{
	sib_worker_t *w;
	sib_link_t *e, *n;

	if (!ep_usable(ep))
		return SIB_ERR_INVALID_PARAM;
	w = ep->w;
	sib_lock(w);
	/* the receive state (sequence numbers) stays with the worker: the
	 * peer may still send to us */
	if (--ep->refs == 0 && ep->host) {
		/* a batch holds messages already reported sent: it goes */
		sib_batch_close(w, ep);
		for (e = ep->host->pending.next; e != &ep->host->pending; e = n) {
			struct sib_request *r = SIB_CONTAINER(e, struct sib_request, qlink);

			n = e->next;
			if (r->ep == ep && !r->is_batch) {
				sib_list_del(e);
				sib_send_finished(w, r, SIB_ERR_CANCELED);
			}
		}
	}
	sib_unlock(w);
	return SIB_OK;
}

/* ---------------- receiving ---------------- */

/* A receive into pieces (SIB_OP_IOV): buf is the array, len its count. */
static int iov_set(struct sib_request *r, const void *buf, size_t n)
{
	const struct sib_iov *v = buf;
	size_t total = 0;

	if (n > SIB_IOV_MAX || (n && !v))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!v[i].base && v[i].len)
			return -1;
		total += v[i].len;
	}
	r->iov = v;
	r->niov = n;
	r->len = total;
	return 0;
}

/* A receive request for buf/len (pieces with SIB_OP_IOV); the worker's
 * lock is held. Shared by the receive and the matched receive. */
static inline sib_status_t recv_req_new(sib_worker_t *w, void *buf, size_t len,
					const struct sib_op_params *op,
					struct sib_request **rp)
{
	struct sib_request *r = sib_req_new_recv(w, op);

	if (!r)
		return SIB_ERR_NO_MEMORY;
	r->buf = buf;
	r->len = len;
	if (op && (op->flags & SIB_OP_IOV) && iov_set(r, buf, len)) {
		sib_req_put(w, r);
		return SIB_ERR_INVALID_PARAM;
	}
	*rp = r;
	return SIB_OK;
}

void sib_deliver(sib_worker_t *w, struct sib_ep *src, const struct sib_hdr *h,
		 uint8_t *payload, size_t len, uint32_t cls, uint32_t idx,
		 bool *keep)
{
	(void)cls;
	(void)idx;
	if (h->type >= SIB_MSG_RTS) {   /* rendezvous control: rndv.c */
		sib_rndv_rx(w, src, h, payload, len);
		return;
	}
	if (h->type == SIB_MSG_AM) {
		struct sib_am_slot *a = h->am_id < SIB_AM_MAX_ID ? &w->am[h->am_id] : NULL;
		size_t hl = h->ctx;

		if (!a || !a->cb || hl > len) {
			sib_log("active message %u from %u: no handler", h->am_id, src->id);
			return;
		}
		*keep = a->cb(a->arg, src->id, payload, hl, payload + hl,
			      len - hl) == SIB_INPROGRESS;
		return;
	}
	sib_deliver_tag(w, src->id, h->ctx, h->tag, payload, len);
}

/* A tagged message: into the oldest matching posted receive (one copy,
 * from the receive buffer straight into the user's), or copied out to
 * the unexpected queue so that the SRQ buffer goes back at once. */
void sib_deliver_tag(sib_worker_t *w, uint32_t src, uint32_t ctx, uint64_t tag,
		     const uint8_t *payload, size_t len)
{
	struct sib_mq_recv *mr = sib_mq_arrive_fast(&w->mq, src, ctx, tag);
	struct sib_message *m;

	if (mr) {
		recv_finish(w, SIB_CONTAINER(mr, struct sib_request, mrecv),
			    src, ctx, tag, payload, len);
		return;
	}
	m = malloc(sizeof(*m) + len);
	if (!m) {
		sib_log("out of memory: message from %u dropped", src);
		return;
	}
	memset(&m->m, 0, sizeof(m->m));
	m->m.tag = tag;
	m->m.src = src;
	m->m.ctx = ctx;
	m->m.len = len;
	m->len = len;
	m->rndv = false;
	memcpy(m->data, payload, len);
	sib_mq_add_unexpected(&w->mq, &m->m);
	w->c.unexpected++;
}

/*
 * The connection thread's gate (async.c) only where the thread could
 * meet what the call touches. A receive from any source touches the
 * worker's request cache, its matching engine and its own counters, none
 * of which the thread ever reads or writes (it never takes, completes or
 * matches a request), so it goes without: the gate was a fifth of the
 * call. A named source may add an endpoint to the table the thread reads
 * (handshakes), and a rendezvous matched here posts on a send QP: those
 * pass the gate. SIB_THREAD_MULTI's lock is taken as always.
 */
SIB_API sib_status_t sib_tag_recv_nb(sib_worker_t *w, void *buf, size_t len,
				     uint32_t src, uint64_t tag, uint64_t mask,
				     uint32_t ctx_id,
				     const struct sib_op_params *op,
				     sib_request_t **req)
{
	struct sib_request *r;
	struct sib_mq_msg *mm;
	struct sib_ep *ep = NULL;
	sib_status_t st;
	bool gate;

	if (req)
		*req = NULL;
	if (!w || !req || (!buf && len))
		return SIB_ERR_INVALID_PARAM;
	if (w->mt)
		pthread_mutex_lock(&w->lock);
	gate = w->async_on && src != SIB_ANY_SOURCE;
	if (gate)
		sib_gate_enter(w);
	st = recv_req_new(w, buf, len, op, &r);
	if (st != SIB_OK)
		goto out;
	r->mrecv.tag = tag;
	r->mrecv.mask = mask;
	r->mrecv.src = src;
	r->mrecv.ctx = ctx_id;
	*req = r;
	if (src != SIB_ANY_SOURCE)
		ep = sib_ep_get(w, src);
	mm = sib_mq_post_fast(&w->mq, &r->mrecv);
	if (mm) {
		struct sib_message *m = SIB_CONTAINER(mm, struct sib_message, m);

		if (m->rndv) {
			if (w->async_on && !gate)
				sib_gate_enter(w);
			sib_rndv_matched(w, r, m);
			if (w->async_on && !gate)
				sib_gate_leave(w);
		} else {
			recv_finish(w, r, mm->src, mm->ctx, mm->tag, m->data, m->len);
		}
		free(m);
	} else if (ep && ep->failed) {
		sib_mq_cancel(&w->mq, &r->mrecv);
		r->st.source = src;
		sib_req_complete(r, SIB_ERR_PEER_FAILED);
	} else if (ep) {
		r->ep = ep;
		ep->rx_named++;
	} else {
		r->wild = true;
		w->rx_wild++;
	}
out:
	if (gate)
		sib_gate_leave(w);
	if (w->mt)
		pthread_mutex_unlock(&w->lock);
	return st;
}

SIB_API sib_status_t sib_tag_probe_nb(sib_worker_t *w, uint32_t src,
				      uint64_t tag, uint64_t mask,
				      uint32_t ctx_id,
				      struct sib_tag_status *st,
				      sib_message_t **msg)
{
	struct sib_mq_msg *mm;

	if (msg)
		*msg = NULL;
	if (!w || !st)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(w);
	mm = sib_mq_probe(&w->mq, src, ctx_id, tag, mask, msg != NULL);
	if (!mm) {
		sib_progress_locked(w);
		mm = sib_mq_probe(&w->mq, src, ctx_id, tag, mask, msg != NULL);
	}
	if (mm) {
		*st = (struct sib_tag_status){ .status = SIB_OK, .source = mm->src,
					       .ctx_id = mm->ctx, .tag = mm->tag,
					       .length = mm->len };
		if (msg)
			*msg = SIB_CONTAINER(mm, struct sib_message, m);
	}
	sib_unlock(w);
	return mm ? SIB_OK : SIB_ERR_NO_MESSAGE;
}

SIB_API sib_status_t sib_tag_mrecv_nb(sib_worker_t *w, void *buf, size_t len,
				      sib_message_t *msg,
				      const struct sib_op_params *op,
				      sib_request_t **req)
{
	struct sib_request *r;
	sib_status_t st;

	if (req)
		*req = NULL;
	if (!w || !msg || !req || (!buf && len))
		return SIB_ERR_INVALID_PARAM;
	sib_lock(w);
	st = recv_req_new(w, buf, len, op, &r);
	if (st != SIB_OK) {
		sib_unlock(w);
		return st;
	}
	*req = r;
	if (msg->rndv)
		sib_rndv_matched(w, r, msg);
	else
		recv_finish(w, r, msg->m.src, msg->m.ctx, msg->m.tag, msg->data,
			    msg->len);
	free(msg);
	sib_unlock(w);
	return SIB_OK;
}

/* ---------------- active messages ---------------- */

SIB_API sib_status_t sib_am_register(sib_worker_t *w, unsigned id,
				     sib_am_handler_t h, void *arg)
{
	if (!w || id >= SIB_AM_MAX_ID)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(w);
	w->am[id] = (struct sib_am_slot){ h, arg };
	sib_unlock(w);
	return SIB_OK;
}

SIB_API sib_status_t sib_am_send_nb(sib_ep_t *ep, unsigned id,
				    const void *header, size_t hlen,
				    const void *data, size_t dlen,
				    const struct sib_op_params *op,
				    sib_request_t **req)
{
	struct sib_hdr h = { .type = SIB_MSG_AM, .am_id = (uint16_t)id,
			     .ctx = (uint32_t)hlen };
	sib_status_t st;

	if (req)
		*req = NULL;
	if (!ep_usable(ep) || !req || id >= SIB_AM_MAX_ID ||
	    (!header && hlen) || (!data && dlen) || hlen > UINT16_MAX)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(ep->w);
	st = sib_send_start(ep, &h, header, hlen, data, dlen, op, req);
	sib_unlock(ep->w);
	return st;
}

SIB_API void sib_am_data_release(sib_worker_t *w, void *data)
{
	if (!w || !data)
		return;
	sib_lock(w);
	for (uint32_t i = 0; i < w->nclasses; i++) {
		struct sib_srq_class *c = &w->cls[i];
		uint8_t *p = data;

		if (p >= c->buf && p < c->buf + (size_t)c->size * c->depth) {
			/* the buffer holding it (a batch's: any offset in
			 * it) goes back with its last kept message */
			uint32_t idx = (uint32_t)((size_t)(p - c->buf) / c->size);

			if (sib_batch_release(w, i, idx)) {
				c->held--;
				sib_srq_repost(w, i, idx);
			}
			sib_unlock(w);
			return;
		}
	}
	sib_rndv_am_release(w, data);   /* a payload that came by rendezvous */
	sib_unlock(w);
}

/* ---------------- teardown ---------------- */

void sib_requests_destroy(sib_worker_t *w)
{
	sib_link_t *e;

	while (!sib_list_empty(&w->batch_eps))   /* never submitted */
		sib_batch_drop(w, SIB_CONTAINER(w->batch_eps.next, struct sib_ep,
						blink), SIB_ERR_CANCELED);

	for (e = w->hosts.next; e != &w->hosts; e = e->next) {
		struct sib_host *h = SIB_CONTAINER(e, struct sib_host, link);
		sib_link_t *lists[3] = { &h->pending, &h->retry, &h->sent };

		for (int i = 0; i < 3; i++)
			while (!sib_list_empty(lists[i])) {
				struct sib_request *r = SIB_CONTAINER(lists[i]->next,
								      struct sib_request, qlink);

				sib_list_del(&r->qlink);
				sib_send_finished(w, r, SIB_ERR_CANCELED);
			}
	}
	w->rx_ep = NULL;
	while (!sib_list_empty(&w->eps)) {
		struct sib_ep *ep = SIB_CONTAINER(w->eps.next, struct sib_ep, link);
		struct sib_mq_msg *mm;
		struct sib_mq_recv *mr;

		while ((mm = sib_mq_take_msg_from(&w->mq, ep->id)))
			free(SIB_CONTAINER(mm, struct sib_message, m));
		while ((mr = sib_mq_take_recv_from(&w->mq, ep->id)))
			sib_req_complete(SIB_CONTAINER(mr, struct sib_request, mrecv),
					 SIB_ERR_CANCELED);
		while (!sib_list_empty(&ep->flushes)) {
			struct sib_request *f = SIB_CONTAINER(ep->flushes.next,
							      struct sib_request, qlink);

			sib_list_del(&f->qlink);
			sib_req_complete(f, SIB_ERR_CANCELED);
		}
		sib_list_del(&ep->link);
		sib_list_del(&ep->hlink);
		free(ep);
	}
}
