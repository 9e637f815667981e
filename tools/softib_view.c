/*
 * softib_view.c: the host's segment as the listings read it: mapped
 * read-only after checking it is this build's and this user's, and the
 * lookups every listing shares (a ring in the heap, a QP directory page,
 * the live owner of an object).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "softib.h"

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
int view_open(struct view *v)
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

void view_close(struct view *v)
{
	if (v->seg)
		munmap((void *)v->seg, v->len);
}

/* A ring header in the heap, or NULL if the offset is not plausible. */
const struct hca_ring *view_ring(const struct view *v, uint64_t off)
{
	const struct hca_ring *r;

	if (off < v->seg->heap_off || off > v->len - sizeof(*r))
		return NULL;
	r = (const void *)((const char *)v->seg + off);
	if (!r->cap || (r->cap & (r->cap - 1)))
		return NULL;
	return r;
}

uint32_t ring_queued(const struct hca_ring *r)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);

	return h > t ? (uint32_t)(h - t) : 0;
}

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

void owner_cell(struct table *t, size_t row, int col,
		       const struct hca_seg *seg, uint16_t slot, uint32_t gen)
{
	pid_t pid = owner_pid(seg, slot, gen);

	if (pid)
		cell(t, row, col, "%d", (int)pid);
	else
		cell(t, row, col, "-");
}

/* A QP directory page (NULL: none, or not inside the mapping). */
const struct hca_qp_ent *view_qp_page(const struct view *v, uint32_t pg)
{
	uint64_t off = atomic_load_explicit(&v->seg->qp_pages[pg], memory_order_acquire);

	if (!off || off + (uint64_t)HCA_QP_PAGE * sizeof(struct hca_qp_ent) > v->len)
		return NULL;
	return (const struct hca_qp_ent *)((const char *)v->seg + off);
}

int live_procs(const struct hca_seg *seg)
{
	int n = 0;

	for (int i = 0; i < HCA_MAX_PROCS; i++)
		n += atomic_load(&seg->procs[i].state) == HCA_PROC_LIVE;
	return n;
}
