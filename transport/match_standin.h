/*
 * match_standin.h: a private stand-in for the matching engine (transport/
 * match.h, owned by the `match` branch) so that libsib builds until that
 * lands.  Same names and contract (notes/match-api.md); deleted at merge.
 */
#ifndef SIB_MATCH_STANDIN_H
#define SIB_MATCH_STANDIN_H
#include <stddef.h>
#include <stdint.h>

#ifndef SIB_ANY_SOURCE
#define SIB_ANY_SOURCE UINT32_MAX
#endif

struct sib_mq_link { struct sib_mq_link *prev, *next; };

struct sib_mq_recv {
	struct sib_mq_link link;
	uint64_t tag, mask;
	uint32_t src;
	uint32_t ctx;
	uint64_t order;
};

struct sib_mq_msg {
	struct sib_mq_link link;
	struct sib_mq_link src_link;
	uint64_t tag;
	uint32_t src, ctx;
	uint64_t len;
};

struct sib_mq {
	struct sib_mq_link posted, unexp;
	size_t nposted, nunexp;
	uint64_t order;
};

int  sib_mq_init(struct sib_mq *mq);
void sib_mq_fini(struct sib_mq *mq);
struct sib_mq_recv *sib_mq_arrive(struct sib_mq *mq, uint32_t src, uint32_t ctx, uint64_t tag);
void sib_mq_add_unexpected(struct sib_mq *mq, struct sib_mq_msg *m);
struct sib_mq_msg *sib_mq_post(struct sib_mq *mq, struct sib_mq_recv *r);
struct sib_mq_msg *sib_mq_probe(struct sib_mq *mq, uint32_t src, uint32_t ctx,
				uint64_t tag, uint64_t mask, int remove);
int sib_mq_cancel(struct sib_mq *mq, struct sib_mq_recv *r);
struct sib_mq_recv *sib_mq_take_recv_from(struct sib_mq *mq, uint32_t src);
struct sib_mq_msg  *sib_mq_take_msg_from(struct sib_mq *mq, uint32_t src);
size_t sib_mq_posted_count(const struct sib_mq *mq);
size_t sib_mq_unexpected_count(const struct sib_mq *mq);
#endif
