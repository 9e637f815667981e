/*
 * The peer table of hca/dev.c from several threads at once. Application
 * threads ask hca_peer_alive about a live peer process (the fast path: no
 * lock) while another asks about a generation that slot does not have
 * (the slow path: it replaces the slot's verdict under dev->lock), and the
 * progress thread learns of the peer's death through its pidfd. A live
 * peer is never called dead, a wrong generation never alive, a killed
 * peer dead within seconds.
 *
 * Run in the ThreadSanitizer tree (build/tsan/test), the same run also
 * proves the table is read and written without a data race: before the
 * table became one atomic word per slot, the fast path's plain reads of
 * gen, pidfd and dead raced the slow path's writes, and TSan said so.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cu_run.h"
#include "hca.h"
#include "hca_int.h" /* hca_peer_alive */

#define ROUNDS 3000
#define DEATH_TIMEOUT_S 10

static struct hca_dev *dev;
static pid_t child = -1;
static uint16_t peer_slot;
static uint32_t peer_gen;
static atomic_int live_said_dead, stale_said_alive;

/*
 * The peer: a process of its own that opens the device (a slot of the
 * host's segment) and waits to be killed. Forked before this process
 * has a thread, so the child is an ordinary process under TSan too.
 */
static int peer_start(void)
{
	int fds[2];
	uint32_t msg[2];

	if (pipe(fds))
		return -1;
	child = fork();
	if (child < 0)
		return -1;
	if (child == 0) {
		struct hca_dev *d;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fds[0]);
		d = hca_dev_get();
		msg[0] = d ? d->slot : 0xffff;
		msg[1] = d ? d->gen : 0;
		if (write(fds[1], msg, sizeof(msg)) != sizeof(msg))
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	ssize_t n = read(fds[0], msg, sizeof(msg));

	close(fds[0]);
	if (n != sizeof(msg) || msg[0] == 0xffff)
		return -1;
	peer_slot = (uint16_t)msg[0];
	peer_gen = msg[1];
	return 0;
}

static int suite_init(void)
{
	if (peer_start())
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

static void *ask_live(void *arg)
{
	for (int i = 0; i < ROUNDS; i++)
		if (!hca_peer_alive(dev, peer_slot, peer_gen))
			atomic_fetch_add(&live_said_dead, 1);
	return arg;
}

/* Each call replaces the slot's verdict (the pidfd of the live
 * generation is closed), so the live askers keep reopening it. */
static void *ask_stale(void *arg)
{
	for (int i = 0; i < ROUNDS; i++)
		if (hca_peer_alive(dev, peer_slot, peer_gen + 1))
			atomic_fetch_add(&stale_said_alive, 1);
	return arg;
}

static void test_concurrent_askers(void)
{
	pthread_t t[3];

	CU_ASSERT_NOT_EQUAL_FATAL(peer_slot, dev->slot);
	CU_ASSERT_FATAL(pthread_create(&t[0], NULL, ask_live, NULL) == 0);
	CU_ASSERT_FATAL(pthread_create(&t[1], NULL, ask_live, NULL) == 0);
	CU_ASSERT_FATAL(pthread_create(&t[2], NULL, ask_stale, NULL) == 0);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	CU_ASSERT_EQUAL(atomic_load(&live_said_dead), 0);
	CU_ASSERT_EQUAL(atomic_load(&stale_said_alive), 0);
	CU_ASSERT_TRUE(hca_peer_alive(dev, peer_slot, peer_gen));
}

/* Killed: the progress thread hears it from the pidfd (or a caller finds
 * the process gone) while application threads keep asking. */
static void *ask_until_dead(void *arg)
{
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (!hca_peer_alive(dev, peer_slot, peer_gen))
			return (void *)1;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec < DEATH_TIMEOUT_S);
	return NULL;
}

static void test_death_seen(void)
{
	pthread_t t[2];
	void *r[2];

	CU_ASSERT_TRUE_FATAL(hca_peer_alive(dev, peer_slot, peer_gen));
	CU_ASSERT_FATAL(pthread_create(&t[0], NULL, ask_until_dead, NULL) == 0);
	CU_ASSERT_FATAL(pthread_create(&t[1], NULL, ask_until_dead, NULL) == 0);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	child = -1;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], &r[i]);
	CU_ASSERT_PTR_NOT_NULL(r[0]);
	CU_ASSERT_PTR_NOT_NULL(r[1]);
	CU_ASSERT_FALSE(hca_peer_alive(dev, peer_slot, peer_gen));
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("peer table", suite_init, suite_clean);

	if (!s ||
	    !CU_add_test(s, "live and stale generations asked at once",
			 test_concurrent_askers) ||
	    !CU_add_test(s, "a killed peer is seen dead", test_death_seen))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
