/*
 * Completion channels.
 *
 * A channel is an AF_UNIX datagram socket bound to an abstract name
 * derived from (owner slot, generation, channel id), so that whichever
 * process completes work into a CQ can wake the CQ owner's channel
 * directly with one datagram — no hop through a thread. Its fd is what
 * ibv_get_cq_event blocks on and what applications poll.
 *
 * The datagram is a hint, never the event itself. The event is the CQ's
 * owed-event word in the segment (hca_cq_ent.ev_pending, cq.c): set 0 -> 1
 * by the producer that disarms the CQ, which sends one datagram on that
 * edge; taken back 1 -> 0 by whoever reads the channel (chan_take). A
 * reader looks at every CQ on the channel before it sleeps, so
 *  - a burst over more CQs than the socket queues (~10) loses nothing:
 *    one datagram wakes the reader, which finds all the owed CQs;
 *  - a datagram that could not be sent at all is sent again later by the
 *    sender's progress thread (wake.c), and the owner's progress thread
 *    posts one itself to a channel that owes an event and holds none
 *    (hca_chan_backstop: a sender that died before its retry);
 *  - a reader that returns one event while others are still owed makes
 *    sure a datagram waits in the socket (chan_rekick), so that an
 *    application polling the fd sees it readable.
 * Ordering: the producer sets ev_pending (seq_cst exchange) before it
 * sends; the reader receives (or finds nothing), then issues a seq_cst
 * fence and looks at the words. A reader that saw no word set has either
 * sleep ahead of it on a socket into which the producer's send (or its
 * retry) will land, or it ran its look after the producer's exchange and
 * saw it.
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
#include "progress.h"

/* What a channel datagram carries: the CQ that owes the event (a hint). */
struct chan_msg {
	uint32_t cq_idx;
	uint32_t handle;
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

static int chan_post(struct hca_dev *dev, uint16_t owner, uint32_t owner_gen,
		     uint32_t chan, const struct chan_msg *m)
{
	struct sockaddr_un a;
	socklen_t al = chan_addr(dev, &a, owner, owner_gen, chan);

	return hca_wake_post(dev, owner, owner_gen, &a, al, m, sizeof(*m));
}

struct hca_chan *hca_chan_create(struct hca_ctx *ctx)
{
	struct hca_dev *dev = ctx->dev;
	struct hca_chan *ch = calloc(1, sizeof(*ch));
	struct sockaddr_un a;
	socklen_t al;
	int rc;

	if (!ch)
		return NULL;
	ch->ctx = ctx;
	ch->id = atomic_fetch_add(&next_chan_id, 1);
	rc = hca_mutex_init(&ch->lock);
	if (rc) {
		free(ch);
		errno = rc;
		return NULL;
	}
	ch->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (ch->fd < 0 || hca_sock_pass_creds(ch->fd))
		goto err;
	al = chan_addr(dev, &a, dev->slot, dev->gen, ch->id);
	if (bind(ch->fd, (struct sockaddr *)&a, al))
		goto err;
	pthread_mutex_lock(&dev->lock);
	ch->next = dev->chans;
	dev->chans = ch;
	pthread_mutex_unlock(&dev->lock);
	return ch;
err:
	rc = errno;
	if (ch->fd >= 0)
		close(ch->fd);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
	errno = rc;
	return NULL;
}

int hca_chan_fd(struct hca_chan *ch)
{
	return ch->fd;
}

int hca_chan_destroy(struct hca_chan *ch)
{
	struct hca_dev *dev = ch->ctx->dev;

	if (atomic_load(&ch->refs))
		return EBUSY;
	pthread_mutex_lock(&dev->lock);
	for (struct hca_chan **pp = &dev->chans; *pp; pp = &(*pp)->next)
		if (*pp == ch) {
			*pp = ch->next;
			break;
		}
	pthread_mutex_unlock(&dev->lock);
	close(ch->fd);
	pthread_mutex_destroy(&ch->lock);
	free(ch->cqs);
	free(ch);
	return 0;
}

/* A CQ made on the channel joins its list (cq.c). */
int hca_chan_add_cq(struct hca_chan *ch, struct hca_cq *cq)
{
	int rc = 0;

	pthread_mutex_lock(&ch->lock);
	if (ch->ncq == ch->cqcap) {
		uint32_t cap = ch->cqcap ? ch->cqcap * 2 : 4;
		struct hca_cq **v = realloc(ch->cqs, cap * sizeof(*v));

		if (!v) {
			rc = ENOMEM;
			goto out;
		}
		ch->cqs = v;
		ch->cqcap = cap;
	}
	ch->cqs[ch->ncq++] = cq;
	atomic_fetch_add(&ch->refs, 1);
out:
	pthread_mutex_unlock(&ch->lock);
	return rc;
}

void hca_chan_del_cq(struct hca_chan *ch, struct hca_cq *cq)
{
	pthread_mutex_lock(&ch->lock);
	for (uint32_t i = 0; i < ch->ncq; i++)
		if (ch->cqs[i] == cq) {
			ch->cqs[i] = ch->cqs[--ch->ncq];
			break;
		}
	atomic_fetch_sub(&ch->refs, 1);
	pthread_mutex_unlock(&ch->lock);
}

/*
 * Take one owed event of the channel's CQs, starting after the CQ that
 * had the last one (so that a busy CQ does not starve the others).
 */
static struct hca_cq *chan_take(struct hca_chan *ch)
{
	struct hca_cq *got = NULL;

	atomic_thread_fence(memory_order_seq_cst); /* see the head of this file */
	pthread_mutex_lock(&ch->lock);
	for (uint32_t k = 0; k < ch->ncq && !got; k++) {
		uint32_t i = (ch->next_scan + k) % ch->ncq;
		struct hca_cq *cq = ch->cqs[i];

		if (atomic_load_explicit(&cq->ent->ev_pending, memory_order_relaxed) &&
		    hca_cq_event_take(cq)) {
			got = cq;
			ch->next_scan = i + 1;
		}
	}
	pthread_mutex_unlock(&ch->lock);
	return got;
}

static bool chan_owes(struct hca_chan *ch)
{
	bool owes = false;

	pthread_mutex_lock(&ch->lock);
	for (uint32_t i = 0; i < ch->ncq && !owes; i++)
		owes = atomic_load(&ch->cqs[i]->ent->ev_pending) != 0;
	pthread_mutex_unlock(&ch->lock);
	return owes;
}

/* Events still owed and no datagram queued to say so: post one. */
static void chan_rekick(struct hca_chan *ch)
{
	struct hca_dev *dev = ch->ctx->dev;
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct chan_msg m = { 0, 0 };

	if (chan_owes(ch) && poll(&p, 1, 0) == 0)
		chan_post(dev, dev->slot, dev->gen, ch->id, &m);
}

/*
 * In the progress thread, at each tick: a channel that owes an event and
 * holds no datagram gets one (the sender's retry died with it). Rarely
 * anything to do: a poll of each channel's fd.
 */
void hca_chan_backstop(struct hca_dev *dev)
{
	pthread_mutex_lock(&dev->lock);
	for (struct hca_chan *ch = dev->chans; ch; ch = ch->next)
		chan_rekick(ch);
	pthread_mutex_unlock(&dev->lock);
}

/*
 * The channel this thread sleeps on (chan_sleep) while it takes what the
 * link socket brought: a completion it makes for that channel needs no
 * datagram, this thread looks at the CQs next in any case.
 */
#define CHAN_SLEEP_LINK_FDS 8 /* sockets polled directly; more: their epoll set */
static _Thread_local struct hca_chan *tls_sleeping;

static bool chan_signal_local(struct hca_dev *dev, uint16_t owner, uint32_t owner_gen,
			      uint32_t chan)
{
	return tls_sleeping && owner == dev->slot && owner_gen == dev->gen &&
	       chan == tls_sleeping->id;
}

/* What the channel socket may hold (hca_chan_get_event). */
enum chan_state { CHAN_EMPTY, CHAN_MAYBE, CHAN_READY };

/* One datagram off the channel, if one is queued: 0, or the errno. */
static int chan_recv(struct hca_chan *ch, bool *got)
{
	struct chan_msg m;
	ssize_t n = hca_sock_recv_checked(ch->fd, &m, sizeof(m), MSG_DONTWAIT,
					  hca_dev_foreign_counter(ch->ctx->dev));

	*got = n >= 0;
	return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR ? errno : 0;
}

/*
 * Is the channel blocking, and how long may a sleep last before its
 * flags are read again? A blocking ibv_get_cq_event sleeps; on a channel
 * the application made O_NONBLOCK it returns EAGAIN — and the fd's flags
 * say which, but reading them (fcntl) was one system call of about five
 * per round trip of an event-driven UDP ping-pong, made to learn what
 * almost never changes. So the flags read are trusted for
 * CHAN_FL_FRESH_NS: a sleep on a value that old at most is bounded by
 * CHAN_FL_SLEEP_MS, after which the flags are read again (and a channel
 * the application has made non-blocking meanwhile answers EAGAIN). A
 * non-blocking channel is read every time (its callers poll the fd
 * themselves; they pay what they did before). *timeout_ms: the bound on
 * the sleep (-1: none, the flags were read just now).
 */
#define CHAN_FL_FRESH_NS 1000000ULL
#define CHAN_FL_SLEEP_MS 2

static bool chan_blocking(struct hca_chan *ch, int *timeout_ms)
{
	uint64_t now = hca_now_ns();
	uint64_t seen = atomic_load_explicit(&ch->fl_ns, memory_order_relaxed);
	int fl;

	if (seen && now - seen < CHAN_FL_FRESH_NS &&
	    !atomic_load_explicit(&ch->fl_nonblock, memory_order_relaxed)) {
		*timeout_ms = CHAN_FL_SLEEP_MS;
		return true;
	}
	fl = fcntl(ch->fd, F_GETFL);
	bool nb = fl >= 0 && (fl & O_NONBLOCK);

	atomic_store_explicit(&ch->fl_nonblock, nb, memory_order_relaxed);
	atomic_store_explicit(&ch->fl_ns, now, memory_order_relaxed);
	*timeout_ms = -1;
	return !nb;
}

/*
 * Nothing on the channel: sleep until something comes, on the channel
 * and, when this process has QPs on the UDP link, on the link socket
 * too, so that the datagram bringing a completion wakes this thread
 * directly (hca_dev_link_sleep_begin says why). What it brings is taken
 * here; a completion it makes is found by the caller's next look.
 * ACKs still owed go before we sleep: nothing would send them meanwhile,
 * and the peer's send would wait for them.
 * Returns 0 or an errno (EAGAIN: the channel is non-blocking and empty;
 * -1: non-blocking, and it may hold a datagram); *chan_ready says whether
 * the channel's fd was readable at the wake-up (if not, a recv would
 * find nothing: the caller skips it).
 */
static int chan_sleep(struct hca_chan *ch, enum chan_state *chan_ready)
{
	struct hca_dev *dev = ch->ctx->dev;
	struct pollfd p[1 + CHAN_SLEEP_LINK_FDS] = { { .fd = ch->fd, .events = POLLIN } };
	int rc = 0, n = 0, per[HCA_LINKS_MAX], timeout_ms;
	bool link, woke = false;

	if (!chan_blocking(ch, &timeout_ms))
		return *chan_ready != CHAN_EMPTY ? -1 : EAGAIN; /* hca_chan_get_event */
	hca_progress(dev, HCA_PROGRESS_ACKS_ALL | HCA_PROGRESS_WAIT);
	link = hca_dev_link_sleep_begin(dev);
	if (link)
		n = hca_progress_sleep_fds(dev, p + 1, CHAN_SLEEP_LINK_FDS, per);
	/* a sleep that times out (the flags were not read this time) ends
	 * as one that found nothing: the caller looks, reads the flags and
	 * sleeps again */
	if (poll(p, 1 + (nfds_t)n, timeout_ms) < 0)
		rc = errno; /* EINTR too, as a blocking read of the channel says */
	*chan_ready = rc || p[0].revents ? CHAN_READY : CHAN_EMPTY;
	if (link) {
		for (int i = 1; i <= n; i++)
			woke |= p[i].revents != 0;
		if (woke) {
			tls_sleeping = ch;
			hca_progress_sleep_rx(dev, p + 1, per);
			tls_sleeping = NULL;
		}
		hca_dev_link_sleep_end(dev);
	}
	return rc;
}

/*
 * Events are in memory (each CQ's ev_pending, set before the datagram
 * that says so is sent): the channel socket is only the wake-up. A
 * datagram is taken with each event delivered, so that the socket holds
 * about as many as there are events owed and an application polling the
 * fd sees it readable only then. It is taken after the event is found,
 * not looked for before: a thread that finds no event sleeps in poll(),
 * which says at once whether the channel has something, so the recv
 * that used to come first found nothing in every round trip of an
 * event-driven ping-pong (one system call of about six: see
 * docs/udp-link-performance.md). chan_ready: CHAN_MAYBE (not known),
 * CHAN_READY (poll said readable), CHAN_EMPTY (a recv found nothing, or
 * a sleep that the link alone ended: the event is then handed over in
 * memory, tls_sleeping).
 */
int hca_chan_get_event(struct hca_chan *ch, void **cq_user)
{
	enum chan_state chan_ready = CHAN_MAYBE;

	for (;;) {
		struct hca_cq *cq = chan_take(ch);
		bool got = false;
		int rc;

		if (cq) {
			/* its datagram, if it is there; an error here is the
			 * next call's to report */
			if (chan_ready != CHAN_EMPTY)
				chan_recv(ch, &got);
			chan_ready = got ? CHAN_MAYBE : CHAN_EMPTY;
			/*
			 * Completions that raised an event may have been polled
			 * already (work done inside post_send completes before
			 * the application waits): an event for an empty CQ
			 * re-arms it as it was armed and is not delivered,
			 * unless a completion came meanwhile.
			 */
			if (!hca_cq_count(cq)) {
				hca_cq_arm(cq, cq->arm_solicited);
				if (!hca_cq_count(cq))
					continue;
			}
			chan_rekick(ch);
			*cq_user = cq->user;
			return 0;
		}
		if (chan_ready == CHAN_READY) {
			/* poll said readable and no event came with it: a
			 * stale hint, taken (else poll would end at once) */
			rc = chan_recv(ch, &got);
			if (rc)
				return rc;
			chan_ready = got ? CHAN_MAYBE : CHAN_EMPTY;
			continue;
		}
		rc = chan_sleep(ch, &chan_ready);
		if (rc < 0) {
			/* a non-blocking channel that may hold a datagram:
			 * taken (the fd must not stay readable with no event
			 * for it), and its event looked for */
			rc = chan_recv(ch, &got);
			if (rc)
				return rc;
			chan_ready = CHAN_EMPTY;
			if (got)
				continue;
			rc = EAGAIN;
		}
		if (rc)
			return rc;
	}
}

/*
 * Wake the owner of a CQ that owes an event (cq.c sets ev_pending first).
 * The datagram is never lost (wake.c); returns 0 or the errno saying the
 * channel is gone.
 */
int hca_chan_signal(struct hca_dev *dev, uint16_t owner, uint32_t owner_gen,
		    uint32_t chan, uint32_t cq_idx, uint32_t handle)
{
	struct chan_msg m = { .cq_idx = cq_idx, .handle = handle };

	if (chan_signal_local(dev, owner, owner_gen, chan))
		return 0;
	return chan_post(dev, owner, owner_gen, chan, &m);
}
