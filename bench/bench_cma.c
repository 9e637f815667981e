/* bench_cma: see bench_cma.h. */
#include "bench_cma.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define FLOOR_RUNS   5        /* the best of these many runs */
#define FLOOR_BYTES  (64u << 20) /* bytes moved per run (at least 4 calls) */

void cma_floor_start(struct cma_floor *f, size_t max, int child_cpu)
{
	int p[2], ready[2];
	char c;

	*f = (struct cma_floor){ .pipe_w = -1, .max = max };
	f->buf = malloc(max);
	if (!f->buf || pipe(p)) {
		fprintf(stderr, "%s: no CMA floor (out of memory or fds)\n", bench_prog);
		free(f->buf);
		f->buf = NULL;
		return;
	}
	if (pipe(ready)) {
		fprintf(stderr, "%s: no CMA floor (out of fds)\n", bench_prog);
		close(p[0]);
		close(p[1]);
		free(f->buf);
		f->buf = NULL;
		return;
	}
	memset(f->buf, 0, max);
	f->child = fork();
	if (f->child == 0) {
		/* the child: its own copy of buf, written by the parent */
		close(p[1]);
		close(ready[0]);
		bench_pin(child_cpu);
		memset(f->buf, 1, max);   /* its own pages, not the parent's */
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		while (read(p[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[0]);
	close(ready[1]);
	if (f->child < 0 || read(ready[0], &c, 1) != 1) {
		fprintf(stderr, "%s: no CMA floor (its child did not start)\n", bench_prog);
		close(ready[0]);
		f->pipe_w = p[1];
		cma_floor_stop(f);
		return;
	}
	close(ready[0]);
	f->pipe_w = p[1];
}

/* One run: n calls of size bytes; MB/s, or 0 when a call failed. */
static double floor_run(struct cma_floor *f, size_t size, unsigned n)
{
	struct iovec l = { f->buf, size }, r = { f->buf, size };
	uint64_t t0 = bench_now_ns(), dt;

	for (unsigned i = 0; i < n; i++) {
		if (process_vm_writev(f->child, &l, 1, &r, 1, 0) != (ssize_t)size) {
			fprintf(stderr, "%s: no CMA floor (process_vm_writev: %s)\n",
				bench_prog, strerror(errno));
			return 0;
		}
	}
	dt = bench_now_ns() - t0;
	return dt ? (double)size * n * 1e3 / (double)dt : 0;
}

double cma_floor_mbs(struct cma_floor *f, size_t size)
{
	unsigned n = (unsigned)(FLOOR_BYTES / size) < 4 ? 4 : (unsigned)(FLOOR_BYTES / size);
	double best = 0;

	if (!f->child || size > f->max)
		return 0;
	floor_run(f, size, 1);   /* the child's pages, faulted in already */
	for (int i = 0; i < FLOOR_RUNS; i++) {
		double v = floor_run(f, size, n);

		if (v == 0) {
			cma_floor_stop(f);
			return 0;
		}
		if (v > best)
			best = v;
	}
	return best;
}

double cma_floor_call_us(struct cma_floor *f, size_t size, unsigned n)
{
	struct iovec l = { f->buf, size }, r = { f->buf, size };
	uint64_t t0 = 0;

	if (!f->child || size > f->max || !n)
		return 0;
	for (unsigned i = 0; i < n + 100; i++) {
		if (i == 100)
			t0 = bench_now_ns();
		if (process_vm_writev(f->child, &l, 1, &r, 1, 0) != (ssize_t)size) {
			fprintf(stderr, "%s: process_vm_writev: %s\n", bench_prog,
				strerror(errno));
			cma_floor_stop(f);
			return 0;
		}
	}
	return (double)(bench_now_ns() - t0) / 1000.0 / n;
}

void cma_floor_stop(struct cma_floor *f)
{
	if (f->pipe_w >= 0)
		close(f->pipe_w);
	if (f->child > 0)
		waitpid(f->child, NULL, 0);
	free(f->buf);
	*f = (struct cma_floor){ .pipe_w = -1 };
}
