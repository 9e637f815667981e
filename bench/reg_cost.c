/*
 * reg_cost: what one ibv_reg_mr and one ibv_dereg_mr cost, by buffer size,
 * on the first device — the figure that decides whether the runtime needs
 * a registration cache (docs/registration-cache.md).
 *
 *   reg_cost [-i ITERS] [-m MIN] [-M MAX] [-t] [-c]
 *
 * For each power-of-two size from -m (4k) to -M (64m): one buffer of that
 * size, mapped anonymous and touched once (so a page fault is not what is
 * timed; a real application registers memory it has used), then -i times
 * register it (local write, remote read and write, as a rendezvous buffer
 * is) and deregister it, each call timed alone. Prints the median and the
 * minimum of each call in microseconds, and the median per MiB. -t also
 * times a registration of a buffer never touched (first-touch cost
 * included: what a real HCA pays in pinning, softib pays nothing).
 * -c times the registration cache (transport/rcache.c) on the same
 * buffer: a hit (sib_rcache_get + sib_rcache_put of a cached range) and a
 * miss (the range dropped with sib_rcache_invalidate first, so the get
 * registers, and the drop deregisters: what an unmap then a reuse costs).
 * Iterations shrink for the large sizes so that a run stays short.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_common.h"
#include "rcache.h"

const char bench_prog[] = "reg_cost";

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | \
		IBV_ACCESS_REMOTE_WRITE)

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double median_us(uint64_t *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) / 1e3;
}

static void *map_buf(size_t len, int touch)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		bench_die("mmap %zu: %s", len, strerror(errno));
	if (touch)
		memset(p, 0x5a, len);
	return p;
}

/* Times iters register/deregister pairs of one buffer of len bytes. */
static void measure(struct ibv_pd *pd, size_t len, int iters, int untouched)
{
	uint64_t *reg = calloc(iters, sizeof(*reg));
	uint64_t *dereg = calloc(iters, sizeof(*dereg));
	uint64_t rmin = UINT64_MAX, dmin = UINT64_MAX;
	void *buf = untouched ? NULL : map_buf(len, 1);

	if (!reg || !dereg)
		bench_die("out of memory");
	for (int i = 0; i < iters; i++) {
		if (untouched)
			buf = map_buf(len, 0);
		uint64_t t0 = bench_now_ns();
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, ACCESS);
		uint64_t t1 = bench_now_ns();

		if (!mr)
			bench_die("ibv_reg_mr %zu: %s", len, strerror(errno));
		int rc = ibv_dereg_mr(mr);
		uint64_t t2 = bench_now_ns();

		if (rc)
			bench_die("ibv_dereg_mr: %s", strerror(rc));
		reg[i] = t1 - t0;
		dereg[i] = t2 - t1;
		rmin = reg[i] < rmin ? reg[i] : rmin;
		dmin = dereg[i] < dmin ? dereg[i] : dmin;
		if (untouched)
			munmap(buf, len);
	}
	double rmed = median_us(reg, iters), dmed = median_us(dereg, iters);

	printf("%-10zu %7d %11.2f %11.2f %11.2f %11.2f %12.2f%s\n", len, iters,
	       rmed, rmin / 1e3, dmed, dmin / 1e3,
	       rmed / ((double)len / (1 << 20)), untouched ? "  (untouched)" : "");
	if (!untouched)
		munmap(buf, len);
	free(reg);
	free(dereg);
}

/* Median get+put of a cached range (hit), and of one just dropped (miss:
 * invalidate + get + put, the invalidation's deregistration included). */
static void measure_cache(struct sib_rcache *c, size_t len, int iters)
{
	uint64_t *hit = calloc(iters, sizeof(*hit));
	uint64_t *miss = calloc(iters, sizeof(*miss));
	void *buf = map_buf(len, 1);
	struct ibv_mr *mr;
	struct sib_rcache_entry *e;

	if (!hit || !miss)
		bench_die("out of memory");
	for (int i = 0; i < iters; i++) {
		uint64_t t0 = bench_now_ns();

		sib_rcache_invalidate(c, buf, len);
		e = sib_rcache_get(c, buf, len, ACCESS, &mr);
		if (!e)
			bench_die("sib_rcache_get: %s", strerror(errno));
		sib_rcache_put(c, e);
		uint64_t t1 = bench_now_ns();

		e = sib_rcache_get(c, buf, len, ACCESS, &mr);
		if (!e)
			bench_die("sib_rcache_get: %s", strerror(errno));
		sib_rcache_put(c, e);
		miss[i] = t1 - t0;
		hit[i] = bench_now_ns() - t1;
	}
	printf("%-10zu %7d %11.3f %11.3f   (rcache: hit get+put, miss "
	       "invalidate+get+put)\n", len, iters, median_us(hit, iters),
	       median_us(miss, iters));
	munmap(buf, len);
	free(hit);
	free(miss);
}

int main(int argc, char **argv)
{
	uint64_t min = 4096, max = 64ull << 20;
	int iters = 1000, untouched = 0, cache = 0, c;

	while ((c = getopt(argc, argv, "i:m:M:tc")) != -1) {
		switch (c) {
		case 'i': iters = atoi(optarg); break;
		case 'm': min = bench_parse_size(optarg, "size"); break;
		case 'M': max = bench_parse_size(optarg, "size"); break;
		case 't': untouched = 1; break;
		case 'c': cache = 1; break;
		default:
			fprintf(stderr, "usage: reg_cost [-i ITERS] [-m MIN] "
					"[-M MAX] [-t] [-c]\n");
			return 2;
		}
	}
	if (iters < 1 || min < 1 || max < min)
		bench_die("bad arguments");

	struct ibv_device **list = ibv_get_device_list(NULL);

	if (!list || !list[0])
		bench_die("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(list[0]);

	if (!ctx)
		bench_die("ibv_open_device: %s", strerror(errno));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);

	if (!pd)
		bench_die("ibv_alloc_pd: %s", strerror(errno));
	printf("# device %s, link %s, median of ITERS calls (us)\n",
	       ibv_get_device_name(list[0]),
	       getenv("SOFTIB_LINK") ? getenv("SOFTIB_LINK") : "default");
	printf("%-10s %7s %11s %11s %11s %11s %12s\n", "# bytes", "iters",
	       "reg_med", "reg_min", "dereg_med", "dereg_min", "reg_us/MiB");
	for (uint64_t len = min; len <= max; len *= 2) {
		/* The large sizes get fewer iterations: a 64 MiB touch
		 * costs milliseconds, and the median needs only a few. */
		int n = len >= (1 << 20) ? (iters > 50 ? 50 : iters) : iters;

		measure(pd, len, n, 0);
		if (untouched)
			measure(pd, len, n > 20 ? 20 : n, 1);
	}
	if (cache) {
		struct sib_rcache *rc = sib_rcache_create(pd, NULL);

		if (!rc)
			bench_die("sib_rcache_create: %s", strerror(errno));
		printf("# rcache: %s\n", sib_rcache_describe(rc));
		printf("%-10s %7s %11s %11s\n", "# bytes", "iters", "hit_med",
		       "miss_med");
		for (uint64_t len = min; len <= max; len *= 2)
			measure_cache(rc, len, len >= (1 << 20) ?
				      (iters > 50 ? 50 : iters) : iters);
		sib_rcache_destroy(rc);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
