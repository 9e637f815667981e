/*
 * sib_rma: libsib's large-message and one-sided figures between two ranks
 * started by mpirun (PMIx bootstrap), in the shapes of ucx_perftest's
 * tests so the two can be printed side by side:
 *   tag_lat   tagged ping-pong, half the round trip (µs, median)
 *   tag_bw    a window of sends then a 1-byte answer (MB/s)
 *   put_lat   put ping-pong: rank 0 puts n bytes, rank 1 sees the last byte
 *             change in its memory and puts back (half round trip, µs)
 *   put_bw    a window of puts, then a worker flush (MB/s)
 *   get_lat   one get, waited (µs)
 *   get_bw    a window of gets, then a flush (MB/s)
 *   add_lat   one 64-bit fetch-add, waited (µs)
 * Sizes 1 B .. 64 MiB (powers of 4, plus 1 MiB), eager and rendezvous.
 * Prints the registration cache's hits, misses and the mean cost of a miss.
 * The exposed region (the target of puts, gets and atomics) is, by -a:
 *   memfd   sib_mem_map(NULL): libsib's allocation, a shared memfd that the
 *           peer's HCA maps (memcpy, no system call) — the default
 *   anon    sib_mem_map(NULL) with SIB_MEM_ALLOC=anon: private memory
 *   malloc  the application's malloc'd buffer given to sib_mem_map
 * (both of the last two: one cross-memory-attach system call per put/get).
 *
 *   mpirun -np 2 sib_rma [TEST|all] [-i ITERS] [-w WINDOW] [-m MAXSIZE]
 *                        [-a memfd|anon|malloc]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/sib.h"

static struct sib_job job;
static sib_worker_t *W;
static sib_ep_t *peer;
static int iters = 200, window = 32;
static size_t maxsize = 64u << 20;
static sib_mem_t *mem;
static sib_rkey_t *rkey;
static uint64_t rbase;
static volatile uint8_t *local;
static const char *alloc = "memfd";
static void *user_region;

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void wait_req(sib_request_t *r)
{
	sib_status_t st;

	if (!r)
		return;
	st = sib_request_wait(r, NULL);
	if (st != SIB_OK) {
		fprintf(stderr, "sib_rma: %s\n", sib_status_string(st));
		exit(1);
	}
	sib_request_free(r);
}

static sib_request_t *isend(const void *b, size_t n, uint64_t tag)
{
	sib_request_t *r;

	if (sib_tag_send_nb(peer, b, n, tag, 0, NULL, &r))
		exit(1);
	return r;
}

static sib_request_t *irecv(void *b, size_t n, uint64_t tag)
{
	sib_request_t *r;

	if (sib_tag_recv_nb(W, b, n, SIB_ANY_SOURCE, tag, ~0ull, 0, NULL, &r))
		exit(1);
	return r;
}

static int its(size_t n)
{
	int i = n >= (16u << 20) ? iters / 20 : n >= (1u << 20) ? iters / 5 : iters;

	return i < 5 ? 5 : i;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmpd);
	return v[n / 2];
}

static void flush(void)
{
	sib_request_t *f;

	if (sib_worker_flush(W, &f) == SIB_INPROGRESS)
		wait_req(f);
}

static double tag_lat(uint8_t *b, size_t n)
{
	int it = its(n);
	double *t = malloc(sizeof(double) * (size_t)it), r;

	for (int i = 0; i < it; i++) {
		double t0 = now_us();

		if (job.rank == 0) {
			wait_req(isend(b, n, 1));
			wait_req(irecv(b, n, 2));
		} else {
			wait_req(irecv(b, n, 1));
			wait_req(isend(b, n, 2));
		}
		t[i] = (now_us() - t0) / 2;
	}
	r = median(t, it);
	free(t);
	return r;
}

static double tag_bw(uint8_t *sb, uint8_t *rb, size_t n)
{
	int it = its(n) / 4 + 2, w = n >= (4u << 20) ? 4 : window;
	sib_request_t **r = malloc(sizeof(*r) * (size_t)w);
	double t0 = 0;

	for (int i = 0; i < it; i++) {
		if (i == 1)
			t0 = now_us();   /* the first round warms the cache */
		for (int k = 0; k < w; k++)
			r[k] = job.rank == 0 ? isend(sb, n, 3) : irecv(rb, n, 3);
		for (int k = 0; k < w; k++)
			wait_req(r[k]);
		if (job.rank == 0)
			wait_req(irecv(rb, 1, 4));
		else
			wait_req(isend(sb, 1, 4));
	}
	free(r);
	return (double)n * w * (it - 1) / (now_us() - t0);
}

static double put_lat(uint8_t *b, size_t n)
{
	int it = its(n);
	double *t = malloc(sizeof(double) * (size_t)it), r;
	sib_request_t *q;

	for (int i = 0; i < it; i++) {
		uint8_t v = (uint8_t)(i * 2 + 1 + job.rank);
		double t0 = now_us();

		if (job.rank == 0) {
			b[n - 1] = v;
			if (sib_put_nb(peer, b, n, rbase, rkey, NULL, &q))
				exit(1);
			wait_req(q);
			while (local[n - 1] != (uint8_t)(v + 1))
				sib_worker_progress(W);
		} else {
			while (local[n - 1] != (uint8_t)(v - 1))
				sib_worker_progress(W);
			b[n - 1] = v;
			if (sib_put_nb(peer, b, n, rbase, rkey, NULL, &q))
				exit(1);
			wait_req(q);
		}
		t[i] = (now_us() - t0) / 2;
	}
	r = median(t, it);
	free(t);
	return r;
}

static double one_sided(uint8_t *b, size_t n, int get, int bwmode)
{
	int it = its(n), w = bwmode ? (n >= (4u << 20) ? 4 : window) : 1;
	double *t = malloc(sizeof(double) * (size_t)it), r, t00 = now_us();
	sib_request_t *q;

	for (int i = 0; i < it; i++) {
		double t0 = now_us();

		for (int k = 0; k < w; k++) {
			if ((get ? sib_get_nb(peer, b, n, rbase, rkey, NULL, &q) :
			     sib_put_nb(peer, b, n, rbase, rkey, NULL, &q)))
				exit(1);
			if (bwmode)
				sib_request_free(q);
			else
				wait_req(q);
		}
		if (bwmode)
			flush();
		t[i] = now_us() - t0;
	}
	r = bwmode ? (double)n * w * it / (now_us() - t00) : median(t, it);
	free(t);
	return r;
}

static double add_lat(void)
{
	int it = iters * 5;
	double *t = malloc(sizeof(double) * (size_t)it), r;
	sib_request_t *q;
	uint64_t old;

	for (int i = 0; i < it; i++) {
		double t0 = now_us();

		if (sib_atomic_fadd64_nb(peer, rbase, rkey, 1, &old, NULL, &q))
			exit(1);
		wait_req(q);
		t[i] = now_us() - t0;
	}
	r = median(t, it);
	free(t);
	return r;
}

static void setup_rma(void)
{
	void *blob;
	size_t blen;
	uint8_t msg[512];
	sib_request_t *r[2];

	if (!strcmp(alloc, "malloc")) {
		user_region = malloc(maxsize);
		if (!user_region)
			exit(1);
		memset(user_region, 0, maxsize);
	} else if (!strcmp(alloc, "anon")) {
		setenv("SIB_MEM_ALLOC", "anon", 1);
	}
	if (sib_mem_map(W, user_region, maxsize, &mem) ||
	    sib_rkey_pack(mem, &blob, &blen))
		exit(1);
	if (job.rank == 0)
		printf("# region: %s (%s)\n", alloc,
		       sib_mem_fd(mem) >= 0 ? "shared memfd: the mapping route" :
		       "private memory: cross-memory attach");
	local = sib_mem_addr(mem);
	*(uint64_t *)msg = (uintptr_t)local;
	memcpy(msg + 8, blob, blen);
	r[0] = irecv(msg + 256, 256, 9);
	r[1] = isend(msg, blen + 8, 9);
	wait_req(r[0]);
	wait_req(r[1]);
	rbase = *(uint64_t *)(msg + 256);
	if (sib_rkey_unpack(peer, msg + 264, blen, &rkey))
		exit(1);
	sib_rkey_buffer_free(blob);
}

static void sizes_loop(const char *name, uint8_t *sb, uint8_t *rb)
{
	if (job.rank == 0)
		printf("# %s\n# %10s %14s\n", name, "bytes",
		       strstr(name, "bw") ? "MB/s" : "usec");
	for (size_t n = 1; n <= maxsize; n = n < 1024 ? n * 4 : n * 4) {
		double v = 0;
		size_t m = n;

		for (int pass = 0; pass < 1 + (n == (256u << 10)); pass++) {
			if (pass)
				m = 1u << 20;   /* also 1 MiB, the target's size */
			if (!strcmp(name, "tag_lat"))
				v = tag_lat(sb, m);
			else if (!strcmp(name, "tag_bw"))
				v = tag_bw(sb, rb, m);
			else if (job.rank == 0 && !strcmp(name, "put_lat"))
				v = put_lat(sb, m);
			else if (job.rank == 1 && !strcmp(name, "put_lat"))
				put_lat(sb, m);
			else if (job.rank == 0 && !strcmp(name, "put_bw"))
				v = one_sided(sb, m, 0, 1);
			else if (job.rank == 0 && !strcmp(name, "get_lat"))
				v = one_sided(rb, m, 1, 0);
			else if (job.rank == 0 && !strcmp(name, "get_bw"))
				v = one_sided(rb, m, 1, 1);
			if (job.rank == 0)
				printf("  %10zu %14.2f\n", m, v);
			fflush(stdout);
			sib_job_fence(&job);
		}
	}
}

int main(int argc, char **argv)
{
	const char *which = "all";
	const char *tests[] = { "tag_lat", "tag_bw", "put_lat", "put_bw",
				"get_lat", "get_bw" };
	struct sib_worker_attr a;
	uint8_t *sb, *rb;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-i") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-w") && i + 1 < argc)
			window = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-m") && i + 1 < argc)
			maxsize = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "-a") && i + 1 < argc)
			alloc = argv[++i];
		else
			which = argv[i];
	}
	if (sib_init_pmix(NULL, &job) || job.size != 2) {
		fprintf(stderr, "sib_rma: needs mpirun -np 2\n");
		return 1;
	}
	W = job.worker;
	peer = job.eps[1 - job.rank];
	sb = malloc(maxsize);
	rb = malloc(maxsize);
	memset(sb, 1, maxsize);
	memset(rb, 2, maxsize);
	setup_rma();
	sib_job_fence(&job);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (!strcmp(which, "all") || !strcmp(which, tests[i]))
			sizes_loop(tests[i], sb, rb);
	if (!strcmp(which, "all") || !strcmp(which, "add_lat")) {
		double v = job.rank == 0 ? add_lat() : 0;

		if (job.rank == 0)
			printf("# add_lat\n  %10d %14.2f\n", 8, v);
		sib_job_fence(&job);
	}
	sib_worker_query(W, &a);
	if (job.rank == 0)
		printf("# registration cache: %lu hits, %lu misses (%.1f%% hits), "
		       "mean miss %.1f usec\n", (unsigned long)a.reg_hits,
		       (unsigned long)a.regs_total,
		       100.0 * a.reg_hits / (a.reg_hits + a.regs_total + 1e-9),
		       a.regs_total ? a.reg_miss_ns / 1e3 / a.regs_total : 0.0);
	sib_rkey_destroy(rkey);
	sib_mem_unmap(mem);
	free(user_region);
	sib_job_fence(&job);
	sib_fini_pmix(&job);
	return 0;
}
