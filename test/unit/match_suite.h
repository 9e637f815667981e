/*
 * What the tag-matching suites share (test_sib_match.c,
 * test_sib_match_model.c): the engine under test, and the nodes the
 * runtime embeds the engine's in.
 */
#ifndef MATCH_SUITE_H
#define MATCH_SUITE_H

#include "match.h"

#define ALL ((uint64_t)~0ULL)

/* What the runtime embeds the engine's nodes in. */
struct req {
	struct sib_mq_recv r;
	int id;
};

struct umsg {
	struct sib_mq_msg m;
	int id;
};

extern struct sib_mq mq;

int match_suite_init(void);
int match_suite_clean(void);

#endif
