/*
 * Events: completion channels and the async event queue of a context.
 *
 * A completion channel is an AF_UNIX datagram socket bound to an abstract
 * name derived from (owner slot, generation, channel id), so that whichever
 * process completes work into a CQ can wake the CQ owner's channel directly
 * with one datagram — no hop through a thread. Its fd is what
 * ibv_get_cq_event blocks on and what applications poll.
 *
 * Async events about an object go to its owner's doorbell; the owner's
 * progress thread acts on them (an errored QP flushes) and queues them on
 * the context's async queue: in memory, counted by an eventfd.
 *
 * No wake-up is lost (wake.c says how a datagram that cannot be sent is
 * kept and sent again): a CQ's owed event is a word in the segment
 * (hca_cq_ent.ev_pending), the channel's datagram only says "look", and
 * whoever reads a channel looks at every CQ on it (chan_take).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "hca_int.h"
#include "progress.h"

/* ---- contexts ---- */

#define ASYNC_QUEUE_FIRST 64

struct hca_ctx *hca_ctx_open(struct hca_dev *dev, void *user)
{
	struct hca_ctx *ctx = calloc(1, sizeof(*ctx));
	int rc;

	if (!ctx)
		return NULL;
	ctx->evq = calloc(ASYNC_QUEUE_FIRST, sizeof(*ctx->evq));
	ctx->evq_cap = ASYNC_QUEUE_FIRST;
	ctx->ev_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	rc = ctx->ev_fd < 0 ? errno : ctx->evq ? 0 : ENOMEM;
	if (!rc)
		rc = hca_mutex_init(&ctx->ev_lock);
	if (rc) {
		if (ctx->ev_fd >= 0)
			close(ctx->ev_fd);
		free(ctx->evq);
		free(ctx);
		errno = rc;
		return NULL;
	}
	ctx->dev = dev;
	ctx->user = user;
	pthread_mutex_lock(&dev->lock);
	ctx->next = dev->ctxs;
	dev->ctxs = ctx;
	pthread_mutex_unlock(&dev->lock);
	return ctx;
}

void hca_ctx_close(struct hca_ctx *ctx)
{
	struct hca_dev *dev = ctx->dev;

	pthread_mutex_lock(&dev->lock);
	for (struct hca_ctx **pp = &dev->ctxs; *pp; pp = &(*pp)->next)
		if (*pp == ctx) {
			*pp = ctx->next;
			break;
		}
	pthread_mutex_unlock(&dev->lock);
	close(ctx->ev_fd);
	pthread_mutex_destroy(&ctx->ev_lock);
	free(ctx->evq);
	free(ctx);
}

int hca_ctx_async_fd(struct hca_ctx *ctx)
{
	return ctx->ev_fd;
}

/* Room for one more event (ev_lock held): the ring doubles, in order. */
static int async_grow(struct hca_ctx *ctx)
{
	uint32_t cap = ctx->evq_cap * 2;
	struct hca_async_ev *q;

	if (ctx->evq_n < ctx->evq_cap)
		return 0;
	q = malloc(cap * sizeof(*q));
	if (!q)
		return ENOMEM;
	for (uint32_t i = 0; i < ctx->evq_n; i++)
		q[i] = ctx->evq[(ctx->evq_head + i) % ctx->evq_cap];
	free(ctx->evq);
	ctx->evq = q;
	ctx->evq_cap = cap;
	ctx->evq_head = 0;
	return 0;
}

/*
 * Queue an event for the application: never dropped, never blocking.
 * The entry is in the ring before the eventfd counts it, so a reader the
 * count lets through always finds one. Only an allocation failure (the
 * ring at its largest) loses an event; it is reported on stderr.
 */
void hca_ctx_queue_event(struct hca_ctx *ctx, enum ibv_event_type type,
			 void *user, int port)
{
	uint64_t one = 1;
	int rc;

	pthread_mutex_lock(&ctx->ev_lock);
	rc = async_grow(ctx);
	if (!rc) {
		ctx->evq[(ctx->evq_head + ctx->evq_n) % ctx->evq_cap] =
			(struct hca_async_ev){ .type = type, .user = user, .port = port };
		ctx->evq_n++;
	}
	pthread_mutex_unlock(&ctx->ev_lock);
	/* an eventfd write fails only past 2^64 - 2 queued */
	if (rc || write(ctx->ev_fd, &one, sizeof(one)) != sizeof(one))
		fprintf(stderr, "softib: async event %d lost: %s\n", (int)type,
			strerror(rc ? rc : errno));
}

/* Blocks unless the application made the fd non-blocking (EAGAIN then). */
int hca_ctx_get_async_event(struct hca_ctx *ctx, struct hca_async_ev *ev)
{
	uint64_t one;

	if (read(ctx->ev_fd, &one, sizeof(one)) != sizeof(one))
		return errno ? errno : EIO;
	pthread_mutex_lock(&ctx->ev_lock);
	if (!ctx->evq_n) { /* cannot be: each count follows its entry */
		pthread_mutex_unlock(&ctx->ev_lock);
		return EIO;
	}
	*ev = ctx->evq[ctx->evq_head];
	ctx->evq_head = (ctx->evq_head + 1) % ctx->evq_cap;
	ctx->evq_n--;
	pthread_mutex_unlock(&ctx->ev_lock);
	return 0;
}

/* ---- raising events toward an object's owner ---- */

/*
 * Always through the owner's doorbell, even when the owner is us: the
 * caller may hold the lock of a queue the event handler must take (a QP
 * connected to itself), and events are rare enough to afford the hop.
 */
static void raise_event(struct hca_dev *dev, uint16_t owner, uint32_t gen,
			const struct hca_db_msg *m)
{
	hca_dev_notify(dev, owner, gen, m, sizeof(*m));
}

/* An XRC target QP's events reach every process that holds it. */
void hca_raise_qp_event(struct hca_dev *dev, struct hca_qp_ent *e,
			enum ibv_event_type type)
{
	struct hca_db_msg m = { .kind = HCA_DB_ASYNC_QP, .event = type,
				.idx = e->num,
				.id = atomic_load(&e->qpn) };

	if (e->type != IBV_QPT_XRC_RECV) {
		raise_event(dev, e->owner, e->owner_gen, &m);
		return;
	}
	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		struct hca_proc *p = &dev->seg->procs[s];

		if ((atomic_load(&e->regs[s / 64]) & (1ULL << (s % 64))) &&
		    atomic_load(&p->state) == HCA_PROC_LIVE)
			raise_event(dev, s, p->gen, &m);
	}
}

void hca_raise_srq_event(struct hca_dev *dev, uint32_t idx, enum ibv_event_type type)
{
	struct hca_srq_ent *e = &dev->seg->srqs[idx];
	struct hca_db_msg m = { .kind = HCA_DB_ASYNC_SRQ, .event = type,
				.idx = idx, .id = atomic_load(&e->handle) };

	raise_event(dev, e->owner, e->owner_gen, &m);
}

void hca_raise_cq_event(struct hca_dev *dev, uint32_t idx, enum ibv_event_type type)
{
	struct hca_cq_ent *e = &dev->seg->cqs[idx];
	struct hca_db_msg m = { .kind = HCA_DB_ASYNC_CQ, .event = type,
				.idx = idx, .id = atomic_load(&e->handle) };

	raise_event(dev, e->owner, e->owner_gen, &m);
}

static bool qp_event_is_fatal(uint32_t ev)
{
	return ev == IBV_EVENT_QP_FATAL || ev == IBV_EVENT_QP_REQ_ERR ||
	       ev == IBV_EVENT_QP_ACCESS_ERR;
}

/* CQ overrun: the CQ is in error and so is every QP that completes to it. */
static void cq_overrun(struct hca_dev *dev, struct hca_cq *cq)
{
	/* our own QPs only: an XRC target QP has no CQ */
	uint32_t first = ((uint32_t)dev->slot + 1) << HCA_QPN_K_BITS;

	for (uint32_t i = first; i < first + HCA_QP_PER_PROC; i++) {
		struct hca_qp *qp = hca_qp_get(dev, i, HCA_NONE);

		if (!qp)
			continue;
		if ((qp->scq == cq || qp->rcq == cq) &&
		    atomic_load(&qp->ent->state) != IBV_QPS_ERR) {
			hca_qp_to_error(qp);
			hca_ctx_queue_event(qp->ctx, IBV_EVENT_QP_FATAL, qp->user, 0);
		}
		hca_qp_put(qp);
	}
}

/*
 * A responder in another process that errs our QP stores ERR in its entry,
 * then asks us (a doorbell) to flush it. The application may have reset
 * and connected the QP again before the doorbell is read: the flush is
 * then stale, and flushing would err the new connection — the receive
 * just posted completes flushed, the peer's next SEND runs out of
 * retries. The entry still reading ERR says it is not stale.
 */
static bool still_in_error(struct hca_qp *qp)
{
	return atomic_load(&qp->ent->state) == IBV_QPS_ERR;
}

/* The test hook, if a test set one (one load otherwise). */
static inline void dispatch_hook(const struct hca_db_msg *m)
{
	void (*h)(const struct hca_db_msg *) =
		atomic_load_explicit(&hca_db_dispatch_hook, memory_order_acquire);

	if (h)
		h(m);
}

static void dispatch_qp(struct hca_dev *dev, const struct hca_db_msg *m)
{
	struct hca_qp *qp = hca_qp_get(dev, m->idx, m->id);

	if (!qp)
		return;
	dispatch_hook(m);
	/* check and act under the state lock: a reset in between would
	 * be undone (an ERR written back, a new receive flushed) */
	pthread_mutex_lock(&qp->state_lock);
	if (m->kind == HCA_DB_QP_FLUSH) {
		/* flush only: the state is ERR already */
		if (still_in_error(qp))
			hca_qp_flush(qp);
	} else if (qp_event_is_fatal(m->event) && still_in_error(qp)) {
		hca_qp_to_error(qp);
	}
	pthread_mutex_unlock(&qp->state_lock);
	if (m->kind != HCA_DB_QP_FLUSH && m->event)
		hca_ctx_queue_event(qp->ctx, m->event, qp->user, 0);
	hca_qp_put(qp);
}

/*
 * In the owner process: act on an event about one of our objects, then
 * hand it to the application. The index + id pair is checked against our
 * own tables, so a message about an object destroyed meanwhile is dropped;
 * the object found is pinned while we act on it, so that its destruction
 * in another thread waits for us (obj_tab.c).
 */
void hca_db_dispatch(struct hca_dev *dev, const struct hca_db_msg *m)
{
	if (m->kind == HCA_DB_BOUNCE) {
		hca_progress(dev, HCA_PROGRESS_SERVE);
	} else if (m->kind == HCA_DB_KICK) {
		hca_dev_kick(dev);
	} else if (m->kind == HCA_DB_QP_FLUSH || m->kind == HCA_DB_ASYNC_QP) {
		dispatch_qp(dev, m);
	} else if (m->kind == HCA_DB_ASYNC_SRQ) {
		struct hca_srq *srq = hca_srq_get(dev, m->idx, m->id);

		if (!srq)
			return;
		dispatch_hook(m);
		hca_ctx_queue_event(srq->pd->ctx, m->event, srq->user, 0);
		hca_srq_put(srq);
	} else if (m->kind == HCA_DB_ASYNC_CQ) {
		struct hca_cq *cq = hca_cq_get(dev, m->idx, m->id);

		if (!cq)
			return;
		dispatch_hook(m);
		if (m->event == IBV_EVENT_CQ_ERR)
			cq_overrun(dev, cq);
		hca_ctx_queue_event(cq->ctx, m->event, cq->user, 0);
		hca_cq_put(cq);
	}
}
