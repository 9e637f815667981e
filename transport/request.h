/*
 * request.h: making requests — the worker's cache of request structs
 * (request.c keeps it) and the inline set-up of each kind, field by field
 * (a send's, a receive's), on the path of every message. Included by
 * sib_int.h where the request struct and the worker are known.
 */
#ifndef SIB_REQUEST_H
#define SIB_REQUEST_H

SIB_LOCAL struct sib_request *sib_req_new(sib_worker_t *w, enum sib_req_kind k,
					  const struct sib_op_params *op);
SIB_LOCAL struct sib_request *sib_req_alloc(void);
SIB_LOCAL void sib_req_free_mem(struct sib_request *r);

/* A request released goes back to the worker's cache (up to this many
 * kept), else to free; inline: once per receive and per send. */
#define SIB_REQ_CACHE 1024
static inline void sib_req_put(sib_worker_t *w, struct sib_request *r)
{
	if (__builtin_expect(w->nreq_cache >= SIB_REQ_CACHE, 0)) {
		sib_req_free_mem(r);
		return;
	}
	r->next_free = w->req_cache;
	w->req_cache = r;
	w->nreq_cache++;
}

/* A request from the worker's cache (or malloc), its fields as they were
 * (request.c keeps the cache; inline: once or twice per message). */
static inline struct sib_request *sib_req_take(sib_worker_t *w)
{
	struct sib_request *r = w->req_cache;

	if (__builtin_expect(r != NULL, 1)) {
		w->req_cache = r->next_free;
		w->nreq_cache--;
		return r;
	}
	return sib_req_alloc();
}

/*
 * What every request made field by field starts with (sib_req_new_send,
 * sib_req_new_recv, batch.c's batched_req): its kind, owner and state
 * flags, not yet done, no status.
 */
static inline struct sib_request *sib_req_start(sib_worker_t *w, enum sib_req_kind k,
						struct sib_ep *ep)
{
	struct sib_request *r = sib_req_take(w);

	if (!r)
		return NULL;
	r->kind = k;
	r->w = w;
	r->ep = ep;
	atomic_store_explicit(&r->done, false, memory_order_relaxed);
	r->freed = r->wild = r->early = r->posted = r->is_batch = false;
	r->unsig_ok = r->unsig = false;
	r->next_free = NULL;
	r->st = (struct sib_tag_status){ 0 };
	return r;
}

/*
 * A send request (sib_send_start's: short or eager), every field but the
 * receive's matching entry set one by one: sib_req_new's memset of ~270
 * bytes (a rep stos) was a sixth of a lone send's own cost.
 */
static inline struct sib_request *sib_req_new_send(sib_worker_t *w,
						   const struct sib_op_params *op)
{
	struct sib_request *r = sib_req_start(w, SIB_REQ_SEND, NULL);

	if (!r)
		return NULL;
	if (op) {
		r->send_cb = op->send_cb;
		r->recv_cb = op->recv_cb;
		r->cb_arg = op->cb_arg;
	} else {
		r->send_cb = NULL;
		r->recv_cb = NULL;
		r->cb_arg = NULL;
	}
	sib_list_init(&r->qlink);
	r->mrecv.link.next = NULL;
	r->buf = NULL;
	r->len = 0;
	r->proto = SIB_PROTO_SHORT;
	r->cls = 0;
	r->wire_len = 0;
	r->slot = -1;
	r->flush_target = 0;
	r->resends = 0;
	r->broken_ms = 0;
	r->data = NULL;
	r->nitems = 0;
	r->members = NULL;
	r->rdma = NULL;
	r->rndv = NULL;
	r->iov = NULL;
	r->niov = 0;
	return r;
}

/*
 * A receive request: the fields a receive, its matching, its rendezvous
 * reading (rndv_rx.c), test, wait, cancel, free and completion read, set
 * one by one; the send-only ones (proto, cls, wire_len, slot, data,
 * flush_target, resends, broken_ms, batch members) are never read for a
 * receive and stay as they were, and mrecv's match
 * fields are the caller's. sib_req_new's memset of ~270 bytes was the
 * largest single cost of a receive (callgrind, docs/transport.md).
 */
static inline struct sib_request *sib_req_new_recv(sib_worker_t *w,
						   const struct sib_op_params *op)
{
	struct sib_request *r = sib_req_start(w, SIB_REQ_RECV, NULL);

	if (!r)
		return NULL;
	r->send_cb = NULL;
	if (op) {
		r->recv_cb = op->recv_cb;
		r->cb_arg = op->cb_arg;
	} else {
		r->recv_cb = NULL;
		r->cb_arg = NULL;
	}
	sib_list_init(&r->qlink);
	r->mrecv.link.next = NULL;   /* not queued (sib_mq_cancel) */
	r->rdma = NULL;
	r->rndv = NULL;
	r->iov = NULL;
	r->niov = 0;
	return r;
}
SIB_LOCAL void sib_req_cache_fini(sib_worker_t *w);

#endif
