/* integrity: a client process. It opens one QP per (transport, index),
 * posts each QP's operation stream and checks what comes back to it
 * (READ data, atomic fetches). */
#include "integrity.h"

struct pend {
	uint32_t seq;
	uint8_t kind, nwr;
	bool signaled;
	uint64_t ring_end;
	uint32_t len;
	uint64_t roff;
	uint32_t at;          /* footprint offset in the arena */
	struct layout lo;     /* READ landing */
	uint64_t expect;      /* atomics: the value the fetch must return */
	uint64_t add;
};

struct cqp {
	int type, q, li, gi;
	uint32_t sid;
	struct ibv_qp *qp;
	struct ibv_ah *ah;
	uint32_t max_inline;
	uint32_t sqpn;
	uint64_t waddr;
	uint32_t wrkey;
	struct ibv_mr *mr;
	struct ring ring;
	struct rng oprng, local;
	uint32_t nops, next;
	struct op op;
	bool have_op;
	uint32_t recv_limit, done_limit;
	struct pend fifo[FIFO_CAP];
	uint32_t fhead, ftail;     /* ever-growing */
	uint32_t sq_used, unsig_run;
	uint64_t priv;             /* the private word, as ops have left it */
	uint64_t shared_floor[NSHARED];
};

struct client {
	int id;
	struct chan ch;
	struct port pt;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	int nq;
	struct cqp *q;
	uint64_t raddr, aaddr;
	uint32_t rrkey, arkey;
	bool eth;
	uint64_t ops, bytes, errors;
	uint64_t kind_ops[K_NKINDS], kind_bytes[K_NKINDS];
	uint64_t shared_sum[NSHARED];
};

static void client_setup(struct client *cl)
{
	struct rec r;
	uint8_t sgid[16];
	uint16_t slid;
	enum ibv_mtu mtu;

	cl->ctx = open_dev(&cl->pt);
	cl->pd = ibv_alloc_pd(cl->ctx);
	if (!cl->pd)
		tp_die("ibv_alloc_pd: %s", strerror(errno));
	cl->nq = per_client();
	cl->q = calloc((size_t)cl->nq, sizeof(*cl->q));
	if (!cl->q)
		tp_die("out of memory");
	cl->cq = ibv_create_cq(cl->ctx, cl->nq * SQ_DEPTH + 16, NULL, NULL, 0);
	if (!cl->cq)
		tp_die("ibv_create_cq: %s", strerror(errno));
	for (int li = 0; li < cl->nq; li++) {
		struct cqp *q = &cl->q[li];
		size_t arena;

		q->type = P.types[li / P.qps];
		q->q = li % P.qps;
		q->li = li;
		q->gi = cl->id * cl->nq + li;
		q->sid = sender_id(cl->id, q->type, q->q);
		q->qp = make_qp(cl->pd, cl->cq, q->type, SQ_DEPTH, 1,
				&q->max_inline);
		/* Large enough that a stuck arena always ends with a
		 * signaled WR (see client_post). */
		arena = q->type == Q_UD ? 256 << 10 : 3 * (size_t)LARGE;
		q->ring.base = alloc_mem(arena);
		q->ring.size = arena;
		q->mr = reg(cl->pd, q->ring.base, arena,
			    IBV_ACCESS_LOCAL_WRITE);
		q->oprng.s = stream_seed(q->sid);
		q->local.s = mix64(stream_seed(q->sid) ^ 0xc11e);
		q->nops = ops_of(q->gi);
		q->priv = priv_init(q->gi);
		r = (struct rec){ .tag = R_CQP, .idx = (uint32_t)li,
				  .a = q->qp->qp_num, .b = q->sid };
		chan_send(&cl->ch, &r, 1);
	}
	r = (struct rec){ .tag = R_CREADY, .a = (uint64_t)cl->nq,
			  .b = cl->pt.attr.lid };
	memcpy(&r.c, cl->pt.gid.raw, 16);
	chan_send(&cl->ch, &r, 1);

	chan_expect(&cl->ch, &r, R_SPORT);
	P.mtu = (uint32_t)r.a;
	mtu = (enum ibv_mtu)r.b;
	slid = (uint16_t)r.c;
	cl->eth = r.d == IBV_LINK_LAYER_ETHERNET;
	chan_expect(&cl->ch, &r, R_SGID);
	memcpy(sgid, &r.a, 16);
	chan_expect(&cl->ch, &r, R_SGLOBAL);
	cl->raddr = r.a;
	cl->rrkey = (uint32_t)r.b;
	cl->aaddr = r.c;
	cl->arkey = (uint32_t)r.d;
	for (int i = 0; i < cl->nq; i++) {
		struct cqp *q;

		chan_expect(&cl->ch, &r, R_SQP);
		if (r.idx >= (uint32_t)cl->nq)
			tp_die("setup: bad QP index %u", r.idx);
		q = &cl->q[r.idx];
		q->sqpn = (uint32_t)r.a;
		q->waddr = r.b;
		q->wrkey = (uint32_t)r.c;
		q->recv_limit = (uint32_t)(r.d >> 32);
		q->done_limit = (uint32_t)r.d;
		connect_qp(q->qp, q->type, q->sqpn, slid, sgid, cl->eth, mtu,
			   psn_of(q->sid, 1), psn_of(q->sid, 0));
		if (q->type == Q_UD) {
			struct ibv_ah_attr ah;

			fill_ah(&ah, slid, sgid, cl->eth);
			q->ah = ibv_create_ah(cl->pd, &ah);
			if (!q->ah)
				tp_die("ibv_create_ah: %s", strerror(errno));
		}
	}
	chan_expect(&cl->ch, &r, R_SREADY);
}

static const char *qname(const struct cqp *q, char *buf, size_t n)
{
	snprintf(buf, n, "%s qp %d", type_names[q->type], q->q);
	return buf;
}

/* Posts the next operation of q if flow control, the send queue and the
 * arena allow.  Returns true if it posted. */
static bool client_post(struct client *cl, struct cqp *q)
{
	struct ibv_send_wr wr[2], *bad;
	struct ibv_sge sge[MAX_SGE], nsge;
	struct layout lo = { .n = 0 };
	struct pend *pe;
	struct op *op = &q->op;
	uint64_t end, need;
	int64_t at;
	uint8_t *base;
	uint32_t nwr;
	bool inl = false, signal;
	int err;

	if (q->next >= q->nops)
		return false;
	if (!q->have_op) {
		gen_op(&q->oprng, q->type, q->sid, q->next, op);
		q->have_op = true;
	}
	if (consumes_recv(op->kind) && op->seq >= q->recv_limit)
		return false;
	if (is_write(op->kind) && op->seq >= q->done_limit + NSLOT)
		return false;
	nwr = op->kind == K_WRITE ? 2 : 1;
	if (q->sq_used + nwr > SQ_DEPTH || q->ftail - q->fhead >= FIFO_CAP)
		return false;
	need = is_atomic(op->kind) ? 16 : op->len + FOOT_EXTRA;
	at = ring_alloc(&q->ring, need, &end);
	if (at < 0)
		return false;
	base = q->ring.base + at;

	pe = &q->fifo[q->ftail % FIFO_CAP];
	memset(pe, 0, sizeof(*pe));
	pe->seq = op->seq;
	pe->kind = op->kind;
	pe->nwr = (uint8_t)nwr;
	pe->ring_end = end;
	pe->len = op->len;
	pe->roff = op->roff;
	pe->at = (uint32_t)at;

	memset(wr, 0, sizeof(wr));
	wr[0].wr_id = (uint64_t)q->li << 32 | op->seq;
	wr[0].sg_list = sge;
	if (is_atomic(op->kind)) {
		uint8_t *res = (uint8_t *)(((uintptr_t)base + 7) & ~(uintptr_t)7);

		memset(res, CANARY, 8);
		pe->at = (uint32_t)(res - q->ring.base);
		sge[0] = (struct ibv_sge){ .addr = (uintptr_t)res, .length = 8,
					   .lkey = q->mr->lkey };
		wr[0].num_sge = 1;
		wr[0].wr.atomic.rkey = cl->arkey;
		pe->expect = q->priv;
		pe->add = op->arg;
		if (op->kind == K_FAA_SHARED) {
			wr[0].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
			wr[0].wr.atomic.remote_addr = cl->aaddr + op->roff * 8;
			wr[0].wr.atomic.compare_add = op->arg;
			cl->shared_sum[op->roff] += op->arg;
		} else {
			wr[0].wr.atomic.remote_addr =
				cl->aaddr + (NSHARED + (uint64_t)q->gi) * 8;
			if (op->kind == K_FAA_PRIV) {
				wr[0].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
				wr[0].wr.atomic.compare_add = op->arg;
				q->priv += op->arg;
			} else {
				wr[0].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
				wr[0].wr.atomic.compare_add = op->cas_hit ?
					q->priv : q->priv ^ (op->arg | 1);
				wr[0].wr.atomic.swap = op->arg;
				if (op->cas_hit)
					q->priv = op->arg;
			}
		}
	} else {
		struct msgid m = op_msgid(op, q->sid);

		layout_make(&q->local, op->len, &lo);
		if (op->kind == K_READ) {
			memset(base, CANARY, need);
			pe->lo = lo;
		} else {
			scatter_fill(&lo, base, &m, 0);
			inl = op->len <= q->max_inline &&
			      rng_below(&q->local, 2);
		}
		wr[0].num_sge = layout_sges(&lo, base, q->mr->lkey, sge);
		switch (op->kind) {
		case K_SEND:
			wr[0].opcode = IBV_WR_SEND;
			break;
		case K_SEND_IMM:
			wr[0].opcode = IBV_WR_SEND_WITH_IMM;
			wr[0].imm_data = htobe32(op->imm);
			break;
		case K_WRITE:
		case K_WRITE_IMM:
			wr[0].opcode = op->kind == K_WRITE ?
				IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
			wr[0].imm_data = htobe32(op->imm);
			wr[0].wr.rdma.remote_addr = q->waddr + op->roff;
			wr[0].wr.rdma.rkey = q->wrkey;
			break;
		case K_READ:
			wr[0].opcode = IBV_WR_RDMA_READ;
			wr[0].wr.rdma.remote_addr = cl->raddr + op->roff;
			wr[0].wr.rdma.rkey = cl->rrkey;
			break;
		}
		if (inl)
			wr[0].send_flags |= IBV_SEND_INLINE;
		if (op->kind != K_READ && op->kind != K_WRITE &&
		    rng_below(&q->local, 8) == 0)
			wr[0].send_flags |= IBV_SEND_SOLICITED;
	}
	if (q->type == Q_RC && rng_below(&q->local, 8) == 0)
		wr[0].send_flags |= IBV_SEND_FENCE;
	if (q->type == Q_UD) {
		wr[0].wr.ud.ah = q->ah;
		wr[0].wr.ud.remote_qpn = q->sqpn;
		wr[0].wr.ud.remote_qkey = QKEY;
	}
	if (op->kind == K_WRITE) {
		/* The notice that names the region: sid, seq, offset, len. */
		uint32_t note[4] = { htole32(q->sid), htole32(op->seq),
				     htole32((uint32_t)op->roff),
				     htole32(op->len) };
		uint8_t *nb = base + op->len + FOOT_EXTRA - 16;

		memcpy(nb, note, 16);
		nsge = (struct ibv_sge){ .addr = (uintptr_t)nb, .length = 16,
					 .lkey = q->mr->lkey };
		wr[0].next = &wr[1];
		wr[1].wr_id = wr[0].wr_id;
		wr[1].opcode = IBV_WR_SEND_WITH_IMM;
		wr[1].imm_data = htobe32(op->imm ^ NOTIFY_X);
		wr[1].sg_list = &nsge;
		wr[1].num_sge = 1;
		if (rng_below(&q->local, 2))
			wr[1].send_flags |= IBV_SEND_INLINE;
	}
	/* Signal most WRs, and always when resources run short: then the
	 * WR that a stuck post waits behind is a signaled one. */
	signal = rng_below(&q->local, 4) != 0 || q->unsig_run >= 3 ||
		 q->next + 1 == q->nops ||
		 ring_used(&q->ring) > q->ring.size / 4 ||
		 q->sq_used + nwr > SQ_DEPTH / 4;
	if (signal)
		wr[nwr - 1].send_flags |= IBV_SEND_SIGNALED;
	pe->signaled = signal;
	q->unsig_run = signal ? 0 : q->unsig_run + 1;

	err = ibv_post_send(q->qp, wr, &bad);
	if (err) {
		char qn[32];

		tp_die("client %d %s: ibv_post_send of seq %u (%s, %u bytes, %d "
		    "SGEs%s): %s", cl->id, qname(q, qn, sizeof(qn)), op->seq,
		    kind_names[op->kind], op->len, wr[0].num_sge,
		    inl ? ", inline" : "", strerror(err));
	}
	if (inl) /* the buffer is ours again on return */
		for (int i = 0; i < lo.n; i++)
			memset(base + lo.off[i], SCRIBBLE, lo.len[i]);
	if (op->kind == K_WRITE && (wr[1].send_flags & IBV_SEND_INLINE))
		memset(base + op->len + FOOT_EXTRA - 16, SCRIBBLE, 16);
	q->sq_used += nwr;
	q->ftail++;
	q->next++;
	q->have_op = false;
	return true;
}

/* An operation is complete: check what came back, free its resources. */
static void client_retire(struct client *cl, struct cqp *q, struct pend *pe)
{
	char qn[32], msg[256];
	uint8_t *base = q->ring.base + pe->at;

	if (pe->kind == K_READ) {
		struct msgid m = read_msgid();

		if (!check_scatter(base, pe->len + FOOT_EXTRA, &pe->lo, 0,
				   pe->len, &m, pe->roff, msg, sizeof(msg))) {
			cl->errors++;
			report("client %d %s seq %u RDMA_READ of %u bytes at "
			       "%#" PRIx64 ": %s", cl->id,
			       qname(q, qn, sizeof(qn)), pe->seq, pe->len,
			       pe->roff, msg);
		}
	} else if (is_atomic(pe->kind)) {
		uint64_t got;

		memcpy(&got, base, 8);
		if (pe->kind == K_FAA_SHARED) {
			uint64_t *floor = &q->shared_floor[pe->roff];

			/* Others only add: what this QP fetches never falls
			 * below what it last left there. */
			if (got < *floor) {
				cl->errors++;
				report("client %d %s seq %u FETCH_AND_ADD on "
				       "shared counter %" PRIu64 " fetched "
				       "%" PRIu64 ", below %" PRIu64
				       " left by this QP before", cl->id,
				       qname(q, qn, sizeof(qn)), pe->seq,
				       pe->roff, got, *floor);
			}
			*floor = got + pe->add;
		} else if (got != pe->expect) {
			cl->errors++;
			report("client %d %s seq %u %s on the private word "
			       "fetched %#" PRIx64 ", expected %#" PRIx64,
			       cl->id, qname(q, qn, sizeof(qn)), pe->seq,
			       kind_names[pe->kind], got, pe->expect);
		}
	}
	cl->ops++;
	cl->bytes += pe->len;
	cl->kind_ops[pe->kind]++;
	cl->kind_bytes[pe->kind] += pe->len;
	q->sq_used -= pe->nwr;
	ring_release(&q->ring, pe->ring_end);
}

static enum ibv_wc_opcode expected_wc(int kind)
{
	switch (kind) {
	case K_WRITE_IMM: return IBV_WC_RDMA_WRITE;
	case K_READ: return IBV_WC_RDMA_READ;
	case K_FAA_SHARED: case K_FAA_PRIV: return IBV_WC_FETCH_ADD;
	case K_CAS_PRIV: return IBV_WC_COMP_SWAP;
	default: return IBV_WC_SEND; /* SEND, SEND_IMM, WRITE's notice */
	}
}

static void client_completion(struct client *cl, const struct ibv_wc *wc)
{
	uint32_t li = (uint32_t)(wc->wr_id >> 32), seq = (uint32_t)wc->wr_id;
	struct cqp *q;
	struct pend *pe = NULL;
	char qn[32];

	if (li >= (uint32_t)cl->nq)
		tp_die("client %d: completion with unknown wr_id %#" PRIx64
		    " (status %s)", cl->id, wc->wr_id,
		    ibv_wc_status_str(wc->status));
	q = &cl->q[li];
	if (wc->status != IBV_WC_SUCCESS) {
		const char *k = "?";

		for (uint32_t i = q->fhead; i != q->ftail; i++)
			if (q->fifo[i % FIFO_CAP].seq == seq)
				k = kind_names[q->fifo[i % FIFO_CAP].kind];
		tp_die("client %d %s: seq %u (%s) completed with %s (status %d, "
		    "vendor_err %#x)", cl->id, qname(q, qn, sizeof(qn)), seq,
		    k, ibv_wc_status_str(wc->status), wc->status,
		    wc->vendor_err);
	}
	/* Send-queue completions come in order: this one retires every
	 * unsignaled WR before it. */
	while (q->fhead != q->ftail &&
	       (int32_t)(q->fifo[q->fhead % FIFO_CAP].seq - seq) <= 0) {
		pe = &q->fifo[q->fhead % FIFO_CAP];
		client_retire(cl, q, pe);
		q->fhead++;
	}
	if (!pe || pe->seq != seq || !pe->signaled) {
		cl->errors++;
		report("client %d %s: completion for seq %u that is not "
		       "outstanding or not signaled (duplicate or out of "
		       "order)", cl->id, qname(q, qn, sizeof(qn)), seq);
		return;
	}
	if (wc->opcode != expected_wc(pe->kind)) {
		cl->errors++;
		report("client %d %s seq %u %s: completion opcode %d, "
		       "expected %d", cl->id, qname(q, qn, sizeof(qn)), seq,
		       kind_names[pe->kind], wc->opcode,
		       expected_wc(pe->kind));
	}
	if (wc->qp_num != q->qp->qp_num) {
		cl->errors++;
		report("client %d %s seq %u: completion names QP %#x, not "
		       "%#x", cl->id, qname(q, qn, sizeof(qn)), seq,
		       wc->qp_num, q->qp->qp_num);
	}
}

static bool client_done(const struct client *cl)
{
	for (int i = 0; i < cl->nq; i++) {
		const struct cqp *q = &cl->q[i];

		if (q->next < q->nops || q->fhead != q->ftail ||
		    q->done_limit < q->nops)
			return false;
	}
	return true;
}

static void client_dump(const struct client *cl)
{
	for (int i = 0; i < cl->nq; i++) {
		const struct cqp *q = &cl->q[i];

		fprintf(stderr, "  client %d %s qp %d: posted %u/%u, "
			"outstanding %u (sq %u), server: receives up to %u, "
			"checked up to %u; arena %" PRIu64 "/%" PRIu64 "\n",
			cl->id, type_names[q->type], q->q, q->next, q->nops,
			q->ftail - q->fhead, q->sq_used, q->recv_limit,
			q->done_limit, ring_used(&q->ring), q->ring.size);
	}
}

int client_main(int id, int fd)
{
	struct client *cl = calloc(1, sizeof(*cl));
	struct ibv_wc wc[32];
	struct rec r;
	double last = tp_now_s();
	unsigned idle = 0;

	if (!cl)
		tp_die("out of memory");
	static char name[32];
	snprintf(name, sizeof(name), "integrity[client %d]", id);
	tp_who = name;
	cl->id = id;
	cl->ch.fd = fd;
	client_setup(cl);

	while (!client_done(cl)) {
		bool busy = false;
		int n = ibv_poll_cq(cl->cq, 32, wc);

		if (n < 0)
			tp_die("ibv_poll_cq failed");
		for (int i = 0; i < n; i++)
			client_completion(cl, &wc[i]);
		busy = n > 0;
		for (;;) {
			int got = chan_recv(&cl->ch, &r, 0);

			if (got < 0)
				tp_die("the server went away");
			if (!got)
				break;
			if (r.tag != R_UPDATE || r.idx >= (uint32_t)cl->nq)
				tp_die("unexpected record %u from the server",
				    r.tag);
			cl->q[r.idx].recv_limit = (uint32_t)r.a;
			cl->q[r.idx].done_limit = (uint32_t)r.b;
			busy = true;
		}
		for (int i = 0; i < cl->nq; i++)
			for (int k = 0; k < 8 && client_post(cl, &cl->q[i]);
			     k++)
				busy = true;
		if (busy) {
			last = tp_now_s();
			idle = 0;
			continue;
		}
		if (++idle < 64)
			continue;
		if (idle < 4096) {
			sched_yield();
			continue;
		}
		/* Long idle: wait for the server on the socketpair. */
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		poll(&pfd, 1, 1);
		if (tp_now_s() - last > STALL_SECS) {
			fprintf(stderr, "%s: no progress for %d s:\n", tp_who,
				STALL_SECS);
			client_dump(cl);
			exit(1);
		}
	}

	/* Report: private words, shared sums, per-kind counts, totals. */
	for (int i = 0; i < cl->nq; i++)
		if (cl->q[i].type == Q_RC) {
			r = (struct rec){ .tag = R_FPRIV,
					  .idx = (uint32_t)cl->q[i].gi,
					  .a = cl->q[i].priv };
			chan_send(&cl->ch, &r, 1);
		}
	for (int c = 0; c < NSHARED; c++) {
		r = (struct rec){ .tag = R_FSHARED, .idx = (uint32_t)c,
				  .a = cl->shared_sum[c] };
		chan_send(&cl->ch, &r, 1);
	}
	for (int k = 0; k < K_NKINDS; k++) {
		r = (struct rec){ .tag = R_FKIND, .idx = (uint32_t)k,
				  .a = cl->kind_ops[k],
				  .b = cl->kind_bytes[k] };
		chan_send(&cl->ch, &r, 1);
	}
	r = (struct rec){ .tag = R_FINAL, .a = cl->ops, .b = cl->bytes,
			  .c = cl->errors };
	chan_send(&cl->ch, &r, 1);

	for (int i = 0; i < cl->nq; i++) {
		struct cqp *q = &cl->q[i];

		if ((q->ah && ibv_destroy_ah(q->ah)) || ibv_destroy_qp(q->qp) ||
		    ibv_dereg_mr(q->mr))
			tp_die("tearing down QP %d failed", i);
		free(q->ring.base);
	}
	if (ibv_destroy_cq(cl->cq) || ibv_dealloc_pd(cl->pd) ||
	    ibv_close_device(cl->ctx))
		tp_die("tearing down failed");
	return cl->errors ? 1 : 0;
}
