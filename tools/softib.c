/*
 * softib: answers "am I really running on softib?".
 *
 * It shows the device and its port as a verbs client would see them (from
 * the same functions the device uses: dev_attr.h), then what is alive on
 * this host, read from the host's shared segment (seg.h): the processes
 * that have the device open, their QPs with per-QP counters, SRQs, CQs,
 * memory keys and XRC domains.
 *
 * The segment is mapped read-only and never created: a host where no
 * softib process ever ran has nothing to show. Entries change under our
 * feet while we read them; each one is read between two loads of its id
 * and skipped if the id changed, so a row is never a mix of two objects.
 * The numbers are a snapshot, not a consistent cut of the whole device.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <endian.h>

#include "dev_attr.h"
#include "ring.h"
#include "seg.h"

/* ---- the segment, read-only ---- */

struct view {
	const struct hca_seg *seg;
	size_t len;
	char name[96];
};

static unsigned long netns_ino(void)
{
	struct stat st;

	return stat("/proc/self/ns/net", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* The first fields sit at the same offsets in every layout: check them first. */
static int seg_check(const struct hca_seg *seg, size_t len)
{
	if (len < sizeof(struct hca_seg)) {
		if (len >= 16 && seg->magic == HCA_SEG_MAGIC)
			fprintf(stderr, "softib: segment of another softib build "
				"(version %u, this tool knows %u)\n",
				seg->version, HCA_SEG_VERSION);
		else
			fprintf(stderr, "softib: segment too small to be softib's\n");
		return -1;
	}
	if (seg->magic != HCA_SEG_MAGIC || seg->version != HCA_SEG_VERSION ||
	    seg->layout_size != sizeof(struct hca_seg)) {
		fprintf(stderr, "softib: segment of another softib build "
			"(version %u, layout %u bytes; this tool knows %u, %zu)\n",
			seg->version, seg->layout_size, HCA_SEG_VERSION,
			sizeof(struct hca_seg));
		return -1;
	}
	if (!atomic_load_explicit(&seg->ready, memory_order_acquire)) {
		fprintf(stderr, "softib: segment still being set up; try again\n");
		return -1;
	}
	return 0;
}

/* 0: mapped; 1: no segment on this host; -1: error (already reported). */
static int view_open(struct view *v)
{
	struct stat st;
	void *p;
	int fd;

	hca_seg_name(v->name, sizeof(v->name));
	fd = shm_open(v->name, O_RDONLY, 0);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		fprintf(stderr, "softib: %s: %s\n", v->name, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || st.st_size < 16) {
		close(fd);
		fprintf(stderr, "softib: %s: empty or unreadable\n", v->name);
		return -1;
	}
	/* as the library (seg.c): a file another user made under the name
	 * is not our segment, and what it says is not shown as ours */
	if (st.st_uid != geteuid() || (st.st_mode & 077)) {
		close(fd);
		fprintf(stderr, "softib: %s: not this user's segment (owner uid %u, "
			"mode %03o): not read\n", v->name, (unsigned)st.st_uid,
			(unsigned)(st.st_mode & 0777));
		return -1;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		fprintf(stderr, "softib: mmap %s: %s\n", v->name, strerror(errno));
		return -1;
	}
	v->seg = p;
	v->len = (size_t)st.st_size;
	if (seg_check(v->seg, v->len)) {
		munmap(p, v->len);
		return -1;
	}
	return 0;
}

static void view_close(struct view *v)
{
	if (v->seg)
		munmap((void *)v->seg, v->len);
}

/* A ring header in the heap, or NULL if the offset is not plausible. */
static const struct hca_ring *view_ring(const struct view *v, uint64_t off)
{
	const struct hca_ring *r;

	if (off < v->seg->heap_off || off > v->len - sizeof(*r))
		return NULL;
	r = (const void *)((const char *)v->seg + off);
	if (!r->cap || (r->cap & (r->cap - 1)))
		return NULL;
	return r;
}

static uint32_t ring_queued(const struct hca_ring *r)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);

	return h > t ? (uint32_t)(h - t) : 0;
}

/* ---- aligned tables ---- */

#define CELL 40

struct col {
	const char *name;
	bool right;          /* numbers align right */
};

struct table {
	const struct col *cols;
	int ncol;
	char *cells;         /* nrow * ncol cells of CELL bytes */
	size_t nrow, cap;
};

static char *cell_at(struct table *t, size_t row, int col)
{
	return t->cells + (row * (size_t)t->ncol + (size_t)col) * CELL;
}

/* Start a new row; cells are then set with cell(). */
static size_t row_add(struct table *t)
{
	if (t->nrow == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		char *c = realloc(t->cells, cap * (size_t)t->ncol * CELL);

		if (!c) {
			fprintf(stderr, "softib: out of memory\n");
			exit(1);
		}
		t->cells = c;
		t->cap = cap;
	}
	memset(cell_at(t, t->nrow, 0), 0, (size_t)t->ncol * CELL);
	return t->nrow++;
}

__attribute__((format(printf, 4, 5)))
static void cell(struct table *t, size_t row, int col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cell_at(t, row, col), CELL, fmt, ap);
	va_end(ap);
}

static void print_line(struct table *t, const int *w, size_t row, bool head)
{
	for (int c = 0; c < t->ncol; c++) {
		const char *s = head ? t->cols[c].name : cell_at(t, row, c);
		bool last = c == t->ncol - 1;

		if (t->cols[c].right)
			printf("%*s", w[c], s);
		else
			printf("%-*s", last ? 0 : w[c], s);
		printf(last ? "\n" : "  ");
	}
}

static void table_print(struct table *t, const char *empty)
{
	int w[16] = { 0 };

	if (!t->nrow) {
		printf("%s\n", empty);
		return;
	}
	for (int c = 0; c < t->ncol && c < 16; c++) {
		w[c] = (int)strlen(t->cols[c].name);
		for (size_t r = 0; r < t->nrow; r++) {
			int n = (int)strlen(cell_at(t, r, c));
			w[c] = n > w[c] ? n : w[c];
		}
	}
	print_line(t, w, 0, true);
	for (size_t r = 0; r < t->nrow; r++)
		print_line(t, w, r, false);
	free(t->cells);
	t->cells = NULL;
}

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

static const char *mtu_name(enum ibv_mtu m)
{
	static const char *const names[] = { "?", "256", "512", "1024", "2048", "4096" };

	return (unsigned)m < sizeof(names) / sizeof(names[0]) ? names[m] : "?";
}

static const char *port_state_name(enum ibv_port_state s)
{
	static const char *const names[] = { "PORT_NOP", "PORT_DOWN", "PORT_INIT",
					     "PORT_ARMED", "PORT_ACTIVE",
					     "PORT_ACTIVE_DEFER" };

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
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

/* The pid of a slot's process if that slot generation is still live. */
static pid_t owner_pid(const struct hca_seg *seg, uint16_t slot, uint32_t gen)
{
	const struct hca_proc *p;

	if (slot >= HCA_MAX_PROCS)
		return 0;
	p = &seg->procs[slot];
	if (atomic_load_explicit(&p->state, memory_order_acquire) != HCA_PROC_LIVE ||
	    p->gen != gen)
		return 0;
	return p->pid;
}

static void owner_cell(struct table *t, size_t row, int col,
		       const struct hca_seg *seg, uint16_t slot, uint32_t gen)
{
	pid_t pid = owner_pid(seg, slot, gen);

	if (pid)
		cell(t, row, col, "%d", (int)pid);
	else
		cell(t, row, col, "-");
}

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

/* A QP directory page (NULL: none, or not inside the mapping). */
static const struct hca_qp_ent *view_qp_page(const struct view *v, uint32_t pg)
{
	uint64_t off = atomic_load_explicit(&v->seg->qp_pages[pg], memory_order_acquire);

	if (!off || off + (uint64_t)HCA_QP_PAGE * sizeof(struct hca_qp_ent) > v->len)
		return NULL;
	return (const struct hca_qp_ent *)((const char *)v->seg + off);
}

/* Each entry of the QP directory that has a page: e runs over them. */
#define FOR_EACH_QP_ENT(v, e)                                                   \
	for (uint32_t pg_ = 0; pg_ < HCA_QP_PAGES; pg_++)                       \
		for (const struct hca_qp_ent *p_ = view_qp_page((v), pg_), *e = p_; \
		     p_ && e < p_ + HCA_QP_PAGE; e++)

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

static int live_procs(const struct hca_seg *seg)
{
	int n = 0;

	for (int i = 0; i < HCA_MAX_PROCS; i++)
		n += atomic_load(&seg->procs[i].state) == HCA_PROC_LIVE;
	return n;
}

static void show_procs(const struct view *v)
{
	struct table t = { proc_cols, 9, NULL, 0, 0 };
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

static void show_qps(const struct view *v)
{
	struct table t = { qp_cols, 11, NULL, 0, 0 };

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

static void show_srqs(const struct view *v)
{
	struct table t = { srq_cols, 9, NULL, 0, 0 };

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

static void show_cqs(const struct view *v)
{
	struct table t = { cq_cols, 7, NULL, 0, 0 };

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

static void show_mrs(const struct view *v)
{
	struct table t = { mr_cols, 7, NULL, 0, 0 };

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

static void show_xrcds(const struct view *v)
{
	struct table t = { xrcd_cols, 4, NULL, 0, 0 };

	for (uint32_t i = 0; i < HCA_MAX_XRCD; i++) {
		const struct hca_xrcd_ent *x = &v->seg->xrcds[i];
		uint32_t h = atomic_load_explicit(&x->handle, memory_order_acquire);

		if (h)
			xrcd_row(&t, v, i, x, h);
	}
	table_print(&t, "no XRC domain on this host");
}

/* ---- status: the device and its port ---- */

static void print_gid(const union ibv_gid *g)
{
	for (int i = 0; i < 16; i += 2)
		printf("%02x%02x%s", g->raw[i], g->raw[i + 1], i < 14 ? ":" : "\n");
}

static void print_guid(__be64 guid)
{
	uint64_t g = be64toh(guid);

	printf("%04x:%04x:%04x:%04x\n", (unsigned)(g >> 48) & 0xffff,
	       (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff,
	       (unsigned)g & 0xffff);
}

static void print_iface(const struct hca_host_net *net)
{
	char ip[INET_ADDRSTRLEN];
	struct in_addr a = { .s_addr = net->ipv4 };

	if (!net->ipv4) {
		printf("  interface     none (loopback only)\n");
		return;
	}
	inet_ntop(AF_INET, &a, ip, sizeof(ip));
	printf("  interface     %s %s mtu %d\n", net->ifname, ip, net->ifmtu);
}

static void print_port(const struct hca_host_net *net, __be64 guid)
{
	struct ibv_port_attr pa;
	enum ibv_mtu mtu = hca_mtu_for_ifmtu(net->ifmtu);
	uint16_t lid = hca_host_lid(net);
	union ibv_gid gid;

	printf("port 1\n");
	if (hca_fill_port_attr(&pa, sizeof(pa), lid, mtu) == 0)
		printf("  state         %s (%d)\n", port_state_name(pa.state), pa.state);
	printf("  LID           0x%04x\n", lid);
	printf("  active MTU    %s (%d)\n", mtu_name(mtu), mtu);
	printf("  link layer    InfiniBand\n");
	printf("  GID[0]        ");
	if (hca_gid_entry(net, guid, 0, &gid) == 0)
		print_gid(&gid);
	else
		printf("?\n");
	print_iface(net);
}

/*
 * Segments of this user and host made by other softib builds (another
 * layout, so another name): their processes run a library other than the
 * one this tool was built with. Named only, never read.
 */
static void print_other_segments(const char *ours)
{
	char prefix[64];
	struct dirent *de;
	DIR *d = opendir("/dev/shm");
	size_t n;

	if (!d)
		return;
	n = (size_t)snprintf(prefix, sizeof(prefix), "softib-%u-%lu",
			     (unsigned)getuid(), netns_ino());
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, n) ||
		    (de->d_name[n] && de->d_name[n] != '-') || !strcmp(de->d_name, ours + 1))
			continue;
		printf("other segment   /%s (another softib build: not read)\n", de->d_name);
	}
	closedir(d);
}

/*
 * The UDP receive buffers of the live processes: a buffer the kernel
 * clamped below what was asked (net.core.rmem_max) drops bursts on the
 * UDP link, which then shows as retransmissions; say so here, and how to
 * lift it.
 */
static void print_rcvbuf(const struct view *v)
{
	uint64_t want = 0, least = UINT64_MAX;
	int n = 0, clamped = 0;

	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		const struct hca_proc *p = &v->seg->procs[s];
		uint64_t w = atomic_load(&p->link.rcvbuf_want);
		uint64_t g = atomic_load(&p->link.rcvbuf_got);

		if (atomic_load(&p->state) != HCA_PROC_LIVE || !w)
			continue;
		n++;
		if (g < w) {
			clamped++;
			want = w > want ? w : want;
			least = g < least ? g : least;
		}
	}
	if (!n)
		return;
	if (!clamped) {
		printf("UDP rcvbuf      as asked in every process\n");
		return;
	}
	printf("UDP rcvbuf      CLAMPED in %d of %d process%s: %llu KiB granted, "
	       "%llu KiB asked\n", clamped, n, n == 1 ? "" : "es",
	       (unsigned long long)least >> 10, (unsigned long long)want >> 10);
	printf("                (net.core.rmem_max; raise it: sysctl -w "
	       "net.core.rmem_max=%llu)\n", (unsigned long long)want);
}

/*
 * The heap's free bytes: the part never handed out (above the bump
 * pointer), the blocks on the free lists and those in quarantine (freed,
 * waiting to go back to their lists). Read without the lock, so exact
 * only while nothing allocates or frees; a walk that meets an offset
 * outside the heap, or more blocks than the heap can hold, stops there
 * and says so (-1).
 */
static long long heap_free_bytes(const struct view *v)
{
	const struct hca_seg *seg = v->seg;
	uint64_t lo = seg->heap_off, hi = seg->heap_off + seg->heap_size;
	uint64_t total, max_blocks = seg->heap_size >> HCA_HEAP_MIN_ORDER;
	uint32_t nq = seg->nquar;

	if (hi > v->len || seg->heap_bump > seg->heap_size || nq > HCA_QUARANTINE_LEN) {
		fprintf(stderr, "softib: heap header out of bounds (bump %llu, %u in quarantine)\n",
			(unsigned long long)seg->heap_bump, nq);
		return -1;
	}
	total = seg->heap_size - seg->heap_bump;
	for (unsigned o = HCA_HEAP_MIN_ORDER; o <= HCA_HEAP_MAX_ORDER; o++) {
		uint64_t n = 0;

		for (uint64_t off = seg->heap_free[o]; off; n++) {
			if (off < lo || off + (1ULL << o) > hi || n > max_blocks) {
				fprintf(stderr, "softib: free list of order %u: %s at block %llu "
					"(offset %llu)\n", o, n > max_blocks ? "a cycle" :
					"an offset outside the heap", (unsigned long long)n,
					(unsigned long long)off);
				return -1;
			}
			total += 1ULL << o;
			off = *(const uint64_t *)((const char *)seg + off);
		}
	}
	for (uint32_t i = 0; i < nq; i++)
		total += 1ULL << seg->quar[i].order;
	return (long long)total;
}

static void print_segment(const struct view *v, int rc)
{
	printf("segment         %s", v->name);
	if (rc == 1)
		printf(" (absent)\nno softib process on this host\n");
	else if (rc < 0)
		printf(" (unusable)\n");
	else
		printf(" (version %u, %d live process%s)\n", v->seg->version,
		       live_procs(v->seg), live_procs(v->seg) == 1 ? "" : "es");
	if (rc == 0) {
		long long f = heap_free_bytes(v);

		if (f < 0)
			printf("heap free       ? (the heap changed under the walk: ask again)\n");
		else
			printf("heap free       %lld bytes of %llu\n", f,
			       (unsigned long long)v->seg->heap_size);
	}
	if (rc == 0)
		print_rcvbuf(v);
	print_other_segments(v->name);
}

static void show_status(const struct view *v, int rc)
{
	struct hca_host_net net;
	__be64 guid;
	int err = hca_host_net_probe(&net);

	if (err) {
		fprintf(stderr, "softib: host probe: %s\n", strerror(err));
		memset(&net, 0, sizeof(net));
	}
	guid = hca_node_guid(&net, getuid());
	printf("device          softib0\n");
	printf("transport       InfiniBand (software HCA in user space)\n");
	printf("node GUID       ");
	print_guid(guid);
	print_port(&net, guid);
	print_segment(v, rc);
}

/* ---- counters: per QP (link packets, retransmissions, NAKs, drops by
 * cause) and per process (its UDP socket, packets refused by cause) ---- */

static const struct col cnt_cols[] = {
	{ "QPN", false }, { "TX_PKTS", true }, { "RX_PKTS", true },
	{ "RETRANS", true }, { "NAK_TX", true }, { "NAK_RX", true },
	{ "RNR_TX", true }, { "RNR_RX", true }, { "D_QKEY", true },
	{ "D_PSN", true }, { "D_ACCESS", true }, { "D_NOWQE", true },
	{ "D_STATE", true }, { "D_LEN", true },
};

#define U64(x) ((unsigned long long)atomic_load(&(x)))

static void cnt_row(struct table *t, const struct hca_qp_ent *e, uint32_t qpn)
{
	size_t r = row_add(t);

	cell(t, r, 0, "0x%06x", qpn);
	cell(t, r, 1, "%llu", U64(e->cnt.tx_pkts));
	cell(t, r, 2, "%llu", U64(e->cnt.rx_pkts));
	cell(t, r, 3, "%llu", U64(e->cnt.retrans));
	cell(t, r, 4, "%llu", U64(e->cnt.naks_sent));
	cell(t, r, 5, "%llu", U64(e->cnt.naks_rcvd));
	cell(t, r, 6, "%llu", U64(e->cnt.rnr_sent));
	cell(t, r, 7, "%llu", U64(e->cnt.rnr_rcvd));
	for (int i = 0; i < HCA_DROP_MAX; i++)
		cell(t, r, 8 + i, "%llu", U64(e->cnt.drops[i]));
	if (atomic_load_explicit(&e->qpn, memory_order_acquire) != qpn)
		t->nrow--;
}

static const struct col link_cols[] = {
	{ "PID", true }, { "TX_PKTS", true }, { "RX_PKTS", true }, { "TX_ERR", true },
	{ "SHORT", true }, { "VERSION", true }, { "OPCODE", true }, { "LENGTH", true },
	{ "PAD", true }, { "ICRC", true }, { "NO_QP", true }, { "FOREIGN", true },
};

static void show_counters(const struct view *v)
{
	struct table t = { cnt_cols, 13, NULL, 0, 0 };
	struct table l = { link_cols, 12, NULL, 0, 0 };

	FOR_EACH_QP_ENT(v, e) {
		uint32_t qpn = atomic_load_explicit(&e->qpn, memory_order_acquire);

		if (qpn)
			cnt_row(&t, e, qpn);
	}
	table_print(&t, "no QP on this host");
	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		const struct hca_proc *p = &v->seg->procs[s];
		size_t r;

		if (atomic_load(&p->state) != HCA_PROC_LIVE)
			continue;
		r = row_add(&l);
		cell(&l, r, 0, "%d", (int)p->pid);
		cell(&l, r, 1, "%llu", U64(p->link.tx_pkts));
		cell(&l, r, 2, "%llu", U64(p->link.rx_pkts));
		cell(&l, r, 3, "%llu", U64(p->link.tx_errors));
		for (int k = 1; k <= 6; k++)
			cell(&l, r, 3 + k, "%llu", U64(p->link.bad[k]));
		cell(&l, r, 10, "%llu", U64(p->link.unknown_qp));
		cell(&l, r, 11, "%llu", U64(p->foreign_dgrams));
	}
	printf("\nUDP link, per process (packets refused by cause; FOREIGN: "
	       "datagrams from other users dropped at its sockets)\n");
	table_print(&l, "no process on this host");
}

/* ---- command line ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: softib [-h] [command]\n"
		"Shows whether this host runs softib, and what is alive on it.\n"
		"\n"
		"commands:\n"
		"  status   device softib0, port 1 (state, LID, MTU, GID[0]), segment (default)\n"
		"  procs    processes that have the device open\n"
		"  qps      every live QP of the host, with its counters\n"
		"  srqs     shared receive queues\n"
		"  cqs      completion queues\n"
		"  mrs      memory keys\n"
		"  xrcds    XRC domains\n"
		"  counters per-QP packets, retransmissions, NAKs, RNR NAKs, drops by\n"
		"           cause; per-process UDP link packets and refusals by cause,\n"
		"           datagrams from other users dropped\n"
		"  sib      libsib workers: endpoints, connections, SRQs, protocol counters\n"
		"  heap-check  the segment heap checked under the segment lock: blocks\n"
		"           in use, quarantined, free; none shared, none lost (exit 1 if not)\n"
		"  all      all of the above\n");
}

struct cmd {
	const char *name;
	void (*show)(const struct view *v);
	const char *title;
};

void show_sib(const struct view *v);   /* softib_sib.c */
int softib_heap_check(void);            /* softib_heap.c */

static const struct cmd cmds[] = {
	{ "procs", show_procs, "processes" },
	{ "qps", show_qps, "queue pairs" },
	{ "srqs", show_srqs, "shared receive queues" },
	{ "cqs", show_cqs, "completion queues" },
	{ "mrs", show_mrs, "memory keys" },
	{ "xrcds", show_xrcds, "XRC domains" },
	{ "counters", show_counters, "counters" },
	{ "sib", show_sib, "libsib workers (transport/)" },
};

#define NCMDS ((int)(sizeof(cmds) / sizeof(cmds[0])))

static int run_all(const struct view *v, int rc)
{
	show_status(v, rc);
	if (rc)
		return rc < 0;
	for (int i = 0; i < NCMDS; i++) {
		printf("\n%s\n", cmds[i].title);
		cmds[i].show(v);
	}
	return 0;
}

/* A listing: nothing to list without a segment, and that is no error. */
static int run_one(const struct cmd *c, const struct view *v, int rc)
{
	if (rc == 1)
		printf("no softib process on this host\n");
	else if (rc == 0)
		c->show(v);
	return rc < 0;
}

static const struct cmd *cmd_find(const char *name)
{
	for (int i = 0; i < NCMDS; i++)
		if (!strcmp(name, cmds[i].name))
			return &cmds[i];
	return NULL;
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "status";
	const struct cmd *c = cmd_find(name);
	struct view v = { 0 };
	int rc, ret;

	if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(name, "heap-check") && argc == 2)
		return softib_heap_check();
	if (argc > 2 || (!c && strcmp(name, "status") && strcmp(name, "all"))) {
		if (argc > 2)
			fprintf(stderr, "softib: one command at a time\n");
		else
			fprintf(stderr, "softib: unknown command '%s'\n", name);
		usage(stderr);
		return 2;
	}
	rc = view_open(&v);
	if (c)
		ret = run_one(c, &v, rc);
	else if (!strcmp(name, "all"))
		ret = run_all(&v, rc);
	else {
		show_status(&v, rc);
		ret = rc < 0;
	}
	view_close(&v);
	return ret;
}
