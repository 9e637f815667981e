/*
 * Unit tests of the registration cache (transport/rcache.c) and of the
 * memory hooks it listens to (transport/memhook.c), on a PD of this
 * build's libibverbs.so.1: lookups, merging of overlapping and adjacent
 * ranges, access upgrades, the entry and byte bounds with LRU eviction,
 * reference counts (an entry in use survives eviction and invalidation
 * until its last put), every unmap path the hooks catch, the off switch,
 * the environment keys, and several threads unmapping while others get.
 *
 * Under ASan (build/asan/test): ASan's interceptors of munmap, mmap,
 * mremap, madvise and shmdt call libc's functions, whose entry points the
 * hooks patch, so those tests run unchanged. ASan's own allocator takes
 * and returns memory with raw system calls and keeps freed blocks in
 * quarantine, so "free() of a large block" is tested only in the plain
 * build (build/test), and by test/integration/test_rcache.sh. The same
 * holds under TSan (build/tsan/test), whose allocator is its own too.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cu_run.h"
#include "memhook.h"
#include "rcache.h"

#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | \
	    IBV_ACCESS_REMOTE_WRITE)

static struct ibv_device **devs;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static size_t PG;

static int suite_init(void)
{
	PG = (size_t)sysconf(_SC_PAGESIZE);
	devs = ibv_get_device_list(NULL);
	if (!devs || !devs[0])
		return -1;
	ctx = ibv_open_device(devs[0]);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	return pd ? 0 : -1;
}

static int suite_clean(void)
{
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	return 0;
}

/* A cache with the given bounds (0: default). */
static struct sib_rcache *cache(size_t entries, size_t bytes, size_t merge)
{
	struct sib_rcache_params p;

	CU_ASSERT_EQUAL_FATAL(sib_rcache_params_init(&p), 0);
	if (entries)
		p.max_entries = entries;
	if (bytes)
		p.max_bytes = bytes;
	p.merge_max = merge;
	struct sib_rcache *c = sib_rcache_create(pd, &p);

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static void *map(size_t pages)
{
	void *p = mmap(NULL, pages * PG, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CU_ASSERT_NOT_EQUAL_FATAL(p, MAP_FAILED);
	memset(p, 1, pages * PG);
	return p;
}

static struct sib_rcache_stats stats(struct sib_rcache *c)
{
	struct sib_rcache_stats s;

	sib_rcache_stats(c, &s);
	return s;
}

/* get + put of [p, p + len): returns the registration's serial. */
static uint64_t touch(struct sib_rcache *c, void *p, size_t len, int acc)
{
	struct ibv_mr *mr = NULL;
	struct sib_rcache_entry *e = sib_rcache_get(c, p, len, acc, &mr);

	CU_ASSERT_PTR_NOT_NULL_FATAL(e);
	CU_ASSERT_PTR_EQUAL(mr, sib_rcache_entry_mr(e));
	CU_ASSERT((uintptr_t)mr->addr <= (uintptr_t)p);
	CU_ASSERT((uintptr_t)mr->addr + mr->length >= (uintptr_t)p + len);
	uint64_t serial = sib_rcache_entry_serial(e);

	sib_rcache_put(c, e);
	return serial;
}

static void test_hooks_installed(void)
{
	CU_ASSERT_EQUAL(sib_memhook_install(), 0);
	struct sib_rcache *c = cache(0, 0, 0);

	CU_ASSERT_NSTRING_EQUAL(sib_rcache_describe(c), "caching", 7);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
}

static void test_lookup(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	char *p = map(16);
	uint64_t s1 = touch(c, p, 4 * PG, RW);

	CU_ASSERT_EQUAL(touch(c, p + 100, 100, RW), s1);
	CU_ASSERT_EQUAL(touch(c, p + 2 * PG, 2 * PG, IBV_ACCESS_LOCAL_WRITE),
			s1);
	CU_ASSERT_NOT_EQUAL(touch(c, p + 8 * PG, PG, RW), s1); /* apart */
	struct sib_rcache_stats s = stats(c);

	CU_ASSERT_EQUAL(s.hits, 2);
	CU_ASSERT_EQUAL(s.misses, 2);
	CU_ASSERT_EQUAL(s.entries, 2);
	CU_ASSERT_EQUAL(s.bytes, 5 * PG);
	CU_ASSERT_EQUAL(s.in_use, 0);
	CU_ASSERT(s.miss_ns > 0 && s.miss_ns_max <= s.miss_ns);
	struct ibv_mr *mr;

	errno = 0;
	CU_ASSERT_PTR_NULL(sib_rcache_get(c, p, 0, RW, &mr));
	CU_ASSERT_EQUAL(errno, EINVAL);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 16 * PG);
}

static void test_merge_overlap(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	char *p = map(16);
	struct ibv_mr *m1, *m2;
	struct sib_rcache_entry *e1 = sib_rcache_get(c, p, 4 * PG, RW, &m1);
	struct sib_rcache_entry *e2 =
		sib_rcache_get(c, p + 3 * PG, 5 * PG, RW, &m2);

	CU_ASSERT_PTR_NOT_NULL_FATAL(e1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(e2);
	CU_ASSERT_PTR_NOT_EQUAL(e1, e2);
	/* e2 registers the union and replaces e1, which stays registered
	 * while in use. */
	CU_ASSERT_EQUAL(m2->addr, (void *)p);
	CU_ASSERT_EQUAL(m2->length, 8 * PG);
	struct sib_rcache_stats s = stats(c);

	CU_ASSERT_EQUAL(s.entries, 1);
	CU_ASSERT_EQUAL(s.merges, 1);
	CU_ASSERT_EQUAL(s.in_use, 2);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), EBUSY);
	sib_rcache_put(c, e1);
	CU_ASSERT_EQUAL(stats(c).in_use, 1);
	CU_ASSERT_EQUAL(touch(c, p + PG, 6 * PG, RW),
			sib_rcache_entry_serial(e2));
	sib_rcache_put(c, e2);
	/* A range covering two entries replaces both. */
	touch(c, p + 10 * PG, PG, RW);
	CU_ASSERT_EQUAL(stats(c).entries, 2);
	uint64_t s3 = touch(c, p + 2 * PG, 10 * PG, RW);

	CU_ASSERT_EQUAL(stats(c).entries, 1);
	CU_ASSERT_EQUAL(stats(c).merges, 3);
	CU_ASSERT_EQUAL(touch(c, p, 11 * PG, RW), s3);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 16 * PG);
}

static void test_merge_adjacent(void)
{
	struct sib_rcache *c = cache(0, 0, 8 * PG);
	char *p = map(32);

	touch(c, p, 4 * PG, RW);
	touch(c, p + 4 * PG, 4 * PG, RW);   /* joins: 8 pages */
	CU_ASSERT_EQUAL(stats(c).entries, 1);
	CU_ASSERT_EQUAL(stats(c).bytes, 8 * PG);
	touch(c, p + 8 * PG, PG, RW);       /* would be 9 > 8: apart */
	CU_ASSERT_EQUAL(stats(c).entries, 2);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);

	c = cache(0, 0, 0);                 /* merge_max 0: never join */
	touch(c, p, 4 * PG, RW);
	touch(c, p + 4 * PG, 4 * PG, RW);
	CU_ASSERT_EQUAL(stats(c).entries, 2);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 32 * PG);
}

static void test_access_upgrade(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	char *p = map(4);
	uint64_t s1 = touch(c, p, PG, IBV_ACCESS_LOCAL_WRITE);
	uint64_t s2 = touch(c, p, PG, IBV_ACCESS_LOCAL_WRITE |
					     IBV_ACCESS_REMOTE_READ);

	CU_ASSERT_NOT_EQUAL(s1, s2);
	CU_ASSERT_EQUAL(touch(c, p, PG, IBV_ACCESS_LOCAL_WRITE), s2);
	CU_ASSERT_EQUAL(stats(c).entries, 1);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 4 * PG);
}

static void test_bound_entries_lru(void)
{
	struct sib_rcache *c = cache(4, 0, 0);
	char *p = map(32);
	uint64_t s[8];

	for (int i = 0; i < 4; i++) /* every other page: never adjacent */
		s[i] = touch(c, p + 2 * i * PG, PG, RW);
	CU_ASSERT_EQUAL(touch(c, p, PG, RW), s[0]); /* r0 now newest */
	s[4] = touch(c, p + 8 * PG, PG, RW);        /* evicts r1 */
	struct sib_rcache_stats st = stats(c);

	CU_ASSERT_EQUAL(st.entries, 4);
	CU_ASSERT_EQUAL(st.evictions, 1);
	CU_ASSERT_EQUAL(touch(c, p, PG, RW), s[0]);
	CU_ASSERT_EQUAL(touch(c, p + 4 * PG, PG, RW), s[2]);
	CU_ASSERT_NOT_EQUAL(touch(c, p + 2 * PG, PG, RW), s[1]);
	CU_ASSERT_EQUAL(stats(c).evictions, 2);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 32 * PG);
}

static void test_bound_bytes(void)
{
	struct sib_rcache *c = cache(0, 8 * PG, 0);
	char *p = map(64);

	touch(c, p, 4 * PG, RW);
	touch(c, p + 8 * PG, 4 * PG, RW);
	touch(c, p + 16 * PG, 4 * PG, RW);  /* 12 > 8 pages: evict one */
	struct sib_rcache_stats s = stats(c);

	CU_ASSERT_EQUAL(s.entries, 2);
	CU_ASSERT_EQUAL(s.bytes, 8 * PG);
	CU_ASSERT_EQUAL(s.evictions, 1);
	/* Wider than the whole cache: registered for this use only. */
	uint64_t a = touch(c, p + 24 * PG, 16 * PG, RW);
	uint64_t b = touch(c, p + 24 * PG, 16 * PG, RW);

	CU_ASSERT_NOT_EQUAL(a, b);
	CU_ASSERT_EQUAL(stats(c).uncached, 2);
	CU_ASSERT_EQUAL(stats(c).entries, 2);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 64 * PG);
}

static void test_in_use_not_evicted(void)
{
	struct sib_rcache *c = cache(1, 0, 0);
	char *p = map(8);
	struct ibv_mr *m0, *m1;
	struct sib_rcache_entry *e0 = sib_rcache_get(c, p, PG, RW, &m0);
	struct sib_rcache_entry *e1 = sib_rcache_get(c, p + 4 * PG, PG, RW,
						     &m1);

	CU_ASSERT_PTR_NOT_NULL_FATAL(e0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(e1);
	CU_ASSERT_EQUAL(stats(c).entries, 2); /* over the bound: in use */
	CU_ASSERT_EQUAL(stats(c).evictions, 0);
	/* A second use of e0 shares it; the first put keeps it. */
	struct ibv_mr *m2;
	struct sib_rcache_entry *e2 = sib_rcache_get(c, p, 8, RW, &m2);

	CU_ASSERT_PTR_EQUAL(e2, e0);
	sib_rcache_put(c, e2);
	CU_ASSERT_EQUAL(stats(c).evictions, 0);
	sib_rcache_put(c, e0);                /* idle now: evicted */
	CU_ASSERT_EQUAL(stats(c).evictions, 1);
	CU_ASSERT_EQUAL(stats(c).entries, 1);
	sib_rcache_put(c, e1);
	CU_ASSERT_EQUAL(stats(c).in_use, 0);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 8 * PG);
}

static void test_invalidate_in_use(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	char *p = map(8);
	struct ibv_mr *m;
	struct sib_rcache_entry *e = sib_rcache_get(c, p, 2 * PG, RW, &m);

	CU_ASSERT_PTR_NOT_NULL_FATAL(e);
	uint64_t s1 = sib_rcache_entry_serial(e);

	sib_rcache_invalidate(c, p + PG, 1);
	struct sib_rcache_stats s = stats(c);

	CU_ASSERT_EQUAL(s.invalidations, 1);
	CU_ASSERT_EQUAL(s.entries, 0);
	CU_ASSERT_EQUAL(s.in_use, 1);         /* still registered for e */
	CU_ASSERT_PTR_EQUAL(sib_rcache_entry_mr(e), m);
	CU_ASSERT_NOT_EQUAL(touch(c, p, 2 * PG, RW), s1);
	sib_rcache_put(c, e);
	CU_ASSERT_EQUAL(stats(c).in_use, 0);
	/* A range next to an entry leaves it. */
	uint64_t s2 = touch(c, p, 2 * PG, RW);

	sib_rcache_invalidate(c, p + 2 * PG, 4 * PG);
	CU_ASSERT_EQUAL(touch(c, p, 2 * PG, RW), s2);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 8 * PG);
}

/* Caches [p, p + len), runs what unmaps, and checks the entry went. */
#define CHECK_DROPPED(c, p, len, ev, unmap_stmt)                          \
	do {                                                              \
		uint64_t inv0 = stats(c).invalidations;                   \
		uint64_t ev0 = sib_memhook_count(ev);                     \
		touch(c, p, len, RW);                                     \
		CU_ASSERT_EQUAL(stats(c).entries, 1);                     \
		unmap_stmt;                                               \
		CU_ASSERT_EQUAL(stats(c).invalidations, inv0 + 1);        \
		CU_ASSERT_EQUAL(stats(c).entries, 0);                     \
		CU_ASSERT(sib_memhook_count(ev) > ev0);                   \
	} while (0)

static void test_hook_munmap_mmap_fixed(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	char *p = map(8);

	CHECK_DROPPED(c, p + PG, 2 * PG, SIB_MEM_UNMAP,
		      CU_ASSERT_EQUAL(munmap(p, 8 * PG), 0));
	p = map(8);
	CHECK_DROPPED(c, p, 8 * PG, SIB_MEM_MAP_FIXED,
		      CU_ASSERT_EQUAL(mmap(p + 2 * PG, PG,
					   PROT_READ | PROT_WRITE,
					   MAP_PRIVATE | MAP_ANONYMOUS |
						   MAP_FIXED, -1, 0),
				      p + 2 * PG));
	/* An mmap that is not MAP_FIXED replaces nothing. */
	touch(c, p, PG, RW);
	void *q = mmap(NULL, PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CU_ASSERT_EQUAL(stats(c).entries, 1);
	munmap(q, PG);
	munmap(p, 8 * PG);
	CU_ASSERT_EQUAL(stats(c).entries, 0);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
}

static void test_hook_mremap_madvise(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	char *p = map(4), *q;

	CHECK_DROPPED(c, p, 4 * PG, SIB_MEM_REMAP,
		      q = mremap(p, 4 * PG, 64 * PG, MREMAP_MAYMOVE));
	CU_ASSERT_NOT_EQUAL_FATAL(q, MAP_FAILED);
	CHECK_DROPPED(c, q, 4 * PG, SIB_MEM_DONTNEED,
		      CU_ASSERT_EQUAL(madvise(q + PG, PG, MADV_DONTNEED), 0));
	CHECK_DROPPED(c, q, 4 * PG, SIB_MEM_DONTNEED,
		      CU_ASSERT_EQUAL(madvise(q, PG, MADV_FREE), 0));
	/* Advice that keeps the pages keeps the entry. */
	touch(c, q, PG, RW);
	CU_ASSERT_EQUAL(madvise(q, PG, MADV_WILLNEED), 0);
	CU_ASSERT_EQUAL(stats(c).entries, 1);
	munmap(q, 64 * PG);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
}

static void test_hook_shmdt(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	int id = shmget(IPC_PRIVATE, 16 * PG, IPC_CREAT | 0600);

	CU_ASSERT_FATAL(id >= 0);
	char *p = shmat(id, NULL, 0);

	shmctl(id, IPC_RMID, NULL);
	CU_ASSERT_NOT_EQUAL_FATAL(p, (void *)-1);
	memset(p, 2, 16 * PG);
	/* An entry at the segment's last page goes: the hook found the
	 * segment's length. */
	CHECK_DROPPED(c, p + 15 * PG, PG, SIB_MEM_SHMDT,
		      CU_ASSERT_EQUAL(shmdt(p), 0));
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
}

static void test_hook_sbrk(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	uintptr_t cur = (uintptr_t)sbrk(0);
	size_t pad = (PG - cur % PG) % PG;

	CU_ASSERT_NOT_EQUAL_FATAL(sbrk(pad + 8 * PG), (void *)-1);
	char *p = (char *)(cur + pad);

	memset(p, 3, 8 * PG);
	CHECK_DROPPED(c, p + 4 * PG, 4 * PG, SIB_MEM_BRK,
		      CU_ASSERT_NOT_EQUAL(sbrk(-(intptr_t)(4 * PG)),
					  (void *)-1));
	/* The part still below the break stays cached. */
	touch(c, p, 2 * PG, RW);
	CU_ASSERT_EQUAL(stats(c).entries, 1);
	CU_ASSERT_NOT_EQUAL(sbrk(-(intptr_t)(pad + 4 * PG)), (void *)-1);
	CU_ASSERT_EQUAL(stats(c).entries, 0);
	CU_ASSERT_EQUAL((uintptr_t)sbrk(0), cur); /* libc's __curbrk kept */
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
}

static void test_hook_free(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(SOFTIB_TSAN)
	/* See the file comment: a sanitizer's free never reaches libc here. */
	CU_PASS("free() of a large block: plain build only");
#else
	struct sib_rcache *c = cache(0, 0, 0);
	size_t len = 8 << 20; /* glibc serves it with mmap, frees munmap */
	char *p = malloc(len);

	CU_ASSERT_PTR_NOT_NULL_FATAL(p);
	memset(p, 4, len);
	CHECK_DROPPED(c, p, len, SIB_MEM_UNMAP, free(p));
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
#endif
}

static void test_off_switch(void)
{
	struct sib_rcache_params prm;

	CU_ASSERT_EQUAL(setenv("SIB_RCACHE", "off", 1), 0);
	CU_ASSERT_EQUAL(sib_rcache_params_init(&prm), 0);
	CU_ASSERT_EQUAL(prm.enable, 0);
	unsetenv("SIB_RCACHE");
	struct sib_rcache *c = sib_rcache_create(pd, &prm);

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_NSTRING_EQUAL(sib_rcache_describe(c), "not caching", 11);
	char *p = map(2);

	CU_ASSERT_NOT_EQUAL(touch(c, p, PG, RW), touch(c, p, PG, RW));
	struct sib_rcache_stats s = stats(c);

	CU_ASSERT_EQUAL(s.uncached, 2);
	CU_ASSERT_EQUAL(s.entries, 0);
	CU_ASSERT_EQUAL(s.in_use, 0);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	munmap(p, 2 * PG);
}

static void test_env_keys(void)
{
	struct sib_rcache_params p;

	setenv("SIB_RCACHE_MAX_BYTES", "16m", 1);
	setenv("SIB_RCACHE_MAX_ENTRIES", "10", 1);
	setenv("SIB_RCACHE_MERGE_MAX", "0", 1);
	CU_ASSERT_EQUAL(sib_rcache_params_init(&p), 0);
	CU_ASSERT_EQUAL(p.max_bytes, 16 << 20);
	CU_ASSERT_EQUAL(p.max_entries, 10);
	CU_ASSERT_EQUAL(p.merge_max, 0);
	const char *bad[][2] = {{"SIB_RCACHE_MAX_BYTES", "lots"},
				{"SIB_RCACHE_MAX_BYTES", "1"},
				{"SIB_RCACHE_MAX_ENTRIES", "0"},
				{"SIB_RCACHE_MAX_ENTRIES", "-3"},
				{"SIB_RCACHE_MERGE_MAX", "4q"},
				{"SIB_RCACHE", "maybe"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv(bad[i][0], bad[i][1], 1);
		CU_ASSERT_EQUAL(sib_rcache_params_init(&p), EINVAL);
		CU_ASSERT_EQUAL(p.max_entries, SIB_RCACHE_DEFAULT_MAX_ENTRIES);
		errno = 0;
		CU_ASSERT_PTR_NULL(sib_rcache_create(pd, NULL));
		CU_ASSERT_EQUAL(errno, EINVAL);
		unsetenv(bad[i][0]);
	}
	unsetenv("SIB_RCACHE_MAX_BYTES");
	unsetenv("SIB_RCACHE_MAX_ENTRIES");
	unsetenv("SIB_RCACHE_MERGE_MAX");
	CU_ASSERT_EQUAL(sib_rcache_params_init(&p), 0);
	CU_ASSERT_EQUAL(p.max_bytes, SIB_RCACHE_DEFAULT_MAX_BYTES);
}

/* Threads that each map, use and unmap buffers of their own while one
 * more reads a shared buffer: every get returns a registration covering
 * what was asked, and at the end nothing is in use or left over. */
#define THREADS 4
#define ROUNDS  300
static struct sib_rcache *mt_cache;
static char *mt_shared;

static void *mt_worker(void *arg)
{
	long id = (long)arg;

	for (int i = 0; i < ROUNDS; i++) {
		size_t pages = 1 + (i + id) % 7;
		char *p = mmap(NULL, pages * PG, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct ibv_mr *mr;

		if (p == MAP_FAILED)
			return (void *)1;
		p[0] = 1;
		struct sib_rcache_entry *e =
			sib_rcache_get(mt_cache, p, pages * PG, RW, &mr);
		struct sib_rcache_entry *s = sib_rcache_get(
			mt_cache, mt_shared + (i % 4) * PG, PG, RW, &mr);

		if (!e || !s)
			return (void *)2;
		sib_rcache_put(mt_cache, e);
		sib_rcache_put(mt_cache, s);
		munmap(p, pages * PG);
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[THREADS];

	mt_cache = cache(64, 0, 0);
	mt_shared = map(4);
	for (long i = 0; i < THREADS; i++)
		CU_ASSERT_EQUAL_FATAL(
			pthread_create(&t[i], NULL, mt_worker, (void *)i), 0);
	for (int i = 0; i < THREADS; i++) {
		void *r;

		pthread_join(t[i], &r);
		CU_ASSERT_PTR_NULL(r);
	}
	struct sib_rcache_stats s = stats(mt_cache);

	CU_ASSERT_EQUAL(s.in_use, 0);
	CU_ASSERT(s.invalidations >= THREADS * ROUNDS / 2);
	CU_ASSERT(s.hits > 0);
	munmap(mt_shared, 4 * PG);
	CU_ASSERT_EQUAL(stats(mt_cache).entries, 0);
	CU_ASSERT_EQUAL(sib_rcache_destroy(mt_cache), 0);
}

/* Threads get and put the same ranges while another drops their pages
 * with madvise again and again: gets race invalidations (the pending,
 * stale-registration path), entries are invalidated while in use. Every
 * get must cover what was asked; nothing may stay in use or leak (ASan). */
static atomic_int race_stop, race_drops;

static void *race_getter(void *arg)
{
	long id = (long)arg;

	int drops0 = atomic_load(&race_drops);

	/* Until both: enough rounds, and the dropper ran meanwhile. */
	for (int i = 0;
	     i < 4 * ROUNDS || atomic_load(&race_drops) < drops0 + 50; i++) {
		size_t off = ((i + id) % 6) * PG, len = (1 + i % 3) * PG;
		struct ibv_mr *mr;
		struct sib_rcache_entry *e =
			sib_rcache_get(mt_cache, mt_shared + off, len, RW, &mr);

		if (!e || (char *)mr->addr > mt_shared + off ||
		    (char *)mr->addr + mr->length < mt_shared + off + len)
			return (void *)1;
		sib_rcache_put(mt_cache, e);
	}
	return NULL;
}

static void *race_dropper(void *arg)
{
	while (!atomic_load(&race_stop)) {
		madvise(mt_shared + 2 * PG, 2 * PG, MADV_DONTNEED);
		atomic_fetch_add(&race_drops, 1);
		sched_yield();
	}
	return NULL;
}

static void test_race_invalidation(void)
{
	pthread_t t[THREADS], d;

	mt_cache = cache(0, 0, 4 * PG);
	mt_shared = map(8);
	atomic_store(&race_stop, 0);
	atomic_store(&race_drops, 0);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&d, NULL, race_dropper, NULL), 0);
	for (long i = 0; i < THREADS; i++)
		CU_ASSERT_EQUAL_FATAL(
			pthread_create(&t[i], NULL, race_getter, (void *)i), 0);
	for (int i = 0; i < THREADS; i++) {
		void *r;

		pthread_join(t[i], &r);
		CU_ASSERT_PTR_NULL(r);
	}
	atomic_store(&race_stop, 1);
	pthread_join(d, NULL);
	struct sib_rcache_stats s = stats(mt_cache);

	CU_ASSERT_EQUAL(s.in_use, 0);
	CU_ASSERT(atomic_load(&race_drops) >= 50);
	printf("(invalidations %llu, misses started again %llu) ",
	       (unsigned long long)s.invalidations,
	       (unsigned long long)s.retries);
	munmap(mt_shared, 8 * PG);
	CU_ASSERT_EQUAL(stats(mt_cache).entries, 0);
	CU_ASSERT_EQUAL(sib_rcache_destroy(mt_cache), 0);
}

/* Another library patching libc's munmap after us (as UCX's ucm or Open
 * MPI's patcher would): its hook makes the system call itself, so our
 * listener misses the unmap. The next get must notice, drop everything,
 * put our patch back on top chained to the other hook, and from then on
 * both see every munmap. */
static atomic_int foreign_calls;

static int foreign_munmap(void *addr, size_t len)
{
	atomic_fetch_add(&foreign_calls, 1);
	return (int)syscall(SYS_munmap, addr, len);
}

/* Byte by byte, out of TSan's sight: it keeps no shadow for libc's text. */
__attribute__((no_sanitize("thread")))
static void code_copy(uint8_t *to, const uint8_t *from, size_t n)
{
	volatile uint8_t *t = to;

	for (size_t i = 0; i < n; i++)
		t[i] = from[i];
}

static void patch_over(uint8_t *at, void *to)
{
	uint8_t code[13] = {0x49, 0xbb};
	uintptr_t lo = (uintptr_t)at & ~(uintptr_t)(PG - 1);

	memcpy(code + 2, &to, 8);
	code[10] = 0x41;
	code[11] = 0xff;
	code[12] = 0xe3;
	CU_ASSERT_EQUAL_FATAL(mprotect((void *)lo, 2 * PG, PROT_READ |
				       PROT_WRITE | PROT_EXEC), 0);
	code_copy(at, code, sizeof(code));
	mprotect((void *)lo, 2 * PG, PROT_READ | PROT_EXEC);
	__builtin___clear_cache((char *)at, (char *)at + sizeof(code));
}

/* The patch replaces only glibc's first instruction ("mov $nr, %eax",
 * 5 bytes) with a jmp rel32: a thread asleep in munmap's system call while
 * the patch is written returns to the bytes after "syscall", which the
 * patch leaves as they were. */
static void test_patch_spares_syscall(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	const char *names[] = { "munmap", "madvise", "brk", "shmdt" };

	CU_ASSERT_PTR_NOT_NULL_FATAL(libc);
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const uint8_t *t = dlsym(libc, names[i]);

		CU_ASSERT_PTR_NOT_NULL_FATAL(t);
		CU_ASSERT_EQUAL(t[0], 0xe9);            /* our jmp rel32 */
		CU_ASSERT(t[5] == 0x0f && t[6] == 0x05); /* glibc's syscall */
	}
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	dlclose(libc);
}

static void test_hook_taken_over(void)
{
	struct sib_rcache *c = cache(0, 0, 0);
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	uint8_t *target = libc ? dlsym(libc, "munmap") : NULL, ours[13];

	CU_ASSERT_PTR_NOT_NULL_FATAL(target);
	memcpy(ours, target, sizeof(ours));
	char *p = map(4), *q = map(4);

	touch(c, p, PG, RW);
	uint64_t sq = touch(c, q, PG, RW);

	patch_over(target, (void *)foreign_munmap);
	CU_ASSERT_EQUAL(munmap(p, 4 * PG), 0);
	CU_ASSERT_EQUAL(atomic_load(&foreign_calls), 1);
	CU_ASSERT_EQUAL(stats(c).entries, 2); /* missed: p's entry stale */
	/* The next get finds q cached, checks the hooks, drops all, and
	 * registers q again. */
	CU_ASSERT_NOT_EQUAL(touch(c, q, PG, RW), sq);
	CU_ASSERT(stats(c).invalidations >= 2);
	CU_ASSERT_EQUAL(stats(c).entries, 1);
	/* our jump back on top: 5 bytes (rel32 to a trampoline) or 13 */
	CU_ASSERT_EQUAL(memcmp(target, ours, ours[0] == 0xe9 ? 5 : 13), 0);
	CU_ASSERT_EQUAL(sib_memhook_verify(), 0);
	/* Chained now: both see the next munmap. */
	CU_ASSERT_EQUAL(munmap(q, 4 * PG), 0);
	CU_ASSERT_EQUAL(atomic_load(&foreign_calls), 2);
	CU_ASSERT_EQUAL(stats(c).entries, 0);
	CU_ASSERT_NSTRING_EQUAL(sib_rcache_describe(c), "caching", 7);
	CU_ASSERT_EQUAL(sib_rcache_destroy(c), 0);
	dlclose(libc);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("sib_rcache", suite_init, suite_clean);

	if (!s)
		return -1;
	struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"hooks installed", test_hooks_installed},
		{"lookup and hits", test_lookup},
		{"overlapping ranges merge", test_merge_overlap},
		{"adjacent ranges merge within merge_max",
		 test_merge_adjacent},
		{"access upgrade", test_access_upgrade},
		{"entry bound, LRU eviction", test_bound_entries_lru},
		{"byte bound", test_bound_bytes},
		{"entries in use are not evicted", test_in_use_not_evicted},
		{"invalidation of an entry in use", test_invalidate_in_use},
		{"hook: munmap, mmap MAP_FIXED", test_hook_munmap_mmap_fixed},
		{"hook: mremap, madvise", test_hook_mremap_madvise},
		{"hook: shmdt", test_hook_shmdt},
		{"hook: sbrk shrink", test_hook_sbrk},
		{"hook: free of a large block", test_hook_free},
		{"SIB_RCACHE=off", test_off_switch},
		{"environment keys", test_env_keys},
		{"threads", test_threads},
		{"gets racing invalidations", test_race_invalidation},
		{"the patch spares a system call in progress", test_patch_spares_syscall},
		{"hooks taken over by another patcher",
		 test_hook_taken_over},
	};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (!CU_add_test(s, tests[i].name, tests[i].fn))
			return -1;
	}
	return 0;
}

CU_RUN_MAIN(add_suites)
