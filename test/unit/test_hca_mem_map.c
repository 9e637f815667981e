/*
 * The mapping route of hca/link/shm/mem_map.c, white-box, between this
 * process and a forked owner of memory regions:
 *   - a region in a sealed memfd, mapped shared, is written and read by
 *     memcpy (the route's counters move, the owner sees the bytes); a
 *     private buffer and an unsealed memfd keep cross-memory attach;
 *   - a range outside the mapped registration is refused by the route;
 *   - after the owner deregisters, the old key can no longer move a byte
 *     through the cached mapping (and the sweep unmaps it); a new
 *     registration of the same range is mapped afresh;
 *   - after the owner dies, nothing moves toward it and the mapping is
 *     unmapped once its keys are reclaimed.
 * Needs SOFTIB_SEG_TAG of its own when run beside other tests.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cu_run.h"
#include "hca.h"
#include "hca_int.h"
#include "shm_link.h"
#include "mem_map.h"

#define REGION (64 * 1024)
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
	     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* what the owner tells us: its slot, and three regions with their keys */
struct owner_info {
	uint32_t slot, gen;
	uint64_t addr[3];   /* sealed memfd, private, unsealed memfd */
	uint32_t key[3];
};

static struct hca_dev *dev;
static pid_t child = -1;
static int to_child = -1, from_child = -1;
static struct owner_info info;

static void *memfd_region(bool seal)
{
	int fd = memfd_create("mem_map_test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p;

	if (fd < 0 || ftruncate(fd, REGION))
		return NULL;
	if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW))
		return NULL;
	p = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	/* the descriptor stays open: the HCA finds the file through it */
	return p == MAP_FAILED ? NULL : p;
}

/* The owner: registers its regions, then serves commands: 'r' N (re-
 * register region 0: a new key), 'p' OFF (print 8 bytes of region 0). */
static void owner_main(int in, int out)
{
	struct hca_dev *d = hca_dev_get();
	struct hca_ctx *c = d ? hca_ctx_open(d, NULL) : NULL;
	struct hca_pd *pd = c ? hca_pd_alloc(c) : NULL;
	struct hca_mr *mr[3] = { NULL, NULL, NULL };
	void *r[3] = { memfd_region(true), malloc(REGION), memfd_region(false) };
	struct owner_info oi = { 0 };
	char cmd;

	for (int i = 0; i < 3 && pd && r[i]; i++) {
		memset(r[i], 0, REGION);
		mr[i] = hca_mr_reg(pd, r[i], REGION, (uintptr_t)r[i], ACC);
		oi.addr[i] = (uintptr_t)r[i];
		oi.key[i] = mr[i] ? hca_mr_key(mr[i]) : 0;
	}
	oi.slot = d ? d->slot : 0xffff;
	oi.gen = d ? d->gen : 0;
	if (write(out, &oi, sizeof(oi)) != sizeof(oi))
		_exit(1);
	while (read(in, &cmd, 1) == 1) {
		uint64_t v = 0, off = 0;
		uint32_t k = 0;

		if (cmd == 'p' && read(in, &off, 8) == 8) {
			memcpy(&v, (char *)r[0] + off, 8);
			if (write(out, &v, 8) != 8)
				_exit(1);
		} else if (cmd == 'r') {
			hca_mr_dereg(mr[0]);
			mr[0] = hca_mr_reg(pd, r[0], REGION, (uintptr_t)r[0], ACC);
			k = mr[0] ? hca_mr_key(mr[0]) : 0;
			if (write(out, &k, 4) != 4)
				_exit(1);
		}
	}
	_exit(0);
}

static int suite_init(void)
{
	int a[2], b[2];

	if (pipe(a) || pipe(b))
		return -1;
	child = fork();
	if (child < 0)
		return -1;
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a[1]);
		close(b[0]);
		owner_main(a[0], b[1]);
	}
	close(a[0]);
	close(b[1]);
	to_child = a[1];
	from_child = b[0];
	if (read(from_child, &info, sizeof(info)) != sizeof(info) ||
	    info.slot == 0xffff || !info.key[0] || !info.key[1] || !info.key[2])
		return -1;
	dev = hca_dev_get();
	return dev ? 0 : -1;
}

static int suite_clean(void)
{
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	if (dev)
		hca_dev_put(dev);
	return 0;
}

/* What the responder does: inside a copy section, check the key, move. */
static int move(bool wr, int region, uint32_t key, uint64_t off, void *buf, size_t len)
{
	struct iovec l = { buf, len };
	struct iovec t = { (void *)(uintptr_t)(info.addr[region] + off), len };
	struct hca_fence f;
	int rc;

	hca_fence_enter(dev, &f);
	if (!hca_mr_lookup(dev->seg, key))
		rc = EACCES;
	else if (wr)
		rc = hca_mem_write(dev, (uint16_t)info.slot, info.gen, &l, 1, &t, &key, 1);
	else
		rc = hca_mem_read(dev, (uint16_t)info.slot, info.gen, &l, 1, &t, &key, 1);
	hca_fence_exit(&f);
	return rc;
}

static uint64_t owner_peek(uint64_t off)
{
	uint64_t v = 0;
	char c = 'p';

	if (write(to_child, &c, 1) != 1 || write(to_child, &off, 8) != 8 ||
	    read(from_child, &v, 8) != 8)
		return ~0ull;
	return v;
}

static void test_route(void)
{
	struct hca_mem_map_stats s0, s1;
	uint64_t v = 0x1122334455667788ull, back = 0;

	hca_mem_map_stats(&s0);
	CU_ASSERT_EQUAL(move(true, 0, info.key[0], 4096, &v, 8), 0);
	CU_ASSERT_EQUAL(move(false, 0, info.key[0], 4096, &back, 8), 0);
	CU_ASSERT_EQUAL(back, v);
	CU_ASSERT_EQUAL(owner_peek(4096), v);
	hca_mem_map_stats(&s1);
	CU_ASSERT_EQUAL(s1.moves - s0.moves, 2);
	CU_ASSERT_EQUAL(s1.maps - s0.maps, 1);
	/* the last byte of the region, and the whole region at once */
	CU_ASSERT_EQUAL(move(true, 0, info.key[0], REGION - 8, &v, 8), 0);
	CU_ASSERT_EQUAL(owner_peek(REGION - 8), v);
	/* private memory and an unsealed memfd: not the route, same bytes */
	hca_mem_map_stats(&s0);
	CU_ASSERT_EQUAL(move(true, 1, info.key[1], 8, &v, 8), 0);
	CU_ASSERT_EQUAL(move(false, 1, info.key[1], 8, &back, 8), 0);
	CU_ASSERT_EQUAL(back, v);
	back = 0;
	CU_ASSERT_EQUAL(move(true, 2, info.key[2], 8, &v, 8), 0);
	CU_ASSERT_EQUAL(move(false, 2, info.key[2], 8, &back, 8), 0);
	CU_ASSERT_EQUAL(back, v);
	hca_mem_map_stats(&s1);
	CU_ASSERT_EQUAL(s1.moves, s0.moves);
	CU_ASSERT_EQUAL(s1.maps, s0.maps);
}

/* The responder checks bounds first; the route refuses what lies outside
 * the registration all the same (never a byte past its mapping). */
static void test_bounds(void)
{
	uint64_t v = 7;
	uint32_t key = info.key[0];
	struct iovec l = { &v, 8 };
	struct iovec past = { (void *)(uintptr_t)(info.addr[0] + REGION), 8 };
	struct iovec before = { (void *)(uintptr_t)(info.addr[0] - 8), 8 };
	struct iovec over = { (void *)(uintptr_t)(info.addr[0] + REGION - 4), 8 };
	struct hca_fence f;

	hca_fence_enter(dev, &f);
	CU_ASSERT_EQUAL(hca_mem_map_move(dev, (uint16_t)info.slot, info.gen, true,
					 &l, 1, &past, &key, 1), ENOENT);
	CU_ASSERT_EQUAL(hca_mem_map_move(dev, (uint16_t)info.slot, info.gen, true,
					 &l, 1, &before, &key, 1), ENOENT);
	CU_ASSERT_EQUAL(hca_mem_map_move(dev, (uint16_t)info.slot, info.gen, false,
					 &l, 1, &over, &key, 1), ENOENT);
	hca_fence_exit(&f);
}

/* A key deregistered (and its range registered again under a new key):
 * the cached mapping of the old key moves nothing, the sweep unmaps it,
 * the new key is mapped afresh. */
static void test_stale_key(void)
{
	struct hca_mem_map_stats s0, s1;
	uint32_t old = info.key[0], nk = 0;
	uint64_t v = 0xabcdef, before = owner_peek(64);
	struct iovec l = { &v, 8 };
	struct iovec t = { (void *)(uintptr_t)(info.addr[0] + 64), 8 };
	struct hca_fence f;
	char c = 'r';

	CU_ASSERT_EQUAL(move(true, 0, old, 0, &v, 8), 0);   /* mapped and cached */
	CU_ASSERT_FATAL(write(to_child, &c, 1) == 1 && read(from_child, &nk, 4) == 4);
	CU_ASSERT_FATAL(nk && nk != old);
	hca_mem_map_stats(&s0);
	/* straight at the route with the old key (the responder would have
	 * refused it): nothing moves through the stale mapping */
	hca_fence_enter(dev, &f);
	CU_ASSERT_EQUAL(hca_mem_map_move(dev, (uint16_t)info.slot, info.gen, true,
					 &l, 1, &t, &old, 1), ENOENT);
	hca_fence_exit(&f);
	CU_ASSERT_EQUAL(owner_peek(64), before);
	CU_ASSERT_EQUAL(move(true, 0, old, 64, &v, 8), EACCES);
	hca_mem_map_sweep(dev);
	hca_mem_map_stats(&s1);
	CU_ASSERT(s1.unmaps > s0.unmaps);
	CU_ASSERT_EQUAL(s1.moves, s0.moves);
	info.key[0] = nk;
	CU_ASSERT_EQUAL(move(true, 0, nk, 64, &v, 8), 0);
	CU_ASSERT_EQUAL(owner_peek(64), v);
	hca_mem_map_stats(&s1);
	CU_ASSERT_EQUAL(s1.maps - s0.maps, 1);
	CU_ASSERT_EQUAL(s1.moves - s0.moves, 1);
}

/* The owner dies: nothing moves toward it; once its keys are reclaimed
 * (by our progress thread) the sweep unmaps what we held. */
static void test_owner_death(void)
{
	struct hca_mem_map_stats s0, s1;
	uint64_t v = 1;
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int rc = 0;

	CU_ASSERT_EQUAL(move(true, 0, info.key[0], 0, &v, 8), 0);
	hca_mem_map_stats(&s0);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	child = -1;
	for (int i = 0; i < 500; i++) {
		rc = move(true, 0, info.key[0], 0, &v, 8);
		if (rc && !atomic_load(&dev->seg->mrs[info.key[0] & (HCA_MAX_MR - 1)].key))
			break;
		nanosleep(&ts, NULL);
	}
	CU_ASSERT(rc == ESRCH || rc == EACCES);
	hca_mem_map_sweep(dev);
	hca_mem_map_stats(&s1);
	CU_ASSERT(s1.unmaps > s0.unmaps);
}

static int add_suites(void)
{
	CU_pSuite s;

	/* A kernel older than 6.11 cannot say which file backs a range: the
	 * route is never taken there (every move goes by CMA, which the
	 * other suites cover), so there is nothing of it to test. */
	if (!hca_mem_map_available()) {
		printf("test_hca_mem_map: no PROCMAP_QUERY in this kernel: "
		       "the mapping route is off, its suite skipped\n");
		return 0;
	}
	s = CU_add_suite("hca_mem_map", suite_init, suite_clean);

	if (!s || !CU_add_test(s, "memcpy through a sealed memfd", test_route) ||
	    !CU_add_test(s, "bounds", test_bounds) ||
	    !CU_add_test(s, "stale key after dereg", test_stale_key) ||
	    !CU_add_test(s, "owner death", test_owner_death))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
