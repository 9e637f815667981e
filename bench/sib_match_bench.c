/*
 * Micro-benchmark of the tag-matching engine (transport/match.c): the cost
 * of one arrive/post pair with N entries already queued, for the shapes
 * that matter to a runtime:
 *
 *   posted     N receives posted for one source, messages arrive in order:
 *              each arrival takes the oldest, the receive is posted again
 *   unexp      N unexpected messages from one source, receives posted in
 *              order: each takes the oldest, the message arrives again
 *   others     N-1 receives posted for N-1 other sources, one for ours:
 *              the per-source buckets keep this at the cost of N = 1
 *   scan       N-1 receives of our source with another tag ahead of ours:
 *              MPI makes the arrival walk past them (O(N))
 *   wildscan   N-1 wildcard-source receives with another tag, posted
 *              first: every arrival must look at them (O(N))
 *   onelist    the "others" shape on one plain list of all posted
 *              receives (what the buckets avoid): O(N)
 *
 * Usage: sib_match_bench [iterations [shape depth]]
 * Without a shape: the whole table, each figure the median of 5 runs of
 * iterations pairs (default 2000000), in ns per pair. With a shape and a
 * depth: that one run only, for instruction counts under callgrind
 * (run it with two iteration counts and divide the difference).
 */
#include "match.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 5

struct req {
	struct sib_mq_recv r;
};

struct umsg {
	struct sib_mq_msg m;
};

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void set_recv(struct sib_mq_recv *r, uint32_t src, uint64_t tag)
{
	r->src = src;
	r->ctx = 0;
	r->tag = tag;
	r->mask = ~0ULL;
}

enum shape { POSTED, UNEXP, OTHERS, SCAN, WILDSCAN, ONELIST, NSHAPES };

static const char *const shape_name[NSHAPES] = {
	"posted", "unexp", "others", "scan", "wildscan", "onelist"
};

/* The baseline: every posted receive on one list in post order, an
 * arrival walks it from the front (the textbook single queue). */
static struct sib_mq_link onelist;

static void onelist_post(struct sib_mq_recv *r)
{
	r->link.prev = onelist.prev;
	r->link.next = &onelist;
	onelist.prev->next = &r->link;
	onelist.prev = &r->link;
}

static struct sib_mq_recv *onelist_arrive(uint32_t src, uint32_t ctx, uint64_t tag)
{
	for (struct sib_mq_link *l = onelist.next; l != &onelist; l = l->next) {
		struct sib_mq_recv *r = (struct sib_mq_recv *)l;   /* link is first */

		if ((r->src == src || r->src == SIB_ANY_SOURCE) && r->ctx == ctx &&
		    ((r->tag ^ tag) & r->mask) == 0) {
			l->prev->next = l->next;
			l->next->prev = l->prev;
			return r;
		}
	}
	return NULL;
}

/* ns per pair on the baseline list, shape "others". */
static double run_onelist(int n, long iters, struct req *q)
{
	volatile uintptr_t sink = 0;
	double t0, t1;

	onelist.prev = onelist.next = &onelist;
	for (int i = 0; i < n; i++) {
		set_recv(&q[i].r, i == n - 1 ? 0 : (uint32_t)i + 1, 0);
		onelist_post(&q[i].r);
	}
	t0 = now_ns();
	for (long k = 0; k < iters; k++) {
		struct sib_mq_recv *r = onelist_arrive(0, 0, 0);

		if (!r)
			return -1;
		onelist_post(r);
		sink += (uintptr_t)r;
	}
	t1 = now_ns();
	(void)sink;
	return (t1 - t0) / (double)iters;
}

/* One timed run of iters pairs; returns ns per pair (or -1 on a mismatch,
 * which would be a bug in the engine). */
static double run(enum shape sh, int n, long iters, struct req *q, struct umsg *u)
{
	struct sib_mq mq;
	volatile uintptr_t sink = 0;
	double t0, t1;
	int ours = n - 1;   /* the entry the loop keeps matching */

	if (sh == ONELIST)
		return run_onelist(n, iters, q);
	if (sib_mq_init(&mq))
		return -1;
	for (int i = 0; i < n; i++) {
		switch (sh) {
		case POSTED:
			set_recv(&q[i].r, 0, 0);
			sib_mq_post(&mq, &q[i].r);
			break;
		case UNEXP:
			u[i].m.src = 0;
			u[i].m.ctx = 0;
			u[i].m.tag = 0;
			sib_mq_add_unexpected(&mq, &u[i].m);
			break;
		case OTHERS:
			set_recv(&q[i].r, i == ours ? 0 : (uint32_t)i + 1, 0);
			sib_mq_post(&mq, &q[i].r);
			break;
		case SCAN:
			set_recv(&q[i].r, 0, i == ours ? 0 : 1);
			sib_mq_post(&mq, &q[i].r);
			break;
		case WILDSCAN:
			set_recv(&q[i].r, i == ours ? 0 : SIB_ANY_SOURCE,
				 i == ours ? 0 : 1);
			sib_mq_post(&mq, &q[i].r);
			break;
		default:
			break;
		}
	}
	struct sib_mq_recv post_me;

	set_recv(&post_me, 0, 0);
	t0 = now_ns();
	for (long k = 0; k < iters; k++) {
		if (sh == UNEXP) {
			struct sib_mq_msg *m = sib_mq_post(&mq, &post_me);

			if (!m || sib_mq_arrive(&mq, 0, 0, 0))
				return -1;
			sib_mq_add_unexpected(&mq, m);
			sink += (uintptr_t)m;
		} else {
			struct sib_mq_recv *r = sib_mq_arrive(&mq, 0, 0, 0);

			if (!r || sib_mq_post(&mq, r))
				return -1;
			sink += (uintptr_t)r;
		}
	}
	t1 = now_ns();
	sib_mq_fini(&mq);
	(void)sink;
	return (t1 - t0) / (double)iters;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static const int depths[] = { 1, 16, 256 };
	long iters = argc > 1 ? atol(argv[1]) : 2000000;
	struct req *q = calloc(256, sizeof(*q));
	struct umsg *u = calloc(256, sizeof(*u));

	if (iters <= 0 || !q || !u) {
		fprintf(stderr, "usage: %s [iterations > 0]\n", argv[0]);
		return 2;
	}
	if (argc == 4) {
		int depth = atoi(argv[3]);

		for (int s = 0; s < NSHAPES; s++)
			if (!strcmp(argv[2], shape_name[s]) && depth >= 1 &&
			    depth <= 256) {
				printf("%s %d: %.1f ns per pair\n", argv[2], depth,
				       run((enum shape)s, depth, iters, q, u));
				return 0;
			}
		fprintf(stderr, "unknown shape or depth (1..256)\n");
		return 2;
	}
	printf("# sib_match_bench: ns per arrive/post pair, median of %d runs of %ld\n",
	       RUNS, iters);
	printf("%-8s", "# queued");
	for (int s = 0; s < NSHAPES; s++)
		printf("%12s", shape_name[s]);
	printf("\n");
	for (unsigned d = 0; d < sizeof(depths) / sizeof(depths[0]); d++) {
		printf("%-8d", depths[d]);
		for (int s = 0; s < NSHAPES; s++) {
			double t[RUNS];

			for (int k = 0; k < RUNS; k++) {
				t[k] = run((enum shape)s, depths[d], iters, q, u);
				if (t[k] < 0) {
					fprintf(stderr, "engine mismatch in %s\n",
						shape_name[s]);
					return 1;
				}
			}
			qsort(t, RUNS, sizeof(t[0]), cmp_double);
			printf("%12.1f", t[RUNS / 2]);
		}
		printf("\n");
	}
	free(q);
	free(u);
	return 0;
}
