/*
 * match_standin.c: linear-scan stand-in for the matching engine (see
 * match_standin.h).  Correct, not fast; deleted when transport/match.c lands.
 */
#include <errno.h>
#include "match_standin.h"

#define CONTAINER(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

static void l_init(struct sib_mq_link *h) { h->prev = h->next = h; }
static void l_del(struct sib_mq_link *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->prev = e->next = e;
}
static void l_tail(struct sib_mq_link *h, struct sib_mq_link *e)
{
	e->prev = h->prev;
	e->next = h;
	h->prev->next = e;
	h->prev = e;
}

int sib_mq_init(struct sib_mq *mq)
{
	l_init(&mq->posted);
	l_init(&mq->unexp);
	mq->nposted = mq->nunexp = 0;
	mq->order = 0;
	return 0;
}

void sib_mq_fini(struct sib_mq *mq) { (void)mq; }

static int fits(uint64_t tag, uint64_t rtag, uint64_t mask)
{
	return (tag & mask) == (rtag & mask);
}

struct sib_mq_recv *sib_mq_arrive(struct sib_mq *mq, uint32_t src, uint32_t ctx, uint64_t tag)
{
	for (struct sib_mq_link *e = mq->posted.next; e != &mq->posted; e = e->next) {
		struct sib_mq_recv *r = CONTAINER(e, struct sib_mq_recv, link);

		if (r->ctx == ctx && (r->src == SIB_ANY_SOURCE || r->src == src) &&
		    fits(tag, r->tag, r->mask)) {
			l_del(e);
			mq->nposted--;
			return r;
		}
	}
	return NULL;
}

void sib_mq_add_unexpected(struct sib_mq *mq, struct sib_mq_msg *m)
{
	l_init(&m->src_link);
	l_tail(&mq->unexp, &m->link);
	mq->nunexp++;
}

struct sib_mq_msg *sib_mq_probe(struct sib_mq *mq, uint32_t src, uint32_t ctx,
				uint64_t tag, uint64_t mask, int remove)
{
	for (struct sib_mq_link *e = mq->unexp.next; e != &mq->unexp; e = e->next) {
		struct sib_mq_msg *m = CONTAINER(e, struct sib_mq_msg, link);

		if (m->ctx == ctx && (src == SIB_ANY_SOURCE || m->src == src) &&
		    fits(m->tag, tag, mask)) {
			if (remove) {
				l_del(e);
				mq->nunexp--;
			}
			return m;
		}
	}
	return NULL;
}

struct sib_mq_msg *sib_mq_post(struct sib_mq *mq, struct sib_mq_recv *r)
{
	struct sib_mq_msg *m = sib_mq_probe(mq, r->src, r->ctx, r->tag, r->mask, 1);

	if (m)
		return m;
	r->order = mq->order++;
	l_tail(&mq->posted, &r->link);
	mq->nposted++;
	return NULL;
}

int sib_mq_cancel(struct sib_mq *mq, struct sib_mq_recv *r)
{
	for (struct sib_mq_link *e = mq->posted.next; e != &mq->posted; e = e->next)
		if (e == &r->link) {
			l_del(e);
			mq->nposted--;
			return 0;
		}
	return ENOENT;
}

struct sib_mq_recv *sib_mq_take_recv_from(struct sib_mq *mq, uint32_t src)
{
	for (struct sib_mq_link *e = mq->posted.next; e != &mq->posted; e = e->next) {
		struct sib_mq_recv *r = CONTAINER(e, struct sib_mq_recv, link);

		if (r->src == src) {
			l_del(e);
			mq->nposted--;
			return r;
		}
	}
	return NULL;
}

struct sib_mq_msg *sib_mq_take_msg_from(struct sib_mq *mq, uint32_t src)
{
	for (struct sib_mq_link *e = mq->unexp.next; e != &mq->unexp; e = e->next) {
		struct sib_mq_msg *m = CONTAINER(e, struct sib_mq_msg, link);

		if (m->src == src) {
			l_del(e);
			mq->nunexp--;
			return m;
		}
	}
	return NULL;
}

size_t sib_mq_posted_count(const struct sib_mq *mq) { return mq->nposted; }
size_t sib_mq_unexpected_count(const struct sib_mq *mq) { return mq->nunexp; }
