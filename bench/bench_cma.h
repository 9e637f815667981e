/*
 * bench_cma: the shared-memory floor of a bandwidth table, measured in
 * the same run: how fast one process moves SIZE bytes into another with
 * back-to-back process_vm_writev calls (one copy by the kernel, what
 * softib's host link does for large messages).
 *
 * The other process is a child forked for the purpose, holding a buffer
 * of the largest size at the same address as its parent's: so nothing
 * is written into any process that did not ask for it. Fork it before
 * any verbs object exists (the child only sleeps on a pipe, and exits
 * when its parent closes it).
 */
#ifndef BENCH_CMA_H
#define BENCH_CMA_H

#include <stddef.h>
#include <sys/types.h>

#define CMA_FLOOR_MIN (64u << 10) /* smaller sizes get no floor */

struct cma_floor {
	pid_t child;    /* 0: none (not started, or CMA refused) */
	int pipe_w;     /* the child exits at EOF */
	void *buf;      /* max bytes, the same address in the child */
	size_t max;
};

/* Forks the child (pinned to CPU child_cpu, unless it is negative) and
 * waits until it holds its own pages; on failure the floor is simply
 * absent (a note on stderr). */
void cma_floor_start(struct cma_floor *f, size_t max, int child_cpu);
/* MB/s (10^6 bytes per second) of process_vm_writev of size bytes into
 * the child, the best of a few short runs; 0 when there is no child or a
 * call failed (CMA refused by a ptrace policy: the note says so once). */
double cma_floor_mbs(struct cma_floor *f, size_t size);
/* The mean time of one process_vm_writev of size bytes into the child
 * (us), over n calls after 100 not timed; 0 as for cma_floor_mbs. */
double cma_floor_call_us(struct cma_floor *f, size_t size, unsigned n);
void cma_floor_stop(struct cma_floor *f);

#endif
