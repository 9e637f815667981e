/*
 * Unit tests of hca/ring.h, the bounded MPMC ring that every receive
 * queue, SRQ and CQ of the device is made of: its initial state, FIFO
 * order, the full and empty edges, the count, wrap-around over many
 * cycles, the reserve/publish split, a multi-threaded stress with
 * checksums (nothing lost, nothing duplicated, nothing torn), a
 * producer and a consumer in two processes sharing one mapping, and the
 * claims a dead process leaves: found by their claimer's name, skipped,
 * published or handed back by whoever reclaims it (claim.c), and head or
 * tail left behind by a claimer killed before it moved them.
 */
#include "ring.h"
#include "cu_run.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A body large enough that a torn copy would show: tag plus derived words. */
struct item {
	uint64_t tag;
	uint64_t check[5];
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

static struct item item_of(uint64_t tag)
{
	struct item it = { .tag = tag };

	for (int i = 0; i < 5; i++)
		it.check[i] = mix(tag + (uint64_t)i);
	return it;
}

static bool item_ok(const struct item *it)
{
	for (int i = 0; i < 5; i++)
		if (it->check[i] != mix(it->tag + (uint64_t)i))
			return false;
	return true;
}

static uint64_t now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec;
}

/* A ring in anonymous memory, shared with children when shared is true. */
static struct hca_ring *ring_new(uint32_t cap, uint32_t body, bool shared,
				 size_t *lenp)
{
	size_t len = hca_ring_bytes(cap, body);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	hca_ring_init(p, cap, body);
	*lenp = len;
	return p;
}

/* ---- single-threaded behaviour ---- */

static void test_init(void)
{
	size_t len;
	struct hca_ring *r = ring_new(16, 20, false, &len);
	uint64_t v;

	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(r->cap, 16);
	/* the seq word plus the body, rounded up to 16 bytes */
	CU_ASSERT_EQUAL(r->stride, 32);
	CU_ASSERT_EQUAL(len, sizeof(struct hca_ring) + 16 * 32);
	CU_ASSERT_EQUAL(atomic_load(&r->head), 0);
	CU_ASSERT_EQUAL(atomic_load(&r->tail), 0);
	CU_ASSERT_EQUAL(hca_ring_count(r), 0);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), -1);
	munmap(r, len);
}

static void test_push_pop_order(void)
{
	size_t len;
	struct hca_ring *r = ring_new(64, sizeof(struct item), false, &len);
	struct item it;

	CU_ASSERT_FATAL(r != NULL);
	for (uint64_t i = 0; i < 50; i++) {
		it = item_of(i);
		CU_ASSERT_EQUAL(hca_ring_push(r, &it, sizeof(it)), 0);
	}
	for (uint64_t i = 0; i < 50; i++) {
		CU_ASSERT_EQUAL_FATAL(hca_ring_pop(r, &it, sizeof(it)), 0);
		CU_ASSERT_EQUAL(it.tag, i);
		CU_ASSERT(item_ok(&it));
	}
	CU_ASSERT_EQUAL(hca_ring_pop(r, &it, sizeof(it)), -1);
	munmap(r, len);
}

static void test_full(void)
{
	size_t len;
	struct hca_ring *r = ring_new(8, sizeof(uint64_t), false, &len);
	uint64_t v;

	CU_ASSERT_FATAL(r != NULL);
	for (v = 0; v < 8; v++)
		CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(hca_ring_count(r), 8);
	/* full: push fails and changes nothing */
	CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), -1);
	CU_ASSERT_EQUAL(hca_ring_count(r), 8);
	/* one pop frees exactly one slot */
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(v, 0);
	v = 100;
	CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), -1);
	for (uint64_t want = 1; want < 8; want++) {
		CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
		CU_ASSERT_EQUAL(v, want);
	}
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(v, 100);
	munmap(r, len);
}

static void test_empty(void)
{
	size_t len;
	struct hca_ring *r = ring_new(4, sizeof(uint64_t), false, &len);
	uint64_t v = 7, out = 0;

	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &out, sizeof(out)), -1);
	CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &out, sizeof(out)), 0);
	CU_ASSERT_EQUAL(out, 7);
	/* empty again: a failed pop leaves the output untouched */
	out = 42;
	CU_ASSERT_EQUAL(hca_ring_pop(r, &out, sizeof(out)), -1);
	CU_ASSERT_EQUAL(out, 42);
	CU_ASSERT_EQUAL(hca_ring_count(r), 0);
	munmap(r, len);
}

static void test_count(void)
{
	size_t len;
	struct hca_ring *r = ring_new(32, sizeof(uint64_t), false, &len);
	uint64_t v = 0;

	CU_ASSERT_FATAL(r != NULL);
	for (uint32_t n = 1; n <= 32; n++) {
		CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), 0);
		CU_ASSERT_EQUAL(hca_ring_count(r), n);
	}
	for (uint32_t n = 32; n > 0; n--) {
		CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
		CU_ASSERT_EQUAL(hca_ring_count(r), n - 1);
	}
	munmap(r, len);
}

/* Positions run far past the capacity; batches of every size 1..cap. */
static void test_wrap_around(void)
{
	const uint32_t cap = 8;
	size_t len;
	struct hca_ring *r = ring_new(cap, sizeof(struct item), false, &len);
	uint64_t next_in = 0, next_out = 0;
	struct item it;
	int bad = 0;

	CU_ASSERT_FATAL(r != NULL);
	for (uint32_t cycle = 0; cycle < 100000; cycle++) {
		uint32_t k = 1 + cycle % cap;

		for (uint32_t i = 0; i < k; i++) {
			it = item_of(next_in++);
			bad += hca_ring_push(r, &it, sizeof(it)) != 0;
		}
		bad += hca_ring_count(r) != k;
		for (uint32_t i = 0; i < k; i++) {
			bad += hca_ring_pop(r, &it, sizeof(it)) != 0;
			bad += it.tag != next_out++ || !item_ok(&it);
		}
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(atomic_load(&r->head), next_in);
	CU_ASSERT_EQUAL(atomic_load(&r->tail), next_out);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &it, sizeof(it)), -1);
	munmap(r, len);
}

/*
 * A slot reserved but not yet published holds back the consumer, even
 * when a later slot is published: entries come out in position order.
 */
static void test_reserve_publish(void)
{
	size_t len;
	struct hca_ring *r = ring_new(4, sizeof(uint64_t), false, &len);
	uint64_t p0 = 0, p1 = 0, v;
	uint64_t *s0, *s1;

	CU_ASSERT_FATAL(r != NULL);
	s0 = hca_ring_reserve(r, HCA_RING_ANON, &p0);
	s1 = hca_ring_reserve(r, HCA_RING_ANON, &p1);
	CU_ASSERT_FATAL(s0 != NULL && s1 != NULL);
	CU_ASSERT_EQUAL(p0, 0);
	CU_ASSERT_EQUAL(p1, 1);
	*s1 = 11;
	hca_ring_publish(r, p1);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), -1);
	*s0 = 10;
	hca_ring_publish(r, p0);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(v, 10);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(v, 11);
	munmap(r, len);
}

/* ---- claims a dead process leaves ---- */

/* A producer killed between claim and publish: SKIP lets the rest out. */
static void test_dead_producer_skipped(void)
{
	size_t len;
	struct hca_ring *r = ring_new(8, sizeof(uint64_t), false, &len);
	uint64_t pos = 99, v;

	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_PTR_NOT_NULL(hca_ring_reserve(r, 5, &pos));
	CU_ASSERT_EQUAL(pos, 0);
	for (v = 1; v <= 3; v++)
		CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), 0);
	/* the claim holds the consumer back, and names its claimer */
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), -1);
	CU_ASSERT(hca_ring_claimed(r, 0, 5, HCA_RING_PCLAIM));
	CU_ASSERT(!hca_ring_claimed(r, 0, 6, HCA_RING_PCLAIM));
	CU_ASSERT(!hca_ring_claimed(r, 1, 5, HCA_RING_PCLAIM));
	hca_ring_skip(r, 0);
	for (uint64_t want = 1; want <= 3; want++) {
		CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
		CU_ASSERT_EQUAL(v, want);
	}
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), -1);
	/* the skipped slot is reusable: a whole lap fits again */
	for (v = 0; v < 8; v++)
		CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), -1);
	munmap(r, len);
}

/* A producer killed after its claim but before it moved head. */
static void test_stale_head_moved(void)
{
	size_t len;
	struct hca_ring *r = ring_new(8, sizeof(uint64_t), false, &len);
	uint64_t pos, v = 42;

	CU_ASSERT_FATAL(r != NULL);
	atomic_store(hca_ring_slot(r, 0), hca_ring_word(0, 9, HCA_RING_PCLAIM));
	CU_ASSERT_PTR_NOT_NULL(hca_ring_reserve(r, 3, &pos));
	CU_ASSERT_EQUAL(pos, 1);
	*(uint64_t *)(hca_ring_slot(r, 1) + 1) = v;
	hca_ring_publish(r, 1);
	CU_ASSERT_EQUAL(atomic_load(&r->head), 2);
	/* the dead claim's entry was whole: the reclaimer publishes it */
	*(uint64_t *)(hca_ring_slot(r, 0) + 1) = 41;
	hca_ring_publish(r, 0);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(v, 41);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(v, 42);
	munmap(r, len);
}

/* A consumer killed before it handed its slot back: producers see the
 * ring full when they come round to that slot, until the reclaimer hands
 * it back. */
static void test_dead_consumer_released(void)
{
	size_t len;
	struct hca_ring *r = ring_new(4, sizeof(uint64_t), false, &len);
	uint64_t pos, v;
	void *body;

	CU_ASSERT_FATAL(r != NULL);
	for (v = 0; v < 4; v++)
		CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), 0);
	body = hca_ring_take(r, 11, &pos);
	CU_ASSERT_PTR_NOT_NULL(body);
	CU_ASSERT_EQUAL(pos, 0);
	CU_ASSERT_EQUAL(*(uint64_t *)body, 0);
	CU_ASSERT(hca_ring_claimed(r, 0, 11, HCA_RING_CCLAIM));
	for (uint64_t want = 1; want < 4; want++) {
		CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
		CU_ASSERT_EQUAL(v, want);
	}
	/* position 4 is slot 0's next lap: held, though 1..3 are free */
	v = 4;
	CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), -1);
	hca_ring_release(r, 0);
	for (v = 4; v < 8; v++)
		CU_ASSERT_EQUAL(hca_ring_push(r, &v, sizeof(v)), 0);
	for (uint64_t want = 4; want < 8; want++) {
		CU_ASSERT_EQUAL(hca_ring_pop(r, &v, sizeof(v)), 0);
		CU_ASSERT_EQUAL(v, want);
	}
	munmap(r, len);
}

/* Positions wrap modulo 2^47 in the slot words; head and tail do not. */
static void test_position_wrap(void)
{
	const uint32_t cap = 8;
	size_t len;
	struct hca_ring *r = ring_new(cap, sizeof(uint64_t), false, &len);
	uint64_t start = (1ULL << 47) - 20, v;
	int bad = 0;

	CU_ASSERT_FATAL(r != NULL);
	atomic_store(&r->head, start);
	atomic_store(&r->tail, start);
	for (uint64_t p = start; p < start + cap; p++)
		atomic_store(hca_ring_slot(r, p), hca_ring_word(p, 0, HCA_RING_EMPTY));
	for (uint64_t i = 0; i < 100; i++) {
		v = i;
		bad += hca_ring_push(r, &v, sizeof(v)) != 0;
		bad += hca_ring_pop(r, &v, sizeof(v)) != 0 || v != i;
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(atomic_load(&r->head), start + 100);
	munmap(r, len);
}

/* ---- multi-threaded: 4 producers x 4 consumers ---- */

#define NPROD    4
#define NCONS    4
#ifdef SOFTIB_TSAN
#define PER_PROD 20000  /* TSan runs each atomic ~10x slower: the same
			 * interleavings, a tenth of the items */
#else
#define PER_PROD 200000
#endif

/*
 * A broken ring must fail the test, not hang it: every loop of the test
 * has a deadline, and a watchdog ends the program if a loop inside the
 * ring itself never returns.
 */
#define STRESS_DEADLINE_S 20

static void watchdog_fired(int sig)
{
	static const char msg[] = "test_hca_ring: watchdog: a ring operation never returned\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nowhere left to say it */
	}
	_exit(3);
}

static void watchdog_arm(void)
{
	signal(SIGALRM, watchdog_fired);
	alarm(STRESS_DEADLINE_S + 10);
}

struct stress {
	struct hca_ring *ring;
	uint64_t deadline;               /* now_s() value to give up at */
	_Atomic bool expired;
	_Atomic uint64_t popped;         /* items consumed, all consumers */
	_Atomic uint8_t *seen;           /* NPROD * PER_PROD flags */
	_Atomic uint64_t dups, torn, disorder, sum;
};

struct worker {
	struct stress *s;
	uint32_t id;
};

static bool stress_expired(struct stress *s)
{
	if (now_s() > s->deadline)
		atomic_store(&s->expired, true);
	return atomic_load(&s->expired);
}

static void *producer(void *arg)
{
	struct worker *w = arg;

	for (uint64_t i = 0; i < PER_PROD; i++) {
		struct item it = item_of(((uint64_t)w->id << 32) | i);

		while (hca_ring_push(w->s->ring, &it, sizeof(it))) {
			if (stress_expired(w->s))
				return NULL;
			sched_yield();
		}
	}
	return NULL;
}

/*
 * Each consumer checks what it pops: the body is whole, the item was not
 * seen before, and the items of one producer come to it in increasing
 * order (positions are claimed in order on both sides).
 */
static void consume_one(struct stress *s, const struct item *it, int64_t *last)
{
	uint32_t p = (uint32_t)(it->tag >> 32);
	uint64_t i = it->tag & 0xffffffffu;

	if (!item_ok(it) || p >= NPROD || i >= PER_PROD) {
		atomic_fetch_add(&s->torn, 1);
		return;
	}
	if (atomic_exchange(&s->seen[p * PER_PROD + i], 1))
		atomic_fetch_add(&s->dups, 1);
	if ((int64_t)i <= last[p])
		atomic_fetch_add(&s->disorder, 1);
	last[p] = (int64_t)i;
	atomic_fetch_add(&s->sum, it->tag);
}

static void *consumer(void *arg)
{
	struct worker *w = arg;
	struct stress *s = w->s;
	int64_t last[NPROD];
	struct item it;

	for (int p = 0; p < NPROD; p++)
		last[p] = -1;
	while (atomic_load(&s->popped) < (uint64_t)NPROD * PER_PROD) {
		if (hca_ring_pop(s->ring, &it, sizeof(it))) {
			if (stress_expired(s))
				return NULL;
			sched_yield();
			continue;
		}
		consume_one(s, &it, last);
		atomic_fetch_add(&s->popped, 1);
	}
	return NULL;
}

static uint64_t expected_sum(void)
{
	uint64_t sum = 0;

	for (uint64_t p = 0; p < NPROD; p++)
		for (uint64_t i = 0; i < PER_PROD; i++)
			sum += (p << 32) | i;
	return sum;
}

static void test_mpmc_threads(void)
{
	struct stress s = { 0 };
	struct worker pw[NPROD], cw[NCONS];
	pthread_t pt[NPROD], ct[NCONS];
	size_t len;

	s.ring = ring_new(1024, sizeof(struct item), false, &len);
	s.deadline = now_s() + STRESS_DEADLINE_S;
	watchdog_arm();
	s.seen = calloc((size_t)NPROD * PER_PROD, 1);
	CU_ASSERT_FATAL(s.ring != NULL && s.seen != NULL);
	for (uint32_t i = 0; i < NCONS; i++) {
		cw[i] = (struct worker){ &s, i };
		CU_ASSERT_FATAL(pthread_create(&ct[i], NULL, consumer, &cw[i]) == 0);
	}
	for (uint32_t i = 0; i < NPROD; i++) {
		pw[i] = (struct worker){ &s, i };
		CU_ASSERT_FATAL(pthread_create(&pt[i], NULL, producer, &pw[i]) == 0);
	}
	for (int i = 0; i < NPROD; i++)
		pthread_join(pt[i], NULL);
	for (int i = 0; i < NCONS; i++)
		pthread_join(ct[i], NULL);
	alarm(0);

	CU_ASSERT_FALSE(atomic_load(&s.expired));
	CU_ASSERT_EQUAL(atomic_load(&s.popped), (uint64_t)NPROD * PER_PROD);
	CU_ASSERT_EQUAL(atomic_load(&s.torn), 0);
	CU_ASSERT_EQUAL(atomic_load(&s.dups), 0);
	CU_ASSERT_EQUAL(atomic_load(&s.disorder), 0);
	CU_ASSERT_EQUAL(atomic_load(&s.sum), expected_sum());
	size_t missing = 0;
	for (size_t i = 0; i < (size_t)NPROD * PER_PROD; i++)
		missing += !atomic_load(&s.seen[i]);
	CU_ASSERT_EQUAL(missing, 0);
	CU_ASSERT_EQUAL(hca_ring_count(s.ring), 0);
	free((void *)s.seen);
	munmap(s.ring, len);
}

/* ---- two processes on one mapping ---- */

#define XPROC_ITEMS 100000

/* The child gives up on its own too, and dies with its parent. */
static void xproc_child(struct hca_ring *r)
{
	uint64_t deadline = now_s() + STRESS_DEADLINE_S;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (uint64_t i = 0; i < XPROC_ITEMS; i++) {
		struct item it = item_of(i);

		while (hca_ring_push(r, &it, sizeof(it))) {
			if (now_s() > deadline)
				_exit(1);
			sched_yield();
		}
	}
	_exit(0);
}

/*
 * The parent consumes until it has every item, giving up (rather than
 * hanging) if the child died early or a generous deadline passes.
 */
static uint64_t xproc_consume(struct hca_ring *r, pid_t child, uint64_t *bad)
{
	uint64_t got = 0, deadline = now_s() + STRESS_DEADLINE_S;
	struct item it;
	int st;

	while (got < XPROC_ITEMS) {
		if (hca_ring_pop(r, &it, sizeof(it)) == 0) {
			*bad += it.tag != got || !item_ok(&it);
			got++;
			continue;
		}
		if (now_s() > deadline ||
		    (waitpid(child, &st, WNOHANG) == child && !hca_ring_count(r)))
			break;
		sched_yield();
	}
	return got;
}

static void test_mpmc_processes(void)
{
	size_t len;
	struct hca_ring *r = ring_new(256, sizeof(struct item), true, &len);
	uint64_t bad = 0, got;
	pid_t child;
	int st = -1;

	CU_ASSERT_FATAL(r != NULL);
	fflush(NULL);
	child = fork();
	CU_ASSERT_FATAL(child >= 0);
	if (child == 0)
		xproc_child(r);
	watchdog_arm();
	got = xproc_consume(r, child, &bad);
	alarm(0);
	if (got < XPROC_ITEMS)
		kill(child, SIGKILL);
	waitpid(child, &st, 0);
	CU_ASSERT_EQUAL(got, XPROC_ITEMS);
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT_EQUAL(hca_ring_pop(r, &bad, sizeof(bad)), -1);
	munmap(r, len);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("hca_ring", NULL, NULL);

	if (!s)
		return -1;
	if (!CU_add_test(s, "init", test_init) ||
	    !CU_add_test(s, "push/pop order", test_push_pop_order) ||
	    !CU_add_test(s, "full", test_full) ||
	    !CU_add_test(s, "empty", test_empty) ||
	    !CU_add_test(s, "count", test_count) ||
	    !CU_add_test(s, "wrap-around", test_wrap_around) ||
	    !CU_add_test(s, "reserve/publish order", test_reserve_publish) ||
	    !CU_add_test(s, "dead producer's claim skipped", test_dead_producer_skipped) ||
	    !CU_add_test(s, "head left behind by a dead claimer", test_stale_head_moved) ||
	    !CU_add_test(s, "dead consumer's slot handed back", test_dead_consumer_released) ||
	    !CU_add_test(s, "positions wrap modulo 2^47", test_position_wrap) ||
	    !CU_add_test(s, "MPMC threads 4x4", test_mpmc_threads) ||
	    !CU_add_test(s, "MPMC across processes", test_mpmc_processes))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
