/*
 * rndv_rx.c: the receiving half of the rendezvous (rndv.c has the
 * protocol's picture): a matched RTS registers the posted buffer and
 * reads the sender's segments into it, in pieces of at most `chunk`
 * bytes, or asks the sender to write them (the WRITE variant, an RTR);
 * then a FIN says how it ended.  An AM rendezvous reads into a buffer of
 * its own that the handler may keep.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rndv_int.h"

static void fin_send(sib_worker_t *w, struct sib_rndv_rx *x, sib_status_t st)
{
	struct sib_hdr h = { .type = SIB_MSG_FIN };
	struct sib_fin f = { .cookie = x->cookie, .status = st };
	sib_request_t *c;

	if (w->rma->destroying || x->ep->failed || !x->ep->has_addr)
		return;
	if (sib_send_start(x->ep, &h, &f, sizeof(f), NULL, 0, NULL, &c) == SIB_OK)
		sib_request_free(c);
}

static void am_deliver(sib_worker_t *w, struct sib_rndv_rx *x)
{
	struct sib_am_slot *a = &w->am[x->am_id];
	struct am_kept *k = SIB_CONTAINER(x->am_buf, struct am_kept, data);

	if (a->cb && a->cb(a->arg, x->ep->id, x->am_hdr, x->am_hlen, x->am_buf,
			   x->total) == SIB_INPROGRESS) {
		sib_list_add_tail(&w->rma->am_kept, &k->link);
		return;
	}
	if (!a->cb)
		sib_log("active message %u from %u: no handler", x->am_id, x->ep->id);
	free(k);
}

void sib_rndv_rx_finish(sib_worker_t *w, struct sib_rndv_rx *x)
{
	struct sib_rma_w *rw = w->rma;
	struct sib_request *r = x->r;
	sib_status_t st = x->st;

	if (st == SIB_ERR_REMOTE_ACCESS && (x->ep->failed || sib_peer_dead(x->ep)))
		st = SIB_ERR_PEER_FAILED;   /* its buffer went with it */
	if (x->canceled)
		st = SIB_ERR_CANCELED;
	for (uint32_t i = 0; i < x->nreg; i++)
		sib_reg_put(w, x->regs[i]);
	sib_list_del(&x->link);
	rw->nrx--;
	if (!x->rid)   /* read variant: the sender waits for my FIN */
		fin_send(w, x, st == SIB_OK ? SIB_OK : st == SIB_ERR_CANCELED ?
			 SIB_ERR_CANCELED : SIB_ERR_IO);
	if (st == SIB_OK) {
		rw->rndv_rx++;
		w->c.rx_msgs[SIB_PROTO_RNDV]++;
		w->c.rx_bytes[SIB_PROTO_RNDV] += x->want;
	}
	if (r) {
		r->rndv = NULL;
		if (r->ep && r->ep->rx_named)
			r->ep->rx_named--;
		if (r->wild && w->rx_wild)
			w->rx_wild--;
		if (st == SIB_OK && x->total > x->want)
			st = SIB_ERR_TRUNCATED;
		sib_req_complete(r, st);
	} else if (st == SIB_OK && !rw->destroying) {
		am_deliver(w, x);
	} else {
		sib_log("active message %u from %u by rendezvous: %s", x->am_id,
			x->ep->id, sib_status_string(st));
		if (x->am_buf)
			free(SIB_CONTAINER(x->am_buf, struct am_kept, data));
	}
	free(x->am_hdr);
	free(x);
}

static void piece_done(sib_request_t *p, sib_status_t st, void *arg)
{
	struct sib_rndv_rx *x = arg;

	free(p->rdma);
	p->rdma = NULL;
	x->out--;
	if (st != SIB_OK && x->st == SIB_OK)
		x->st = st;
	if (!x->out && !x->hold && !x->wfin)
		sib_rndv_rx_finish(x->w, x);
}

/* Where the bytes go: the posted buffer (contiguous or pieces) or, for an
 * active message, a buffer of our own. */
struct lseg {
	uint8_t *addr;
	size_t len;
	uint32_t lkey;
};

static int local_segs(sib_worker_t *w, struct sib_rndv_rx *x, struct lseg *ls,
		      uint32_t *nls, int access)
{
	struct sib_iov one, *v = &one;
	size_t n = 1, left = x->want;

	if (x->r && x->r->iov) {
		v = (struct sib_iov *)x->r->iov;
		n = x->r->niov;
	} else {
		one.base = x->r ? x->r->buf : x->am_buf;
		one.len = x->want;
	}
	*nls = 0;
	for (size_t i = 0; i < n && left; i++) {
		size_t l = v[i].len < left ? v[i].len : left;

		if (!l)
			continue;
		x->regs[x->nreg] = sib_reg_get(w, v[i].base, l, access);
		if (!x->regs[x->nreg])
			return -1;
		ls[*nls] = (struct lseg){ v[i].base, l, x->regs[x->nreg]->mr->lkey };
		x->nreg++;
		(*nls)++;
		left -= l;
	}
	return 0;
}

static int piece_post(sib_worker_t *w, struct sib_rndv_rx *x, uint8_t *laddr,
		      uint32_t lkey, uint64_t raddr, uint32_t rkey, size_t len)
{
	struct sib_request *p = sib_req_new(w, SIB_REQ_SEND,
					    &(struct sib_op_params){
						    .send_cb = piece_done,
						    .cb_arg = x });
	struct sib_rdma *d = calloc(1, sizeof(*d));

	if (!p || !d) {
		free(p);
		free(d);
		return -1;
	}
	*d = (struct sib_rdma){ .opcode = IBV_WR_RDMA_READ, .laddr = (uintptr_t)laddr,
				.len = (uint32_t)len, .lkey = lkey, .raddr = raddr,
				.rkey = rkey, .srqn = x->ep->addr.srqn[0],
				.parent = x };
	p->ep = x->ep;
	p->proto = SIB_PROTO_RNDV;
	p->rdma = d;
	p->freed = true;
	p->st.length = len;
	x->ep->tx_issued++;
	x->out++;
	sib_host_submit(w, x->ep->host, p);
	return 0;
}

/* Read the remote segments into the local ones, pieces of at most chunk. */
static void rx_read(sib_worker_t *w, struct sib_rndv_rx *x,
		    const struct sib_rseg *rs, uint32_t nrs)
{
	/* on the stack (6 KiB), not thread-local: libsib is dlopen'ed by the
	 * MPI component, and the memory hooks make its TLS static, which must
	 * fit glibc's small surplus */
	struct lseg ls[SIB_IOV_MAX];
	uint32_t nls, i = 0, j = 0;
	size_t ri = 0, li = 0, left = x->want, chunk = w->rma->chunk;

	if (local_segs(w, x, ls, &nls, IBV_ACCESS_LOCAL_WRITE)) {
		x->st = SIB_ERR_NO_RESOURCE;
		return;
	}
	while (left && i < nrs && j < nls) {
		size_t n = rs[i].len - ri;

		if (n > ls[j].len - li)
			n = ls[j].len - li;
		if (n > chunk)
			n = chunk;
		if (n > left)
			n = left;
		if (piece_post(w, x, ls[j].addr + li, ls[j].lkey, rs[i].addr + ri,
			       rs[i].rkey, n)) {
			x->st = SIB_ERR_NO_MEMORY;
			return;
		}
		left -= n;
		ri += n;
		li += n;
		if (ri == rs[i].len) {
			i++;
			ri = 0;
		}
		if (li == ls[j].len) {
			j++;
			li = 0;
		}
	}
	if (left)
		x->st = SIB_ERR_IO;   /* segments shorter than announced */
}

/* WRITE variant: expose the buffer and ask the sender to write it. */
static void rx_ask_write(sib_worker_t *w, struct sib_rndv_rx *x)
{
	struct lseg ls[SIB_IOV_MAX];   /* on the stack: see rx_read */
	struct sib_hdr h = { .type = SIB_MSG_RTR };
	struct sib_rtr *m;
	struct sib_rseg *seg;
	sib_request_t *c;
	uint32_t nls;
	size_t len;

	if (local_segs(w, x, ls, &nls, IBV_ACCESS_REMOTE_WRITE)) {
		x->st = SIB_ERR_NO_RESOURCE;
		return;
	}
	len = sizeof(*m) + nls * sizeof(*seg);
	m = calloc(1, len);
	if (!m) {
		x->st = SIB_ERR_NO_MEMORY;
		return;
	}
	x->rid = w->rma->cookie_next++;
	*m = (struct sib_rtr){ .cookie = x->cookie, .rid = x->rid, .want = x->want,
			       .nseg = nls };
	seg = (struct sib_rseg *)(m + 1);
	for (uint32_t i = 0; i < nls; i++)
		seg[i] = (struct sib_rseg){ (uintptr_t)ls[i].addr, ls[i].len,
					    x->regs[i]->mr->rkey, 0 };
	if (len > sib_eager_max(w) ||
	    sib_send_start(x->ep, &h, m, len, NULL, 0, NULL, &c)) {
		x->st = SIB_ERR_NO_RESOURCE;
		x->rid = 0;
	} else {
		sib_request_free(c);
		x->wfin = true;
	}
	free(m);
}

/* Start reading an RTS (p, len: its payload) for receive r (NULL: AM). */
void sib_rndv_rx_start(sib_worker_t *w, struct sib_request *r,
		       struct sib_ep *ep, const struct sib_hdr *h,
		       const uint8_t *p, size_t len)
{
	const struct sib_rts *rts = (const void *)p;
	struct sib_rndv_rx *x = calloc(1, sizeof(*x));
	const struct sib_rseg *rs;

	if (!x) {
		if (r)
			sib_req_complete(r, SIB_ERR_NO_MEMORY);
		return;
	}
	x->w = w;
	x->ep = ep;
	x->r = r;
	x->cookie = rts->cookie;
	x->total = rts->len;
	x->want = r ? (rts->len < r->len ? rts->len : r->len) : rts->len;
	x->hold = 1;
	sib_list_add_tail(&w->rma->rx, &x->link);
	w->rma->nrx++;
	if (r) {
		r->rndv = x;
		r->st.source = ep->id;
		r->st.ctx_id = h->ctx;
		r->st.tag = h->tag;
		r->st.length = rts->len;
	} else {
		struct am_kept *k = malloc(sizeof(*k) + (x->total ? x->total : 1));

		x->am_id = h->am_id;
		x->am_hlen = rts->hlen;
		x->am_hdr = malloc(rts->hlen ? rts->hlen : 1);
		if (!k || !x->am_hdr) {
			free(k);
			x->am_buf = NULL;
			x->st = SIB_ERR_NO_MEMORY;
		} else {
			x->am_buf = k->data;
			memcpy(x->am_hdr, rts + 1, rts->hlen);
		}
	}
	rs = (const void *)(p + sizeof(*rts) + HPAD(rts->hlen));
	if (ep->failed)
		x->st = SIB_ERR_PEER_FAILED;
	else if (!x->st && x->want && (ep->host->local ? w->rma->write_local :
					  w->rma->write_remote))
		rx_ask_write(w, x);
	else if (!x->st && x->want)
		rx_read(w, x, rs, rts->nseg);
	(void)len;
	if (!--x->hold && !x->out && !x->wfin)
		sib_rndv_rx_finish(w, x);
}
