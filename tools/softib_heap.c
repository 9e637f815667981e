/*
 * softib heap-check: the segment heap's consistency, checked under the
 * segment's lock (hca/heap_check.c): every block in use, quarantined or
 * free in place, no two overlapping, none lost. Unlike the listings it
 * maps the segment writable, to take the lock; it changes nothing —
 * unless the lock's last holder died, when taking it rebuilds the heap as
 * any softib process would.
 *
 * Exit status: 0 consistent, 1 not, 2 no segment or an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seg.h"

static int map_rw(struct hca_seg **segp, size_t *lenp)
{
	char name[96];
	struct stat st;
	void *p;
	int fd;

	hca_seg_name(name, sizeof(name));
	fd = shm_open(name, O_RDWR, 0);
	if (fd < 0) {
		if (errno == ENOENT)
			printf("no softib process on this host\n");
		else
			fprintf(stderr, "softib: %s: %s\n", name, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || (size_t)st.st_size < sizeof(struct hca_seg)) {
		close(fd);
		fprintf(stderr, "softib: %s: not a segment of this build\n", name);
		return -1;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		fprintf(stderr, "softib: mmap %s: %s\n", name, strerror(errno));
		return -1;
	}
	*segp = p;
	*lenp = (size_t)st.st_size;
	if ((*segp)->magic != HCA_SEG_MAGIC || (*segp)->version != HCA_SEG_VERSION ||
	    (*segp)->layout_size != sizeof(struct hca_seg) ||
	    !atomic_load(&(*segp)->ready)) {
		fprintf(stderr, "softib: %s: not a segment of this build\n", name);
		munmap(p, *lenp);
		return -1;
	}
	return 0;
}

static void mib(const char *what, uint64_t blocks, uint64_t bytes)
{
	printf("  %-12s %8llu blocks %12.1f MiB\n", what, (unsigned long long)blocks,
	       (double)bytes / 1048576.0);
}

/* Process slots whose process is gone but whose objects are not yet
 * reclaimed (a survivor's progress thread does it on the death). */
static int unreclaimed(const struct hca_seg *seg, int *live)
{
	int n = 0;

	*live = 0;
	for (int i = 0; i < HCA_MAX_PROCS; i++) {
		const struct hca_proc *p = &seg->procs[i];
		uint32_t st = atomic_load(&p->state);

		if (st == HCA_PROC_FREE)
			continue;
		if (st == HCA_PROC_DEAD || hca_proc_starttime(p->pid) != p->starttime)
			n++;
		else
			(*live)++;
	}
	return n;
}

int softib_heap_check(void)
{
	struct hca_heap_report rep;
	struct hca_seg *seg;
	size_t len;
	int rc, live, dead;

	if (map_rw(&seg, &len))
		return 2;
	hca_seg_lock(seg);
	rc = hca_heap_check(seg, &rep);
	dead = unreclaimed(seg, &live);
	hca_seg_unlock(seg);
	printf("processes: %d live, processes being reclaimed: %d\n", live, dead);
	printf("heap: %.1f MiB of %.1f MiB bumped\n", (double)rep.bump / 1048576.0,
	       (double)rep.size / 1048576.0);
	mib("in use", rep.blocks[HCA_HEAP_LIVE], rep.bytes[HCA_HEAP_LIVE]);
	mib("quarantined", rep.blocks[HCA_HEAP_QUAR], rep.bytes[HCA_HEAP_QUAR]);
	mib("free", rep.blocks[HCA_HEAP_FREE], rep.bytes[HCA_HEAP_FREE]);
	printf("  rebuilt after a holder's death: %llu times; receive WQEs a "
	       "reclaimer could not re-post: %llu\n",
	       (unsigned long long)atomic_load(&seg->heap_repairs),
	       (unsigned long long)atomic_load(&seg->claims_lost));
	if (rc)
		printf("INCONSISTENT: %llu problems (%llu overlaps, %llu B lost); first: %s\n",
		       (unsigned long long)rep.problems, (unsigned long long)rep.overlaps,
		       (unsigned long long)rep.lost, rep.first);
	else
		printf("consistent\n");
	munmap(seg, len);
	return rc ? 1 : 0;
}
