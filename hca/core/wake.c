/*
 * Wake-ups that are never lost: every datagram that tells another process
 * (or another thread of ours) to look at shared state — a doorbell to a
 * progress thread, a completion channel's wake — goes through
 * hca_wake_post.
 *
 * Datagrams are MSG_DONTWAIT sends into an AF_UNIX queue that holds about
 * ten (/proc/sys/net/unix/max_dgram_qlen) and whose bytes are charged to
 * the sender's send buffer until they are read: a burst can find either
 * full. A send that fails so is not dropped: it waits in this process's
 * retry list, and the progress thread sends it again on a timer of its
 * own (1 ms, doubling to 64 ms while the receiver stays full) until it is
 * taken, or the receiver is gone (its socket no longer bound: the process
 * died or the channel was destroyed, and there is no one left to wake).
 *
 * What a datagram announces is never only in the datagram: the state it
 * points at (a CQ's owed event, a bounce mailbox's request, a QP entry in
 * error) stays in the segment until the receiver acts on it, and the
 * receivers drain that state on any wake (event.c, mem_bounce.c). The
 * retry list is what makes the wake itself arrive.
 *
 * SOFTIB_TEST_FAIL (kind:count[,kind:count]) makes the next `count`
 * calls of a kind fail as the kernel may make them fail, so the tests can
 * show that each result is checked: send (EAGAIN), epoll (ENOMEM),
 * timerfd (EINVAL), mutex (ENOMEM).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "hca_int.h"

#define WAKE_RETRY_FIRST_NS 1000000ULL   /* 1 ms */
#define WAKE_RETRY_MAX_NS   64000000ULL  /* 64 ms */

_Atomic int hca_test_fail[HCA_FAIL_MAX];

static const char *const fail_names[HCA_FAIL_MAX] = {
	[HCA_FAIL_SEND] = "send", [HCA_FAIL_EPOLL] = "epoll",
	[HCA_FAIL_TIMERFD] = "timerfd", [HCA_FAIL_MUTEX] = "mutex",
};

/* Parse SOFTIB_TEST_FAIL once per process (the first device open). */
void hca_test_fail_env(void)
{
	static _Atomic int parsed;
	const char *s = getenv("SOFTIB_TEST_FAIL");

	if (!s || atomic_exchange(&parsed, 1))
		return;
	while (*s) {
		size_t n = strcspn(s, ":,");

		for (int k = 0; k < HCA_FAIL_MAX; k++)
			if (s[n] == ':' && strlen(fail_names[k]) == n &&
			    !strncmp(s, fail_names[k], n))
				atomic_store(&hca_test_fail[k], atoi(s + n + 1));
		s += n;
		s += strcspn(s, ",");
		if (*s == ',')
			s++;
	}
}

bool hca_test_fail_take(enum hca_fail_kind k)
{
	int left = atomic_load_explicit(&hca_test_fail[k], memory_order_relaxed);

	while (left > 0)
		if (atomic_compare_exchange_weak(&hca_test_fail[k], &left, left - 1))
			return true;
	return false;
}

int hca_mutex_init(pthread_mutex_t *m)
{
	if (hca_test_fail_take(HCA_FAIL_MUTEX))
		return ENOMEM;
	return pthread_mutex_init(m, NULL);
}

int hca_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (hca_test_fail_take(HCA_FAIL_EPOLL)) {
		errno = ENOMEM;
		return -1;
	}
	return epoll_ctl(epfd, op, fd, ev);
}

int hca_timerfd_settime(int fd, const struct itimerspec *its)
{
	if (hca_test_fail_take(HCA_FAIL_TIMERFD)) {
		errno = EINVAL;
		return -1;
	}
	return timerfd_settime(fd, 0, its, NULL);
}

int hca_wake_init(struct hca_dev *dev)
{
	struct hca_wake *w = &dev->wake;
	int rc = hca_mutex_init(&w->lock);

	if (rc)
		return rc;
	w->lock_ok = true;
	w->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	return w->timer_fd < 0 ? errno : 0;
}

void hca_wake_fini(struct hca_dev *dev)
{
	struct hca_wake *w = &dev->wake;

	if (w->timer_fd >= 0)
		close(w->timer_fd);
	w->timer_fd = -1;
	free(w->q);
	w->q = NULL;
	w->n = w->cap = 0;
	if (w->lock_ok)
		pthread_mutex_destroy(&w->lock);
	w->lock_ok = false;
}

/* The receiver is gone: nothing will ever read this name again. */
static bool receiver_gone(int err)
{
	return err == ECONNREFUSED || err == ENOENT || err == ENOTCONN;
}

static int wake_send(struct hca_dev *dev, const struct hca_wake_retry *r)
{
	if (hca_test_fail_take(HCA_FAIL_SEND))
		return EAGAIN;
	if (sendto(dev->db_fd, r->msg, r->len, MSG_DONTWAIT,
		   (const struct sockaddr *)&r->a, r->al) < 0)
		return errno;
	return 0;
}

/* Retries go on the thread's own timer; w->lock held. */
static void retry_timer_locked(struct hca_wake *w, uint64_t ns)
{
	struct itimerspec its = { .it_value.tv_sec = (time_t)(ns / 1000000000ULL),
				  .it_value.tv_nsec = (long)(ns % 1000000000ULL) };

	if (w->timer_fd < 0)
		return;
	/* a failed arm leaves the progress thread's 200 ms tick to retry */
	if (hca_timerfd_settime(w->timer_fd, &its))
		atomic_fetch_add_explicit(&w->timer_errors, 1, memory_order_relaxed);
}

static bool same_retry(const struct hca_wake_retry *a, const struct hca_wake_retry *b)
{
	return a->al == b->al && a->len == b->len && !memcmp(&a->a, &b->a, a->al) &&
	       !memcmp(a->msg, b->msg, a->len);
}

/* Keep a failed send for the progress thread (once: an equal one already
 * waiting says the same). Returns 0, or ENOMEM when it cannot be kept. */
static int retry_add(struct hca_dev *dev, const struct hca_wake_retry *r)
{
	struct hca_wake *w = &dev->wake;
	int rc = 0;

	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < w->n; i++)
		if (same_retry(&w->q[i], r))
			goto out;
	if (w->n == w->cap) {
		uint32_t cap = w->cap ? w->cap * 2 : 16;
		struct hca_wake_retry *q = realloc(w->q, cap * sizeof(*q));

		if (!q) {
			rc = ENOMEM;
			goto out;
		}
		w->q = q;
		w->cap = cap;
	}
	w->q[w->n++] = *r;
	atomic_fetch_add_explicit(&w->deferred, 1, memory_order_relaxed);
	if (w->n == 1) {
		w->backoff_ns = WAKE_RETRY_FIRST_NS;
		retry_timer_locked(w, w->backoff_ns);
	}
out:
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int hca_wake_post(struct hca_dev *dev, uint16_t slot, uint32_t gen,
		  const struct sockaddr_un *a, socklen_t al, const void *msg, size_t len)
{
	struct hca_wake_retry r = { .a = *a, .al = al, .slot = slot, .gen = gen,
				    .len = (uint32_t)len };
	int rc;

	if (len > sizeof(r.msg))
		return EINVAL;
	memcpy(r.msg, msg, len);
	rc = wake_send(dev, &r);
	if (!rc || receiver_gone(rc))
		return rc;
	/* EAGAIN (a full queue or send buffer), ENOBUFS, ENOMEM, EINTR:
	 * the receiver is there and must hear it, later */
	return retry_add(dev, &r);
}

/* A retry's process is no longer the one it was meant for. */
static bool retry_stale(struct hca_dev *dev, const struct hca_wake_retry *r)
{
	struct hca_proc *p = &dev->seg->procs[r->slot];

	return r->slot >= HCA_MAX_PROCS || atomic_load(&p->state) != HCA_PROC_LIVE ||
	       p->gen != r->gen;
}

/*
 * In the progress thread: send what waits, in order. Called on the retry
 * timer (timer: its expiry is read) and by the thread's periodic backstop
 * (in case arming the retry timer failed). Returns how many still wait.
 */
uint32_t hca_wake_retry_run(struct hca_dev *dev, bool timer)
{
	struct hca_wake *w = &dev->wake;
	uint64_t v;
	uint32_t keep = 0;

	if (timer && read(w->timer_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		atomic_fetch_add_explicit(&w->timer_errors, 1, memory_order_relaxed);
	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < w->n; i++) {
		int rc = retry_stale(dev, &w->q[i]) ? ECONNREFUSED : wake_send(dev, &w->q[i]);

		if (rc && !receiver_gone(rc))
			w->q[keep++] = w->q[i];
		else if (!rc)
			atomic_fetch_add_explicit(&w->retried, 1, memory_order_relaxed);
	}
	w->n = keep;
	if (keep) {
		if (w->backoff_ns < WAKE_RETRY_MAX_NS)
			w->backoff_ns *= 2;
		retry_timer_locked(w, w->backoff_ns);
	}
	pthread_mutex_unlock(&w->lock);
	return keep;
}

/*
 * A flush request whose sender died before its retry went: the QP's entry
 * reads ERR, and the flush is owed. Looked for whenever the host's
 * membership changed (a death is one), over our own QP entries; the
 * request goes through the doorbell's own dispatch, which checks it as it
 * checks a datagram (a QP flushed already is flushed again: nothing).
 */
static void flush_owed(struct hca_seg *seg, struct hca_qp_ent *e, void *arg)
{
	struct hca_dev *dev = arg;
	uint32_t qpn = atomic_load_explicit(&e->qpn, memory_order_acquire);
	struct hca_db_msg m = { .kind = HCA_DB_QP_FLUSH, .idx = qpn & (HCA_MAX_QP - 1),
				.id = qpn };

	(void)seg;
	if (qpn && e->owner == dev->slot && e->owner_gen == dev->gen &&
	    e->type != IBV_QPT_XRC_RECV && atomic_load(&e->state) == IBV_QPS_ERR)
		hca_db_dispatch(dev, &m);
}

void hca_wake_flush_backstop(struct hca_dev *dev)
{
	uint32_t m = atomic_load(&dev->seg->members);

	if (m == dev->wake.members_seen)
		return;
	dev->wake.members_seen = m;
	hca_qp_ent_each(dev->seg, ((uint32_t)dev->slot + 1) << (HCA_QPN_K_BITS -
								 HCA_QP_PAGE_BITS),
			HCA_QP_PER_PROC / HCA_QP_PAGE, flush_owed, dev);
}

uint32_t hca_wake_retry_pending(struct hca_dev *dev)
{
	uint32_t n;

	pthread_mutex_lock(&dev->wake.lock);
	n = dev->wake.n;
	pthread_mutex_unlock(&dev->wake.lock);
	return n;
}
