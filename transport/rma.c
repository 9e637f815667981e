/*
 * rma.c: one-sided operations.  Put / get / 64-bit atomics on another
 * process's region, the worker flush, and the registrations of user
 * buffers that rendezvous and RMA use (the regions a process exposes and
 * their keys: mem.c).
 *
 * Every one-sided WR is a request on the host's send QP like a SEND (so
 * per-host order, flow control, reconnection and the endpoint's flush
 * apply unchanged); the protocol table's rndv row posts it
 * (sib_rdma_post).  XRC: the WR names the target process's SRQ; the
 * target's HCA checks the key against that SRQ's owner and PD, so one send
 * QP reaches the memory of every process of the host.
 *
 * Small puts go inline (the data in the WQE) or through a bounce slot,
 * small gets and atomics land in a bounce slot and are copied out at
 * completion: no registration of the user buffer.  Larger buffers are
 * registered for the operation (sib_reg_get).
 *
 * A remote access error (outside the region, an unmapped key) completes
 * the operation with SIB_ERR_REMOTE_ACCESS; it has also moved the send QP
 * to error, and host.c recovers the connection (a new send QP, a new
 * handshake) with the operations flushed behind it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "rcache.h"
#include "sib_rma.h"

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static size_t env_size(const char *k, size_t dflt)
{
	const char *v = getenv(k);
	char *end;
	unsigned long long x;

	if (!v || !*v)
		return dflt;
	x = strtoull(v, &end, 0);
	if (*end == 'k' || *end == 'K')
		x <<= 10;
	else if (*end == 'm' || *end == 'M')
		x <<= 20;
	return (size_t)x;
}

/* "read" or "write": which side moves a rendezvous's bytes */
static bool rndv_mode(const char *key, bool dflt)
{
	const char *v = getenv(key);

	if (!v)
		v = getenv("SIB_RNDV_MODE");
	if (!v || !*v)
		return dflt;
	if (!strcmp(v, "read"))
		return false;
	if (!strcmp(v, "write"))
		return true;
	sib_log("%s=%s: neither read nor write; %s kept", key, v,
		dflt ? "write" : "read");
	return dflt;
}

int sib_rma_init(sib_worker_t *w)
{
	struct sib_rma_w *rw = calloc(1, sizeof(*rw));

	if (!rw)
		return -1;
	sib_list_init(&rw->maps);
	sib_list_init(&rw->rkeys);
	sib_list_init(&rw->flushes);
	sib_list_init(&rw->tx);
	sib_list_init(&rw->rx);
	sib_list_init(&rw->am_kept);
	rw->cookie_next = 1;
	/* measured thresholds: docs/transport.md, "Rendezvous" */
	rw->thresh_local = env_size("SIB_RNDV_THRESH_LOCAL",
				    env_size("SIB_RNDV_THRESH", SIZE_MAX));
	rw->thresh_remote = env_size("SIB_RNDV_THRESH_REMOTE",
				     env_size("SIB_RNDV_THRESH", SIZE_MAX));
	rw->chunk = env_size("SIB_RNDV_CHUNK", 4u << 20);
	rw->write_local = rndv_mode("SIB_RNDV_MODE_LOCAL", true);
	rw->write_remote = rndv_mode("SIB_RNDV_MODE_REMOTE", true);
	if (rw->chunk < 4096)
		rw->chunk = 4096;
	/* user buffers of rendezvous and RMA: the registration cache
	 * (invalidated by the memory hooks before memory is reused) */
	rw->rcache = sib_rcache_create(w->pd, NULL);
	if (!rw->rcache)
		sib_log("no registration cache (errno %d): one per use", errno);
	w->rma = rw;
	return 0;
}

int sib_rd_atomic(sib_worker_t *w)
{
	struct ibv_device_attr da;
	struct sib_rma_w *rw = w->rma;
	int n = 1;

	if (rw && rw->rd_atom)
		return rw->rd_atom;
	/* READs and atomics in flight per QP: up to 16, what the device
	 * allows both as initiator and as responder */
	if (!ibv_query_device(w->dev, &da)) {
		n = da.max_qp_rd_atom < da.max_qp_init_rd_atom ?
		    da.max_qp_rd_atom : da.max_qp_init_rd_atom;
		if (n > 16)
			n = 16;
		if (n < 1)
			n = 1;
	}
	if (rw)
		rw->rd_atom = n;
	return n;
}

bool sib_peer_dead(const struct sib_ep *ep)
{
	return ep->addr.host == ep->w->ctx->host_key && ep->addr.pid &&
	       kill((pid_t)ep->addr.pid, 0) && errno == ESRCH;
}

/* ---------------- registrations of user buffers ---------------- */

/* The one place that registers user buffers: through the registration
 * cache (a hit costs a lookup; rcache.h says how it stays correct when
 * memory is freed and reused), else a registration per use. */
struct sib_reg *sib_reg_get(sib_worker_t *w, void *addr, size_t len, int access)
{
	struct sib_rma_w *rw = w->rma;
	struct sib_reg *g = calloc(1, sizeof(*g));
	uint64_t t0 = now_ns();

	if (!g)
		return NULL;
	if (rw->rcache) {
		g->cache_entry = sib_rcache_get(rw->rcache, addr, len,
						access | IBV_ACCESS_LOCAL_WRITE,
						&g->mr);
		if (!g->cache_entry) {
			sib_log("registration of %zu bytes failed (errno %d)",
				len, errno);
			free(g);
			return NULL;
		}
		rw->regs_active++;
		return g;
	}
	g->mr = ibv_reg_mr(w->pd, addr, len, access | IBV_ACCESS_LOCAL_WRITE);
	if (!g->mr) {
		sib_log("registration of %zu bytes failed (errno %d)", len, errno);
		free(g);
		return NULL;
	}
	rw->reg_miss_ns += now_ns() - t0;
	rw->regs_total++;
	rw->regs_active++;
	return g;
}

void sib_reg_put(sib_worker_t *w, struct sib_reg *g)
{
	if (!g)
		return;
	if (g->cache_entry)
		sib_rcache_put(w->rma->rcache, g->cache_entry);
	else
		ibv_dereg_mr(g->mr);
	w->rma->regs_active--;
	free(g);
}

/* ---------------- posting and completing one-sided WRs ---------------- */

int sib_rdma_post(sib_worker_t *w, struct sib_host *h, struct sib_request *r)
{
	struct sib_rdma *d = r->rdma;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;

	if (!d)   /* nothing one-sided to post (never queued so) */
		return ENOSYS;
	sge = (struct ibv_sge){ .addr = d->laddr, .length = d->len, .lkey = d->lkey };
	wr = (struct ibv_send_wr){
		.wr_id = (uintptr_t)r, .sg_list = &sge, .num_sge = d->len ? 1 : 0,
		.opcode = d->opcode, .send_flags = IBV_SEND_SIGNALED,
	};
	if (d->bounce) {
		if (r->slot < 0) {
			if (!w->nfree)
				return EAGAIN;   /* a completion frees one */
			r->slot = w->free_slots[--w->nfree];
			d->slot_addr = w->sbuf + (size_t)r->slot * w->slot_size;
			if (d->opcode == IBV_WR_RDMA_WRITE)
				memcpy(d->slot_addr, d->ubuf, d->len);
		}
		sge.addr = (uintptr_t)d->slot_addr;
		sge.lkey = w->smr->lkey;
	}
	if (d->inl)
		wr.send_flags |= IBV_SEND_INLINE;
	wr.qp_type.xrc.remote_srqn = d->srqn;
	if (d->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
	    d->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = d->raddr;
		wr.wr.atomic.rkey = d->rkey;
		wr.wr.atomic.compare_add = d->cmp;
		wr.wr.atomic.swap = d->swap;
	} else {
		wr.wr.rdma.remote_addr = d->raddr;
		wr.wr.rdma.rkey = d->rkey;
	}
	return ibv_post_send(h->sqp, &wr, &bad);
}

bool sib_rdma_access_error(sib_worker_t *w, struct sib_request *r,
			   enum ibv_wc_status s)
{
	if (!r->rdma || (s != IBV_WC_REM_ACCESS_ERR && s != IBV_WC_LOC_PROT_ERR &&
			 s != IBV_WC_LOC_ACCESS_ERR && s != IBV_WC_REM_OP_ERR))
		return false;
	w->rma->access_errors++;
	sib_send_finished(w, r, SIB_ERR_REMOTE_ACCESS);
	return true;
}

/*
 * An atomic on a QP that broke before its answer came may have been
 * executed at the target all the same (its answer lost, or the WR out on
 * the wire before an earlier one failed and flushed it). Sent again over
 * a new connection it could apply twice, so it completes with SIB_ERR_IO
 * instead. Puts and gets go again: done twice, they leave the same bytes.
 */
bool sib_rdma_outcome_lost(sib_worker_t *w, struct sib_request *r,
			   enum ibv_wc_status s)
{
	if (!r->rdma || s == IBV_WC_SUCCESS ||
	    (r->rdma->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD &&
	     r->rdma->opcode != IBV_WR_ATOMIC_CMP_AND_SWP))
		return false;
	sib_log("an atomic to %u ended %s: its connection broke, and whether "
		"the target applied it is unknown", r->ep->id,
		ibv_wc_status_str(s));
	sib_send_finished(w, r, SIB_ERR_IO);
	return true;
}

static void flushes_check(sib_worker_t *w)
{
	struct sib_rma_w *rw = w->rma;

	while (!sib_list_empty(&rw->flushes)) {
		struct sib_request *f = SIB_CONTAINER(rw->flushes.next,
						      struct sib_request, qlink);

		if (rw->done < f->flush_target)
			return;
		sib_list_del(&f->qlink);
		sib_req_complete(f, SIB_OK);
	}
}

void sib_rma_done_one(sib_worker_t *w)
{
	w->rma->done++;
	flushes_check(w);
}

/*
 * The descriptors of user operations are kept for reuse (worker lock
 * held): a malloc and a free per put, get or atomic were 10 % of the
 * instructions libsib adds to one (docs/transport.md, "One-sided
 * latency"). A kept descriptor links to the next through its parent
 * field (unused by user operations; rewritten when it is taken).
 */
#define RDMA_KEEP 64

static struct sib_rdma *rdma_get(struct sib_rma_w *rw)
{
	struct sib_rdma *d = rw->rdma_free;

	if (!d)
		return malloc(sizeof(*d));
	rw->rdma_free = d->parent;
	rw->nrdma_free--;
	return d;
}

static void rdma_put(struct sib_rma_w *rw, struct sib_rdma *d)
{
	if (rw->nrdma_free >= RDMA_KEEP) {
		free(d);
		return;
	}
	d->parent = rw->rdma_free;
	rw->rdma_free = d;
	rw->nrdma_free++;
}

/* A user's put / get / atomic has completed (st is its status). */
static void rma_done(sib_request_t *r, sib_status_t st, void *arg)
{
	struct sib_rdma *d = r->rdma;
	sib_worker_t *w = r->w;
	sib_send_cb_t cb;
	void *user_arg;

	(void)arg;
	if (st == SIB_OK && d->bounce && d->slot_addr) {
		if (d->opcode == IBV_WR_RDMA_READ)
			memcpy(d->ubuf, d->slot_addr, d->len);
		else if (d->opcode != IBV_WR_RDMA_WRITE && d->result)
			memcpy(d->result, d->slot_addr, 8);
	}
	sib_reg_put(w, d->reg);
	r->rdma = NULL;
	r->send_cb = d->user_cb;
	sib_rma_done_one(w);
	cb = d->user_cb;
	user_arg = d->user_arg;
	rdma_put(w->rma, d);
	if (cb)
		cb(r, st, user_arg);
}

/* ---------------- put, get, atomics ---------------- */

static sib_status_t rma_start(sib_ep_t *ep, sib_rkey_t *k, struct sib_rdma *d,
			      const struct sib_op_params *op, sib_request_t **out)
{
	sib_worker_t *w = ep->w;
	struct sib_request *r;

	d->rkey = k->rkey;
	d->srqn = ep->addr.srqn[0];
	d->rma = true;
	if (op) {
		d->user_cb = op->send_cb;
		d->user_arg = op->cb_arg;
	}
	r = sib_req_new(w, SIB_REQ_SEND, NULL);
	if (!r)
		return SIB_ERR_NO_MEMORY;
	r->ep = ep;
	r->proto = SIB_PROTO_RNDV;
	r->rdma = d;
	r->send_cb = rma_done;
	r->st.length = d->len;
	if (d->inl) {
		memcpy(r->inl, d->ubuf, d->len);
		d->laddr = (uintptr_t)r->inl;
	}
	if (!d->bounce && !d->inl && d->len) {
		d->reg = sib_reg_get(w, (void *)(uintptr_t)d->laddr, d->len,
				     d->opcode == IBV_WR_RDMA_READ ?
				     IBV_ACCESS_LOCAL_WRITE : 0);
		if (!d->reg) {
			free(r);
			return SIB_ERR_NO_RESOURCE;
		}
		d->lkey = d->reg->mr->lkey;
	}
	w->rma->rma_ops++;
	w->rma->issued++;
	ep->tx_issued++;
	sib_host_submit(w, ep->host, r);
	*out = r;
	return SIB_OK;
}

static sib_status_t rma_op(sib_ep_t *ep, sib_rkey_t *k, struct sib_rdma *tmpl,
			   const struct sib_op_params *op, sib_request_t **req)
{
	struct sib_rdma *d;
	sib_status_t st;

	if (req)
		*req = NULL;
	if (!ep || !ep->has_addr || ep->refs <= 0 || !k || k->ep != ep || !req)
		return SIB_ERR_INVALID_PARAM;
	if (tmpl->len > (1u << 30))
		return SIB_ERR_MSG_TOO_LONG;
	sib_lock(ep->w);
	d = rdma_get(ep->w->rma);
	if (!d)
		st = SIB_ERR_NO_MEMORY;
	else if (ep->failed)
		st = SIB_ERR_PEER_FAILED;
	else
		st = rma_start(ep, k, (*d = *tmpl, d), op, req);
	if (st && d)
		rdma_put(ep->w->rma, d);
	sib_unlock(ep->w);
	return st;
}

SIB_API sib_status_t sib_put_nb(sib_ep_t *ep, const void *buf, size_t len,
				uint64_t raddr, sib_rkey_t *k,
				const struct sib_op_params *op,
				sib_request_t **req)
{
	struct sib_rdma d = { .opcode = IBV_WR_RDMA_WRITE, .len = (uint32_t)len,
			      .laddr = (uintptr_t)buf, .raddr = raddr,
			      .ubuf = (void *)(uintptr_t)buf };

	if ((!buf && len) || !ep)
		return req ? (*req = NULL, SIB_ERR_INVALID_PARAM) : SIB_ERR_INVALID_PARAM;
	if (len && len <= ep->w->max_inline && len <= SIB_SHORT_CAP)
		d.inl = true;
	else if (len && len <= ep->w->slot_size)
		d.bounce = true;
	d.len = (uint32_t)(len > (1u << 30) ? (1u << 30) + 1 : len);
	return rma_op(ep, k, &d, op, req);
}

SIB_API sib_status_t sib_get_nb(sib_ep_t *ep, void *buf, size_t len,
				uint64_t raddr, sib_rkey_t *k,
				const struct sib_op_params *op,
				sib_request_t **req)
{
	struct sib_rdma d = { .opcode = IBV_WR_RDMA_READ,
			      .laddr = (uintptr_t)buf, .raddr = raddr,
			      .ubuf = buf };

	if ((!buf && len) || !ep)
		return req ? (*req = NULL, SIB_ERR_INVALID_PARAM) : SIB_ERR_INVALID_PARAM;
	if (len && len <= ep->w->slot_size)
		d.bounce = true;
	d.len = (uint32_t)(len > (1u << 30) ? (1u << 30) + 1 : len);
	return rma_op(ep, k, &d, op, req);
}

static sib_status_t atomic_op(sib_ep_t *ep, enum ibv_wr_opcode opc,
			      uint64_t raddr, sib_rkey_t *k, uint64_t cmp,
			      uint64_t swap, uint64_t *result,
			      const struct sib_op_params *op, sib_request_t **req)
{
	struct sib_rdma d = { .opcode = opc, .len = 8, .raddr = raddr,
			      .cmp = cmp, .swap = swap, .result = result,
			      .bounce = true };

	if (raddr & 7)   /* the HCA would refuse it and break the QP */
		return req ? (*req = NULL, SIB_ERR_INVALID_PARAM) : SIB_ERR_INVALID_PARAM;
	return rma_op(ep, k, &d, op, req);
}

SIB_API sib_status_t sib_atomic_fadd64_nb(sib_ep_t *ep, uint64_t raddr,
					  sib_rkey_t *k, uint64_t add,
					  uint64_t *result,
					  const struct sib_op_params *op,
					  sib_request_t **req)
{
	return atomic_op(ep, IBV_WR_ATOMIC_FETCH_AND_ADD, raddr, k, add, 0,
			 result, op, req);
}

SIB_API sib_status_t sib_atomic_cswap64_nb(sib_ep_t *ep, uint64_t raddr,
					   sib_rkey_t *k, uint64_t compare,
					   uint64_t swap, uint64_t *result,
					   const struct sib_op_params *op,
					   sib_request_t **req)
{
	return atomic_op(ep, IBV_WR_ATOMIC_CMP_AND_SWP, raddr, k, compare, swap,
			 result, op, req);
}

SIB_API sib_status_t sib_worker_flush(sib_worker_t *w, sib_request_t **req)
{
	struct sib_request *f;

	if (req)
		*req = NULL;
	if (!w || !req)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(w);
	if (w->rma->done >= w->rma->issued) {
		sib_unlock(w);
		return SIB_OK;
	}
	f = sib_req_new(w, SIB_REQ_FLUSH, NULL);
	if (!f) {
		sib_unlock(w);
		return SIB_ERR_NO_MEMORY;
	}
	f->flush_target = w->rma->issued;
	sib_list_add_tail(&w->rma->flushes, &f->qlink);
	*req = f;
	sib_unlock(w);
	return SIB_INPROGRESS;
}

/* ---------------- counters, teardown ---------------- */

void sib_rma_query(sib_worker_t *w, struct sib_worker_attr *a)
{
	struct sib_rma_w *rw = w->rma;

	a->rndv_thresh_local = rw->thresh_local < a->eager_max ?
			       rw->thresh_local : a->eager_max;
	a->rndv_thresh_remote = rw->thresh_remote < a->eager_max ?
				rw->thresh_remote : a->eager_max;
	a->rndv_tx_active = rw->ntx;
	a->rndv_rx_active = rw->nrx;
	a->regs_active = rw->regs_active;
	a->mem_maps = rw->nmaps;
	a->rkeys = rw->nrkeys;
	a->regs_total = rw->regs_total;
	a->reg_hits = rw->reg_hits;
	a->reg_miss_ns = rw->reg_miss_ns;
	if (rw->rcache) {
		struct sib_rcache_stats cs;

		sib_rcache_stats(rw->rcache, &cs);
		a->regs_total += cs.misses + cs.uncached;
		a->reg_hits += cs.hits;
		a->reg_miss_ns += cs.miss_ns;
	}
	a->rndv_tx = rw->rndv_tx;
	a->rndv_rx = rw->rndv_rx;
	a->rma_ops = rw->rma_ops;
	a->rma_access_errors = rw->access_errors;
}

void sib_rma_fini(sib_worker_t *w)
{
	struct sib_rma_w *rw = w->rma;

	if (!rw)
		return;
	while (!sib_list_empty(&rw->am_kept)) {
		sib_link_t *e = rw->am_kept.next;

		sib_list_del(e);
		free(e);
	}
	while (!sib_list_empty(&rw->flushes)) {
		struct sib_request *f = SIB_CONTAINER(rw->flushes.next,
						      struct sib_request, qlink);

		sib_list_del(&f->qlink);
		sib_req_complete(f, SIB_ERR_CANCELED);
	}
	while (!sib_list_empty(&rw->maps))
		sib_mem_free(SIB_CONTAINER(rw->maps.next, struct sib_mem, link));
	while (!sib_list_empty(&rw->rkeys)) {
		struct sib_rkey *k = SIB_CONTAINER(rw->rkeys.next, struct sib_rkey, link);

		sib_list_del(&k->link);
		free(k);
	}
	while (rw->rdma_free)
		free(rdma_get(rw));
	if (rw->rcache && sib_rcache_destroy(rw->rcache))
		sib_log("registration cache still in use at worker destroy");
	free(rw);
	w->rma = NULL;
}
