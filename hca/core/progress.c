/*
 * The progress engine: one function, hca_progress, walks the links'
 * receive sides, acknowledgements and timers (core/link_ops.h) and the
 * QPs held back by RNR or retransmission timers; the CQ poll, the
 * completion channel's sleep (ibv_get_cq_event) and the progress thread
 * all call it. Here too: the waiting list and its timer, the progress
 * thread, and who reads the links' sockets — a busy poller, a thread
 * sleeping for a completion, or the progress thread.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "hca_int.h"
#include "link_ops.h"
#include "progress.h"
#include "mbox.h"

#define HCA_PERIOD_NS (200ULL * 1000000ULL) /* membership re-check */
#define HCA_POLL_GRACE_NS 200000ULL /* a poller this recent reads the socket */
#define HCA_POLL_RECHECK_NS 500000ULL /* ... and is looked at again after this */

/* ---- waiting QPs (RNR and retransmission timers) ---- */

/* The progress thread wakes at `when` (and every period after). */
static void timer_arm(struct hca_dev *dev, uint64_t when, uint64_t now)
{
	struct itimerspec its = { .it_interval.tv_nsec = (long)HCA_PERIOD_NS };
	uint64_t d = when > now ? when - now : 1000;

	its.it_value.tv_sec = (time_t)(d / 1000000000ULL);
	its.it_value.tv_nsec = (long)(d % 1000000000ULL);
	/* a timer that cannot be set: the thread wakes every millisecond
	 * instead (progress_main), so no deadline is missed */
	dev->timer_failed = hca_timerfd_settime(dev->timer_fd, &its) != 0;
	dev->timer_at = now + d;
}

/*
 * The application busy-polls and the progress thread has left the socket
 * to it: the poller also runs the waiting list (hca_cq_poll), so the
 * thread need not wake for its timers — every wake of it takes the CPU
 * from a poller of this 2-core world for a few microseconds.
 */
static bool poller_busy(struct hca_dev *dev, uint64_t now)
{
	return dev->link_paused && now - atomic_load(&dev->poll_ns) < HCA_POLL_GRACE_NS;
}

void hca_dev_wait_add(struct hca_dev *dev, struct hca_qp *qp)
{
	uint64_t now = hca_now_ns();
	uint64_t when = atomic_load_explicit(&qp->wait_until_ns, memory_order_relaxed);

	pthread_mutex_lock(&dev->lock);
	if (atomic_load(&qp->dying)) {
		pthread_mutex_unlock(&dev->lock);
		return;
	}
	if (!atomic_load_explicit(&qp->waiting, memory_order_relaxed)) {
		atomic_store_explicit(&qp->waiting, true, memory_order_relaxed);
		qp->next_wait = dev->waiting;
		dev->waiting = qp;
	}
	if (when < atomic_load(&dev->next_wake_ns) || !atomic_load(&dev->next_wake_ns)) {
		atomic_store(&dev->next_wake_ns, when);
		if (!poller_busy(dev, now))
			timer_arm(dev, when, now);
	}
	pthread_mutex_unlock(&dev->lock);
}

void hca_dev_run_waiting(struct hca_dev *dev)
{
	uint64_t wake = atomic_load(&dev->next_wake_ns), now, next = 0;
	struct hca_qp *run[64];
	int n = 0;

	if (!wake || wake > (now = hca_now_ns()))
		return;
	pthread_mutex_lock(&dev->lock);
	for (struct hca_qp **pp = &dev->waiting; *pp;) {
		struct hca_qp *qp = *pp;

		uint64_t until = atomic_load_explicit(&qp->wait_until_ns, memory_order_relaxed);

		if (until <= now && n < 64) {
			*pp = qp->next_wait;
			atomic_store_explicit(&qp->waiting, false, memory_order_relaxed);
			atomic_fetch_add(&qp->pin, 1);
			run[n++] = qp;
		} else {
			if (!next || until < next)
				next = until;
			pp = &qp->next_wait;
		}
	}
	atomic_store(&dev->next_wake_ns, next);
	/* never later than the look the paused link socket is owed; while
	 * the poller is busy, it runs the list itself */
	if (poller_busy(dev, now))
		next = now + HCA_POLL_RECHECK_NS;
	else if (dev->link_paused && (!next || next > now + HCA_POLL_GRACE_NS))
		next = now + HCA_POLL_GRACE_NS;
	if (next)
		timer_arm(dev, next, now);
	pthread_mutex_unlock(&dev->lock);
	for (int i = 0; i < n; i++) {
		hca_engine.sq_progress(run[i]);
		atomic_fetch_sub(&run[i]->pin, 1);
	}
}

/* Receives were posted where our QPs met RNR: retry them now. */
void hca_dev_kick(struct hca_dev *dev)
{
	pthread_mutex_lock(&dev->lock);
	for (struct hca_qp *qp = dev->waiting; qp; qp = qp->next_wait)
		if (atomic_load_explicit(&qp->rnr_wait, memory_order_relaxed))
			atomic_store_explicit(&qp->wait_until_ns, 1, memory_order_relaxed);
	atomic_store(&dev->next_wake_ns, 1);
	pthread_mutex_unlock(&dev->lock);
	hca_dev_run_waiting(dev);
}

/*
 * Called after posting receives: wake the processes whose requests were
 * held by RNR on this queue, rather than leave them to the RNR timer (a
 * host-local shortcut; the UDP link keeps to the timer).
 */
void hca_rnr_kick(struct hca_dev *dev, _Atomic uint64_t *waiters)
{
	struct hca_db_msg m = { .kind = HCA_DB_KICK };

	for (int w = 0; w < HCA_MAX_PROCS / 64; w++) {
		uint64_t bits;

		if (!atomic_load_explicit(&waiters[w], memory_order_relaxed))
			continue;
		bits = atomic_exchange(&waiters[w], 0);
		while (bits) {
			uint16_t s = (uint16_t)(w * 64 + __builtin_ctzll(bits));
			struct hca_proc *p = &dev->seg->procs[s];

			bits &= bits - 1;
			if (atomic_load(&p->state) == HCA_PROC_LIVE)
				hca_dev_notify(dev, s, p->gen, &m, sizeof(m));
		}
	}
}

void hca_dev_wait_remove(struct hca_dev *dev, struct hca_qp *qp)
{
	pthread_mutex_lock(&dev->lock);
	for (struct hca_qp **pp = &dev->waiting; *pp; pp = &(*pp)->next_wait) {
		if (*pp == qp) {
			*pp = qp->next_wait;
			break;
		}
	}
	atomic_store_explicit(&qp->waiting, false, memory_order_relaxed);
	pthread_mutex_unlock(&dev->lock);
	while (atomic_load(&qp->pin))
		sched_yield();
}

/* ---- the progress thread ---- */

/*
 * Arm or disarm the thread's one-shot watch of the link socket (a no-op
 * when it already is as asked). Under link_watch_lock, so that two
 * threads' epoll_ctl calls cannot cross and leave the flag wrong.
 */
static void link_watch_locked(struct hca_dev *dev, bool on)
{
	struct epoll_event ev = { .events = on ? EPOLLIN | EPOLLONESHOT : EPOLLONESHOT,
				  .data.u64 = 3 };

	if (dev->link_watched == on)
		return;
	HCA_LINKS_EACH(l) {
		int fd = l->wait_fd ? l->wait_fd(dev) : -1;

		if (fd >= 0 && hca_epoll_ctl(dev->epfd, EPOLL_CTL_MOD, fd, &ev)) {
			/* the watch is as it was; arming failed: the socket
			 * is left to the timer, whose tick tries again
			 * (link_paused_tick) */
			if (on)
				dev->link_paused = true;
			return;
		}
	}
	dev->link_watched = on;
}

/* Has a link a socket for the progress thread to watch? */
static bool links_watchable(struct hca_dev *dev)
{
	HCA_LINKS_EACH(l)
		if (l->wait_fd && l->wait_fd(dev) >= 0)
			return true;
	return false;
}

/* The thread watches the socket again, unless an application thread
 * sleeps on it itself. */
static void link_rearm(struct hca_dev *dev)
{
	dev->link_paused = false;
	pthread_mutex_lock(&dev->link_watch_lock);
	if (!dev->link_sleepers)
		link_watch_locked(dev, true);
	pthread_mutex_unlock(&dev->link_watch_lock);
}

/*
 * An application thread is about to sleep for a completion
 * (hca_chan_get_event) and will watch the link socket itself: the
 * datagram that brings its completion then wakes it alone, not the
 * progress thread first and the application after it through the
 * channel — two wake-ups per message, and on a 2-core machine the second
 * waits for the first to give up its CPU. Returns whether the caller is
 * to watch the socket (then hca_dev_link_sleep_end when it wakes).
 */
bool hca_dev_link_sleep_begin(struct hca_dev *dev)
{
	if (!links_watchable(dev) || !dev->progress_started ||
	    !atomic_load_explicit(&dev->udp_qps, memory_order_relaxed))
		return false;
	pthread_mutex_lock(&dev->link_watch_lock);
	if (!dev->link_sleepers++)
		link_watch_locked(dev, false);
	pthread_mutex_unlock(&dev->link_watch_lock);
	return true;
}

/*
 * The last sleeper woke: the application will poll the CQ, answer, arm
 * the CQ and most likely sleep here again within microseconds. Watched
 * by the thread meanwhile, the socket would wake it for the next
 * datagram — the very wake-up sleeping on the socket avoids. So the
 * socket is left to the application as to a busy poller (link_paused),
 * and the thread's timer looks within a grace: an application that went
 * off to compute instead gets its socket watched again then.
 */
void hca_dev_link_sleep_end(struct hca_dev *dev)
{
	uint64_t now = hca_now_ns();
	bool last;

	pthread_mutex_lock(&dev->link_watch_lock);
	last = !--dev->link_sleepers;
	if (last) {
		atomic_store(&dev->poll_ns, now);
		atomic_store(&dev->sleeper_ns, now);
		dev->link_paused = true;
	}
	pthread_mutex_unlock(&dev->link_watch_lock);
	if (!last)
		return;
	pthread_mutex_lock(&dev->lock);
	/* a timer due within a recheck will do: arming one costs a call */
	if (dev->timer_at <= now || dev->timer_at > now + HCA_POLL_RECHECK_NS)
		timer_arm(dev, now + HCA_POLL_RECHECK_NS, now);
	pthread_mutex_unlock(&dev->lock);
}

/*
 * A datagram woke us. While the application busy-polls a CQ it reads the
 * socket itself (hca_cq_poll), without a thread hop: waking here for each
 * datagram would only take the CPU from it. So the socket is watched
 * one-shot; with a recent poller we leave it, and look again shortly.
 */
static void link_wake(struct hca_dev *dev)
{
	uint64_t now = hca_now_ns();

	if (now - atomic_load(&dev->poll_ns) < HCA_POLL_GRACE_NS) {
		dev->link_paused = true;
		pthread_mutex_lock(&dev->lock);
		timer_arm(dev, now + HCA_POLL_GRACE_NS, now);
		pthread_mutex_unlock(&dev->lock);
		return;
	}
	hca_progress(dev, HCA_PROGRESS_RX | HCA_PROGRESS_WAIT);
	link_rearm(dev);
}

/*
 * The thread watches for itself again: the timers a busy poller was
 * running (hca_dev_wait_add armed none meanwhile) are its own again.
 */
static void timers_reclaim(struct hca_dev *dev)
{
	uint64_t now = hca_now_ns(), next;

	pthread_mutex_lock(&dev->lock);
	next = atomic_load(&dev->next_wake_ns);
	if (next)
		timer_arm(dev, next, now);
	pthread_mutex_unlock(&dev->lock);
}

/*
 * A busy poller that posts is still a poller: a window of sends over the
 * UDP link (64 MPI messages of 1 KiB take ~400 us of sendmsg calls) let
 * its mark go stale, the thread took the socket back, woke for the
 * window's ACKs and fought the application for the receive lock and, on
 * a 2-core machine, for its CPU (the sender's thread at 25 % of a CPU,
 * ~870 timer wake-ups a second; the rank descheduled for a millisecond
 * now and then, and its peer going back over what had arrived). So a
 * post extends a mark that is still fresh; it never makes one (an
 * application that armed a CQ to sleep has none: hca_dev_link_handover).
 */
void hca_dev_poller_extend(struct hca_dev *dev)
{
	uint64_t was = atomic_load_explicit(&dev->poll_ns, memory_order_relaxed), now;

	if (!was)
		return;
	now = hca_now_ns();
	if (now - was < HCA_POLL_GRACE_NS && now > was)
		atomic_compare_exchange_strong_explicit(&dev->poll_ns, &was, now,
							memory_order_relaxed,
							memory_order_relaxed);
}

/*
 * The poller is at work inside a poll: a stream drained off the socket
 * (link_udp.c's rx_poll) can take longer than the grace, and the thread,
 * finding the mark stale, took the socket back, woke for each datagram
 * and fought the poller for the receive lock: in `sib_osu bw -s 16384`
 * between two namespace hosts, ~5,500 such wakes in a 2-second run on
 * the receiving side (docs/udp-link-performance.md). Renews a mark that
 * exists, whatever its age; never makes one (0: handed over).
 */
void hca_dev_poller_busy(struct hca_dev *dev)
{
	uint64_t was = atomic_load_explicit(&dev->poll_ns, memory_order_relaxed);

	if (was)
		atomic_compare_exchange_strong_explicit(&dev->poll_ns, &was, hca_now_ns(),
							memory_order_relaxed,
							memory_order_relaxed);
}

/* The application will block (it armed a CQ): the socket is the thread's. */
void hca_dev_link_handover(struct hca_dev *dev)
{
	uint64_t slept = atomic_load(&dev->sleeper_ns);

	/* an application cycling through hca_chan_get_event sleeps on the
	 * socket itself: left with it (hca_dev_link_sleep_end) */
	if (slept && hca_now_ns() - slept < HCA_POLL_GRACE_NS)
		return;
	atomic_store(&dev->polls_at_arm, atomic_load(&dev->polls));
	atomic_store(&dev->poll_ns, 0);
	if (dev->progress_started && links_watchable(dev)) {
		bool paused = dev->link_paused;

		link_rearm(dev); /* no system call if already watched */
		if (paused) /* a poller ran the timers: they are ours again */
			timers_reclaim(dev);
	}
}

/*
 * The timer, while the socket is left to a poller: a poller still busy
 * keeps it for another grace (one wake per grace, not two); otherwise the
 * thread watches the socket again.
 */
static void link_paused_tick(struct hca_dev *dev)
{
	uint64_t now = hca_now_ns();

	if (now - atomic_load(&dev->poll_ns) < HCA_POLL_GRACE_NS) {
		pthread_mutex_lock(&dev->lock);
		timer_arm(dev, now + HCA_POLL_RECHECK_NS, now);
		pthread_mutex_unlock(&dev->lock);
		return;
	}
	link_rearm(dev);
	timers_reclaim(dev);
}

_Atomic uint64_t *hca_dev_foreign_counter(struct hca_dev *dev)
{
	return &dev->seg->procs[dev->slot].foreign_dgrams;
}

static void drain_doorbell(struct hca_dev *dev)
{
	struct hca_db_msg m;

	ssize_t n;

	while ((n = hca_sock_recv_checked(dev->db_fd, &m, sizeof(m), MSG_DONTWAIT,
					  hca_dev_foreign_counter(dev))) >= 0)
		if (n == sizeof(m))
			hca_db_dispatch(dev, &m);
}


/*
 * The thread's timer. Also the backstop of every wake-up (wake.c): sends
 * still waiting go again, a bounce request is served, and owed channel
 * events get a datagram, whatever happened to the ones that were sent.
 */
static void progress_tick(struct hca_dev *dev)
{
	uint64_t now = hca_now_ns();

	/* the timer also fires for every UDP retransmission deadline: the
	 * backstops run at most once a period */
	if (now - dev->backstop_ns >= HCA_PERIOD_NS / 2) {
		dev->backstop_ns = now;
		hca_wake_retry_run(dev, false);
		hca_progress(dev, HCA_PROGRESS_SERVE);
		hca_chan_backstop(dev);
		hca_peers_poll_unwatched(dev);
	}
	hca_peers_scan(dev);
	hca_wake_flush_backstop(dev);
	if (poller_busy(dev, now)) {
		/* the poller sweeps the owed ACKs and runs the waiting list
		 * itself (cq.c, every 16 polls): here they only waited for
		 * its locks, ~1,500 times a second in a stream between two
		 * hosts, each a wake-up that took the CPU from a rank */
		hca_progress(dev, HCA_PROGRESS_TIMERS);
		link_paused_tick(dev);
		return;
	}
	hca_progress(dev, HCA_PROGRESS_TIMERS | HCA_PROGRESS_ACKS_ALL | HCA_PROGRESS_WAIT);
	if (dev->link_paused)
		link_paused_tick(dev);
	hca_progress(dev, HCA_PROGRESS_WAITING);
}

static void *progress_main(void *arg)
{
	struct hca_dev *dev = arg;
	struct epoll_event evs[16];

	for (;;) {
		/* a timer that could not be set: tick every millisecond */
		int n = epoll_wait(dev->epfd, evs, 16, dev->timer_failed ? 1 : -1);

		if (n == 0) {
			hca_inl_sweep(dev);
			hca_mb_sweep(dev);
			progress_tick(dev);
		}
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64, v;

			if (tag == 0) {
				return NULL; /* stop_fd */
			} else if (tag == 1) {
				drain_doorbell(dev);
			} else if (tag == 2) {
				hca_inl_sweep(dev); /* data lands without a poll */
				hca_mb_sweep(dev);
				if (read(dev->timer_fd, &v, sizeof(v)) < 0)
					continue;
				progress_tick(dev);
			} else if (tag == 4) {
				hca_wake_retry_run(dev, true);
			} else if (tag == 3) {
				/* one-shot: the kernel disarmed the watch */
				pthread_mutex_lock(&dev->link_watch_lock);
				dev->link_watched = false;
				pthread_mutex_unlock(&dev->link_watch_lock);
				link_wake(dev);
			} else if (tag & HCA_PEER_EPOLL_TAG) {
				hca_peer_died(dev, (uint16_t)(tag & 0xffff), (uint32_t)(tag >> 16));
			}
		}
	}
}

int hca_progress_start(struct hca_dev *dev)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct itimerspec its = { .it_value.tv_nsec = (long)HCA_PERIOD_NS,
				  .it_interval.tv_nsec = (long)HCA_PERIOD_NS };

	dev->epfd = epoll_create1(EPOLL_CLOEXEC);
	dev->stop_fd = eventfd(0, EFD_CLOEXEC);
	dev->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (dev->epfd < 0 || dev->stop_fd < 0 || dev->timer_fd < 0)
		return errno;
	/* without any of these the thread would sleep through what it is
	 * for: the device does not open */
	ev.data.u64 = 0;
	if (hca_epoll_ctl(dev->epfd, EPOLL_CTL_ADD, dev->stop_fd, &ev))
		return errno;
	ev.data.u64 = 1;
	if (hca_epoll_ctl(dev->epfd, EPOLL_CTL_ADD, dev->db_fd, &ev))
		return errno;
	ev.data.u64 = 2;
	if (hca_epoll_ctl(dev->epfd, EPOLL_CTL_ADD, dev->timer_fd, &ev))
		return errno;
	ev.data.u64 = 4;
	if (hca_epoll_ctl(dev->epfd, EPOLL_CTL_ADD, dev->wake.timer_fd, &ev))
		return errno;
	HCA_LINKS_EACH(l) {
		int fd = l->wait_fd ? l->wait_fd(dev) : -1;

		if (fd < 0)
			continue;
		ev.events = EPOLLIN | EPOLLONESHOT;
		ev.data.u64 = 3;
		if (hca_epoll_ctl(dev->epfd, EPOLL_CTL_ADD, fd, &ev))
			return errno;
		dev->link_watched = true;
	}
	if (hca_timerfd_settime(dev->timer_fd, &its))
		dev->timer_failed = true; /* progress_main ticks by itself */
	if (pthread_create(&dev->progress, NULL, progress_main, dev))
		return EAGAIN;
	pthread_setname_np(dev->progress, "softib-progress"); /* top -H, perf */
	dev->progress_started = true;
	return 0;
}

/* ---- the progress engine ---- */

void hca_progress(struct hca_dev *dev, unsigned what)
{
	bool wait = what & HCA_PROGRESS_WAIT;

	if (what & HCA_PROGRESS_SERVE)
		HCA_LINKS_EACH(l)
			if (l->serve)
				l->serve(dev);
	if (what & HCA_PROGRESS_TIMERS)
		HCA_LINKS_EACH(l)
			if (l->tick)
				l->tick(dev);
	if (what & HCA_PROGRESS_WAITING)
		hca_dev_run_waiting(dev);
	if (what & HCA_PROGRESS_ACKS_MASK) {
		enum hca_ack_flush acks = (enum hca_ack_flush)
			(((what & HCA_PROGRESS_ACKS_MASK) >> 5) - 1);

		HCA_LINKS_EACH(l)
			if (l->acks_flush)
				l->acks_flush(dev, wait, acks);
	}
	if (what & HCA_PROGRESS_RX)
		HCA_LINKS_EACH(l)
			if (l->rx)
				l->rx(dev, wait);
}

int hca_progress_sleep_fds(struct hca_dev *dev, struct pollfd *p, int max, int *per)
{
	int n = 0, i = 0;

	HCA_LINKS_EACH(l) {
		if (i == HCA_LINKS_MAX - 1)
			break;
		per[i] = l->wait_fds ? l->wait_fds(dev, p + n, max - n) : 0;
		n += per[i++];
	}
	per[i] = -1;
	return n;
}

void hca_progress_sleep_rx(struct hca_dev *dev, const struct pollfd *p, const int *per)
{
	int n = 0, i = 0;

	HCA_LINKS_EACH(l) {
		if (per[i] < 0)
			break;
		if (per[i] && l->rx_sleeper)
			l->rx_sleeper(dev, p + n, per[i]);
		n += per[i++];
	}
}
