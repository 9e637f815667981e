/*
 * The responder: what the target QP's side of the HCA does with a request
 * (hca_msg) — whichever link brought it and whichever process runs it.
 * On the shared-memory link the requester's process runs it, reaching the
 * target's memory through the host link's mem_write/mem_read; on the UDP link the target's own
 * process will run the same code.
 *
 * It checks the target QP (exists, can receive, right transport), the
 * Q_Key (UD), the memory key and access rights (RDMA, atomics), takes the
 * receive WQE (from the RQ or SRQ), moves the data, and writes the
 * receive completion. Its answer tells the requester what the wire would
 * have said: ACK, RNR NAK, a NAK class, or nothing at all (DROP).
 *
 * Error classes follow the IB spec's responder rules: on RC a bad rkey or
 * access is a remote access error that also puts the responder QP in the
 * error state (IBV_EVENT_QP_ACCESS_ERR); an invalid request (misaligned
 * atomic, opcode the QP does not serve) is IBV_EVENT_QP_REQ_ERR; a receive
 * buffer too small completes that WQE with a local length error and the
 * requester sees an invalid request. UC drops what it cannot accept; UD
 * drops a datagram whose Q_Key does not match.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "engine.h"

#define GRH_LEN 40

/*
 * Where a request lands: for RC, UC and UD the target QP's own owner, PD,
 * receive queue and CQ; for XRC those of the XRC SRQ the request names —
 * the target QP only checks the domain and the access rights.
 */
struct resp_ctx {
	struct hca_dev *dev;
	struct hca_msg *m;
	struct hca_qp_ent *e;
	uint32_t qpn;
	const struct hca_opcode *op;
	uint16_t owner;
	uint32_t owner_gen;
	uint32_t pd;
	uint32_t rcq;
	uint32_t srq;         /* HCA_NONE: the QP's own RQ */
	uint32_t emb_room;    /* payload bytes the receive CQ's slot holds
			       * beside one range (resp_prefetch) */
};

static bool state_receives(uint8_t s)
{
	return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD ||
	       s == IBV_QPS_SQE;
}

/* The key names a region of the target QP's owner and PD, with access. */
static bool key_ok(const struct hca_mr_ent *mr, const struct resp_ctx *r,
		   unsigned access)
{
	return mr && mr->owner == r->owner && mr->owner_gen == r->owner_gen &&
	       mr->pd == r->pd && (mr->access & access) == access;
}

static bool range_ok(const struct hca_mr_ent *mr, uint64_t addr, uint64_t len)
{
	return addr >= mr->iova && len <= mr->length &&
	       addr - mr->iova <= mr->length - len;
}

static bool rkey_check(struct resp_ctx *r, uint64_t len, uint64_t *vaddr)
{
	struct hca_mr_ent *mr;
	unsigned acc = r->op->rkey_access;

	if (!len) {
		*vaddr = 0; /* a zero-length RDMA names no memory */
		return true;
	}
	mr = hca_mr_lookup(r->dev->seg, r->m->rkey);
	if (!key_ok(mr, r, acc) || !(atomic_load(&r->e->access) & acc) ||
	    !range_ok(mr, r->m->raddr, len))
		return false;
	*vaddr = mr->addr + (r->m->raddr - mr->iova);
	return true;
}

/* ---- receive WQEs ---- */

struct rwqe_buf {
	struct hca_rwqe h;
	struct hca_rsge sge[HCA_MAX_SGE];
};

static struct hca_ring *recv_ring(struct resp_ctx *r, uint32_t *srq_idx,
				   struct hca_claim_ring *ref)
{
	struct hca_seg *seg = r->dev->seg;

	*srq_idx = r->srq;
	if (*srq_idx == HCA_NONE) {
		*ref = (struct hca_claim_ring){ .kind = HCA_CLAIM_RQ, .idx = r->qpn,
						.off = r->e->rq_off };
		return hca_seg_ptr(seg, ref->off);
	}
	struct hca_srq_ent *s = &seg->srqs[*srq_idx];
	uint32_t handle = atomic_load_explicit(&s->handle, memory_order_acquire);

	if (!handle)
		return NULL;
	*ref = (struct hca_claim_ring){ .kind = HCA_CLAIM_SRQ, .idx = *srq_idx,
					.handle = handle, .off = s->ring_off };
	return hca_seg_ptr(seg, ref->off);
}

/* The SRQ limit event is one-shot: it disarms as it fires. */
static void srq_limit_check(struct hca_dev *dev, uint32_t idx, struct hca_ring *ring)
{
	struct hca_srq_ent *s = &dev->seg->srqs[idx];
	uint32_t limit = atomic_load(&s->limit);

	if (limit && hca_ring_count(ring) < limit && atomic_exchange(&s->limit, 0))
		hca_raise_srq_event(dev, idx, IBV_EVENT_SRQ_LIMIT_REACHED);
}

/*
 * The next receive WQE, in a claim cell of ours (claim.c) that holds it
 * until its completion is pushed; NULL if there is none.
 */
static struct hca_claim *take_rwqe(struct resp_ctx *r)
{
	struct hca_claim_ring ref;
	uint32_t srq_idx;
	struct hca_ring *ring = recv_ring(r, &srq_idx, &ref);
	struct hca_claim *c;

	if (!ring)
		return NULL;
	c = hca_claim_get(r->dev);
	if (!hca_claim_take_wqe(r->dev->seg, c, ring, &ref)) {
		hca_claim_put(r->dev, c);
		return NULL;
	}
	if (srq_idx != HCA_NONE)
		srq_limit_check(r->dev, srq_idx, ring);
	/* our own buffers: the next one is prefetched while we wait (cq.c) */
	if (r->owner == r->dev->slot && r->owner_gen == r->dev->gen)
		hca_rx_prefetch_note(r->dev, &ref);
	return c;
}

/*
 * No receive WQE: RNR on the reliable transports (and the requester's
 * process is noted, to be woken by the next post_recv), a drop otherwise.
 */
static enum hca_resp_status no_rwqe(struct resp_ctx *r)
{
	struct hca_seg *seg = r->dev->seg;
	uint32_t s = r->m->src_slot;
	_Atomic uint64_t *waiters;

	if (!hca_reliable(r->m->type)) {
		HCA_COUNT_DROP(r->e, HCA_DROP_NO_WQE);
		return HCA_RESP_DROP;
	}
	if (s < HCA_MAX_PROCS) {
		waiters = r->srq == HCA_NONE ? r->e->rnr_waiters : seg->srqs[r->srq].rnr_waiters;
		atomic_fetch_or(&waiters[s / 64], 1ULL << (s % 64));
	}
	return HCA_RESP_RNR;
}

/* Scatter list of a receive WQE as target iovecs; a WC status on error. */
static enum ibv_wc_status rwqe_iov(struct resp_ctx *r, const struct rwqe_buf *w,
				   uint64_t need, struct iovec *iov, uint32_t *lkeys,
				   int *n)
{
	uint64_t room = 0;

	*n = 0;
	for (uint32_t i = 0; i < w->h.num_sge && room < need; i++) {
		const struct hca_rsge *s = &w->h.sge[i];
		struct hca_mr_ent *mr;
		uint64_t take;

		if (!s->length)
			continue;
		mr = hca_mr_lookup(r->dev->seg, s->lkey);
		if (!key_ok(mr, r, IBV_ACCESS_LOCAL_WRITE) ||
		    !range_ok(mr, s->addr, s->length))
			return IBV_WC_LOC_PROT_ERR;
		take = s->length < need - room ? s->length : need - room;
		iov[*n].iov_base = (void *)(uintptr_t)(mr->addr + (s->addr - mr->iova));
		iov[*n].iov_len = take;
		lkeys[*n] = s->lkey;
		(*n)++;
		room += take;
	}
	return room < need ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS;
}

/*
 * The completion of the WQE cl holds; cl is given back once it is out.
 * With inl HCA_INL_EMBED, the payload waits in m->deferred_cqe after it
 * (ext bytes in all: recv_inline).
 */
static void push_recv_cqe(struct resp_ctx *r, struct hca_claim *cl, uint64_t wr_id,
			  enum ibv_wc_status st, uint32_t byte_len, uint16_t inl,
			  uint32_t ext)
{
	struct hca_cqe c = { .wr_id = wr_id, .status = st, .qp_num = r->qpn,
			     .src_qp = r->m->src_qpn, .slid = r->m->slid,
			     .byte_len = byte_len, .inl = inl };

	c.opcode = (r->op->flags & HCA_OPF_WRITE) ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
	if (r->op->flags & HCA_OPF_IMM) {
		c.imm = r->m->imm;
		c.wc_flags |= IBV_WC_WITH_IMM;
	}
	if (r->m->type == IBV_QPT_UD && r->m->ah && r->m->ah->is_global)
		c.wc_flags |= IBV_WC_GRH;
	r->m->deferred_cqe.c = c;
	r->m->deferred_len = inl == HCA_INL_EMBED ? ext : sizeof(c);
	if (r->m->defer_recv_cqe) {
		r->m->deferred = true;
		r->m->claim = cl;
		r->m->deferred_cq = r->rcq;
		return;
	}
	hca_cq_push_body(r->dev, cl, r->rcq, &r->m->deferred_cqe, r->m->deferred_len,
			 r->m->solicited, true);
	hca_claim_put(r->dev, cl);
}

/* The responder QP errs: its owner flushes it (and learns why, if told). */
static void resp_qp_error(struct resp_ctx *r, enum ibv_event_type ev)
{
	struct hca_db_msg m = { .kind = HCA_DB_QP_FLUSH,
				.idx = r->qpn & (HCA_MAX_QP - 1), .id = r->qpn };

	atomic_store(&r->e->state, IBV_QPS_ERR);
	if (ev)
		hca_raise_qp_event(r->dev, r->e, ev);
	else
		hca_dev_notify(r->dev, r->owner, r->owner_gen, &m, sizeof(m));
}

static void build_grh(struct resp_ctx *r, uint8_t *grh)
{
	const struct hca_ah *ah = r->m->ah;

	memset(grh, 0, GRH_LEN);
	if (!ah || !ah->is_global)
		return;
	grh[0] = 6 << 4; /* IP version 6 */
	grh[4] = (uint8_t)(r->m->len >> 8);
	grh[5] = (uint8_t)r->m->len;
	grh[6] = 0x1b;   /* next header: IBA transport */
	grh[7] = ah->hop_limit;
	memcpy(grh + 8, r->m->sgid.raw, 16);
	memcpy(grh + 24, ah->dgid.raw, 16);
}

/*
 * Toward another process, a payload that fits in a slot of the receive
 * CQ's ring beside its target ranges rides in the completion itself
 * (cq_embed.c: HCA_INL_EMBED, *ext the bytes to push); one up to the
 * CQ's inline threshold goes through the CQ's pool (cq_inline.c); the
 * owner copies either out as it polls. Returns the slot for the CQE,
 * or 0 (CMA).
 */
static uint16_t recv_inline(struct resp_ctx *r, struct hca_claim *cl,
			    const struct iovec *liov, int nl,
			    const struct iovec *tiov, const uint32_t *lkeys, int nt,
			    uint64_t need, uint32_t *ext)
{
	if (r->owner == r->dev->slot && r->owner_gen == r->dev->gen)
		return 0; /* our own memory: memcpy is as good */
	if (need > hca_inl_max())
		return 0;
	if (need <= r->emb_room && (nt <= 1 || need <= hca_emb_room(r->dev, r->rcq, nt))) {
		*ext = hca_emb_build(&r->m->deferred_cqe, liov, nl, tiov, lkeys, nt,
				     (uint32_t)need);
		return HCA_INL_EMBED;
	}
	return hca_inl_put(r->dev, cl, r->rcq, liov, nl, tiov, lkeys, nt, (uint32_t)need);
}

/* The target QP is gone (its number freed) or no longer receives. */
static bool target_left(const struct resp_ctx *r)
{
	return atomic_load(&r->e->qpn) != r->qpn ||
	       !state_receives(atomic_load(&r->e->state));
}

/* SEND, SEND_WITH_IMM, and the WQE half of RDMA_WRITE_WITH_IMM. */
static enum hca_resp_status resp_recv(struct resp_ctx *r, bool carries_data)
{
	struct hca_msg *m = r->m;
	bool ud = m->type == IBV_QPT_UD;
	uint64_t need = carries_data ? m->len + (ud ? GRH_LEN : 0) : 0;
	struct iovec tiov[HCA_MAX_SGE], liov[HCA_MAX_SGE + 1];
	uint32_t lkeys[HCA_MAX_SGE];
	uint8_t grh[GRH_LEN];
	const struct rwqe_buf *w;
	struct hca_claim *cl;
	enum ibv_wc_status st;
	uint16_t inl = 0;
	uint32_t ext = 0;
	int nt, nl = 0, rc;

	if (!(cl = take_rwqe(r)))
		return no_rwqe(r);
	w = (const struct rwqe_buf *)cl->wqe;
	st = rwqe_iov(r, w, need, tiov, lkeys, &nt);
	if (st == IBV_WC_SUCCESS && need) {
		if (ud) {
			build_grh(r, grh);
			liov[nl].iov_base = grh;
			liov[nl++].iov_len = GRH_LEN;
		}
		memcpy(liov + nl, m->iov, (size_t)m->iovcnt * sizeof(*liov));
		nl += m->iovcnt;
		inl = recv_inline(r, cl, liov, nl, tiov, lkeys, nt, need, &ext);
		rc = inl ? 0 : hca_link_host->mem_write(r->dev, r->owner, r->owner_gen,
							liov, nl, tiov, lkeys, nt);
		/* the target died: its queues go with it; or its QP was
		 * destroyed while the bytes moved (a teardown: destroy, then
		 * dereg, refused the copy): as a packet that came after the
		 * destroy, dropped, and the requester's retries time out */
		if (rc == ESRCH || (rc && target_left(r))) {
			hca_claim_drop(cl);
			hca_claim_put(r->dev, cl);
			return HCA_RESP_DROP;
		}
		if (rc)
			st = IBV_WC_LOC_PROT_ERR; /* the target range is not mapped */
	}
	push_recv_cqe(r, cl, w->h.wr_id, st, (uint32_t)(carries_data ? need : m->len), inl,
		      ext);
	if (st == IBV_WC_SUCCESS)
		return HCA_RESP_ACK;
	if (ud)
		return HCA_RESP_ACK;   /* a datagram's loss is the receiver's */
	resp_qp_error(r, 0);
	if (m->type == IBV_QPT_UC)
		return HCA_RESP_ACK;   /* UC: the requester never knows */
	return st == IBV_WC_LOC_LEN_ERR ? HCA_RESP_NAK_INV : HCA_RESP_NAK_OP;
}

/* A remote access violation: RC NAKs and errs; UC drops silently. */
static enum hca_resp_status resp_access_error(struct resp_ctx *r)
{
	r->m->refused = true;
	if (!hca_reliable(r->m->type)) {
		HCA_COUNT_DROP(r->e, HCA_DROP_ACCESS);
		return HCA_RESP_ACK;
	}
	resp_qp_error(r, IBV_EVENT_QP_ACCESS_ERR);
	return HCA_RESP_NAK_ACCESS;
}

static enum hca_resp_status resp_write(struct resp_ctx *r)
{
	struct hca_msg *m = r->m;
	struct iovec t;
	uint64_t va;
	int rc;

	if (!rkey_check(r, m->len, &va))
		return resp_access_error(r);
	if (m->range_only) /* the UDP responder, before it buffers (udp_resp.c) */
		return HCA_RESP_ACK;
	/* WRITE_WITH_IMM needs its receive WQE before any byte lands */
	if ((r->op->flags & HCA_OPF_IMM)) {
		uint32_t srq_idx;
		struct hca_claim_ring ref;
		struct hca_ring *ring = recv_ring(r, &srq_idx, &ref);

		if (!ring || !hca_ring_count(ring))
			return no_rwqe(r);
	}
	if (m->len) {
		t.iov_base = (void *)(uintptr_t)va;
		t.iov_len = m->len;
		rc = hca_link_host->mem_write(r->dev, r->owner, r->owner_gen, m->iov,
					      m->iovcnt, &t, &m->rkey, 1);
		if (rc == ESRCH)
			return HCA_RESP_DROP;
		if (rc)
			return resp_access_error(r);
	}
	if (r->op->flags & HCA_OPF_IMM)
		return resp_recv(r, false);
	return HCA_RESP_ACK;
}

/*
 * A READ that fails its key or range check errs the QP — unless it is a
 * duplicate (m->duplicate): answered once already, its requester may well
 * have completed it and let the memory go since (a rendezvous sender
 * deregistering its buffer). Erring the QP then would leave a healthy
 * connection dead, every later request dropped in silence. It is
 * dropped instead: a requester that really lacks the data asks again and
 * ends in RETRY_EXC_ERR.
 */
static enum hca_resp_status read_refused(struct resp_ctx *r)
{
	if (!r->m->duplicate)
		return resp_access_error(r);
	HCA_COUNT_DROP(r->e, HCA_DROP_ACCESS);
	return HCA_RESP_DROP;
}

static enum hca_resp_status resp_read(struct resp_ctx *r)
{
	struct hca_msg *m = r->m;
	struct iovec t;
	uint64_t va;
	int rc;

	if (!rkey_check(r, m->len, &va))
		return read_refused(r);
	if (!m->len || m->range_only)
		return HCA_RESP_ACK;
	t.iov_base = (void *)(uintptr_t)va;
	t.iov_len = m->len;
	rc = hca_link_host->mem_read(r->dev, r->owner, r->owner_gen, m->iov, m->iovcnt,
				     &t, &m->rkey, 1);
	if (rc == ESRCH)
		return HCA_RESP_DROP;
	return rc ? read_refused(r) : HCA_RESP_ACK;
}

/*
 * Atomics are atomic with respect to every other softib atomic on the
 * host (IBV_ATOMIC_HCA): one of a table of robust locks, chosen by the
 * target address, serialises the read-modify-write.
 */
static enum hca_resp_status resp_atomic(struct resp_ctx *r)
{
	struct hca_msg *m = r->m;
	uint64_t va, old = 0, nv;
	struct iovec l = { &old, 8 }, t;
	pthread_mutex_t *lk;
	int rc;

	if (m->raddr & 7) {
		resp_qp_error(r, IBV_EVENT_QP_REQ_ERR);
		return HCA_RESP_NAK_INV;
	}
	if (!rkey_check(r, 8, &va))
		return resp_access_error(r);
	t.iov_base = (void *)(uintptr_t)va;
	t.iov_len = 8;
	lk = &r->dev->seg->atomic_locks[((va >> 3) ^ r->owner) % HCA_ATOMIC_LOCKS];
	hca_robust_lock(lk);
	rc = hca_link_host->mem_read(r->dev, r->owner, r->owner_gen, &l, 1, &t,
				     &m->rkey, 1);
	if (!rc) {
		if (m->op == IBV_WR_ATOMIC_CMP_AND_SWP)
			nv = old == m->compare_add ? m->swap : old;
		else
			nv = old + m->compare_add;
		l.iov_base = &nv;
		rc = hca_link_host->mem_write(r->dev, r->owner, r->owner_gen, &l, 1, &t,
					      &m->rkey, 1);
	}
	pthread_mutex_unlock(lk);
	if (rc == ESRCH)
		return HCA_RESP_DROP;
	if (rc)
		return resp_access_error(r);
	m->atomic_orig = old;
	return HCA_RESP_ACK;
}

/* The target QP exists, can receive, and serves this transport. */
static bool target_ok(struct resp_ctx *r)
{
	struct hca_qp_ent *e = r->e;
	uint8_t want = r->m->type == IBV_QPT_XRC_SEND ? IBV_QPT_XRC_RECV : r->m->type;

	if (!state_receives(atomic_load(&e->state)) || e->type != want)
		return false;
	/* a connected QP takes its peer's packets only: a number that came
	 * back to a new QP is never reached by a requester that was
	 * connected to the number's dead holder (docs/shared-segment.md) */
	if (want != IBV_QPT_UD && atomic_load(&e->dest_qpn) != r->m->src_qpn) {
		HCA_COUNT_DROP(e, HCA_DROP_STATE);
		return false;
	}
	if (e->type == IBV_QPT_XRC_RECV)
		return true; /* the domain's: its SRQ's owner is checked */
	r->owner = e->owner;
	r->owner_gen = e->owner_gen;
	r->pd = e->pd;
	r->rcq = e->rcq;
	r->srq = e->srq;
	return hca_peer_check(r->dev, e->owner, e->owner_gen) != HCA_LIVE_DEAD;
}

/* XRC: the SRQ the request names must be of the target QP's domain. */
static enum hca_resp_status xrc_target(struct resp_ctx *r)
{
	struct hca_seg *seg = r->dev->seg;
	uint32_t n = r->m->xrc_srqn;
	struct hca_srq_ent *s;

	if (r->e->type != IBV_QPT_XRC_RECV)
		return HCA_RESP_ACK;
	s = hca_srq_lookup(seg, n);
	if (!s || s->xrcd != r->e->xrcd) {
		HCA_COUNT_DROP(r->e, HCA_DROP_ACCESS);
		return HCA_RESP_NAK_INV;
	}
	r->owner = s->owner;
	r->owner_gen = s->owner_gen;
	r->pd = s->pd;
	r->rcq = s->cq;
	r->srq = n & (HCA_MAX_SRQ - 1);
	return hca_peer_check(r->dev, s->owner, s->owner_gen) != HCA_LIVE_DEAD ?
	       HCA_RESP_ACK : HCA_RESP_DROP;
}

/* UD: a Q_Key with the high bit set means "use the QP's own" (done by
 * the requester); the responder compares what arrives. */
static bool qkey_ok(struct resp_ctx *r)
{
	return r->m->type != IBV_QPT_UD || r->m->qkey == atomic_load(&r->e->qkey);
}

/*
 * A SEND toward another process will write the receive ring's slot at its
 * tail, a slot of the CQ's inline pool and the CQ's head and slot: lines
 * the target wrote last, each a cache miss. Asked for together here, they
 * travel in parallel instead of one after the other (docs/datapath.md).
 */
static void resp_prefetch(struct resp_ctx *r)
{
	struct hca_claim_ring ref;
	struct hca_ring *ring;
	uint32_t srq_idx;

	if (r->owner == r->dev->slot && r->owner_gen == r->dev->gen)
		return;
	ring = recv_ring(r, &srq_idx, &ref);
	if (ring)
		hca_prefetchw(hca_ring_slot(ring, atomic_load_explicit(
			&ring->tail, memory_order_relaxed)));
	/* larger ones go by CMA; smaller ones in the CQ's slot (one range) */
	r->emb_room = hca_emb_room(r->dev, r->rcq, 1);
	if (r->m->len <= hca_inl_max() && r->m->len > r->emb_room)
		hca_inl_prefetch(r->dev, r->rcq);
	hca_cq_prefetch(r->dev, r->rcq);
}

static void comm_est(struct resp_ctx *r)
{
	if (atomic_load(&r->e->state) == IBV_QPS_RTR && r->m->type != IBV_QPT_UD &&
	    !atomic_exchange(&r->e->comm_est, 1))
		hca_raise_qp_event(r->dev, r->e, IBV_EVENT_COMM_EST);
}

static enum hca_resp_status resp_execute(struct hca_dev *dev, struct hca_msg *m);

/*
 * The whole responder runs inside a copy section (fence.c): from the
 * first key it looks up to the last byte it moves, an owner's dereg of
 * one of those keys waits for it. Over the shared-memory link the
 * requester's exec_head holds a section already (m->fenced).
 */
enum hca_resp_status hca_resp_execute(struct hca_dev *dev, struct hca_msg *m)
{
	enum hca_resp_status st;
	struct hca_fence f;

	if (m->fenced)
		return resp_execute(dev, m);
	hca_fence_enter(dev, &f);
	st = resp_execute(dev, m);
	hca_fence_exit(&f);
	return st;
}

static enum hca_resp_status resp_execute(struct hca_dev *dev, struct hca_msg *m)
{
	struct resp_ctx r = { .dev = dev, .m = m, .qpn = m->dst_qpn };
	enum hca_resp_status st;

	r.op = hca_opcode_get(m->op);
	r.e = hca_qp_lookup(dev->seg, m->dst_qpn);
	if (!r.op || !r.e || !target_ok(&r))
		return HCA_RESP_DROP;
	if (!qkey_ok(&r)) {
		HCA_COUNT_DROP(r.e, HCA_DROP_QKEY);
		return HCA_RESP_DROP;
	}
	st = xrc_target(&r);
	if (st != HCA_RESP_ACK)
		return st;
	comm_est(&r);
	if (r.op->flags & HCA_OPF_SEND) {
		resp_prefetch(&r);
		st = resp_recv(&r, true);
	} else if (r.op->flags & HCA_OPF_WRITE)
		st = resp_write(&r);
	else if (r.op->flags & HCA_OPF_READ)
		st = resp_read(&r);
	else
		st = resp_atomic(&r);
	if (st == HCA_RESP_ACK && !m->uncounted) {
		atomic_fetch_add_explicit(&r.e->rx_msgs, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&r.e->rx_bytes, m->len, memory_order_relaxed);
	} else if (st == HCA_RESP_RNR) {
		HCA_COUNT(r.e, rnr_sent);
	}
	return st;
}
