/*
 * softib_objects.c: the listings of the host's objects, one table each:
 * `softib procs` (processes that have the device open, with what they
 * own), `qps`, `srqs`, `cqs`, `mrs` (memory keys) and `xrcds`. Each row is
 * read between two loads of the entry's id and dropped if the id changed.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "softib.h"

/* ---- names ---- */

static const char *qp_type_name(unsigned t)
{
	switch (t) {
	case IBV_QPT_RC: return "RC";
	case IBV_QPT_UC: return "UC";
	case IBV_QPT_UD: return "UD";
	case IBV_QPT_RAW_PACKET: return "RAW";
	case IBV_QPT_XRC_SEND: return "XRC_SEND";
	case IBV_QPT_XRC_RECV: return "XRC_RECV";
	default: return "?";
	}
}

static const char *qp_state_name(unsigned s)
{
	static const char *const names[] = { "RESET", "INIT", "RTR", "RTS",
					     "SQD", "SQE", "ERR" };

	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

static void access_str(char *buf, size_t len, unsigned a)
{
	static const struct { unsigned bit; const char *name; } f[] = {
		{ IBV_ACCESS_LOCAL_WRITE, "LW" }, { IBV_ACCESS_REMOTE_WRITE, "RW" },
		{ IBV_ACCESS_REMOTE_READ, "RR" }, { IBV_ACCESS_REMOTE_ATOMIC, "RA" },
		{ IBV_ACCESS_MW_BIND, "MW" }, { IBV_ACCESS_ZERO_BASED, "ZB" },
		{ IBV_ACCESS_ON_DEMAND, "ODP" }, { IBV_ACCESS_HUGETLB, "HUGE" },
		{ IBV_ACCESS_RELAXED_ORDERING, "RO" },
	};
	size_t n = 0;

	buf[0] = 0;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if ((a & f[i].bit) && n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", f[i].name);
	if (!n)
		snprintf(buf, len, "-");
}

/* ---- processes ---- */

static void proc_comm(pid_t pid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, len - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0) {
		snprintf(buf, len, "?");
		return;
	}
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
}

/*
 * A slot marked live whose process is gone (its pid vanished, or names a
 * newer process) is about to be reclaimed by whichever peer notices.
 */
static const char *proc_liveness(const struct hca_proc *p)
{
	uint64_t st = hca_proc_starttime(p->pid);

	if (!st)
		return "dead, not yet reclaimed";
	if (st != p->starttime)
		return "dead (pid reused), not yet reclaimed";
	return "live";
}

struct counts {
	uint32_t qps[HCA_MAX_PROCS], cqs[HCA_MAX_PROCS];
	uint32_t srqs[HCA_MAX_PROCS], mrs[HCA_MAX_PROCS];
};

static void count_owned(const struct view *v, struct counts *c)
{
	const struct hca_seg *seg = v->seg;

	memset(c, 0, sizeof(*c));
	FOR_EACH_QP_ENT(v, e)
		if (atomic_load(&e->qpn) && e->owner < HCA_MAX_PROCS)
			c->qps[e->owner]++;
	for (uint32_t i = 0; i < HCA_MAX_CQ; i++)
		if (atomic_load(&seg->cqs[i].handle) && seg->cqs[i].owner < HCA_MAX_PROCS)
			c->cqs[seg->cqs[i].owner]++;
	for (uint32_t i = 0; i < HCA_MAX_SRQ; i++)
		if (atomic_load(&seg->srqs[i].handle) && seg->srqs[i].owner < HCA_MAX_PROCS)
			c->srqs[seg->srqs[i].owner]++;
	for (uint32_t i = 0; i < HCA_MAX_MR; i++)
		if (atomic_load(&seg->mrs[i].key) && seg->mrs[i].owner < HCA_MAX_PROCS)
			c->mrs[seg->mrs[i].owner]++;
}

static const struct col proc_cols[] = {
	{ "SLOT", true }, { "GEN", true }, { "PID", true }, { "QPS", true },
	{ "CQS", true }, { "SRQS", true }, { "MRS", true }, { "COMMAND", false },
	{ "STATE", false },
};

static void proc_row(struct table *t, const struct hca_proc *p, int slot,
		     const struct counts *c)
{
	size_t r = row_add(t);
	char comm[32];

	proc_comm(p->pid, comm, sizeof(comm));
	cell(t, r, 0, "%d", slot);
	cell(t, r, 1, "%u", p->gen);
	cell(t, r, 2, "%d", (int)p->pid);
	cell(t, r, 3, "%u", c->qps[slot]);
	cell(t, r, 4, "%u", c->cqs[slot]);
	cell(t, r, 5, "%u", c->srqs[slot]);
	cell(t, r, 6, "%u", c->mrs[slot]);
	cell(t, r, 7, "%s", comm);
	cell(t, r, 8, "%s", proc_liveness(p));
}


void show_procs(const struct view *v)
{
	struct table t = TABLE(proc_cols);
	struct counts *c = malloc(sizeof(*c));

	if (!c) {
		fprintf(stderr, "softib: out of memory\n");
		return;
	}
	count_owned(v, c);
	for (int i = 0; i < HCA_MAX_PROCS; i++) {
		const struct hca_proc *p = &v->seg->procs[i];

		if (atomic_load_explicit(&p->state, memory_order_acquire) == HCA_PROC_LIVE)
			proc_row(&t, p, i, c);
	}
	free(c);
	table_print(&t, "no live softib process");
}

/* ---- QPs ---- */

static const struct col qp_cols[] = {
	{ "QPN", false }, { "TYPE", false }, { "STATE", false }, { "PID", true },
	{ "PD", true }, { "RECV", false }, { "DEST", false }, { "RX_MSGS", true },
	{ "RX_BYTES", true }, { "RNR_SENT", true }, { "DROPS", true },
};

static uint64_t drops_total(const struct hca_qp_ent *e)
{
	uint64_t n = 0;

	for (int i = 0; i < HCA_DROP_MAX; i++)
		n += atomic_load(&e->cnt.drops[i]);
	return n;
}

static int xrc_holders(const struct hca_qp_ent *e)
{
	int n = 0;

	for (int i = 0; i < HCA_MAX_PROCS / 64; i++)
		n += __builtin_popcountll(atomic_load(&e->regs[i]));
	return n;
}

/* Where the QP's receives come from: its own RQ, an SRQ, or a domain. */
static void qp_recv_cell(struct table *t, size_t r, const struct view *v,
			 const struct hca_qp_ent *e)
{
	const struct hca_ring *rq = e->rq_off ? view_ring(v, e->rq_off) : NULL;

	if (e->type == IBV_QPT_XRC_RECV)
		cell(t, r, 5, "xrcd %u, %d holders", e->xrcd, xrc_holders(e));
	else if (e->srq != HCA_NONE && e->srq < HCA_MAX_SRQ)
		cell(t, r, 5, "srq 0x%06x", atomic_load(&v->seg->srqs[e->srq].srqn));
	else if (rq)
		cell(t, r, 5, "rq %u/%u", ring_queued(rq), rq->cap);
	else
		cell(t, r, 5, "-");
}

static void qp_row(struct table *t, const struct view *v,
		   const struct hca_qp_ent *e, uint32_t qpn)
{
	size_t r = row_add(t);
	unsigned state = atomic_load(&e->state);
	uint32_t dest = atomic_load(&e->dest_qpn);
	bool connected = e->type != IBV_QPT_UD && e->type != IBV_QPT_XRC_RECV &&
			 state >= IBV_QPS_RTR && state <= IBV_QPS_SQE;

	cell(t, r, 0, "0x%06x", qpn);
	cell(t, r, 1, "%s", qp_type_name(e->type));
	cell(t, r, 2, "%s", qp_state_name(state));
	owner_cell(t, r, 3, v->seg, e->owner, e->owner_gen);
	cell(t, r, 4, "%u", e->pd);
	qp_recv_cell(t, r, v, e);
	if (connected)
		cell(t, r, 6, "0x%06x", dest);
	else
		cell(t, r, 6, "-");
	cell(t, r, 7, "%llu", (unsigned long long)atomic_load(&e->rx_msgs));
	cell(t, r, 8, "%llu", (unsigned long long)atomic_load(&e->rx_bytes));
	cell(t, r, 9, "%llu", (unsigned long long)atomic_load(&e->cnt.rnr_sent));
	cell(t, r, 10, "%llu", (unsigned long long)drops_total(e));
	/* the entry was freed or reused while we read it: drop the row */
	if (atomic_load_explicit(&e->qpn, memory_order_acquire) != qpn)
		t->nrow--;
}

void show_qps(const struct view *v)
{
	struct table t = TABLE(qp_cols);

	FOR_EACH_QP_ENT(v, e) {
		uint32_t qpn = atomic_load_explicit(&e->qpn, memory_order_acquire);

		if (qpn)
			qp_row(&t, v, e, qpn);
	}
	table_print(&t, "no QP on this host");
}

/* ---- SRQs ---- */

static const struct col srq_cols[] = {
	{ "SRQN", true }, { "PID", true }, { "PD", true }, { "QUEUED", true },
	{ "CAP", true }, { "MAX_SGE", true }, { "LIMIT", true }, { "XRCD", false },
	{ "STATE", false },
};

static void srq_row(struct table *t, const struct view *v, uint32_t idx,
		    const struct hca_srq_ent *e, uint32_t handle)
{
	const struct hca_ring *ring = view_ring(v, e->ring_off);
	size_t r = row_add(t);

	(void)idx;
	cell(t, r, 0, "0x%06x", atomic_load(&e->srqn)); /* what peers name it by */
	owner_cell(t, r, 1, v->seg, e->owner, e->owner_gen);
	cell(t, r, 2, "%u", e->pd);
	cell(t, r, 3, "%u", ring ? ring_queued(ring) : 0);
	cell(t, r, 4, "%u", ring ? ring->cap : 0);
	cell(t, r, 5, "%u", e->max_sge);
	cell(t, r, 6, "%u", atomic_load(&e->limit));
	if (e->xrcd != HCA_NONE)
		cell(t, r, 7, "%u (cq %u)", e->xrcd, e->cq);
	else
		cell(t, r, 7, "-");
	cell(t, r, 8, "%s", atomic_load(&e->error) ? "error" : "ok");
	if (atomic_load_explicit(&e->handle, memory_order_acquire) != handle)
		t->nrow--;
}

void show_srqs(const struct view *v)
{
	struct table t = TABLE(srq_cols);

	for (uint32_t i = 0; i < HCA_MAX_SRQ; i++) {
		const struct hca_srq_ent *e = &v->seg->srqs[i];
		uint32_t h = atomic_load_explicit(&e->handle, memory_order_acquire);

		if (h)
			srq_row(&t, v, i, e, h);
	}
	table_print(&t, "no SRQ on this host");
}

/* ---- CQs ---- */

static const struct col cq_cols[] = {
	{ "CQ", true }, { "PID", true }, { "QUEUED", true }, { "CAP", true },
	{ "ARMED", false }, { "CHANNEL", false }, { "STATE", false },
};

static const char *armed_name(uint32_t a)
{
	return a == 1 ? "next" : a == 2 ? "solicited" : "-";
}

static void cq_row(struct table *t, const struct view *v, uint32_t idx,
		   const struct hca_cq_ent *e, uint32_t handle)
{
	const struct hca_ring *ring = view_ring(v, e->ring_off);
	size_t r = row_add(t);

	cell(t, r, 0, "%u", idx);
	owner_cell(t, r, 1, v->seg, e->owner, e->owner_gen);
	cell(t, r, 2, "%u", ring ? ring_queued(ring) : 0);
	cell(t, r, 3, "%u", ring ? ring->cap : 0);
	cell(t, r, 4, "%s", armed_name(atomic_load(&e->armed)));
	if (e->chan)
		cell(t, r, 5, "%u", e->chan);
	else
		cell(t, r, 5, "-");
	cell(t, r, 6, "%s", atomic_load(&e->overrun) ? "overrun" : "ok");
	if (atomic_load_explicit(&e->handle, memory_order_acquire) != handle)
		t->nrow--;
}

void show_cqs(const struct view *v)
{
	struct table t = TABLE(cq_cols);

	for (uint32_t i = 0; i < HCA_MAX_CQ; i++) {
		const struct hca_cq_ent *e = &v->seg->cqs[i];
		uint32_t h = atomic_load_explicit(&e->handle, memory_order_acquire);

		if (h)
			cq_row(&t, v, i, e, h);
	}
	table_print(&t, "no CQ on this host");
}

/* ---- memory keys ---- */

static const struct col mr_cols[] = {
	{ "KEY", false }, { "PID", true }, { "PD", true }, { "ADDR", false },
	{ "LENGTH", true }, { "IOVA", false }, { "ACCESS", false },
};

static void mr_row(struct table *t, const struct view *v,
		   const struct hca_mr_ent *e, uint32_t key)
{
	size_t r = row_add(t);
	char acc[CELL];

	access_str(acc, sizeof(acc), e->access);
	cell(t, r, 0, "0x%08x", key);
	owner_cell(t, r, 1, v->seg, e->owner, e->owner_gen);
	cell(t, r, 2, "%u", e->pd);
	cell(t, r, 3, "0x%llx", (unsigned long long)e->addr);
	cell(t, r, 4, "%llu", (unsigned long long)e->length);
	cell(t, r, 5, "0x%llx", (unsigned long long)e->iova);
	cell(t, r, 6, "%s", acc);
	if (atomic_load_explicit(&e->key, memory_order_acquire) != key)
		t->nrow--;
}

void show_mrs(const struct view *v)
{
	struct table t = TABLE(mr_cols);

	for (uint32_t i = 0; i < HCA_MAX_MR; i++) {
		const struct hca_mr_ent *e = &v->seg->mrs[i];
		uint32_t key = atomic_load_explicit(&e->key, memory_order_acquire);

		if (key)
			mr_row(&t, v, e, key);
	}
	table_print(&t, "no memory region on this host");
}

/* ---- XRC domains ---- */

static const struct col xrcd_cols[] = {
	{ "XRCD", true }, { "FILE", false }, { "PROCS", true }, { "TGT_QPS", true },
};

static void xrcd_row(struct table *t, const struct view *v, uint32_t idx,
		     const struct hca_xrcd_ent *x, uint32_t handle)
{
	size_t r = row_add(t);
	int procs = 0, tgts = 0;

	for (int s = 0; s < HCA_MAX_PROCS; s++)
		procs += x->opens[s] != 0;
	FOR_EACH_QP_ENT(v, e)
		tgts += atomic_load(&e->qpn) && e->type == IBV_QPT_XRC_RECV &&
			e->xrcd == idx;
	cell(t, r, 0, "%u", idx);
	if (x->fdev || x->fino)
		cell(t, r, 1, "dev %llu ino %llu", (unsigned long long)x->fdev,
		     (unsigned long long)x->fino);
	else
		cell(t, r, 1, "(private)");
	cell(t, r, 2, "%d", procs);
	cell(t, r, 3, "%d", tgts);
	if (atomic_load_explicit(&x->handle, memory_order_acquire) != handle)
		t->nrow--;
}

void show_xrcds(const struct view *v)
{
	struct table t = TABLE(xrcd_cols);

	for (uint32_t i = 0; i < HCA_MAX_XRCD; i++) {
		const struct hca_xrcd_ent *x = &v->seg->xrcds[i];
		uint32_t h = atomic_load_explicit(&x->handle, memory_order_acquire);

		if (h)
			xrcd_row(&t, v, i, x, h);
	}
	table_print(&t, "no XRC domain on this host");
}

