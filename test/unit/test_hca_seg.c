/*
 * Unit tests of hca/seg.c: the heap of the shared segment (block size and
 * alignment, distinct blocks, the alignment gap handed to smaller sizes,
 * the quarantine that delays reuse), the robust process-shared locks (a
 * holder that dies does not wedge the next locker), process slots, and the
 * start time that guards against pid reuse.
 *
 * The host's real segment is never touched: the heap tests run on a
 * private region shaped like one (struct hca_seg followed by a heap) with
 * only the fields the heap uses initialised.
 */
#include "ring.h"
#include "seg.h"
#include "cu_run.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include <sys/wait.h>
#include <unistd.h>

#define HEAP_BYTES   (64ULL << 20)
#define WATCHDOG_S   20

/* ---- a private segment-shaped region ---- */

static uint64_t hdr_bytes(void)
{
	return (sizeof(struct hca_seg) + 4095) & ~4095ULL;
}

static struct hca_seg *seg_new(void)
{
	size_t len = hdr_bytes() + HEAP_BYTES;
	struct hca_seg *seg = mmap(NULL, len, PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (seg == MAP_FAILED)
		return NULL;
	/* anonymous memory is zero: free lists empty, nothing quarantined */
	seg->heap_off = hdr_bytes();
	seg->heap_size = HEAP_BYTES;
	seg->heap_bump = 0;
	return seg;
}

static void seg_free(struct hca_seg *seg)
{
	munmap(seg, hdr_bytes() + HEAP_BYTES);
}

static uint64_t block_of(uint64_t size)
{
	uint64_t b = 1ULL << HCA_HEAP_MIN_ORDER;

	while (b < size)
		b <<= 1;
	return b;
}

/* Let every quarantined block expire now, without waiting for the clock. */
static void quarantine_expire(struct hca_seg *seg)
{
	for (uint32_t i = 0; i < seg->nquar; i++)
		seg->quar[i].free_at_ns = 0;
}

/* ---- heap ---- */

static void test_heap_alignment(void)
{
	static const uint64_t sizes[] = { 1, 100, 4096, 4097, 10000, 65536,
					  65537, 1 << 20, 3 << 20 };
	struct hca_seg *seg = seg_new();

	CU_ASSERT_FATAL(seg != NULL);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t b = block_of(sizes[i]);
		uint64_t off = hca_heap_alloc(seg, sizes[i]);

		CU_ASSERT_FATAL(off != 0);
		CU_ASSERT(off >= seg->heap_off);
		CU_ASSERT(off + b <= seg->heap_off + seg->heap_size);
		/* aligned to its block size within the heap */
		CU_ASSERT_EQUAL((off - seg->heap_off) % b, 0);
	}
	seg_free(seg);
}

struct span {
	uint64_t off, len;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

static void test_heap_distinct(void)
{
	enum { N = 300 };
	struct hca_seg *seg = seg_new();
	struct span s[N];
	int overlaps = 0;

	CU_ASSERT_FATAL(seg != NULL);
	for (int i = 0; i < N; i++) {
		uint64_t size = 1000ULL + (uint64_t)(i * 7919 % 200000);

		s[i].off = hca_heap_alloc(seg, size);
		s[i].len = block_of(size);
		CU_ASSERT_FATAL(s[i].off != 0);
		/* the caller owns the whole block: write it end to end */
		memset(hca_seg_ptr(seg, s[i].off), i & 0xff, s[i].len);
	}
	qsort(s, N, sizeof(s[0]), span_cmp);
	for (int i = 1; i < N; i++)
		overlaps += s[i - 1].off + s[i - 1].len > s[i].off;
	CU_ASSERT_EQUAL(overlaps, 0);
	seg_free(seg);
}

/* The gap left before a large aligned block serves later small ones. */
static void test_heap_gap_reused(void)
{
	struct hca_seg *seg = seg_new();
	uint64_t small, big, again;

	CU_ASSERT_FATAL(seg != NULL);
	small = hca_heap_alloc(seg, 4096);
	big = hca_heap_alloc(seg, 1 << 20);
	CU_ASSERT_EQUAL(small, seg->heap_off);
	CU_ASSERT_EQUAL(big, seg->heap_off + (1 << 20));
	again = hca_heap_alloc(seg, 256 << 10);
	CU_ASSERT(again > small && again < big);
	again = hca_heap_alloc(seg, 4096);
	CU_ASSERT(again > small && again < big);
	seg_free(seg);
}

static void test_heap_zeroed(void)
{
	struct hca_seg *seg = seg_new();
	uint64_t a, b;
	unsigned char *p;
	int nonzero = 0;

	CU_ASSERT_FATAL(seg != NULL);
	a = hca_heap_alloc(seg, 8192);
	CU_ASSERT_FATAL(a != 0);
	memset(hca_seg_ptr(seg, a), 0xff, 8192);
	hca_heap_free(seg, a, 8192);
	quarantine_expire(seg);
	b = hca_heap_alloc(seg, 8192);
	CU_ASSERT_EQUAL(b, a);
	p = hca_seg_ptr(seg, b);
	for (int i = 0; i < 8192; i++)
		nonzero += p[i] != 0;
	CU_ASSERT_EQUAL(nonzero, 0);
	seg_free(seg);
}

/* A freed block is not handed out again until its quarantine ends. */
static void test_heap_quarantine(void)
{
	struct hca_seg *seg = seg_new();
	uint64_t a, b, c;

	CU_ASSERT_FATAL(seg != NULL);
	a = hca_heap_alloc(seg, 65536);
	CU_ASSERT_FATAL(a != 0);
	hca_heap_free(seg, a, 65536);
	CU_ASSERT_EQUAL(seg->nquar, 1);
	CU_ASSERT(seg->quar[0].free_at_ns >= hca_now_ns() + HCA_QUARANTINE_NS / 2);
	b = hca_heap_alloc(seg, 65536);
	CU_ASSERT(b != 0 && b != a);
	CU_ASSERT_EQUAL(seg->nquar, 1);
	quarantine_expire(seg);
	c = hca_heap_alloc(seg, 65536);
	CU_ASSERT_EQUAL(c, a);
	CU_ASSERT_EQUAL(seg->nquar, 0);
	seg_free(seg);
}

/* A full quarantine makes room (its oldest eighth leaves early) but never
 * overflows. */
static void test_heap_quarantine_full(void)
{
	enum { N = HCA_QUARANTINE_LEN + 8 };
	struct hca_seg *seg = seg_new();
	uint64_t *offs = calloc(N, sizeof(*offs));

	CU_ASSERT_FATAL(seg != NULL && offs != NULL);
	for (int i = 0; i < N; i++) {
		offs[i] = hca_heap_alloc(seg, 4096);
		CU_ASSERT_FATAL(offs[i] != 0);
	}
	for (int i = 0; i < N; i++)
		hca_heap_free(seg, offs[i], 4096);
	CU_ASSERT(seg->nquar <= HCA_QUARANTINE_LEN);
	CU_ASSERT(seg->nquar >= HCA_QUARANTINE_LEN - HCA_QUARANTINE_LEN / 8);
	/* the blocks pushed out early are on the free list, usable */
	CU_ASSERT(seg->heap_free[HCA_HEAP_MIN_ORDER] != 0);
	free(offs);
	seg_free(seg);
}

static void test_heap_limits(void)
{
	struct hca_seg *seg = seg_new();

	CU_ASSERT_FATAL(seg != NULL);
	CU_ASSERT_EQUAL(hca_heap_alloc(seg, HEAP_BYTES * 2), 0);
	CU_ASSERT_EQUAL(hca_heap_alloc(seg, 1ULL << (HCA_HEAP_MAX_ORDER + 1)), 0);
	/* the whole heap as one block, then nothing more */
	CU_ASSERT_EQUAL(hca_heap_alloc(seg, HEAP_BYTES), seg->heap_off);
	CU_ASSERT_EQUAL(hca_heap_alloc(seg, 1), 0);
	/* freeing offset 0 (what a failed alloc returned) is harmless */
	hca_heap_free(seg, 0, 4096);
	CU_ASSERT_EQUAL(seg->nquar, 0);
	CU_ASSERT_PTR_NULL(hca_seg_ptr(seg, 0));
	seg_free(seg);
}

/* ---- robust locks ---- */

/* ---- the heap verifier and the rebuild (heap_check.c) ---- */

/* A block in use as the directory names one: a CQ ring at index idx. */
static uint64_t ring_in_use(struct hca_seg *seg, uint32_t idx)
{
	uint64_t off = hca_heap_alloc(seg, hca_ring_bytes(16, 64));

	hca_ring_init(hca_seg_ptr(seg, off), 16, 64);
	seg->cqs[idx].ring_off = off;
	atomic_store(&seg->cqs[idx].handle, idx);
	return off;
}

static void test_heap_check_consistent(void)
{
	struct hca_seg *seg = seg_new();
	struct hca_heap_report rep;
	uint64_t q;

	CU_ASSERT_FATAL(seg != NULL);
	for (uint32_t i = 1; i <= 8; i++)
		ring_in_use(seg, i);
	q = hca_heap_alloc(seg, 4096);
	hca_heap_free(seg, q, 4096);
	hca_heap_alloc(seg, 1 << 20); /* leaves a gap on the free lists */
	atomic_store(&seg->cqs[9].handle, 0);
	/* the 1 MiB block is named by nobody: lost until a rebuild */
	CU_ASSERT_EQUAL(hca_heap_check(seg, &rep), EFAULT);
	CU_ASSERT_EQUAL(rep.lost, 1 << 20);
	CU_ASSERT_EQUAL(rep.overlaps, 0);
	CU_ASSERT_EQUAL(hca_heap_rebuild(seg), 0);
	CU_ASSERT_EQUAL(hca_heap_check(seg, &rep), 0);
	CU_ASSERT_EQUAL(rep.blocks[HCA_HEAP_LIVE], 8);
	CU_ASSERT_EQUAL(rep.blocks[HCA_HEAP_QUAR], 1);
	CU_ASSERT_EQUAL(rep.lost, 0);
	CU_ASSERT_EQUAL(rep.bytes[HCA_HEAP_LIVE] + rep.bytes[HCA_HEAP_QUAR] +
			rep.bytes[HCA_HEAP_FREE], seg->heap_bump);
	seg_free(seg);
}

/* A block both free and quarantined, and one listed twice: found, and
 * the rebuild hands each out once. */
static void test_heap_check_double(void)
{
	struct hca_seg *seg = seg_new();
	struct hca_heap_report rep;
	uint64_t a, b, got[4];

	CU_ASSERT_FATAL(seg != NULL);
	ring_in_use(seg, 1);
	a = hca_heap_alloc(seg, 4096);
	b = hca_heap_alloc(seg, 4096);
	hca_heap_free(seg, a, 4096);
	/* a death half-way through a drain: a on its list, still queued */
	*(uint64_t *)hca_seg_ptr(seg, a) = seg->heap_free[12];
	seg->heap_free[12] = a;
	/* b on its list twice */
	*(uint64_t *)hca_seg_ptr(seg, b) = seg->heap_free[12];
	seg->heap_free[12] = b;
	CU_ASSERT_EQUAL(hca_heap_check(seg, &rep), EFAULT);
	CU_ASSERT(rep.overlaps >= 1);
	CU_ASSERT_EQUAL(hca_heap_rebuild(seg), 0);
	CU_ASSERT_EQUAL(hca_heap_check(seg, &rep), 0);
	quarantine_expire(seg);
	for (int i = 0; i < 4; i++)
		got[i] = hca_heap_alloc(seg, 4096);
	for (int i = 0; i < 4; i++)
		for (int j = i + 1; j < 4; j++)
			CU_ASSERT(got[i] != got[j]);
	seg_free(seg);
}

static void watchdog_fired(int sig)
{
	static const char msg[] = "test_hca_seg: watchdog: a lock was never granted\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nowhere left to say it */
	}
	_exit(3);
}

/* A broken robust lock would hang the parent: fail the program instead. */
static void watchdog_arm(void)
{
	signal(SIGALRM, watchdog_fired);
	alarm(WATCHDOG_S);
}

/* Fork a child that runs lock(arg) and exits holding the lock. */
static int die_holding(void (*lock)(void *), void *arg)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		lock(arg);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		return -1;
	return 0;
}

static void lock_mutex(void *m)
{
	hca_robust_lock(m);
}

static void lock_seg(void *seg)
{
	hca_seg_lock(seg);
}

static void test_robust_lock_owner_death(void)
{
	pthread_mutex_t *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	CU_ASSERT_FATAL(m != MAP_FAILED);
	CU_ASSERT_EQUAL_FATAL(hca_robust_mutex_init(m), 0);
	CU_ASSERT_EQUAL_FATAL(die_holding(lock_mutex, m), 0);
	watchdog_arm();
	hca_robust_lock(m);               /* EOWNERDEAD, made consistent */
	CU_ASSERT_EQUAL(pthread_mutex_unlock(m), 0);
	/* consistent again: an ordinary lock, no owner-died report */
	CU_ASSERT_EQUAL(pthread_mutex_trylock(m), 0);
	CU_ASSERT_EQUAL(pthread_mutex_unlock(m), 0);
	/* and it survives a second death */
	CU_ASSERT_EQUAL_FATAL(die_holding(lock_mutex, m), 0);
	hca_robust_lock(m);
	CU_ASSERT_EQUAL(pthread_mutex_unlock(m), 0);
	alarm(0);
	munmap(m, sizeof(*m));
}

static void test_seg_lock_owner_death(void)
{
	struct hca_seg *seg = seg_new();

	CU_ASSERT_FATAL(seg != NULL);
	CU_ASSERT_EQUAL_FATAL(hca_robust_mutex_init(&seg->lock), 0);
	CU_ASSERT_EQUAL_FATAL(die_holding(lock_seg, seg), 0);
	watchdog_arm();
	hca_seg_lock(seg);
	hca_seg_unlock(seg);
	CU_ASSERT_EQUAL(pthread_mutex_trylock(&seg->lock), 0);
	hca_seg_unlock(seg);
	alarm(0);
	seg_free(seg);
}

/*
 * The waiter the kernel wakes when a holder dies is killed before it
 * takes the lock: the kernel wakes nobody else, and a plain
 * pthread_mutex_lock of the next waiter sleeps forever. Made certain:
 * the first waiter is pinned to CPU 1, where a SCHED_FIFO spinner keeps
 * it from running between its wake-up and its SIGKILL. Skipped without
 * two CPUs or real-time scheduling (not root).
 */
static pid_t pinned_child(int cpu)
{
	cpu_set_t set;
	pid_t pid = fork();

	if (pid == 0) {
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			_exit(3);
	}
	return pid;
}

static void waiter(pthread_mutex_t *m, int fd)
{
	hca_robust_lock(m);
	if (write(fd, "g", 1) != 1)
		_exit(4);
	pthread_mutex_unlock(m);
	_exit(0);
}

static void test_robust_lock_woken_waiter_dies(void)
{
	pthread_mutex_t *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct sched_param rt = { .sched_priority = 10 };
	struct pollfd pf;
	pid_t h, w1, w2, spin;
	int p[2], st;
	char c;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || sched_getscheduler(0) < 0) {
		printf("(skipped: needs 2 CPUs) ");
		return;
	}
	CU_ASSERT_FATAL(m != MAP_FAILED);
	CU_ASSERT_EQUAL_FATAL(hca_robust_mutex_init(m), 0);
	CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
	if ((h = fork()) == 0) {          /* the holder */
		hca_robust_lock(m);
		if (write(p[1], "h", 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	CU_ASSERT_EQUAL_FATAL(read(p[0], &c, 1), 1);
	if ((w1 = pinned_child(1)) == 0)  /* first in the futex queue */
		waiter(m, p[1]);
	usleep(100000);
	if ((w2 = pinned_child(0)) == 0)  /* the one that must get the lock */
		waiter(m, p[1]);
	usleep(100000);
	if ((spin = pinned_child(1)) == 0) {
		if (sched_setscheduler(0, SCHED_FIFO, &rt))
			_exit(5);
		for (uint64_t t0 = hca_now_ns(); hca_now_ns() - t0 < 300000000ULL;)
			;
		_exit(0);
	}
	usleep(50000);                    /* the spinner holds CPU 1 */
	kill(h, SIGKILL);                 /* the kernel wakes w1 ... */
	waitpid(h, &st, 0);
	kill(w1, SIGKILL);                /* ... which dies before it runs */
	waitpid(spin, &st, 0);
	waitpid(w1, &st, 0);
	if (!WIFEXITED(st) && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
		pf.fd = p[0];
		pf.events = POLLIN;
		/* w2 takes the lock within a recheck (50 ms), not never */
		CU_ASSERT_EQUAL(poll(&pf, 1, 3000), 1);
	} else {
		printf("(skipped: the first waiter ran) ");
	}
	kill(w2, SIGKILL);
	waitpid(w2, &st, 0);
	close(p[0]);
	close(p[1]);
	munmap(m, sizeof(*m));
}

/*
 * A holder that died without the kernel marking its lock (its robust
 * list gone: here it unregisters it before it dies): the word names a
 * thread that no longer exists, and a plain lock would sleep forever.
 * hca_robust_lock rechecks, proves the death and takes it.
 */
static void lock_unlisted(void *arg)
{
	hca_robust_lock(arg);
	syscall(SYS_set_robust_list, NULL, sizeof(struct robust_list_head));
}

static void test_robust_lock_unlisted_holder(void)
{
	pthread_mutex_t *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	CU_ASSERT_FATAL(m != MAP_FAILED);
	CU_ASSERT_EQUAL_FATAL(hca_robust_mutex_init(m), 0);
	CU_ASSERT_EQUAL_FATAL(die_holding(lock_unlisted, m), 0);
	watchdog_arm();
	hca_robust_lock(m);               /* within a recheck, not never */
	CU_ASSERT_EQUAL(pthread_mutex_unlock(m), 0);
	CU_ASSERT_EQUAL(pthread_mutex_trylock(m), 0);
	CU_ASSERT_EQUAL(pthread_mutex_unlock(m), 0);
	alarm(0);
	munmap(m, sizeof(*m));
}

/* ---- process slots and start times ---- */

static void test_starttime_self(void)
{
	uint64_t a = hca_proc_starttime(getpid());

	CU_ASSERT(a != 0);
	usleep(20000);
	CU_ASSERT_EQUAL(hca_proc_starttime(getpid()), a);
}

static pid_t pid_max(void)
{
	FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
	long v = 0;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = 0;
		fclose(f);
	}
	return (pid_t)v;
}

/* pids run below pid_max: pid_max itself never names a process. */
static void test_starttime_absent(void)
{
	pid_t none = pid_max();

	CU_ASSERT_FATAL(none > 0);
	CU_ASSERT_EQUAL(hca_proc_starttime(none), 0);
	CU_ASSERT_EQUAL(hca_proc_starttime(-1), 0);
}

/* A command name with spaces and parentheses does not shift the fields. */
static void test_starttime_odd_comm(void)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		uint64_t before = hca_proc_starttime(getpid());

		prctl(PR_SET_NAME, "a) 1 2 (b) x");
		_exit(before != 0 && hca_proc_starttime(getpid()) == before ? 0 : 1);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* attach takes the free slot freed longest ago, and a new generation. */
static void test_proc_attach(void)
{
	struct hca_seg *seg = seg_new();
	uint32_t gen = 0;
	uint16_t slot = 0;

	CU_ASSERT_FATAL(seg != NULL);
	for (int i = 0; i < HCA_MAX_PROCS; i++)
		seg->procs[i].freed_ns = 1000 + (uint64_t)i;
	seg->procs[7].freed_ns = 5;
	seg->procs[7].gen = 41;
	CU_ASSERT_EQUAL(hca_proc_attach(seg, &slot, &gen), 0);
	CU_ASSERT_EQUAL(slot, 7);
	CU_ASSERT_EQUAL(gen, 42);
	CU_ASSERT_EQUAL(seg->procs[7].gen, 42);
	CU_ASSERT_EQUAL(seg->procs[7].pid, getpid());
	CU_ASSERT_EQUAL(seg->procs[7].starttime, hca_proc_starttime(getpid()));
	CU_ASSERT_EQUAL(atomic_load(&seg->procs[7].state), HCA_PROC_LIVE);
	CU_ASSERT_EQUAL(atomic_load(&seg->members), 1);
	/* next: slot 0, the oldest of the rest */
	CU_ASSERT_EQUAL(hca_proc_attach(seg, &slot, &gen), 0);
	CU_ASSERT_EQUAL(slot, 0);
	for (int i = 0; i < HCA_MAX_PROCS; i++)
		atomic_store(&seg->procs[i].state, HCA_PROC_LIVE);
	CU_ASSERT_EQUAL(hca_proc_attach(seg, &slot, &gen), ENOSPC);
	seg_free(seg);
}

static void test_now_monotonic(void)
{
	uint64_t a = hca_now_ns(), b;

	usleep(1000);
	b = hca_now_ns();
	CU_ASSERT(a != 0);
	CU_ASSERT(b >= a + 1000000);
}

static int add_suites(void)
{
	CU_pSuite heap = CU_add_suite("hca_seg heap", NULL, NULL);
	CU_pSuite lock = CU_add_suite("hca_seg robust locks", NULL, NULL);
	CU_pSuite proc = CU_add_suite("hca_seg processes", NULL, NULL);

	if (!heap || !lock || !proc)
		return -1;
	if (!CU_add_test(heap, "block size and alignment", test_heap_alignment) ||
	    !CU_add_test(heap, "heap check and rebuild: lost block", test_heap_check_consistent) ||
	    !CU_add_test(heap, "heap check and rebuild: double block", test_heap_check_double) ||
	    !CU_add_test(heap, "distinct blocks", test_heap_distinct) ||
	    !CU_add_test(heap, "alignment gap reused", test_heap_gap_reused) ||
	    !CU_add_test(heap, "blocks come zeroed", test_heap_zeroed) ||
	    !CU_add_test(heap, "quarantine delays reuse", test_heap_quarantine) ||
	    !CU_add_test(heap, "full quarantine", test_heap_quarantine_full) ||
	    !CU_add_test(heap, "limits", test_heap_limits))
		return -1;
	if (!CU_add_test(lock, "holder dies", test_robust_lock_owner_death) ||
	    !CU_add_test(lock, "segment lock holder dies", test_seg_lock_owner_death) ||
	    !CU_add_test(lock, "holder dies off its robust list",
			 test_robust_lock_unlisted_holder) ||
	    !CU_add_test(lock, "the waiter woken for a dead holder dies too",
			 test_robust_lock_woken_waiter_dies))
		return -1;
	if (!CU_add_test(proc, "start time of self", test_starttime_self) ||
	    !CU_add_test(proc, "start time of no process", test_starttime_absent) ||
	    !CU_add_test(proc, "start time, odd command name", test_starttime_odd_comm) ||
	    !CU_add_test(proc, "attach picks the oldest free slot", test_proc_attach) ||
	    !CU_add_test(proc, "monotonic clock", test_now_monotonic))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
