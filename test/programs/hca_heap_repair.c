/*
 * hca_heap_repair: a process killed inside a critical section of the
 * segment heap (issue 15 item 6) must not leave the heap able to hand one
 * block out twice, nor lose blocks. White-box: links libhca.a and works
 * on a segment of its own (SOFTIB_SEG_TAG=heaprepair<pid>, removed at
 * the end).
 *
 *   hca_heap_repair -k drain|gap|pop|quar [-v]
 *
 * The parent lays the heap out (blocks in use, named by CQ directory
 * entries as real rings are; blocks in the quarantine, expired), then a
 * child takes the segment lock and is killed by a test point
 * (hca_die_arm) in the middle of:
 *   drain  releasing expired quarantine entries to the free lists
 *   gap    giving the alignment gap below a large block to smaller lists
 *   pop    allocating: a block unlinked from its free list, not yet given
 *   quar   freeing: a quarantine entry written, not yet counted
 * The parent then takes the lock (EOWNERDEAD: the heap is repaired) and
 * checks: the heap verifier finds it consistent (every block in place,
 * none shared, none lost), and allocating every block of the sizes
 * involved hands out no block twice and none that is in use.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "die_at.h"
#include "ring.h"
#include "seg.h"

#define NLIVE  32
#define NQUAR  64
#define NALLOC 512

static bool verbose;
static const char *mode = "";

static void fail(const char *fmt, const char *a, uint64_t x)
{
	printf("%s: FAIL: ", mode);
	printf(fmt, a, x);
	printf("\n");
	exit(1);
}

/* A block in use, as the directory names one: a CQ ring. */
static uint64_t live_ring(struct hca_seg *seg, uint32_t idx)
{
	uint64_t off = hca_heap_alloc(seg, hca_ring_bytes(16, 64));

	if (!off)
		fail("%s%" PRIu64, "no heap for a ring ", idx);
	hca_ring_init(hca_seg_ptr(seg, off), 16, 64);
	seg->cqs[idx].ring_off = off;
	atomic_store(&seg->cqs[idx].handle, 1000 + idx);
	return off;
}

static void expire_quarantine(struct hca_seg *seg)
{
	for (uint32_t i = 0; i < seg->nquar; i++)
		seg->quar[i].free_at_ns = 0;
}

struct blk {
	uint64_t off, size;
};

static int cmp_blk(const void *a, const void *b)
{
	uint64_t x = ((const struct blk *)a)->off, y = ((const struct blk *)b)->off;

	return x < y ? -1 : x > y;
}

static void check_heap(struct hca_seg *seg, const char *when)
{
	struct hca_heap_report rep;

	if (hca_heap_check(seg, &rep)) {
		printf("%s: %s\n", mode, rep.first);
		fail("heap inconsistent %s: %" PRIu64 " problems", when, rep.problems);
	}
	if (verbose)
		printf("%s: heap consistent %s: %" PRIu64 " in use, %" PRIu64
		       " quarantined, %" PRIu64 " free blocks\n", mode, when,
		       rep.blocks[HCA_HEAP_LIVE], rep.blocks[HCA_HEAP_QUAR],
		       rep.blocks[HCA_HEAP_FREE]);
}

/*
 * Allocate blocks of every size the test freed or gapped (the quarantine
 * expired first, so that everything freed comes back): no two of them,
 * nor one of them and a ring in use, may overlap.
 */
static void check_allocs(struct hca_seg *seg, const uint64_t *live, int nlive)
{
	static const struct { uint64_t size; int n; } want[] = {
		{ 1 << 20, 1 }, { 1 << 17, 4 }, { 1 << 18, 2 }, { 1 << 12, NALLOC },
	};
	struct blk got[NALLOC + NLIVE + 16];
	int n = 0;

	expire_quarantine(seg);
	for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++)
		for (int i = 0; i < want[w].n; i++) {
			got[n].size = want[w].size;
			if (!(got[n++].off = hca_heap_alloc(seg, want[w].size)))
				fail("%sallocation of %" PRIu64 " B failed", "", want[w].size);
		}
	for (int j = 0; j < nlive; j++)
		got[n++] = (struct blk){ live[j], 4096 };
	qsort(got, (size_t)n, sizeof(got[0]), cmp_blk);
	for (int i = 1; i < n; i++)
		if (got[i - 1].off + got[i - 1].size > got[i].off)
			fail("block %s%#" PRIx64 " handed out twice (or while in use)", "+",
			     got[i].off - seg->heap_off);
}

/* The child: takes the lock and dies at the site, lock held. */
static void child(struct hca_seg *seg, enum hca_die_site site, long n, uint64_t off)
{
	hca_die_arm(site, n);
	hca_seg_lock(seg);
	switch (site) {
	case HCA_DIE_HEAP_DRAIN:
	case HCA_DIE_HEAP_POP:
		hca_heap_alloc(seg, 4096);
		break;
	case HCA_DIE_HEAP_GAP:
		hca_heap_alloc(seg, 1 << 20);
		break;
	case HCA_DIE_HEAP_QUAR:
		/* a ring in use freed as its destroy would: entry cleared,
		 * then into the quarantine */
		atomic_store(&seg->cqs[1].handle, 0);
		hca_heap_free(seg, off, 4096);
		break;
	default:
		break;
	}
	_exit(3); /* the test point was never reached */
}

int main(int argc, char **argv)
{
	enum hca_die_site site = HCA_DIE_NONE;
	uint64_t live[NLIVE], q[NQUAR];
	struct hca_seg *seg;
	char name[112], tag[32];
	size_t len;
	int lockfd = -1;
	long n = 1;
	int opt, st = 0, nlive = NLIVE;
	pid_t kid;

	while ((opt = getopt(argc, argv, "k:v")) != -1) {
		if (opt == 'v') {
			verbose = true;
			continue;
		}
		mode = optarg;
		if (!strcmp(optarg, "drain"))
			site = HCA_DIE_HEAP_DRAIN, n = NQUAR / 2;
		else if (!strcmp(optarg, "gap"))
			site = HCA_DIE_HEAP_GAP;
		else if (!strcmp(optarg, "pop"))
			site = HCA_DIE_HEAP_POP;
		else if (!strcmp(optarg, "quar"))
			site = HCA_DIE_HEAP_QUAR;
	}
	if (site == HCA_DIE_NONE) {
		fprintf(stderr, "usage: hca_heap_repair -k drain|gap|pop|quar [-v]\n");
		return 2;
	}
	snprintf(tag, sizeof(tag), "heaprepair%d", (int)getpid());
	setenv("SOFTIB_SEG_TAG", tag, 1);
	hca_seg_name(name, sizeof(name));
	if (hca_seg_map(&seg, &len, &lockfd)) {
		fprintf(stderr, "hca_heap_repair: cannot map a segment\n");
		return 2;
	}
	shm_unlink(name); /* ours alone: gone when we are */
	strncat(name, ".lock", sizeof(name) - strlen(name) - 1);
	shm_unlink(name);

	/* the layout: rings in use; a 4 KiB gap below the 1 MiB block that
	 * "gap" allocates; expired quarantine entries for "drain" */
	hca_seg_lock(seg);
	for (int i = 0; i < NLIVE; i++)
		live[i] = live_ring(seg, (uint32_t)i + 1);
	for (int i = 0; i < NQUAR; i++)
		q[i] = hca_heap_alloc(seg, 4096);
	for (int i = 0; i < NQUAR; i++)
		hca_heap_free(seg, q[i], 4096);
	expire_quarantine(seg);
	check_heap(seg, "before");
	hca_seg_unlock(seg);

	fflush(NULL);
	kid = fork();
	if (kid == 0)
		child(seg, site, n, live[0]);
	if (kid < 0 || waitpid(kid, &st, 0) != kid)
		fail("%sfork/wait: %" PRIu64, "", (uint64_t)errno);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		fail("the child did not die at its test point%s (status %#" PRIx64 ")", "",
		     (uint64_t)st);
	if (site == HCA_DIE_HEAP_QUAR)
		live[0] = live[--nlive]; /* the ring the child freed */

	hca_seg_lock(seg); /* EOWNERDEAD: the heap is repaired here */
	check_heap(seg, "after the death");
	check_allocs(seg, live, nlive); /* (blocks no directory names: not
					  * checked by the verifier after) */
	hca_seg_unlock(seg);
	printf("%s: killed in the heap's critical section; the heap repaired, "
	       "consistent, %d blocks handed out once each: PASS\n", mode, NALLOC);
	hca_seg_unmap(seg, len, lockfd);
	return 0;
}
