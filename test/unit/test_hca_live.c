/*
 * Unit tests of hca/live.c, the liveness verdict that decides whether a
 * peer is reclaimed (issue 15 item 3): only proof of death answers DEAD —
 * a pid that no longer exists, a zombie seen through its pidfd, another
 * start time — and a checker without a file descriptor to spare answers
 * UNKNOWN for a live process, never DEAD.
 */
#include "hca_int.h"
#include "cu_run.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t start_of(pid_t pid)
{
	uint64_t st = 0;

	CU_ASSERT_EQUAL_FATAL(hca_proc_stat(pid, &st, NULL), 0);
	return st;
}

/* A child that sleeps until killed. */
static pid_t sleeper(void)
{
	pid_t c = fork();

	if (c == 0) {
		for (;;)
			pause();
	}
	CU_ASSERT_FATAL(c > 0);
	return c;
}

static void test_self_alive(void)
{
	int fd;

	CU_ASSERT_EQUAL(hca_proc_live(getpid(), start_of(getpid()), -1), HCA_LIVE_YES);
	CU_ASSERT_EQUAL(hca_proc_watch(getpid(), start_of(getpid()), &fd), HCA_LIVE_YES);
	CU_ASSERT(fd >= 0);
	if (fd >= 0)
		close(fd);
}

static void test_gone_is_dead(void)
{
	pid_t c = sleeper();
	uint64_t st = start_of(c);
	int fd;

	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
	CU_ASSERT_EQUAL(hca_proc_live(c, st, -1), HCA_LIVE_DEAD);
	CU_ASSERT_EQUAL(hca_proc_watch(c, st, &fd), HCA_LIVE_DEAD);
	CU_ASSERT_EQUAL(fd, -1);
}

/* Killed and not yet waited for: /proc still shows it, its pidfd does not. */
static void test_zombie_is_dead(void)
{
	pid_t c = sleeper();
	uint64_t st = start_of(c);
	int fd;

	kill(c, SIGKILL);
	for (int i = 0; i < 1000; i++) { /* until it is a zombie */
		char state = 0;
		uint64_t s2;

		if (hca_proc_stat(c, &s2, &state) == 0 && state == 'Z')
			break;
		usleep(1000);
	}
	CU_ASSERT_EQUAL(hca_proc_watch(c, st, &fd), HCA_LIVE_DEAD);
	waitpid(c, NULL, 0);
}

static void test_other_start_is_dead(void)
{
	pid_t c = sleeper();
	int fd;

	/* the pid names another process than the one recorded */
	CU_ASSERT_EQUAL(hca_proc_live(c, start_of(c) + 1, -1), HCA_LIVE_DEAD);
	CU_ASSERT_EQUAL(hca_proc_watch(c, start_of(c) + 1, &fd), HCA_LIVE_DEAD);
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
}

/*
 * No descriptor to spare: pidfd_open and open() fail with EMFILE. A live
 * peer is then UNKNOWN, never DEAD; a gone one is still DEAD (kill says
 * ESRCH without a descriptor).
 */
static void test_emfile_is_not_death(void)
{
	pid_t alive = sleeper(), gone = sleeper();
	uint64_t sa = start_of(alive), sg = start_of(gone);
	struct rlimit old, rl;
	int fd, probe;

	kill(gone, SIGKILL);
	waitpid(gone, NULL, 0);
	CU_ASSERT_EQUAL_FATAL(getrlimit(RLIMIT_NOFILE, &old), 0);
	rl = old;
	rl.rlim_cur = 0; /* no descriptor may be made at all */
	CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_NOFILE, &rl), 0);
	probe = dup(0);
	CU_ASSERT(probe < 0 && errno == EMFILE);
	CU_ASSERT_EQUAL(hca_proc_live(alive, sa, -1), HCA_LIVE_UNKNOWN);
	CU_ASSERT_EQUAL(hca_proc_watch(alive, sa, &fd), HCA_LIVE_UNKNOWN);
	CU_ASSERT_EQUAL(fd, -1);
	CU_ASSERT_EQUAL(hca_proc_watch(gone, sg, &fd), HCA_LIVE_DEAD);
	setrlimit(RLIMIT_NOFILE, &old);
	if (probe >= 0)
		close(probe);
	/* and with descriptors again, the live one is known live */
	CU_ASSERT_EQUAL(hca_proc_watch(alive, sa, &fd), HCA_LIVE_YES);
	if (fd >= 0)
		close(fd);
	kill(alive, SIGKILL);
	waitpid(alive, NULL, 0);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("hca_live", NULL, NULL);

	if (!s)
		return -1;
	if (!CU_add_test(s, "self alive", test_self_alive) ||
	    !CU_add_test(s, "gone pid: dead", test_gone_is_dead) ||
	    !CU_add_test(s, "zombie: dead through its pidfd", test_zombie_is_dead) ||
	    !CU_add_test(s, "other start time: dead", test_other_start_is_dead) ||
	    !CU_add_test(s, "EMFILE: unknown, never dead", test_emfile_is_not_death))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
