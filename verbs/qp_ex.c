/*
 * The ibv_qp_ex work-request interface (ibv_wr_post(3)): between
 * ibv_wr_start() and ibv_wr_complete(), each opcode call opens a work
 * request (taking wr_id and wr_flags from struct ibv_qp_ex at that moment)
 * and the setters that follow fill it; ibv_wr_complete() posts the whole
 * list through the same HCA call as ibv_post_send().
 *
 * The batch keeps its own copies of everything the application hands in —
 * SGE lists and inline data — because the application may reuse them as
 * soon as the setter returns.  The arrays may move while the batch grows,
 * so the list's pointers (next, sg_list, inline addresses) are only
 * resolved at complete time.  An error in any call is kept and returned
 * by ibv_wr_complete(), which then posts nothing.
 *
 * The batch lock is held from ibv_wr_start() to ibv_wr_complete() or
 * ibv_wr_abort(), so several threads may build batches on one QP.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_int.h"

static void qp_ex_set_ops(struct ibv_qp_ex *x);

/* Every QP gets the ops, so that no ibv_wr_*() inline calls through NULL. */
int vb_wr_init(struct vb_qp *qp)
{
	qp_ex_set_ops(&qp->qpx);
	return pthread_mutex_init(&qp->wr.lock, NULL);
}

void vb_wr_fini(struct vb_qp *qp)
{
	struct vb_wr_batch *b = &qp->wr;

	free(b->wrs);
	free(b->meta);
	free(b->sges);
	free(b->inl);
	pthread_mutex_destroy(&b->lock);
}

static void batch_reset(struct vb_wr_batch *b)
{
	b->n = 0;
	b->nsge = 0;
	b->inl_len = 0;
	b->err = 0;
}

static void batch_fail(struct vb_wr_batch *b, int err)
{
	if (!b->err)
		b->err = err;
}

/* Grow an array to hold `need` elements of `size` bytes. */
static int grow(void **arr, uint32_t *cap, uint32_t need, size_t size)
{
	uint32_t ncap = *cap ? *cap : 8;
	void *p;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	p = realloc(*arr, (size_t)ncap * size);
	if (!p)
		return ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

/* ---- opening a work request ---- */

static struct ibv_send_wr *wr_open(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op)
{
	struct vb_wr_batch *b = &vb_qp_ex(qpx)->wr;
	uint32_t wcap = b->cap, mcap = b->cap;
	struct ibv_send_wr *w;

	if (b->err)
		return NULL;
	if (grow((void **)&b->wrs, &wcap, b->n + 1, sizeof(*b->wrs)) ||
	    grow((void **)&b->meta, &mcap, b->n + 1, sizeof(*b->meta))) {
		batch_fail(b, ENOMEM);
		return NULL;
	}
	b->cap = wcap < mcap ? wcap : mcap;
	w = &b->wrs[b->n];
	memset(w, 0, sizeof(*w));
	w->wr_id = qpx->wr_id;
	/* inline is what the setter says, not a flag */
	w->send_flags = (int)(qpx->wr_flags & ~(unsigned)IBV_SEND_INLINE);
	w->opcode = op;
	b->meta[b->n].sge_first = b->nsge;
	b->meta[b->n].inl = false;
	b->n++;
	return w;
}

static void wr_send(struct ibv_qp_ex *qpx)
{
	wr_open(qpx, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
	struct ibv_send_wr *w = wr_open(qpx, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm_data = imm_data;
}

static void rdma_open(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op,
		      uint32_t rkey, uint64_t remote_addr, __be32 imm_data)
{
	struct ibv_send_wr *w = wr_open(qpx, op);

	if (!w)
		return;
	w->wr.rdma.rkey = rkey;
	w->wr.rdma.remote_addr = remote_addr;
	w->imm_data = imm_data;
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey,
			  uint64_t remote_addr)
{
	rdma_open(qpx, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey,
			      uint64_t remote_addr, __be32 imm_data)
{
	rdma_open(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm_data);
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey,
			 uint64_t remote_addr)
{
	rdma_open(qpx, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

static void atomic_open(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op,
			uint32_t rkey, uint64_t remote_addr,
			uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr *w = wr_open(qpx, op);

	if (!w)
		return;
	w->wr.atomic.rkey = rkey;
	w->wr.atomic.remote_addr = remote_addr;
	w->wr.atomic.compare_add = compare_add;
	w->wr.atomic.swap = swap;
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey,
			      uint64_t remote_addr, uint64_t compare,
			      uint64_t swap)
{
	atomic_open(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr, compare,
		    swap);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey,
				uint64_t remote_addr, uint64_t add)
{
	atomic_open(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr, add, 0);
}

/* ---- opcodes softib does not carry (yet) ---- */

static void unsupported(struct ibv_qp_ex *qpx)
{
	batch_fail(&vb_qp_ex(qpx)->wr, EOPNOTSUPP);
}

static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *bind_info)
{
	unsupported(qpx);
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	unsupported(qpx);
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	unsupported(qpx);
}

static void wr_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz,
			uint16_t mss)
{
	unsupported(qpx);
}

static void wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey,
			    uint64_t remote_addr, const void *atomic_wr)
{
	unsupported(qpx);
}

/* ---- setters of the open work request ---- */

/* The work request the setters apply to: the last one opened. */
static struct ibv_send_wr *wr_current(struct vb_wr_batch *b)
{
	if (b->err)
		return NULL;
	if (!b->n) {
		batch_fail(b, EINVAL);
		return NULL;
	}
	return &b->wrs[b->n - 1];
}

/*
 * Replace the current work request's SGEs with `num` new ones (they are
 * the last in the pool, so a second setter call simply overwrites them).
 */
static struct ibv_sge *sges_claim(struct vb_qp *qp, struct ibv_send_wr *w,
				  size_t num, bool inl)
{
	struct vb_wr_batch *b = &qp->wr;
	struct vb_wr_meta *m = &b->meta[b->n - 1];

	if (num > qp->cap.max_send_sge && !inl) {
		batch_fail(b, EINVAL);
		return NULL;
	}
	b->nsge = m->sge_first;
	if (grow((void **)&b->sges, &b->sge_cap, b->nsge + (uint32_t)num,
		 sizeof(*b->sges))) {
		batch_fail(b, ENOMEM);
		return NULL;
	}
	m->inl = inl;
	w->num_sge = (int)num;
	w->send_flags &= ~IBV_SEND_INLINE;
	if (inl)
		w->send_flags |= IBV_SEND_INLINE;
	b->nsge += (uint32_t)num;
	return &b->sges[m->sge_first];
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr,
		       uint32_t length)
{
	struct vb_qp *qp = vb_qp_ex(qpx);
	struct ibv_send_wr *w = wr_current(&qp->wr);
	struct ibv_sge *s;

	if (!w || !(s = sges_claim(qp, w, 1, false)))
		return;
	s->lkey = lkey;
	s->addr = addr;
	s->length = length;
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge,
			    const struct ibv_sge *sg_list)
{
	struct vb_qp *qp = vb_qp_ex(qpx);
	struct ibv_send_wr *w = wr_current(&qp->wr);
	struct ibv_sge *s;

	if (!w || !(s = sges_claim(qp, w, num_sge, false)))
		return;
	if (num_sge)
		memcpy(s, sg_list, num_sge * sizeof(*s));
}

/*
 * Inline data is copied into the batch now; its one SGE holds the offset
 * of the copy until complete time turns it into an address.
 */
static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf,
				    const struct ibv_data_buf *buf_list)
{
	struct vb_qp *qp = vb_qp_ex(qpx);
	struct vb_wr_batch *b = &qp->wr;
	struct ibv_send_wr *w = wr_current(b);
	size_t total = 0, off;
	struct ibv_sge *s;

	if (!w)
		return;
	for (size_t i = 0; i < num_buf; i++)
		total += buf_list[i].length;
	if (total > qp->cap.max_inline_data) {
		batch_fail(b, EINVAL);
		return;
	}
	if (b->inl_len + total > b->inl_cap) {
		size_t ncap = b->inl_cap ? b->inl_cap : 256;
		uint8_t *p;

		while (ncap < b->inl_len + total)
			ncap *= 2;
		p = realloc(b->inl, ncap);
		if (!p) {
			batch_fail(b, ENOMEM);
			return;
		}
		b->inl = p;
		b->inl_cap = ncap;
	}
	s = sges_claim(qp, w, 1, true);
	if (!s)
		return;
	off = b->inl_len;
	for (size_t i = 0; i < num_buf; i++) {
		memcpy(b->inl + b->inl_len, buf_list[i].addr, buf_list[i].length);
		b->inl_len += buf_list[i].length;
	}
	s->addr = off;
	s->length = (uint32_t)total;
	s->lkey = 0;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr,
			       size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	wr_set_inline_data_list(qpx, 1, &buf);
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah,
			   uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct vb_wr_batch *b = &vb_qp_ex(qpx)->wr;
	struct ibv_send_wr *w = wr_current(b);

	if (!w)
		return;
	if (qpx->qp_base.qp_type != IBV_QPT_UD || !ah) {
		batch_fail(b, EINVAL);
		return;
	}
	w->wr.ud.ah = ah;
	w->wr.ud.remote_qpn = remote_qpn;
	w->wr.ud.remote_qkey = remote_qkey;
}

/* XRC: the SRQ, of the target QP's domain, that receives the request. */
static void wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t remote_srqn)
{
	struct vb_wr_batch *b = &vb_qp_ex(qpx)->wr;
	struct ibv_send_wr *w = wr_current(b);

	if (!w)
		return;
	if (qpx->qp_base.qp_type != IBV_QPT_XRC_SEND) {
		batch_fail(b, EINVAL);
		return;
	}
	w->qp_type.xrc.remote_srqn = remote_srqn;
}

/* ---- start, complete, abort ---- */

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct vb_wr_batch *b = &vb_qp_ex(qpx)->wr;

	pthread_mutex_lock(&b->lock);
	batch_reset(b);
}

/* Turn offsets into pointers, now that the arrays no longer move. */
static void batch_resolve(struct vb_wr_batch *b)
{
	for (uint32_t i = 0; i < b->n; i++) {
		struct ibv_send_wr *w = &b->wrs[i];
		struct ibv_sge *s = &b->sges[b->meta[i].sge_first];

		w->next = i + 1 < b->n ? &b->wrs[i + 1] : NULL;
		w->sg_list = w->num_sge ? s : NULL;
		if (b->meta[i].inl)
			s->addr = (uintptr_t)(b->inl + s->addr);
	}
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct vb_qp *qp = vb_qp_ex(qpx);
	struct vb_wr_batch *b = &qp->wr;
	struct ibv_send_wr *bad;
	int rc = b->err;

	/*
	 * The HCA checks each request as it posts it: one it refuses stops the
	 * list there, the ones before it stay posted, as with ibv_post_send().
	 */
	if (!rc && b->n) {
		batch_resolve(b);
		rc = qp->qpx.qp_base.qp_type == IBV_QPT_UD ?
		     vb_post_send_ud(qp->h, b->wrs, &bad) :
		     hca_qp_post_send(qp->h, b->wrs, &bad);
	}
	batch_reset(b);
	pthread_mutex_unlock(&b->lock);
	return rc;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct vb_wr_batch *b = &vb_qp_ex(qpx)->wr;

	batch_reset(b);
	pthread_mutex_unlock(&b->lock);
}

static void qp_ex_set_ops(struct ibv_qp_ex *x)
{
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_atomic_write = wr_atomic_write;
}
