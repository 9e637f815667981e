/* integrity: the server. It forks the clients, mirrors every client QP's
 * stream, posts the receive each message will consume and checks every byte,
 * completion and final counter. */
#include "integrity.h"

struct expect {
	struct op op;
	struct layout lo;
	uint32_t at, fp, cap;
	uint64_t ring_end;
};

struct sqp {
	int client, type, q, gi;
	uint32_t sid, cqpn;
	struct ibv_qp *qp;
	uint32_t max_inline;
	struct ring ring;
	struct ibv_mr *rmr;
	uint8_t *warea;
	struct ibv_mr *wmr;
	struct rng mirror, local;
	uint32_t nops, scan;
	struct op next_op;
	bool have_next;
	struct expect fifo[RQ_WINDOW];
	uint32_t fhead, ftail;
	uint32_t sent_recv, sent_done;
	bool dirty;
};

struct server {
	struct port pt;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	int nqp;
	struct sqp *q;
	uint8_t *rregion, *aregion;
	struct ibv_mr *rmr, *amr;
	struct chan ch[MAX_PROCS];
	pid_t pid[MAX_PROCS];
	bool final[MAX_PROCS];
	uint64_t errors, ops, bytes, client_errors;
	uint64_t kind_ops[K_NKINDS], kind_bytes[K_NKINDS];
	uint64_t shared_sum[NSHARED];
	uint64_t *priv_final;
	bool *priv_seen;
	uint64_t recv_msgs;
};

static void server_kill_all(struct server *s)
{
	for (int c = 0; c < P.procs; c++)
		if (s->pid[c] > 0)
			kill(s->pid[c], SIGKILL);
}

static void server_fatal(struct server *s, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", tp_who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	server_kill_all(s);
	for (int c = 0; c < P.procs; c++)
		if (s->pid[c] > 0)
			waitpid(s->pid[c], NULL, 0);
	exit(1);
}

static uint32_t srv_recv_limit(const struct sqp *q)
{
	return q->scan;
}

static uint32_t srv_done_limit(const struct sqp *q)
{
	return q->fhead != q->ftail ? q->fifo[q->fhead % RQ_WINDOW].op.seq
				    : q->scan;
}

/* Posts receives for the coming receive-consuming operations of q, as
 * many as the window and the arena allow. */
static void server_fill(struct server *s, struct sqp *q)
{
	while (q->ftail - q->fhead < RQ_WINDOW) {
		struct ibv_recv_wr wr = { 0 }, *bad;
		struct ibv_sge sge[MAX_SGE];
		struct expect *e;
		uint32_t cap, fp;
		uint64_t end;
		int64_t at;
		int err;

		if (!q->have_next) {
			if (q->scan >= q->nops)
				break;
			gen_op(&q->mirror, q->type, q->sid, q->scan,
			       &q->next_op);
			q->have_next = true;
		}
		if (!consumes_recv(q->next_op.kind)) {
			q->scan++;
			q->have_next = false;
			continue;
		}
		switch (q->next_op.kind) {
		case K_WRITE:
			cap = 16;
			break;
		case K_WRITE_IMM:
			cap = 0;
			break;
		default:
			cap = q->next_op.len + (q->type == Q_UD ? GRH_LEN : 0);
		}
		cap += rng_below(&q->local, 33); /* room to spare */
		fp = cap + FOOT_EXTRA;
		at = ring_alloc(&q->ring, fp, &end);
		if (at < 0)
			break;
		e = &q->fifo[q->ftail % RQ_WINDOW];
		e->op = q->next_op;
		e->at = (uint32_t)at;
		e->fp = fp;
		e->cap = cap;
		e->ring_end = end;
		layout_make(&q->local, cap, &e->lo);
		memset(q->ring.base + at, CANARY, fp);
		wr.wr_id = (uint64_t)(q - s->q) << 32 | e->op.seq;
		wr.sg_list = sge;
		wr.num_sge = layout_sges(&e->lo, q->ring.base + at,
					 q->rmr->lkey, sge);
		err = ibv_post_recv(q->qp, &wr, &bad);
		if (err)
			server_fatal(s, "ibv_post_recv (%s, %d SGEs, %u "
				     "bytes): %s", type_names[q->type],
				     wr.num_sge, cap, strerror(err));
		q->ftail++;
		q->scan++;
		q->have_next = false;
	}
	if (srv_recv_limit(q) != q->sent_recv ||
	    srv_done_limit(q) != q->sent_done)
		q->dirty = true;
}

static void server_setup(struct server *s)
{
	int per = per_client();
	struct rec r;
	uint8_t cgid[MAX_PROCS][16];
	uint16_t clid[MAX_PROCS];
	size_t asize;

	s->ctx = open_dev(&s->pt);
	P.mtu = 128u << s->pt.attr.active_mtu;
	s->pd = ibv_alloc_pd(s->ctx);
	if (!s->pd)
		tp_die("ibv_alloc_pd: %s", strerror(errno));
	s->nqp = P.procs * per;
	s->q = calloc((size_t)s->nqp, sizeof(*s->q));
	s->priv_final = calloc((size_t)s->nqp, sizeof(uint64_t));
	s->priv_seen = calloc((size_t)s->nqp, sizeof(bool));
	if (!s->q || !s->priv_final || !s->priv_seen)
		tp_die("out of memory");
	s->cq = ibv_create_cq(s->ctx, s->nqp * RQ_WINDOW + 16, NULL, NULL, 0);
	if (!s->cq)
		tp_die("ibv_create_cq: %s", strerror(errno));

	/* The read region (contents known to all) and the atomic words:
	 * NSHARED shared counters, then one private word per QP. */
	s->rregion = alloc_mem(RSIZE);
	{
		struct msgid m = read_msgid();

		stream_fill(&m, 0, s->rregion, RSIZE);
	}
	s->rmr = reg(s->pd, s->rregion, RSIZE, IBV_ACCESS_REMOTE_READ);
	asize = ((size_t)NSHARED + s->nqp) * 8;
	s->aregion = alloc_mem(asize);
	memset(s->aregion, 0, asize);
	for (int gi = 0; gi < s->nqp; gi++) {
		uint64_t v = priv_init(gi);

		memcpy(s->aregion + (NSHARED + gi) * 8, &v, 8);
	}
	s->amr = reg(s->pd, s->aregion, asize, IBV_ACCESS_LOCAL_WRITE |
		     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_WRITE);

	for (int gi = 0; gi < s->nqp; gi++) {
		struct sqp *q = &s->q[gi];
		int li = gi % per;
		size_t arena;

		q->client = gi / per;
		q->type = P.types[li / P.qps];
		q->q = li % P.qps;
		q->gi = gi;
		q->sid = sender_id(q->client, q->type, q->q);
		q->qp = make_qp(s->pd, s->cq, q->type, 1, RQ_WINDOW,
				&q->max_inline);
		arena = q->type == Q_UD ? 256 << 10 :
					  2 * (size_t)LARGE + (256 << 10);
		q->ring.base = alloc_mem(arena);
		q->ring.size = arena;
		q->rmr = reg(s->pd, q->ring.base, arena,
			     IBV_ACCESS_LOCAL_WRITE);
		if (q->type != Q_UD) {
			q->warea = alloc_mem(WAREA);
			memset(q->warea, CANARY, WAREA);
			q->wmr = reg(s->pd, q->warea, WAREA,
				     IBV_ACCESS_LOCAL_WRITE |
				     IBV_ACCESS_REMOTE_WRITE);
		}
		q->mirror.s = stream_seed(q->sid);
		q->local.s = mix64(stream_seed(q->sid) ^ 0x5e7e);
		q->nops = ops_of(gi);
	}

	/* Each client's QPs, then connect ours to them. */
	for (int c = 0; c < P.procs; c++) {
		for (int i = 0; i < per; i++) {
			struct sqp *q;

			chan_expect(&s->ch[c], &r, R_CQP);
			if (r.idx >= (uint32_t)per)
				server_fatal(s, "setup: bad QP index %u",
					     r.idx);
			q = &s->q[c * per + (int)r.idx];
			if (r.b != q->sid)
				server_fatal(s, "setup: client %d QP %u has "
					     "sender id %#" PRIx64 ", not %#x",
					     c, r.idx, r.b, q->sid);
			q->cqpn = (uint32_t)r.a;
		}
		chan_expect(&s->ch[c], &r, R_CREADY);
		clid[c] = (uint16_t)r.b;
		memcpy(cgid[c], &r.c, 16);
	}
	for (int gi = 0; gi < s->nqp; gi++) {
		struct sqp *q = &s->q[gi];

		connect_qp(q->qp, q->type, q->cqpn, clid[q->client],
			   cgid[q->client],
			   s->pt.attr.link_layer == IBV_LINK_LAYER_ETHERNET,
			   s->pt.attr.active_mtu, psn_of(q->sid, 0),
			   psn_of(q->sid, 1));
		server_fill(s, q);
	}
	for (int c = 0; c < P.procs; c++) {
		r = (struct rec){ .tag = R_SPORT, .a = P.mtu,
				  .b = s->pt.attr.active_mtu,
				  .c = s->pt.attr.lid,
				  .d = s->pt.attr.link_layer };
		chan_send(&s->ch[c], &r, 1);
		r = (struct rec){ .tag = R_SGID };
		memcpy(&r.a, s->pt.gid.raw, 16);
		chan_send(&s->ch[c], &r, 1);
		r = (struct rec){ .tag = R_SGLOBAL,
				  .a = (uintptr_t)s->rregion,
				  .b = s->rmr->rkey,
				  .c = (uintptr_t)s->aregion,
				  .d = s->amr->rkey };
		chan_send(&s->ch[c], &r, 1);
		for (int i = 0; i < per; i++) {
			struct sqp *q = &s->q[c * per + i];

			q->sent_recv = srv_recv_limit(q);
			q->sent_done = srv_done_limit(q);
			q->dirty = false;
			r = (struct rec){ .tag = R_SQP, .idx = (uint32_t)i,
					  .a = q->qp->qp_num,
					  .b = (uintptr_t)q->warea,
					  .c = q->wmr ? q->wmr->rkey : 0,
					  .d = (uint64_t)q->sent_recv << 32 |
					       q->sent_done };
			chan_send(&s->ch[c], &r, 1);
		}
		r = (struct rec){ .tag = R_SREADY };
		chan_send(&s->ch[c], &r, 1);
	}
}

/* Checks the written region of e and its guards, then restores the
 * canary so that the slot is clean for its next write. */
static bool server_check_region(struct sqp *q, const struct expect *e,
				char *msg, size_t msz)
{
	struct msgid m = op_msgid(&e->op, q->sid);
	uint8_t *reg = q->warea + e->op.roff, got, want;
	int64_t bad;

	bad = find_not_canary(reg - GUARD, GUARD);
	if (bad < 0)
		bad = find_not_canary(reg + e->op.len, GUARD);
	if (bad >= 0) {
		snprintf(msg, msz, "a guard byte around the region %#" PRIx64
			 "+%u was overwritten", e->op.roff, e->op.len);
		return false;
	}
	bad = compare_stream(reg, e->op.len, &m, 0, &got, &want);
	memset(reg, CANARY, e->op.len);
	if (bad >= 0) {
		snprintf(msg, msz, "region %#" PRIx64 "+%u: byte %" PRId64
			 " is %#04x, expected %#04x%s", e->op.roff, e->op.len,
			 bad, got, want,
			 got == CANARY ? " (never written?)" : "");
		return false;
	}
	return true;
}

static void server_completion(struct server *s, const struct ibv_wc *wc)
{
	uint32_t gi = (uint32_t)(wc->wr_id >> 32), seq = (uint32_t)wc->wr_id;
	struct sqp *q;
	struct expect *e;
	char msg[320], where[96];
	bool ok = true, imm;
	uint32_t want_len, skip;
	int want_op;

	if (gi >= (uint32_t)s->nqp)
		server_fatal(s, "receive completion with unknown wr_id %#"
			     PRIx64 " (status %s)", wc->wr_id,
			     ibv_wc_status_str(wc->status));
	q = &s->q[gi];
	snprintf(where, sizeof(where), "client %d %s qp %d seq %u", q->client,
		 type_names[q->type], q->q, seq);
	if (wc->status != IBV_WC_SUCCESS)
		server_fatal(s, "%s: receive completed with %s (status %d, "
			     "vendor_err %#x)", where,
			     ibv_wc_status_str(wc->status), wc->status,
			     wc->vendor_err);
	if (q->fhead == q->ftail)
		server_fatal(s, "%s: a receive completion with no receive "
			     "posted", where);
	e = &q->fifo[q->fhead % RQ_WINDOW];
	if (e->op.seq != seq) {
		s->errors++;
		report("%s: completion of the receive posted for seq %u came "
		       "first (receives consumed out of order)", where,
		       e->op.seq);
	}
	snprintf(where, sizeof(where), "client %d %s qp %d seq %u %s len %u",
		 q->client, type_names[q->type], q->q, e->op.seq,
		 kind_names[e->op.kind], e->op.len);

	imm = e->op.kind != K_SEND;
	want_op = e->op.kind == K_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
					     : IBV_WC_RECV;
	skip = q->type == Q_UD ? GRH_LEN : 0;
	want_len = e->op.kind == K_WRITE ? 16 : e->op.len + skip;
	if ((int)wc->opcode != want_op) {
		s->errors++;
		report("%s: completion opcode %d, expected %d", where,
		       wc->opcode, want_op);
	}
	if (wc->byte_len != want_len) {
		s->errors++;
		report("%s: byte_len %u, expected %u", where, wc->byte_len,
		       want_len);
	}
	if (!!(wc->wc_flags & IBV_WC_WITH_IMM) != imm) {
		s->errors++;
		report("%s: IBV_WC_WITH_IMM is %s", where,
		       imm ? "missing" : "set on a plain SEND");
	} else if (imm) {
		uint32_t want = e->op.imm ^ (e->op.kind == K_WRITE ?
					     NOTIFY_X : 0);

		if (be32toh(wc->imm_data) != want) {
			s->errors++;
			report("%s: immediate %#x, expected %#x", where,
			       be32toh(wc->imm_data), want);
		}
	}
	if (wc->qp_num != q->qp->qp_num) {
		s->errors++;
		report("%s: completion names QP %#x, not %#x", where,
		       wc->qp_num, q->qp->qp_num);
	}
	if (q->type == Q_UD && wc->src_qp != q->cqpn) {
		s->errors++;
		report("%s: src_qp %#x, expected %#x", where, wc->src_qp,
		       q->cqpn);
	}

	/* The receive buffer. */
	if (e->op.kind == K_WRITE) {
		uint32_t note[4], want[4] = { q->sid, e->op.seq,
					      (uint32_t)e->op.roff,
					      e->op.len };
		struct msgid none = { 0 };

		gather(&e->lo, q->ring.base + e->at, 0, (uint8_t *)note, 16);
		for (int i = 0; i < 4; i++)
			if (le32toh(note[i]) != want[i])
				ok = false;
		if (!ok) {
			s->errors++;
			report("%s: the notice names sender %#x seq %u region "
			       "%#x+%u, expected %#x seq %u %#x+%u", where,
			       le32toh(note[0]), le32toh(note[1]),
			       le32toh(note[2]), le32toh(note[3]), want[0],
			       want[1], want[2], want[3]);
		}
		/* Only the notice's 16 bytes may have changed: put the
		 * canary back over them, then all must be canary. */
		uint8_t *b = q->ring.base + e->at;

		for (int i = 0, p = 0; i < e->lo.n && p < 16; i++) {
			int t = e->lo.len[i] < (uint32_t)(16 - p) ?
				(int)e->lo.len[i] : 16 - p;

			memset(b + e->lo.off[i], CANARY, (size_t)t);
			p += t;
		}
		if (!check_scatter(b, e->fp, &e->lo, 0, 0, &none, 0, msg,
				   sizeof(msg))) {
			s->errors++;
			report("%s (notice): %s", where, msg);
		}
	} else {
		struct msgid m = op_msgid(&e->op, q->sid);
		uint32_t n = e->op.kind == K_WRITE_IMM ? 0 : e->op.len;

		if (!check_scatter(q->ring.base + e->at, e->fp, &e->lo, skip,
				   n, &m, 0, msg, sizeof(msg))) {
			uint8_t h[8] = { 0 };

			if (n >= 8)
				gather(&e->lo, q->ring.base + e->at, skip, h,
				       8);
			s->errors++;
			report("%s: %s", where, msg);
			if (n >= 8)
				report("%s: (its header says sender %#x seq "
				       "%u)", where,
				       h[0] | h[1] << 8 | h[2] << 16 |
					       (uint32_t)h[3] << 24,
				       h[4] | h[5] << 8 | h[6] << 16 |
					       (uint32_t)h[7] << 24);
		}
	}
	/* The written region. */
	if (is_write(e->op.kind) && !server_check_region(q, e, msg,
							 sizeof(msg))) {
		s->errors++;
		report("%s: %s", where, msg);
	}
	s->recv_msgs++;
	ring_release(&q->ring, e->ring_end);
	q->fhead++;
	server_fill(s, q);
}

static void server_flush_updates(struct server *s)
{
	int per = per_client();

	for (int c = 0; c < P.procs; c++) {
		struct rec r[MAX_QPS * Q_NTYPES];
		size_t n = 0;

		for (int i = 0; i < per; i++) {
			struct sqp *q = &s->q[c * per + i];

			if (!q->dirty)
				continue;
			q->dirty = false;
			q->sent_recv = srv_recv_limit(q);
			q->sent_done = srv_done_limit(q);
			r[n++] = (struct rec){ .tag = R_UPDATE,
					       .idx = (uint32_t)i,
					       .a = q->sent_recv,
					       .b = q->sent_done };
		}
		if (n && !s->final[c] && !chan_try_send(&s->ch[c], r, n))
			server_fatal(s, "client %d went away (see its messages "
				     "above)", c);
	}
}

static void server_dump(const struct server *s)
{
	for (int gi = 0; gi < s->nqp; gi++) {
		const struct sqp *q = &s->q[gi];

		fprintf(stderr, "  server qp of client %d %s qp %d: %u ops, "
			"receives posted up to %u, %u outstanding, checked up "
			"to %u\n", q->client, type_names[q->type], q->q,
			q->nops, q->scan, q->ftail - q->fhead,
			srv_done_limit(q));
	}
}

/* A record from client c; false once it has said R_FINAL. */
static void server_record(struct server *s, int c, const struct rec *r)
{
	switch (r->tag) {
	case R_FPRIV:
		if (r->idx < (uint32_t)s->nqp) {
			s->priv_final[r->idx] = r->a;
			s->priv_seen[r->idx] = true;
		}
		break;
	case R_FSHARED:
		if (r->idx < NSHARED)
			s->shared_sum[r->idx] += r->a;
		break;
	case R_FKIND:
		if (r->idx < K_NKINDS) {
			s->kind_ops[r->idx] += r->a;
			s->kind_bytes[r->idx] += r->b;
		}
		break;
	case R_FINAL:
		s->ops += r->a;
		s->bytes += r->b;
		s->client_errors += r->c;
		s->final[c] = true;
		break;
	default:
		server_fatal(s, "unexpected record %u from client %d", r->tag,
			     c);
	}
}

static void server_check_atomics(struct server *s)
{
	for (int c = 0; c < NSHARED; c++) {
		uint64_t v;

		memcpy(&v, s->aregion + c * 8, 8);
		if (v != s->shared_sum[c]) {
			s->errors++;
			report("shared counter %d is %" PRIu64 ", but the "
			       "clients added %" PRIu64, c, v,
			       s->shared_sum[c]);
		}
	}
	for (int gi = 0; gi < s->nqp; gi++) {
		uint64_t v;

		if (!s->priv_seen[gi])
			continue;
		memcpy(&v, s->aregion + (NSHARED + gi) * 8, 8);
		if (v != s->priv_final[gi]) {
			s->errors++;
			report("client %d rc qp %d: private word is %#" PRIx64
			       ", the client's operations leave %#" PRIx64,
			       s->q[gi].client, s->q[gi].q, v,
			       s->priv_final[gi]);
		}
	}
}

static int server_main(struct server *s)
{
	struct ibv_wc wc[64];
	double t0, last;
	unsigned idle = 0;
	int finals = 0, status = 0;

	server_setup(s);
	t0 = last = tp_now_s();
	while (finals < P.procs) {
		bool busy = false;
		int n = ibv_poll_cq(s->cq, 64, wc);

		if (n < 0)
			server_fatal(s, "ibv_poll_cq failed");
		for (int i = 0; i < n; i++)
			server_completion(s, &wc[i]);
		busy = n > 0;
		server_flush_updates(s);
		for (int c = 0; c < P.procs; c++) {
			struct rec r;
			int got;

			while (!s->final[c] &&
			       (got = chan_recv(&s->ch[c], &r, 0)) != 0) {
				if (got < 0)
					server_fatal(s, "client %d exited "
						     "before it finished (see "
						     "its messages above)", c);
				server_record(s, c, &r);
				finals += s->final[c];
				busy = true;
			}
		}
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
		{
			struct pollfd pfd[MAX_PROCS];

			for (int c = 0; c < P.procs; c++)
				pfd[c] = (struct pollfd){ .fd = s->ch[c].fd,
							  .events = POLLIN };
			poll(pfd, (nfds_t)P.procs, 1);
		}
		if (tp_now_s() - last > STALL_SECS) {
			fprintf(stderr, "%s: no progress for %d s:\n", tp_who,
				STALL_SECS);
			server_dump(s);
			server_fatal(s, "stalled");
		}
	}
	/* Everything the clients sent has been checked (they finish only
	 * when the server has): leftovers would be duplicates. */
	{
		int n = ibv_poll_cq(s->cq, 64, wc);

		for (int i = 0; i < n; i++) {
			s->errors++;
			report("an extra receive completion after the end "
			       "(wr_id %#" PRIx64 ", status %s)", wc[i].wr_id,
			       ibv_wc_status_str(wc[i].status));
		}
	}
	server_check_atomics(s);
	double secs = tp_now_s() - t0;

	for (int c = 0; c < P.procs; c++) {
		int st;

		if (waitpid(s->pid[c], &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0) {
			status = 1;
			fprintf(stderr, "%s: client %d %s %d\n", tp_who, c,
				WIFSIGNALED(st) ? "was killed by signal" :
						  "exited with",
				WIFSIGNALED(st) ? WTERMSIG(st) :
						  WEXITSTATUS(st));
		}
		s->pid[c] = 0;
	}

	printf("integrity: %d procs x %d QPs of", P.procs, P.qps);
	for (int t = 0; t < P.ntypes; t++)
		printf(" %s", type_names[P.types[t]]);
	printf(", seed %" PRIu64 ", device %s\n", P.seed, P.dev);
	for (int k = 0; k < K_NKINDS; k++)
		if (s->kind_ops[k])
			printf("  %-24s %10" PRIu64 " ops %14" PRIu64
			       " bytes\n", kind_names[k], s->kind_ops[k],
			       s->kind_bytes[k]);
	printf("messages %" PRIu64 " (expected %" PRIu64 "), bytes %" PRIu64
	       ", receives checked %" PRIu64 ", errors %" PRIu64
	       " (server %" PRIu64 ", clients %" PRIu64 "), %.1f s, %.0f "
	       "MB/s\n", s->ops, P.messages, s->bytes, s->recv_msgs,
	       s->errors + s->client_errors, s->errors, s->client_errors,
	       secs, s->bytes / secs / 1e6);
	if (s->ops != P.messages) {
		fprintf(stderr, "%s: %" PRIu64 " operations completed, "
			"not %" PRIu64 "\n", tp_who, s->ops, P.messages);
		status = 1;
	}
	if (s->errors || s->client_errors)
		status = 1;
	printf("%s\n", status ? "FAILED" : "PASSED");
	return status;
}

/* Makes the socketpairs, forks the clients and runs the server side.
 * Socketpairs first; each process opens the device after the fork, so
 * that no verbs object crosses it. */
int server_run(void)
{
	static struct server s;
	int sv[MAX_PROCS][2];
	pid_t server_pid;

	fflush(NULL);
	server_pid = getpid();
	for (int i = 0; i < P.procs; i++)
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]) < 0)
			tp_die("socketpair: %s", strerror(errno));
	for (int i = 0; i < P.procs; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			server_kill_all(&s);
			tp_die("fork: %s", strerror(errno));
		}
		if (pid == 0) {
			for (int j = 0; j < P.procs; j++) {
				close(sv[j][0]);
				if (j != i)
					close(sv[j][1]);
			}
			/* Die with the server. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != server_pid)
				_exit(1);
			exit(client_main(i, sv[i][1]));
		}
		s.pid[i] = pid;
	}
	for (int i = 0; i < P.procs; i++) {
		close(sv[i][1]);
		s.ch[i].fd = sv[i][0];
	}
	tp_who = "integrity[server]";
	signal(SIGPIPE, SIG_IGN);
	return server_main(&s);
}
