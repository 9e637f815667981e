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
 * the context's async fd, a local datagram socketpair.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "hca_int.h"

struct chan_msg {
	uint32_t cq_idx;
	uint32_t handle;
};

struct async_msg {
	uint32_t type;
	int32_t port;
	void *user;
};

static _Atomic uint32_t next_chan_id = 1;

static socklen_t chan_addr(struct hca_dev *dev, struct sockaddr_un *a, uint16_t slot,
			   uint32_t gen, uint32_t id)
{
	static _Atomic long uid = -1; /* a system call per completion event saved */
	long u = atomic_load_explicit(&uid, memory_order_relaxed);

	if (u < 0)
		atomic_store_explicit(&uid, u = (long)getuid(), memory_order_relaxed);
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1,
			 "softib-%u-%08x-ch-%u-%u-%u", (unsigned)u, dev->seg->nonce,
			 slot, gen, id);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* ---- contexts ---- */

struct hca_ctx *hca_ctx_open(struct hca_dev *dev, void *user)
{
	struct hca_ctx *ctx = calloc(1, sizeof(*ctx));
	int sv[2];

	if (!ctx)
		return NULL;
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv)) {
		free(ctx);
		return NULL;
	}
	ctx->dev = dev;
	ctx->user = user;
	ctx->ev_rd = sv[0];
	ctx->ev_wr = sv[1];
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
	close(ctx->ev_rd);
	close(ctx->ev_wr);
	free(ctx);
}

int hca_ctx_async_fd(struct hca_ctx *ctx)
{
	return ctx->ev_rd;
}

void hca_ctx_queue_event(struct hca_ctx *ctx, enum ibv_event_type type,
			 void *user, int port)
{
	struct async_msg m = { .type = type, .port = port, .user = user };

	/* a full queue loses the event rather than block the device */
	if (send(ctx->ev_wr, &m, sizeof(m), MSG_DONTWAIT) < 0)
		return;
}

int hca_ctx_get_async_event(struct hca_ctx *ctx, struct hca_async_ev *ev)
{
	struct async_msg m;
	ssize_t n = recv(ctx->ev_rd, &m, sizeof(m), 0);

	if (n < 0)
		return errno;
	if (n != sizeof(m))
		return EIO;
	ev->type = m.type;
	ev->user = m.user;
	ev->port = m.port;
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
		struct hca_qp *qp = dev->qp_tab[i];

		if (qp && (qp->scq == cq || qp->rcq == cq) &&
		    atomic_load(&qp->ent->state) != IBV_QPS_ERR) {
			hca_qp_to_error(qp);
			hca_ctx_queue_event(qp->ctx, IBV_EVENT_QP_FATAL, qp->user, 0);
		}
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

/*
 * In the owner process: act on an event about one of our objects, then
 * hand it to the application. The index + id pair is checked against our
 * own tables, so a message about an object destroyed meanwhile is dropped.
 */
void hca_db_dispatch(struct hca_dev *dev, const struct hca_db_msg *m)
{
	if (m->kind == HCA_DB_BOUNCE) {
		hca_bounce_serve(dev);
	} else if (m->kind == HCA_DB_KICK) {
		hca_dev_kick(dev);

	} else if (m->kind == HCA_DB_QP_FLUSH && m->idx < HCA_MAX_QP) {
		struct hca_qp *qp = dev->qp_tab[m->idx];

		if (qp && qp->qpn == m->id && still_in_error(qp))
			hca_qp_to_error(qp);
	} else if (m->kind == HCA_DB_ASYNC_QP && m->idx < HCA_MAX_QP) {
		struct hca_qp *qp = dev->qp_tab[m->idx];

		if (!qp || qp->qpn != m->id)
			return;
		if (qp_event_is_fatal(m->event) && still_in_error(qp))
			hca_qp_to_error(qp);
		if (m->event == 0)
			return;
		hca_ctx_queue_event(qp->ctx, m->event, qp->user, 0);
	} else if (m->kind == HCA_DB_ASYNC_SRQ && m->idx < HCA_MAX_SRQ) {
		struct hca_srq *srq = dev->srq_tab[m->idx];

		if (srq && srq->handle == m->id)
			hca_ctx_queue_event(srq->pd->ctx, m->event, srq->user, 0);
	} else if (m->kind == HCA_DB_ASYNC_CQ && m->idx < HCA_MAX_CQ) {
		struct hca_cq *cq = dev->cq_tab[m->idx];

		if (!cq || cq->handle != m->id)
			return;
		if (m->event == IBV_EVENT_CQ_ERR)
			cq_overrun(dev, cq);
		hca_ctx_queue_event(cq->ctx, m->event, cq->user, 0);
	}
}

/* ---- completion channels ---- */

struct hca_chan *hca_chan_create(struct hca_ctx *ctx)
{
	struct hca_dev *dev = ctx->dev;
	struct hca_chan *ch = calloc(1, sizeof(*ch));
	struct sockaddr_un a;
	socklen_t al;

	if (!ch)
		return NULL;
	ch->ctx = ctx;
	ch->id = atomic_fetch_add(&next_chan_id, 1);
	ch->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (ch->fd < 0 || hca_sock_pass_creds(ch->fd))
		goto err;
	al = chan_addr(dev, &a, dev->slot, dev->gen, ch->id);
	if (bind(ch->fd, (struct sockaddr *)&a, al))
		goto err;
	return ch;
err:
	if (ch->fd >= 0)
		close(ch->fd);
	free(ch);
	return NULL;
}

int hca_chan_fd(struct hca_chan *ch)
{
	return ch->fd;
}

int hca_chan_destroy(struct hca_chan *ch)
{
	if (atomic_load(&ch->refs))
		return EBUSY;
	close(ch->fd);
	free(ch);
	return 0;
}

/*
 * Nothing on the channel: sleep until something comes, on the channel
 * and, when this process has QPs on the UDP link, on the link socket
 * too, so that the datagram bringing a completion wakes this thread
 * directly (hca_dev_link_sleep_begin says why). What it brings is taken
 * here; a completion it makes signals the channel, which the caller then
 * reads without sleeping. ACKs still owed go before we sleep: nothing
 * would send them meanwhile, and the peer's send would wait for them.
 * Returns 0 or an errno (EAGAIN: the channel is non-blocking).
 */
/*
 * The channel this thread sleeps on (chan_sleep) while it takes what the
 * link socket brought, and the events that raised on it: this thread
 * reads them next in any case, so they are handed over in memory, not
 * as a datagram to ourselves (a send, a receive and the name's
 * formatting saved per event).
 */
static int chan_post(struct hca_dev *dev, uint16_t owner, uint32_t owner_gen,
		     uint32_t chan, const struct chan_msg *m);

#define CHAN_TLS_MAX 8
#define CHAN_SLEEP_LINK_FDS 8 /* sockets polled directly; more: their epoll set */
static _Thread_local struct {
	struct hca_chan *ch;
	int n;
	struct chan_msg m[CHAN_TLS_MAX];
} tls_wait;

static bool chan_signal_local(struct hca_dev *dev, uint16_t owner, uint32_t owner_gen,
			      uint32_t chan, const struct chan_msg *m)
{
	if (!tls_wait.ch || owner != dev->slot || owner_gen != dev->gen ||
	    chan != tls_wait.ch->id || tls_wait.n == CHAN_TLS_MAX)
		return false;
	tls_wait.m[tls_wait.n++] = *m;
	return true;
}

static int chan_sleep(struct hca_chan *ch)
{
	struct hca_dev *dev = ch->ctx->dev;
	struct pollfd p[1 + CHAN_SLEEP_LINK_FDS] = { { .fd = ch->fd, .events = POLLIN } };
	int fl = fcntl(ch->fd, F_GETFL), rc = 0, n = 0;
	bool link, woke = false;

	if (fl >= 0 && (fl & O_NONBLOCK))
		return EAGAIN;
	hca_link_acks_flush(dev, true, HCA_ACKS_ALL);
	link = hca_dev_link_sleep_begin(dev);
	if (link)
		n = hca_link_wait_fds(dev, p + 1, CHAN_SLEEP_LINK_FDS);
	if (poll(p, 1 + (nfds_t)n, -1) < 0)
		rc = errno; /* EINTR too, as a blocking read of the channel says */
	if (link) {
		for (int i = 1; i <= n; i++)
			woke |= p[i].revents != 0;
		if (woke) {
			tls_wait.ch = ch;
			hca_link_rx_sleeper(dev, p + 1, n);
			tls_wait.ch = NULL;
		}
		hca_dev_link_sleep_end(dev);
	}
	return rc;
}

int hca_chan_get_event(struct hca_chan *ch, void **cq_user)
{
	struct hca_dev *dev = ch->ctx->dev;
	struct chan_msg m;

	for (;;) {
		ssize_t n;
		struct hca_cq *cq;

		if (tls_wait.n) { /* raised while we took the socket */
			m = tls_wait.m[0];
			memmove(tls_wait.m, tls_wait.m + 1, --tls_wait.n * sizeof(m));
			n = sizeof(m);
		} else {
			n = hca_sock_recv_checked(ch->fd, &m, sizeof(m), MSG_DONTWAIT,
						  hca_dev_foreign_counter(dev));
		}
		if (n < 0) {
			int rc = errno;

			if (rc != EAGAIN && rc != EWOULDBLOCK && rc != EINTR)
				return rc;
			rc = rc == EINTR ? 0 : chan_sleep(ch);
			if (rc)
				return rc;
			continue;
		}
		if (n != sizeof(m) || m.cq_idx >= HCA_MAX_CQ)
			continue;
		cq = dev->cq_tab[m.cq_idx];
		/* an event for a CQ destroyed since is not delivered */
		if (!cq || cq->handle != m.handle || cq->chan != ch)
			continue;
		hca_cq_event_read(cq); /* the next wake may be sent (cq.c) */
		/*
		 * Completions that raised an event may have been polled already
		 * (work done inside post_send completes before the application
		 * waits): an event for an empty CQ re-arms it as it was armed
		 * and is not delivered, unless a completion came meanwhile.
		 */
		if (!hca_ring_count(cq->ring)) {
			hca_cq_arm(cq, cq->arm_solicited);
			if (!hca_ring_count(cq->ring))
				continue;
		}
		*cq_user = cq->user;
		/* events left over go the channel's way: this thread may not
		 * come back for them, another may read the channel */
		for (int i = 0; i < tls_wait.n; i++)
			chan_post(dev, dev->slot, dev->gen, ch->id, &tls_wait.m[i]);
		tls_wait.n = 0;
		return 0;
	}
}

static int chan_post(struct hca_dev *dev, uint16_t owner, uint32_t owner_gen,
		     uint32_t chan, const struct chan_msg *m)
{
	struct sockaddr_un a;
	socklen_t al = chan_addr(dev, &a, owner, owner_gen, chan);

	if (sendto(dev->db_fd, m, sizeof(*m), MSG_DONTWAIT, (struct sockaddr *)&a, al) < 0)
		return errno;
	return 0;
}

int hca_chan_signal(struct hca_dev *dev, uint16_t owner, uint32_t owner_gen,
		    uint32_t chan, uint32_t cq_idx, uint32_t handle)
{
	struct chan_msg m = { .cq_idx = cq_idx, .handle = handle };

	if (chan_signal_local(dev, owner, owner_gen, chan, &m))
		return 0;
	return chan_post(dev, owner, owner_gen, chan, &m);
}
