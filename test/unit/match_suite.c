/* The engine a tag-matching suite runs on (match_suite.h). */
#include "match_suite.h"

struct sib_mq mq;

int match_suite_init(void)
{
	return sib_mq_init(&mq) ? -1 : 0;
}

int match_suite_clean(void)
{
	sib_mq_fini(&mq);
	return 0;
}
