/*
 * Test points (die_at.h): SOFTIB_TEST_DIE_AT=<site>[:<n>] kills the
 * process at the n-th pass of <site>. For tests only; the sites are
 * where a real SIGKILL would leave shared state half changed.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "die_at.h"

_Atomic int hca_die_armed = -1;
static int die_site;
static _Atomic long die_left;

static const char *const site_names[HCA_DIE_SITES] = {
	[HCA_DIE_CQ_CLAIMED] = "cq_claimed",
	[HCA_DIE_CQ_WRITTEN] = "cq_written",
	[HCA_DIE_RQ_CLAIMED] = "rq_claimed",
	[HCA_DIE_RQ_HELD] = "rq_held",
	[HCA_DIE_INL_FILLING] = "inl_filling",
	[HCA_DIE_INL_READY] = "inl_ready",
	[HCA_DIE_HEAP_DRAIN] = "heap_drain",
	[HCA_DIE_HEAP_GAP] = "heap_gap",
	[HCA_DIE_HEAP_POP] = "heap_pop",
	[HCA_DIE_HEAP_QUAR] = "heap_quar",
	[HCA_DIE_BOUNCE_HELD] = "bounce_held",
};

static void parse_env(void)
{
	const char *s = getenv("SOFTIB_TEST_DIE_AT");
	const char *colon;
	size_t n;

	if (!s || !*s) {
		atomic_store(&hca_die_armed, 0);
		return;
	}
	colon = strchr(s, ':');
	n = colon ? (size_t)(colon - s) : strlen(s);
	for (int i = 1; i < HCA_DIE_SITES; i++) {
		if (strlen(site_names[i]) == n && !strncmp(s, site_names[i], n)) {
			long k = colon ? strtol(colon + 1, NULL, 10) : 1;

			die_site = i;
			atomic_store(&die_left, k > 0 ? k : 1);
			atomic_store(&hca_die_armed, 1);
			return;
		}
	}
	atomic_store(&hca_die_armed, 0);
}

static pthread_once_t die_once = PTHREAD_ONCE_INIT;

void hca_die_arm(enum hca_die_site site, long n)
{
	pthread_once(&die_once, parse_env);
	die_site = (int)site;
	atomic_store(&die_left, n > 0 ? n : 1);
	atomic_store(&hca_die_armed, site != HCA_DIE_NONE);
}

void hca_die_check(enum hca_die_site site)
{
	pthread_once(&die_once, parse_env);
	if (!atomic_load(&hca_die_armed) || (int)site != die_site)
		return;
	if (atomic_fetch_sub(&die_left, 1) == 1)
		kill(getpid(), SIGKILL);
}
