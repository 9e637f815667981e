/*
 * Test points: a process that dies at a chosen place in the middle of an
 * operation on shared state, so that tests can prove a survivor repairs
 * what it left half done (test/integration/test_ring_claims.sh,
 * test_heap_repair.sh).
 *
 *   SOFTIB_TEST_DIE_AT=<site>[:<n>]
 *
 * kills the process with SIGKILL the n-th time (default 1) any of its
 * threads passes <site>. Unset, a test point costs one relaxed load and a
 * compare against zero.
 */
#ifndef HCA_DIE_AT_H
#define HCA_DIE_AT_H

#include <stdatomic.h>

enum hca_die_site {
	HCA_DIE_NONE = 0,
	HCA_DIE_CQ_CLAIMED,     /* a CQ slot claimed, entry not yet published */
	HCA_DIE_CQ_WRITTEN,     /* ... its body written, not yet published */
	HCA_DIE_RQ_CLAIMED,     /* a receive WQE claimed, not yet handed back */
	HCA_DIE_RQ_HELD,        /* a receive WQE taken, its completion not pushed */
	HCA_DIE_INL_FILLING,    /* an inline slot claimed, not yet ready */
	HCA_DIE_INL_READY,      /* an inline slot ready, its completion not pushed */
	HCA_DIE_HEAP_DRAIN,     /* half-way through draining the quarantine */
	HCA_DIE_HEAP_GAP,       /* half-way through giving a bump gap away */
	HCA_DIE_HEAP_POP,       /* a free-list head read, not yet unlinked */
	HCA_DIE_HEAP_QUAR,      /* a quarantine entry written, not yet counted */
	HCA_DIE_BOUNCE_HELD,    /* a target's mailbox held, its request posted */
	HCA_DIE_SITES
};

/* -1: the environment not read yet; 0: no test point armed. */
extern _Atomic int hca_die_armed;

void hca_die_check(enum hca_die_site site);
/* The same from a test program (a child after fork, say): die at the
 * n-th pass of site from now on; HCA_DIE_NONE disarms. */
void hca_die_arm(enum hca_die_site site, long n);

static inline void hca_die_at(enum hca_die_site site)
{
	if (__builtin_expect(atomic_load_explicit(&hca_die_armed,
						  memory_order_relaxed) != 0, 0))
		hca_die_check(site);
}

#endif
