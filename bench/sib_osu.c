/*
 * sib_osu: osu-style message-level benchmarks of libsib between two ranks
 * started by mpirun (PMIx bootstrap), tagged send/receive:
 *   lat    ping-pong, half the round trip (µs)
 *   bw     a window of sends, then a 1-byte answer (MB/s)
 *   bibw   both ranks send a window at once (MB/s, both directions)
 *   rate   8-byte messages, a window at a time (million messages/s)
 * Sizes 1 B (0 for rate) up to the eager limit, powers of two.
 *
 *   mpirun -np 2 sib_osu [lat|bw|bibw|rate|all] [-i ITERS] [-w WINDOW] [-s SIZE] [-R]
 * -s SIZE: the latency (or bandwidth) at that one size (per-message counts:
 * perf, strace).
 * Sends pass SIB_OP_NOREQ (a send done in the call makes no request, as
 * UCX's ucp_tag_send_nbx returns none; ucx_perftest relies on it); -R
 * asks for a request per send instead (wait and free it: the A/B).
 * Progress mode from SIB_PROGRESS (default: polling).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/sib.h"   /* installed as build/include/sib.h */

static struct sib_job job;
static sib_worker_t *W;
static sib_ep_t *peer;
static int iters = 2000, window = 64;
static size_t only;   /* -s SIZE: lat at this size alone */
static struct sib_op_params send_op = { .flags = SIB_OP_NOREQ };

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void wait_req(sib_request_t *r)
{
	sib_status_t st;

	if (!r)        /* a send done in its call (SIB_DONE) */
		return;
	st = sib_request_wait(r, NULL);
	if (st != SIB_OK) {
		fprintf(stderr, "sib_osu: %s\n", sib_status_string(st));
		exit(1);
	}
	sib_request_free(r);
}

static void xsend(const void *b, size_t n, uint64_t tag)
{
	sib_request_t *r;

	if (sib_tag_send_nb(peer, b, n, tag, 0, &send_op, &r) < 0)
		exit(1);
	wait_req(r);
}

static void xrecv(void *b, size_t n, uint64_t tag)
{
	sib_request_t *r;

	if (sib_tag_recv_nb(W, b, n, SIB_ANY_SOURCE, tag, ~0ull, 0, NULL, &r))
		exit(1);
	wait_req(r);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Half the round trip: the mean, and the median (which a loaded machine's
 * scheduling stalls move less) in *median. One clock read per round trip
 * (the end of one is the start of the next), as ucx_perftest reads its
 * clock once per iteration: a second read was ~22 ns of each round trip
 * here (~11 ns of a one-way figure of ~0.37 us). */
static double lat(uint8_t *b, size_t n, double *median)
{
	int warm = iters / 10;
	double *rt = calloc((size_t)iters, sizeof(*rt)), t0, prev, t;

	t0 = prev = now_us();
	for (int i = 0; i < iters + warm; i++) {
		if (job.rank == 0) {
			xsend(b, n, 1);
			xrecv(b, n, 1);
		} else {
			xrecv(b, n, 1);
			xsend(b, n, 1);
		}
		t = now_us();
		if (i >= warm)
			rt[i - warm] = (t - prev) / 2;
		else
			t0 = t;
		prev = t;
	}
	t = (prev - t0) / iters / 2;
	qsort(rt, (size_t)iters, sizeof(*rt), cmp_double);
	*median = rt[iters / 2];
	free(rt);
	return t;
}

/*
 * One window out (and, for bibw, one in), then the answer. Windows
 * holding 10,000 messages (or a tenth of the run, if more) go first,
 * untimed, as ucx_perftest runs 10,000 warm-up iterations (osu_bw skips
 * its first windows likewise): the first messages to a host open its
 * connection (the UD handshake) and touch the receive buffers for the
 * first time, which in a 200,000-message run (8 ms) was half the time
 * measured.
 */
static double bw(uint8_t *sb, uint8_t *rb, size_t n, int bidir)
{
	sib_request_t **rq = calloc((size_t)window * 2, sizeof(*rq));
	int reps = iters / window > 10 ? iters / window : 10;
	int warm = (10000 + window - 1) / window;

	if (warm < reps / 10)
		warm = reps / 10;
	double t0 = 0;

	for (int k = -warm; k < reps; k++) {
		if (k == 0)
			t0 = now_us();
		int m = 0;
		bool sender = job.rank == 0 || bidir;
		bool receiver = job.rank == 1 || bidir;

		for (int i = 0; receiver && i < window; i++)
			sib_tag_recv_nb(W, rb, n, SIB_ANY_SOURCE, 2, ~0ull, 0, NULL, &rq[m++]);
		for (int i = 0; sender && i < window; i++)
			sib_tag_send_nb(peer, sb, n, 2, 0, &send_op, &rq[m++]);
		for (int i = 0; i < m; i++)
			wait_req(rq[i]);
		if (job.rank == 0)
			xrecv(rb, 1, 3);
		else
			xsend(sb, 1, 3);
	}
	free(rq);
	return (double)n * window * reps * (bidir ? 2 : 1) / (now_us() - t0);
}

int main(int argc, char **argv)
{
	const char *what = "all";
	struct sib_worker_attr a;
	uint8_t *sb, *rb;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-i") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-w") && i + 1 < argc)
			window = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-s") && i + 1 < argc)
			only = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "-R"))
			send_op.flags = 0;
		else
			what = argv[i];
	}
	if (sib_init_pmix(NULL, &job) || job.size != 2) {
		fprintf(stderr, "sib_osu: two ranks under mpirun\n");
		return 1;
	}
	W = job.worker;
	peer = job.eps[1 - job.rank];
	sib_worker_query(W, &a);
	sb = calloc(1, a.eager_max);
	rb = calloc(1, a.eager_max);
	if (job.rank == 0)
		printf("# libsib: short <= %zu B, eager <= %zu B, progress %s\n",
		       a.short_max, a.eager_max, a.progress_mode ? "blocking" : "poll");
	if (!strcmp(what, "lat") || !strcmp(what, "all")) {
		if (job.rank == 0)
			printf("# sib_osu latency (half the round trip)\n"
			       "# size    mean us  median us\n");
		for (size_t n = 1; n <= a.eager_max; n = n * 2 > a.eager_max &&
		     n < a.eager_max ? a.eager_max : n * 2) {
			double med, us;

			if (only && n != only && !(only > a.eager_max &&
			    n == a.eager_max))
				continue;
			us = lat(sb, n, &med);
			if (job.rank == 0)
				printf("%-8zu %8.3f %10.3f\n", n, us, med);
		}
	}
	for (int bidir = 0; bidir < 2; bidir++) {
		if (strcmp(what, bidir ? "bibw" : "bw") && strcmp(what, "all"))
			continue;
		if (job.rank == 0)
			printf("# sib_osu %s\n# size    MB/s\n", bidir ? "bi-bandwidth" : "bandwidth");
		for (size_t n = 1; n <= a.eager_max; n = n * 2 > a.eager_max &&
		     n < a.eager_max ? a.eager_max : n * 2) {
			double mbs;

			if (only && n != only)
				continue;
			mbs = bw(sb, rb, n, bidir);

			if (job.rank == 0)
				printf("%-8zu %10.1f\n", n, mbs);
		}
	}
	if (!strcmp(what, "rate") || !strcmp(what, "all")) {
		struct sib_worker_attr a0, a1;
		double mbs;

		sib_worker_query(W, &a0);
		mbs = bw(sb, rb, 8, 0);
		sib_worker_query(W, &a1);
		if (job.rank == 0)
			printf("# batches: %llu messages in %llu SENDs\n"
			       "# sib_osu message rate, 8 B, window %d: %.3f M msg/s\n",
			       (unsigned long long)(a1.tx_batched - a0.tx_batched),
			       (unsigned long long)(a1.tx_batches - a0.tx_batches),
			       window, mbs / 8);
	}
	sib_job_fence(&job);
	sib_fini_pmix(&job);
	return 0;
}
