/*
 * rndv.c: the rendezvous protocol (the protocol table's rndv row), for
 * tagged messages and active messages above the path's threshold.
 *
 *   sender                                 receiver
 *   register the buffer(s) (REMOTE_READ)
 *   RTS {cookie, length, my address,  -->  matched like any message (or
 *        AM header, segments}              queued unexpected, RTS kept)
 *                                          register the posted buffer,
 *                                     <==  RDMA READ straight into it,
 *                                          pieces of at most `chunk` bytes
 *   buffer released, send completes   <--  FIN {cookie, status}
 *
 * RTS and FIN are small messages of the short / eager rows (header types
 * SIB_MSG_RTS, SIB_MSG_AM_RTS, SIB_MSG_FIN), so they keep the pair's order
 * and travel through the same connection and recovery.  The RTS carries
 * the sender's address: a receiver that never made an endpoint to the
 * sender can still read and answer.
 *
 * Endings, each with a status and every registration released:
 *   truncation - the receiver reads what fits; SIB_ERR_TRUNCATED with the
 *                full length; the sender completes SIB_OK;
 *   cancel     - of a matched receive still reading: pieces not yet posted
 *                are dropped, the posted ones finish (they write into the
 *                buffer: the request completes only after them) and the
 *                receive completes SIB_ERR_CANCELED; the FIN says so and
 *                the send completes SIB_ERR_CANCELED too;
 *   peer death - the reads fail (SIB_ERR_PEER_FAILED on the receive); a
 *                sender whose receiver dies before the FIN completes
 *                SIB_ERR_PEER_FAILED when the endpoint fails (pid check on
 *                the host, pings across hosts while it waits, PMIx).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rndv_int.h"

size_t sib_iov_copy(const struct sib_iov *iov, size_t niov, size_t off,
		    const void *src, size_t n)
{
	const uint8_t *s = src;
	size_t done = 0;

	for (size_t i = 0; i < niov && done < n; i++) {
		size_t l = iov[i].len;

		if (off >= l) {
			off -= l;
			continue;
		}
		l -= off;
		if (l > n - done)
			l = n - done;
		memcpy((uint8_t *)iov[i].base + off, s + done, l);
		done += l;
		off = 0;
	}
	return done;
}

size_t sib_rndv_thresh(const struct sib_ep *ep)
{
	const struct sib_rma_w *rw = ep->w->rma;
	size_t t = ep->host && !ep->host->local ? rw->thresh_remote :
		   rw->thresh_local;
	size_t m = sib_eager_max(ep->w);

	return t < m ? t : m;
}

/* The largest message that takes the short row whatever the path: the
 * send's fast path tests this one bound (tag.c). */
size_t sib_short_lim(const sib_worker_t *w)
{
	const struct sib_rma_w *rw = w->rma;
	size_t m = sib_short_max(w);

	if (m > rw->thresh_local)
		m = rw->thresh_local;
	if (m > rw->thresh_remote)
		m = rw->thresh_remote;
	return m;
}

static struct sib_rndv_tx *tx_find(struct sib_rma_w *rw, uint64_t cookie)
{
	for (sib_link_t *e = rw->tx.next; e != &rw->tx; e = e->next) {
		struct sib_rndv_tx *t = SIB_CONTAINER(e, struct sib_rndv_tx, link);

		if (t->cookie == cookie)
			return t;
	}
	return NULL;
}

/* ---------------- sender ---------------- */

static void tx_finish(sib_worker_t *w, struct sib_rndv_tx *t, sib_status_t st)
{
	struct sib_rma_w *rw = w->rma;

	if (t->out) {   /* WRITEs in flight: the last one finishes it */
		if (t->st == SIB_OK)
			t->st = st;
		t->gone = true;
		return;
	}
	sib_list_del(&t->link);
	free(t->segs);
	rw->ntx--;
	for (uint32_t i = 0; i < t->nreg; i++)
		sib_reg_put(w, t->regs[i]);
	if (t->ep->rndv_wait)
		t->ep->rndv_wait--;
	if (st == SIB_OK) {
		rw->rndv_tx++;
		w->c.tx_msgs[SIB_PROTO_RNDV]++;
		w->c.tx_bytes[SIB_PROTO_RNDV] += t->len;
	}
	sib_send_finished(w, t->user, st);
	sib_rma_done_one(w);
	free(t);
}

/* The RTS went out (or failed: then the send fails with it). */
static void rts_sent(sib_request_t *c, sib_status_t st, void *arg)
{
	struct sib_rndv_tx *t;

	if (st == SIB_OK || !c->w->rma)
		return;
	t = tx_find(c->w->rma, (uint64_t)(uintptr_t)arg);
	if (t)
		tx_finish(c->w, t, st);
}

sib_status_t sib_rndv_send(struct sib_ep *ep, struct sib_hdr *h,
			   const void *hdr, size_t hlen,
			   const struct sib_iov *iov, size_t niov,
			   const struct sib_op_params *op, sib_request_t **out)
{
	sib_worker_t *w = ep->w;
	struct sib_rma_w *rw = w->rma;
	struct sib_hdr ch = *h;
	struct sib_rndv_tx *t;
	struct sib_rts *rts;
	struct sib_rseg *seg;
	struct sib_request *u, *c;
	size_t rlen, total = 0;
	uint32_t nseg = 0;
	sib_status_t st;

	if (ep->failed)
		return SIB_ERR_PEER_FAILED;
	for (size_t i = 0; i < niov; i++) {
		total += iov[i].len;
		nseg += iov[i].len != 0;
	}
	rlen = sizeof(*rts) + HPAD(hlen) + nseg * sizeof(*seg);
	if (rlen > sib_eager_max(w))
		return SIB_ERR_MSG_TOO_LONG;
	t = calloc(1, sizeof(*t) + nseg * sizeof(t->regs[0]));
	rts = calloc(1, rlen);
	u = sib_req_new(w, SIB_REQ_SEND, op);
	if (t)
		t->segs = calloc(nseg ? nseg : 1, sizeof(*t->segs));
	if (!t || !rts || !u || !t->segs) {
		st = SIB_ERR_NO_MEMORY;
		goto err;
	}
	rts->cookie = t->cookie = rw->cookie_next++;
	rts->len = t->len = total;
	rts->nseg = nseg;
	rts->hlen = (uint32_t)hlen;
	rts->from = ep->addr;   /* overwritten below with mine */
	{
		void *a;
		size_t al;

		if (sib_worker_get_address(w, &a, &al) == SIB_OK) {
			memcpy(&rts->from, a, sizeof(rts->from));
			sib_address_free(a);
		}
	}
	if (hlen)
		memcpy(rts + 1, hdr, hlen);
	seg = (struct sib_rseg *)((uint8_t *)(rts + 1) + HPAD(hlen));
	for (size_t i = 0; i < niov; i++) {
		if (!iov[i].len)
			continue;
		t->regs[t->nreg] = sib_reg_get(w, iov[i].base, iov[i].len,
					       IBV_ACCESS_REMOTE_READ);
		if (!t->regs[t->nreg]) {
			st = SIB_ERR_NO_RESOURCE;
			goto err;
		}
		seg->addr = (uintptr_t)iov[i].base;
		seg->len = iov[i].len;
		t->segs[t->nreg] = iov[i];
		seg->rkey = t->regs[t->nreg]->mr->rkey;
		seg++;
		t->nreg++;
	}
	ch.type = h->type == SIB_MSG_AM ? SIB_MSG_AM_RTS : SIB_MSG_RTS;
	st = sib_send_start(ep, &ch, rts, rlen, NULL, 0,
			    &(struct sib_op_params){ .send_cb = rts_sent,
				    .cb_arg = (void *)(uintptr_t)t->cookie }, &c);
	if (st)
		goto err;
	sib_request_free(c);
	free(rts);
	t->ep = ep;
	t->user = u;
	u->ep = ep;
	u->proto = SIB_PROTO_RNDV;
	u->st.length = total;
	ep->tx_issued++;
	ep->rndv_wait++;
	rw->issued++;
	rw->ntx++;
	sib_list_add_tail(&rw->tx, &t->link);
	*out = u;
	return SIB_OK;
err:
	if (t) {
		for (uint32_t i = 0; i < t->nreg; i++)
			sib_reg_put(w, t->regs[i]);
		free(t->segs);
	}
	free(t);
	free(rts);
	free(u);
	return st;
}

sib_status_t sib_tag_send_iov(struct sib_ep *ep, const struct sib_iov *iov,
			      size_t niov, uint64_t tag, uint32_t ctx_id,
			      const struct sib_op_params *op, sib_request_t **req)
{
	struct sib_hdr h = { .type = SIB_MSG_TAG, .ctx = ctx_id, .tag = tag };
	sib_worker_t *w = ep->w;
	size_t total = 0;
	sib_status_t st;

	if (niov > SIB_IOV_MAX || (niov && !iov))
		return SIB_ERR_INVALID_PARAM;
	for (size_t i = 0; i < niov; i++) {
		if (!iov[i].base && iov[i].len)
			return SIB_ERR_INVALID_PARAM;
		total += iov[i].len;
	}
	sib_lock(w);
	if (total > sib_rndv_thresh(ep)) {
		st = ep->failed ? SIB_ERR_PEER_FAILED :
		     sib_rndv_send(ep, &h, NULL, 0, iov, niov, op, req);
	} else {
		/* copied anyway: gather, then the short / eager rows */
		uint8_t *tmp = malloc(total ? total : 1);
		size_t off = 0;

		if (!tmp) {
			sib_unlock(w);
			return SIB_ERR_NO_MEMORY;
		}
		for (size_t i = 0; i < niov; i++) {
			memcpy(tmp + off, iov[i].base, iov[i].len);
			off += iov[i].len;
		}
		st = sib_send_start(ep, &h, tmp, total, NULL, 0, op, req);
		free(tmp);
	}
	if (!st) {
		(*req)->st.tag = tag;
		(*req)->st.ctx_id = ctx_id;
		(*req)->st.source = w->id;
	}
	sib_unlock(w);
	return st;
}

/* ---------------- WRITE variant, sender side ---------------- */

static void fin_w_send(sib_worker_t *w, struct sib_rndv_tx *t, sib_status_t st)
{
	struct sib_hdr h = { .type = SIB_MSG_FIN_W };
	struct sib_fin f = { .cookie = t->rid, .status = st };
	sib_request_t *c;

	if (w->rma->destroying || t->ep->failed)
		return;
	if (sib_send_start(t->ep, &h, &f, sizeof(f), NULL, 0, NULL, &c) == SIB_OK)
		sib_request_free(c);
}

/* A WRITE piece, the posting hold or the early FIN_W has ended. */
static void tx_out_done(sib_worker_t *w, struct sib_rndv_tx *t)
{
	if (--t->out)
		return;
	if (!t->gone && !t->fin_early)
		fin_w_send(w, t, t->st == SIB_OK ? SIB_OK : SIB_ERR_IO);
	tx_finish(w, t, t->st);
}

static void wpiece_done(sib_request_t *p, sib_status_t st, void *arg)
{
	struct sib_rndv_tx *t = arg;

	free(p->rdma);
	p->rdma = NULL;
	if (st != SIB_OK && t->st == SIB_OK)
		t->st = st;
	tx_out_done(p->w, t);
}

/*
 * The early FIN_W has ended. Not delivered (the peer failed, or it was
 * voided behind a failed WRITE): the last piece out sends the FIN_W that
 * tells the transfer's status, if the peer can still hear it.
 */
static void fin_early_done(sib_request_t *p, sib_status_t st, void *arg)
{
	struct sib_rndv_tx *t = arg;

	if (st != SIB_OK) {
		t->fin_early = false;
		if (t->st == SIB_OK)
			t->st = st;
	}
	tx_out_done(p->w, t);
}

/*
 * Every WRITE piece is posted: the FIN_W (status OK) goes now, behind
 * them on the same send QP, instead of after their acknowledgements (a
 * round trip and the link's ACK delay later, across hosts). A QP delivers
 * in order, so the receiver takes it only once the data has landed. It
 * counts as a piece in flight. A WRITE that fails puts the QP in error,
 * so this FIN_W comes back flushed, undelivered; host.c asks
 * sib_rndv_fin_void before sending a flushed request again, and this one
 * must not go (the last piece sends FIN_W with the error instead).
 */
static void fin_early_send(sib_worker_t *w, struct sib_rndv_tx *t)
{
	struct sib_hdr h = { .type = SIB_MSG_FIN_W };
	struct sib_fin f = { .cookie = t->rid, .status = SIB_OK };
	struct sib_op_params op = { .send_cb = fin_early_done, .cb_arg = t };
	sib_request_t *c;

	if (w->rma->destroying || t->ep->failed)
		return;
	t->out++;          /* before: its callback may run inside the call */
	t->fin_early = true;
	if (sib_send_start(t->ep, &h, &f, sizeof(f), NULL, 0, &op, &c) != SIB_OK) {
		t->out--;
		t->fin_early = false;
		return;
	}
	sib_request_free(c);
}

bool sib_rndv_fin_void(const struct sib_request *r)
{
	return r->send_cb == fin_early_done &&
	       ((const struct sib_rndv_tx *)r->cb_arg)->st != SIB_OK;
}

static void tx_write(sib_worker_t *w, struct sib_rndv_tx *t, const uint8_t *p,
		     size_t len)
{
	const struct sib_rtr *m = (const void *)p;
	const struct sib_rseg *rs = (const void *)(m + 1);
	size_t left, ri = 0, li = 0, chunk = w->rma->chunk;
	uint32_t i = 0, j = 0;

	if (len < sizeof(*m) || m->nseg > SIB_IOV_MAX ||
	    len < sizeof(*m) + m->nseg * sizeof(*rs) || m->want > t->len)
		return;
	t->rid = m->rid;
	left = m->want;
	t->out++;   /* held while posting */
	while (left && i < t->nreg && j < m->nseg) {
		size_t n = t->segs[i].len - li;
		struct sib_request *q;
		struct sib_rdma *d;

		if (n > rs[j].len - ri)
			n = rs[j].len - ri;
		if (n > chunk)
			n = chunk;
		if (n > left)
			n = left;
		q = sib_req_new(w, SIB_REQ_SEND, &(struct sib_op_params){
					.send_cb = wpiece_done, .cb_arg = t });
		d = calloc(1, sizeof(*d));
		if (!q || !d) {
			free(q);
			free(d);
			t->st = SIB_ERR_NO_MEMORY;
			break;
		}
		*d = (struct sib_rdma){ .opcode = IBV_WR_RDMA_WRITE,
					.laddr = (uintptr_t)t->segs[i].base + li,
					.len = (uint32_t)n, .lkey = t->regs[i]->mr->lkey,
					.raddr = rs[j].addr + ri, .rkey = rs[j].rkey,
					.srqn = t->ep->addr.srqn[0], .parent = t };
		q->ep = t->ep;
		q->proto = SIB_PROTO_RNDV;
		q->rdma = d;
		q->freed = true;
		t->ep->tx_issued++;
		t->out++;
		sib_host_submit(w, t->ep->host, q);
		left -= n;
		li += n;
		ri += n;
		if (li == t->segs[i].len) {
			i++;
			li = 0;
		}
		if (ri == rs[j].len) {
			j++;
			ri = 0;
		}
	}
	if (left && t->st == SIB_OK)
		t->st = SIB_ERR_IO;
	if (t->st == SIB_OK && !t->gone)
		fin_early_send(w, t);
	tx_out_done(w, t);   /* the posting hold: as if a piece completed */
}

static struct sib_rndv_rx *rx_find(struct sib_rma_w *rw, uint64_t rid)
{
	for (sib_link_t *e = rw->rx.next; e != &rw->rx; e = e->next) {
		struct sib_rndv_rx *x = SIB_CONTAINER(e, struct sib_rndv_rx, link);

		if (x->rid == rid && x->wfin)
			return x;
	}
	return NULL;
}

static bool rts_valid(const uint8_t *p, size_t len)
{
	const struct sib_rts *rts = (const void *)p;

	return len >= sizeof(*rts) && rts->nseg <= SIB_IOV_MAX &&
	       rts->hlen <= UINT16_MAX &&
	       len >= sizeof(*rts) + HPAD(rts->hlen) + rts->nseg * sizeof(struct sib_rseg) &&
	       rts->from.magic == SIB_ADDR_MAGIC;
}

void sib_rndv_rx(sib_worker_t *w, struct sib_ep *src, const struct sib_hdr *h,
		 const uint8_t *p, size_t len)
{
	const struct sib_rts *rts = (const void *)p;
	struct sib_mq_recv *mr;
	struct sib_message *m;

	if (h->type == SIB_MSG_FIN) {
		struct sib_fin f;
		struct sib_rndv_tx *t;

		if (len < sizeof(f))
			return;
		memcpy(&f, p, sizeof(f));
		t = tx_find(w->rma, f.cookie);
		if (t)
			tx_finish(w, t, f.status == SIB_OK ? SIB_OK :
				  f.status == SIB_ERR_CANCELED ? SIB_ERR_CANCELED :
				  SIB_ERR_IO);
		return;
	}
	if (h->type == SIB_MSG_RTR) {
		struct sib_rndv_tx *t;
		uint64_t ck;

		if (len < sizeof(struct sib_rtr))
			return;
		memcpy(&ck, p, sizeof(ck));
		t = tx_find(w->rma, ck);
		if (t && !t->gone)
			tx_write(w, t, p, len);
		return;
	}
	if (h->type == SIB_MSG_FIN_W) {
		struct sib_fin f;
		struct sib_rndv_rx *x;

		if (len < sizeof(f))
			return;
		memcpy(&f, p, sizeof(f));
		x = rx_find(w->rma, f.cookie);
		if (!x)
			return;
		x->wfin = false;
		if (f.status != SIB_OK && x->st == SIB_OK)
			x->st = SIB_ERR_IO;
		if (!x->out && !x->hold)
			sib_rndv_rx_finish(w, x);
		return;
	}
	if (!rts_valid(p, len)) {
		sib_log("malformed rendezvous from %u dropped", src->id);
		return;
	}
	if (!src->has_addr) {   /* a sender I never addressed: now I can */
		src->host = sib_host_get(w, &rts->from);
		if (!src->host)
			return;
		src->addr = rts->from;
		src->has_addr = true;
	}
	if (h->type == SIB_MSG_AM_RTS) {
		if (h->am_id < SIB_AM_MAX_ID)
			sib_rndv_rx_start(w, NULL, src, h, p, len);
		return;
	}
	mr = sib_mq_arrive(&w->mq, src->id, h->ctx, h->tag);
	if (mr) {
		sib_rndv_rx_start(w, SIB_CONTAINER(mr, struct sib_request, mrecv), src, h,
			 p, len);
		return;
	}
	/* nobody waits: keep the RTS; the read starts when a receive takes it */
	m = malloc(sizeof(*m) + len + sizeof(struct sib_hdr));
	if (!m) {
		sib_log("out of memory: rendezvous from %u dropped", src->id);
		return;
	}
	memset(&m->m, 0, sizeof(m->m));
	m->m.tag = h->tag;
	m->m.src = src->id;
	m->m.ctx = h->ctx;
	m->m.len = rts->len;
	m->len = len;
	m->rndv = true;
	memcpy(m->data, p, len);
	sib_mq_add_unexpected(&w->mq, &m->m);
	w->c.unexpected++;
}

void sib_rndv_matched(sib_worker_t *w, struct sib_request *r,
		      struct sib_message *m)
{
	struct sib_hdr h = { .ctx = m->m.ctx, .tag = m->m.tag };
	struct sib_ep *ep = sib_ep_get(w, m->m.src);

	if (!ep) {
		sib_req_complete(r, SIB_ERR_NO_MEMORY);
		return;
	}
	sib_rndv_rx_start(w, r, ep, &h, m->data, m->len);
}

sib_status_t sib_rndv_cancel(sib_worker_t *w, struct sib_request *r)
{
	struct sib_rndv_rx *x = r->rndv;
	struct sib_host *hs = x->ep->host;
	sib_link_t *lists[2] = { &hs->pending, &hs->retry }, *e, *n;

	x->canceled = true;
	x->hold++;
	for (int i = 0; i < 2; i++)
		for (e = lists[i]->next; e != lists[i]; e = n) {
			struct sib_request *p = SIB_CONTAINER(e, struct sib_request,
							      qlink);

			n = e->next;
			if (!p->rdma || p->rdma->parent != x)
				continue;
			sib_list_del(e);
			sib_send_finished(w, p, SIB_ERR_CANCELED);
		}
	/* the pieces already posted write into the buffer: the receive
	 * completes after the last of them (WRITE variant: after the
	 * sender's FIN_W, its writes being beyond my reach) */
	if (!--x->hold && !x->out && !x->wfin)
		sib_rndv_rx_finish(w, x);
	return SIB_OK;
}

void sib_rndv_ep_failed(sib_worker_t *w, struct sib_ep *ep)
{
	sib_link_t *e, *n;

	if (!w->rma)
		return;
	for (e = w->rma->tx.next; e != &w->rma->tx; e = n) {
		struct sib_rndv_tx *t = SIB_CONTAINER(e, struct sib_rndv_tx, link);

		n = e->next;
		if (t->ep == ep)
			tx_finish(w, t, SIB_ERR_PEER_FAILED);
	}
	for (e = w->rma->rx.next; e != &w->rma->rx; e = n) {
		struct sib_rndv_rx *x = SIB_CONTAINER(e, struct sib_rndv_rx, link);

		n = e->next;
		if (x->ep != ep || !x->wfin)
			continue;
		x->wfin = false;
		if (x->st == SIB_OK)
			x->st = SIB_ERR_PEER_FAILED;
		if (!x->out && !x->hold)
			sib_rndv_rx_finish(w, x);
	}
}

bool sib_rndv_am_release(sib_worker_t *w, void *data)
{
	sib_link_t *h = &w->rma->am_kept;

	for (sib_link_t *e = h->next; e != h; e = e->next) {
		struct am_kept *k = SIB_CONTAINER(e, struct am_kept, link);

		if (k->data == data) {
			sib_list_del(e);
			free(k);
			return true;
		}
	}
	return false;
}

/* The worker goes: sends waiting for a FIN are cancelled; reads finish
 * (cancelled) as the runtime takes their WRs back. */
void sib_rndv_fini(sib_worker_t *w)
{
	if (!w->rma)
		return;
	sib_link_t *e, *n;

	w->rma->destroying = true;
	/* those with WRITEs in flight finish as the runtime takes them back */
	for (e = w->rma->tx.next; e != &w->rma->tx; e = n) {
		n = e->next;
		tx_finish(w, SIB_CONTAINER(e, struct sib_rndv_tx, link),
			  SIB_ERR_CANCELED);
	}
	/* reads waiting for a FIN_W that will not come */
	for (e = w->rma->rx.next; e != &w->rma->rx; e = n) {
		struct sib_rndv_rx *x = SIB_CONTAINER(e, struct sib_rndv_rx, link);

		n = e->next;
		if (!x->wfin)
			continue;
		x->wfin = false;
		x->st = SIB_ERR_CANCELED;
		if (!x->out && !x->hold)
			sib_rndv_rx_finish(w, x);
	}
}
