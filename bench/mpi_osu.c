/*
 * mpi_osu: osu-style MPI benchmarks, one program for every transport that
 * Open MPI can be given (--mca btl self,vader / self,tcp / self,softib).
 *
 *   mpirun -np 2 build/bin/mpi_osu -t lat [-m MIN:MAX] [-i ITERS] [-x WARMUP]
 *
 * Tests (-t):
 *   lat        ping-pong between ranks 0 and 1; half the round trip, in us
 *   bw         rank 0 streams windows of -W non-blocking sends to rank 1,
 *              which answers each window with a 0-byte message; MB/s
 *   bibw       both ranks stream windows at once; the sum, MB/s
 *   mr         multi-pair: rank i < n/2 streams to rank i + n/2 (all pairs
 *              at once); aggregate MB/s and messages/s
 *   allreduce  MPI_Allreduce of SIZE bytes of floats (sum); average over
 *              the ranks of each rank's mean time, in us
 *   alltoall   MPI_Alltoall of SIZE bytes to every peer; same average
 *   put_lat    rank 0 puts SIZE bytes into rank 1's window and flushes,
 *              inside one passive-target epoch (MPI_Win_lock); in us
 *
 * Sizes go in powers of two from MIN to MAX (a k, m or g suffix is a power
 * of 1024); MIN 0 prints the 0-byte row first, then 1, 2, 4...  Messages
 * above 64 KiB run a tenth of the iterations (at least 10), as such tests
 * usually do, so that a sweep to 4 MiB stays short.  -c checks the data
 * that arrives (a pattern that depends on size and iteration): slower,
 * for tests of a transport rather than measurements.  -M makes lat and
 * put_lat report the median iteration instead of the mean (each
 * iteration timed): the figure a loaded machine disturbs least.
 *
 * Output: a '#' header naming the test, then "# Size  <measure>" and one
 * row per size, two columns (three for mr: MB/s and messages/s), the
 * format that osu_* tools print, so that scripts and plots read both.
 * Bandwidth is in MB/s (10^6 bytes per second).  Rank 0 prints.
 *
 * Exit status 0; 1 on a data mismatch (-c) or bad use; MPI errors abort
 * the job through MPI's default error handler.
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG_MSG      (64u << 10) /* above: fewer iterations */
#define DEFAULT_ITER 10000
#define DEFAULT_WARM 200
#define BW_ITER      100  /* windows per size for bw/bibw/mr */
#define BW_WARM      10
#define DEFAULT_WIN  64
#define TAG_DATA     1
#define TAG_ACK      2

enum test { T_LAT, T_BW, T_BIBW, T_MR, T_ALLREDUCE, T_ALLTOALL, T_PUT_LAT,
	    T_COUNT };

struct opts {
	enum test test;
	uint64_t min, max;
	int iters, warm;     /* 0: the defaults of the test */
	int window;
	bool check;
	bool median;         /* -M: lat/put_lat report the median sample */
};

static int rank, nranks;
static unsigned long mismatches;

struct test_desc {
	const char *name;
	const char *title;
	const char *columns[2]; /* second: mr's messages/s, else NULL */
	uint64_t min_size; /* smallest size that makes sense */
	int min_ranks;
	void (*run)(const struct opts *o);
};

static void die(const char *msg)
{
	if (rank == 0)
		fprintf(stderr, "mpi_osu: %s\n", msg);
	MPI_Finalize();
	exit(1);
}

/* ---- sizes, buffers, data checks ---- */

static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (end == s || *end)
		die("bad size (want a number with an optional k, m or g)");
	return v;
}

/* The next size of a sweep: 0, 1, 2, 4, ... */
static uint64_t next_size(uint64_t s) { return s ? s * 2 : 1; }

static void *buf_alloc(size_t n)
{
	void *p;

	/* page-aligned, as a user's large buffers usually are, and touched
	 * so that first-touch page faults stay out of the timing */
	if (posix_memalign(&p, 4096, n ? n : 1))
		die("out of memory");
	memset(p, 0, n ? n : 1);
	return p;
}

static int iters_for(const struct opts *o, uint64_t size, int deflt)
{
	int n = o->iters ? o->iters : deflt;

	if (size > BIG_MSG && (n /= 10) < 10)
		n = 10;
	return n;
}

static int warm_for(const struct opts *o, uint64_t size, int deflt)
{
	int n = o->warm >= 0 ? o->warm : deflt;

	return size > BIG_MSG ? (n + 9) / 10 : n;
}

/* The byte at offset i of message number it: changes with both, so that a
 * stale or misplaced buffer shows. */
static inline uint8_t pattern(uint64_t i, int it)
{
	return (uint8_t)(i * 7 + (unsigned)it * 13 + 1);
}

static void fill(uint8_t *p, uint64_t n, int it)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = pattern(i, it);
}

static void verify(const uint8_t *p, uint64_t n, int it)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != pattern(i, it)) {
			if (mismatches++ < 5)
				fprintf(stderr, "mpi_osu: rank %d: byte %llu of "
					"message %d is %u, want %u\n", rank,
					(unsigned long long)i, it, p[i],
					pattern(i, it));
			return;
		}
}

static void print_row(uint64_t size, double v)
{
	printf("%-10llu %18.2f\n", (unsigned long long)size, v);
	fflush(stdout);
}

/* Per-iteration samples for -M (median instead of mean): on a loaded
 * machine a few preempted iterations move the mean by far more than the
 * transport's own cost, the median not at all. */
struct samples {
	double *v;
	int n;
	double last;
};

static void samples_init(struct samples *s, int n)
{
	s->v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
	if (!s->v)
		die("out of memory");
	s->n = 0;
	s->last = MPI_Wtime();
}

static void samples_take(struct samples *s)
{
	double now = MPI_Wtime();

	s->v[s->n++] = now - s->last;
	s->last = now;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double samples_median(struct samples *s)
{
	qsort(s->v, s->n, sizeof(double), cmp_double);
	double m = s->n % 2 ? s->v[s->n / 2]
			    : (s->v[s->n / 2 - 1] + s->v[s->n / 2]) / 2;
	free(s->v);
	return m;
}

/* ---- lat: ping-pong between ranks 0 and 1 ---- */

static void run_lat(const struct opts *o)
{
	uint8_t *sbuf = buf_alloc(o->max), *rbuf = buf_alloc(o->max);
	int peer = rank == 0 ? 1 : 0;

	for (uint64_t size = o->min; size <= o->max; size = next_size(size)) {
		int n = iters_for(o, size, DEFAULT_ITER);
		int w = warm_for(o, size, DEFAULT_WARM);
		double t0 = 0;
		struct samples sm = { 0 };

		MPI_Barrier(MPI_COMM_WORLD);
		if (rank > 1)
			continue;
		for (int it = -w; it < n; it++) {
			if (it == 0) {
				t0 = MPI_Wtime();
				if (o->median)
					samples_init(&sm, n);
			} else if (it > 0 && o->median) {
				samples_take(&sm);
			}
			if (o->check)
				fill(sbuf, size, it);
			if (rank == 0) {
				MPI_Send(sbuf, (int)size, MPI_BYTE, peer,
					 TAG_DATA, MPI_COMM_WORLD);
				MPI_Recv(rbuf, (int)size, MPI_BYTE, peer,
					 TAG_DATA, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(rbuf, (int)size, MPI_BYTE, peer,
					 TAG_DATA, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				MPI_Send(sbuf, (int)size, MPI_BYTE, peer,
					 TAG_DATA, MPI_COMM_WORLD);
			}
			if (o->check)
				verify(rbuf, size, it);
		}
		if (o->median) {
			samples_take(&sm);
			double m = samples_median(&sm);
			if (rank == 0)
				print_row(size, m * 1e6 / 2.0);
		} else if (rank == 0) {
			print_row(size, (MPI_Wtime() - t0) * 1e6 / (2.0 * n));
		}
	}
	free(sbuf);
	free(rbuf);
}

/* ---- bw, bibw, mr: windows of non-blocking sends ---- */

/* One window: `window` messages from the sender to the receiver, and a
 * 0-byte message back once all have arrived (the receiver's "got them",
 * which keeps the sender from running ahead by more than one window). */
static void window_send(uint8_t *buf, uint64_t size, int peer, int window,
			MPI_Request *req, bool check, int it)
{
	if (check)
		fill(buf, size, it);
	for (int k = 0; k < window; k++)
		MPI_Isend(buf, (int)size, MPI_BYTE, peer, TAG_DATA,
			  MPI_COMM_WORLD, &req[k]);
	MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
	MPI_Recv(NULL, 0, MPI_BYTE, peer, TAG_ACK, MPI_COMM_WORLD,
		 MPI_STATUS_IGNORE);
}

static void window_recv(uint8_t *buf, uint64_t size, int peer, int window,
			MPI_Request *req, bool check, int it)
{
	/* with -c every message of the window lands in its own slot, so
	 * each can be checked; otherwise they share one buffer, as osu_bw */
	for (int k = 0; k < window; k++)
		MPI_Irecv(buf + (check ? k * size : 0), (int)size, MPI_BYTE,
			  peer, TAG_DATA, MPI_COMM_WORLD, &req[k]);
	MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
	if (check)
		for (int k = 0; k < window; k++)
			verify(buf + k * size, size, it);
	MPI_Send(NULL, 0, MPI_BYTE, peer, TAG_ACK, MPI_COMM_WORLD);
}

/* bibw: both sides post their receives and sends at once, then swap acks. */
static void window_both(uint8_t *sbuf, uint8_t *rbuf, uint64_t size, int peer,
			int window, MPI_Request *req, bool check, int it)
{
	if (check)
		fill(sbuf, size, it);
	for (int k = 0; k < window; k++)
		MPI_Irecv(rbuf + (check ? k * size : 0), (int)size, MPI_BYTE,
			  peer, TAG_DATA, MPI_COMM_WORLD, &req[k]);
	for (int k = 0; k < window; k++)
		MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, TAG_DATA,
			  MPI_COMM_WORLD, &req[window + k]);
	MPI_Waitall(2 * window, req, MPI_STATUSES_IGNORE);
	if (check)
		for (int k = 0; k < window; k++)
			verify(rbuf + k * size, size, it);
	MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, TAG_ACK, NULL, 0, MPI_BYTE, peer,
		     TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* Shared by bw, bibw and mr.  The pairs: (0, 1) for bw and bibw; for mr
 * rank i < n/2 sends to rank i + n/2.  Returns nothing; rank 0 prints. */
static void run_stream(const struct opts *o)
{
	bool mr = o->test == T_MR, bi = o->test == T_BIBW;
	int half = mr ? nranks / 2 : 1;
	int peer = rank < half ? rank + half : rank - half;
	bool active = rank < 2 * half, sender = rank < half;
	size_t rlen = o->max * (o->check ? (size_t)o->window : 1);
	uint8_t *sbuf = buf_alloc(o->max), *rbuf = buf_alloc(rlen);
	MPI_Request *req = malloc(2 * (size_t)o->window * sizeof(*req));

	if (!req)
		die("out of memory");
	for (uint64_t size = o->min; size <= o->max; size = next_size(size)) {
		int n = iters_for(o, size, BW_ITER);
		int w = warm_for(o, size, BW_WARM);
		double t0 = 0, t = 0, tmax = 0;

		MPI_Barrier(MPI_COMM_WORLD);
		if (active) {
			for (int it = -w; it < n; it++) {
				if (it == 0)
					t0 = MPI_Wtime();
				if (bi)
					window_both(sbuf, rbuf, size, peer,
						    o->window, req, o->check, it);
				else if (sender)
					window_send(sbuf, size, peer, o->window,
						    req, o->check, it);
				else
					window_recv(rbuf, size, peer, o->window,
						    req, o->check, it);
			}
			t = MPI_Wtime() - t0;
		}
		/* aggregate rate: all the pairs' bytes over the slowest
		 * pair's time (they ran at once) */
		MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0,
			   MPI_COMM_WORLD);
		if (rank != 0)
			continue;
		double msgs = (double)n * o->window * half * (bi ? 2 : 1);
		double mbs = msgs * (double)size / tmax / 1e6;
		if (mr)
			printf("%-10llu %18.2f %18.2f\n",
			       (unsigned long long)size, mbs, msgs / tmax);
		else
			print_row(size, mbs);
		fflush(stdout);
	}
	free(req);
	free(sbuf);
	free(rbuf);
}

/* ---- collectives ---- */

/* Prints the mean over the ranks of each rank's mean time per call. */
static void print_coll(uint64_t size, double t, int n)
{
	double mine = t * 1e6 / n, sum = 0;

	MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		print_row(size, sum / nranks);
}

static void run_allreduce(const struct opts *o)
{
	uint64_t maxc = o->max / sizeof(float);
	float *in = buf_alloc(maxc * sizeof(float));
	float *out = buf_alloc(maxc * sizeof(float));

	for (uint64_t size = o->min; size <= o->max; size = next_size(size)) {
		int cnt = (int)(size / sizeof(float));
		int n = iters_for(o, size, DEFAULT_ITER / 10);
		int w = warm_for(o, size, DEFAULT_WARM / 10);
		double t0 = 0;

		if (!cnt)
			continue;
		MPI_Barrier(MPI_COMM_WORLD);
		for (int it = -w; it < n; it++) {
			if (it == 0)
				t0 = MPI_Wtime();
			if (o->check)
				for (int k = 0; k < cnt; k++)
					in[k] = (float)((rank + k + it) % 64);
			MPI_Allreduce(in, out, cnt, MPI_FLOAT, MPI_SUM,
				      MPI_COMM_WORLD);
			if (!o->check)
				continue;
			/* small integers: the float sum is exact */
			for (int k = 0; k < cnt; k++) {
				float want = 0;
				for (int r = 0; r < nranks; r++)
					want += (float)((r + k + it) % 64);
				if (out[k] != want && mismatches++ < 5)
					fprintf(stderr, "mpi_osu: rank %d: "
						"allreduce element %d is %g, "
						"want %g\n", rank, k, out[k],
						want);
			}
		}
		print_coll(size, MPI_Wtime() - t0, n);
	}
	free(in);
	free(out);
}

static void run_alltoall(const struct opts *o)
{
	size_t all = o->max * (size_t)nranks;
	uint8_t *sbuf = buf_alloc(all), *rbuf = buf_alloc(all);

	for (uint64_t size = o->min; size <= o->max; size = next_size(size)) {
		int n = iters_for(o, size, DEFAULT_ITER / 10);
		int w = warm_for(o, size, DEFAULT_WARM / 10);
		double t0 = 0;

		MPI_Barrier(MPI_COMM_WORLD);
		for (int it = -w; it < n; it++) {
			if (it == 0)
				t0 = MPI_Wtime();
			/* block r of rank q's send buffer carries message
			 * (q * nranks + r): each arriving block is known */
			if (o->check)
				for (int r = 0; r < nranks; r++)
					fill(sbuf + r * size, size,
					     it + rank * nranks + r);
			MPI_Alltoall(sbuf, (int)size, MPI_BYTE, rbuf,
				     (int)size, MPI_BYTE, MPI_COMM_WORLD);
			if (o->check)
				for (int q = 0; q < nranks; q++)
					verify(rbuf + q * size, size,
					       it + q * nranks + rank);
		}
		print_coll(size, MPI_Wtime() - t0, n);
	}
	free(sbuf);
	free(rbuf);
}

/* ---- put_lat: MPI_Put + MPI_Win_flush in a passive-target epoch ---- */

static void run_put_lat(const struct opts *o)
{
	uint8_t *sbuf = buf_alloc(o->max), *wbuf;
	MPI_Win win;

	/* MPI_Win_allocate lets the implementation place the window where
	 * its one-sided path reaches it best (osc rdma registers it) */
	MPI_Win_allocate((MPI_Aint)(o->max ? o->max : 1), 1, MPI_INFO_NULL,
			 MPI_COMM_WORLD, &wbuf, &win);
	memset(wbuf, 0, o->max ? o->max : 1);
	for (uint64_t size = o->min; size <= o->max; size = next_size(size)) {
		int n = iters_for(o, size, DEFAULT_ITER);
		int w = warm_for(o, size, DEFAULT_WARM);
		double t0 = 0;
		struct samples sm = { 0 };

		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 0) {
			MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
			for (int it = -w; it < n; it++) {
				if (it == 0) {
					t0 = MPI_Wtime();
					if (o->median)
						samples_init(&sm, n);
				} else if (it > 0 && o->median) {
					samples_take(&sm);
				}
				if (o->check)
					fill(sbuf, size, it);
				MPI_Put(sbuf, (int)size, MPI_BYTE, 1, 0,
					(int)size, MPI_BYTE, win);
				MPI_Win_flush(1, win);
			}
			double t = (MPI_Wtime() - t0) / n;
			if (o->median) {
				samples_take(&sm);
				t = samples_median(&sm);
			}
			MPI_Win_unlock(1, win);
			print_row(size, t * 1e6);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		/* after the barrier the last put is complete at the target:
		 * rank 1 may read its own window (under a lock of its own, as
		 * the separate memory model asks) */
		if (rank == 1 && o->check) {
			MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
			verify(wbuf, size, n - 1);
			MPI_Win_unlock(1, win);
		}
	}
	MPI_Win_free(&win);
	free(sbuf);
}

static const struct test_desc tests[T_COUNT] = {
	[T_LAT] = { "lat", "Latency Test", { "Latency (us)" }, 0, 2, run_lat },
	[T_BW] = { "bw", "Bandwidth Test", { "Bandwidth (MB/s)" }, 1, 2,
		   run_stream },
	[T_BIBW] = { "bibw", "Bi-Directional Bandwidth Test",
		     { "Bandwidth (MB/s)" }, 1, 2, run_stream },
	[T_MR] = { "mr", "Multiple Bandwidth / Message Rate Test",
		   { "MB/s", "Messages/s" }, 1, 2, run_stream },
	[T_ALLREDUCE] = { "allreduce", "Allreduce Latency Test",
			  { "Avg Latency (us)" }, 4, 1, run_allreduce },
	[T_ALLTOALL] = { "alltoall", "Alltoall Latency Test",
			 { "Avg Latency (us)" }, 1, 1, run_alltoall },
	[T_PUT_LAT] = { "put_lat", "Put Latency Test (MPI_Win_lock, "
			"MPI_Win_flush)", { "Latency (us)" }, 0, 2, run_put_lat },
};

static void usage(void)
{
	if (rank == 0)
		fprintf(stderr,
			"usage: mpirun -np N mpi_osu -t TEST [-m [MIN:]MAX] "
			"[-i ITERS] [-x WARMUP] [-W WINDOW] [-c] [-M]\n"
			"  TEST: lat bw bibw mr allreduce alltoall put_lat\n"
			"  sizes: powers of two, k/m/g suffixes (default "
			"0:4m, 1:4m for bandwidths, 4:1m collectives)\n"
			"  -i ITERS  timed iterations per size (windows for "
			"bandwidths); a tenth above 64k\n"
			"  -x WARMUP untimed iterations first\n"
			"  -W WINDOW messages in flight per window (bw, bibw, "
			"mr; default 64)\n"
			"  -c        check every byte received (slower)\n"
			"  -M        lat, put_lat: the median iteration, not "
			"the mean\n");
	MPI_Finalize();
	exit(1);
}

static void parse(int argc, char **argv, struct opts *o)
{
	const char *t = NULL, *range = NULL;
	int c;

	*o = (struct opts){ .test = T_COUNT, .warm = -1,
			    .window = DEFAULT_WIN };
	opterr = 0;
	while ((c = getopt(argc, argv, "t:m:i:x:W:cMh")) != -1) {
		switch (c) {
		case 't': t = optarg; break;
		case 'm': range = optarg; break;
		case 'i': o->iters = atoi(optarg); break;
		case 'x': o->warm = atoi(optarg); break;
		case 'W': o->window = atoi(optarg); break;
		case 'c': o->check = true; break;
		case 'M': o->median = true; break;
		default: usage();
		}
	}
	if (!t || optind != argc || o->iters < 0 || o->window < 1)
		usage();
	for (int k = 0; k < T_COUNT; k++)
		if (!strcmp(t, tests[k].name))
			o->test = k;
	if (o->test == T_COUNT)
		usage();
	o->min = o->test == T_LAT || o->test == T_PUT_LAT ? 0 : 1;
	o->max = 4u << 20;
	if (o->test == T_ALLREDUCE || o->test == T_ALLTOALL)
		o->max = 1u << 20;
	if (range) {
		char *colon = strchr(range, ':');
		if (colon) {
			*colon = 0;
			o->min = parse_size(range);
			o->max = parse_size(colon + 1);
		} else {
			o->max = parse_size(range);
		}
	}
	if (o->min < tests[o->test].min_size)
		o->min = tests[o->test].min_size;
	if (o->max > INT32_MAX || o->min > o->max)
		die("bad size range");
}

int main(int argc, char **argv)
{
	struct opts o;
	char lib[MPI_MAX_LIBRARY_VERSION_STRING];
	int len;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	parse(argc, argv, &o);
	const struct test_desc *d = &tests[o.test];
	if (nranks < d->min_ranks)
		die("this test needs at least 2 ranks");
	if (o.test == T_MR && nranks % 2)
		die("mr needs an even number of ranks");

	if (rank == 0) {
		MPI_Get_library_version(lib, &len);
		lib[strcspn(lib, ",\n")] = 0;
		printf("# mpi_osu %s (%s), %d ranks\n", d->title, lib, nranks);
		if (o.median && (o.test == T_LAT || o.test == T_PUT_LAT))
			printf("# median of the iterations\n");
		if (o.test == T_BW || o.test == T_BIBW || o.test == T_MR)
			printf("# window %d, %s\n", o.window,
			       o.check ? "data checked" : "data not checked");
		printf("%-10s %18s", "# Size", d->columns[0]);
		if (d->columns[1])
			printf(" %18s", d->columns[1]);
		printf("\n");
		fflush(stdout);
	}
	d->run(&o);

	unsigned long all = 0;
	MPI_Allreduce(&mismatches, &all, 1, MPI_UNSIGNED_LONG, MPI_SUM,
		      MPI_COMM_WORLD);
	if (rank == 0 && o.check)
		printf("# data check: %s (%lu mismatching messages)\n",
		       all ? "FAILED" : "ok", all);
	MPI_Finalize();
	return all ? 1 : 0;
}
