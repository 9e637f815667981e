/*
 * The peers of this process: which processes of the host are alive, as
 * their pidfds (watched in the progress thread's epoll set) tell, and the
 * reclaim (reclaim.c) of a dead one's objects by whoever notices first.
 * Only proof of death reclaims (live.c): a check that cannot be made is
 * "unknown" and made again later.
 */
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "hca_int.h"

/* A liveness check that could not be made is not made again sooner. */
#define HCA_UNKNOWN_NS (50ULL * 1000000ULL)

/* The epoll tag of a peer's pidfd: the slot and the generation watched. */

static uint64_t peer_tag(uint16_t slot, uint32_t gen)
{
	return HCA_PEER_EPOLL_TAG | (uint64_t)gen << 16 | slot;
}

static void peer_close(struct hca_dev *dev, uint16_t slot)
{
	struct hca_peer *p = &dev->peers[slot];

	if (p->pidfd >= 0) {
		/* close drops it from the epoll set in any case */
		(void)epoll_ctl(dev->epfd, EPOLL_CTL_DEL, p->pidfd, NULL);
		close(p->pidfd);
	}
	p->pidfd = -1;
	p->unwatched = false;
	atomic_store_explicit(&p->known, 0, memory_order_release);
}

/*
 * The process of (slot, gen) as the slot records it: its pid and start
 * time, read so that they are that generation's (a seqlock read: the slot
 * may be reclaimed and taken again while we read). False: that
 * generation is no longer the slot's — it was reclaimed, which only
 * proof of its death (or its own close) does.
 */
static bool slot_read(struct hca_seg *seg, uint16_t slot, uint32_t gen, pid_t *pid,
		      uint64_t *start)
{
	struct hca_proc *pr = &seg->procs[slot];

	if (atomic_load_explicit(&pr->state, memory_order_acquire) != HCA_PROC_LIVE ||
	    pr->gen != gen)
		return false;
	*pid = pr->pid;
	*start = pr->starttime;
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&pr->state, memory_order_relaxed) == HCA_PROC_LIVE &&
	       pr->gen == gen;
}

/*
 * Check (slot, gen) with a pidfd of its own: from then on the pidfd tells
 * us when it dies, in the progress thread's epoll set. Called with
 * dev->lock held. HCA_LIVE_UNKNOWN (no file descriptor to spare, /proc
 * unreadable) leaves everything as it was, and the membership scan asks
 * again at its next tick.
 */
static enum hca_live peer_open(struct hca_dev *dev, uint16_t slot, uint32_t gen)
{
	struct hca_peer *p = &dev->peers[slot];
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = peer_tag(slot, gen) };
	enum hca_live v;
	uint64_t start;
	pid_t pid;
	int fd;

	if (!slot_read(dev->seg, slot, gen, &pid, &start))
		return HCA_LIVE_DEAD; /* another generation's now: not our cache's */
	if (p->unknown_gen == gen && hca_now_ns() < p->unknown_until) {
		dev->rescan = true;
		return HCA_LIVE_UNKNOWN; /* asked a moment ago */
	}
	v = hca_proc_watch(pid, start, &fd);
	if (v == HCA_LIVE_UNKNOWN) {
		p->unknown_gen = gen;
		p->unknown_until = hca_now_ns() + HCA_UNKNOWN_NS;
		dev->rescan = true;
		return v;
	}
	peer_close(dev, slot);
	if (v == HCA_LIVE_DEAD) {
		p->pidfd = -2; /* known dead, no fd */
		atomic_store_explicit(&p->known, (uint64_t)gen << 32 | HCA_PEER_DEAD,
				      memory_order_release);
		return v;
	}
	p->pidfd = fd;
	/* not watched (ENOMEM, ENOSPC: max_user_watches): the thread's tick
	 * polls the pidfd instead (peers_poll_unwatched) */
	if (dev->epfd >= 0 && hca_epoll_ctl(dev->epfd, EPOLL_CTL_ADD, fd, &ev))
		p->unwatched = true;
	atomic_store_explicit(&p->known, (uint64_t)gen << 32 | HCA_PEER_OPEN,
			      memory_order_release);
	return v;
}

/* Is (slot, gen) alive, dead, or can we not tell now? */
enum hca_live hca_peer_check(struct hca_dev *dev, uint16_t slot, uint32_t gen)
{
	struct hca_peer *p = &dev->peers[slot];
	const uint64_t open = (uint64_t)gen << 32 | HCA_PEER_OPEN;
	const uint64_t dead = (uint64_t)gen << 32 | HCA_PEER_DEAD;
	enum hca_live v;
	uint64_t k;

	if (slot == dev->slot)
		return gen == dev->gen ? HCA_LIVE_YES : HCA_LIVE_DEAD;
	/* the common case: a pidfd watches this incarnation, or it is known
	 * dead — one acquire load, no lock */
	k = atomic_load_explicit(&p->known, memory_order_acquire);
	if (k == open || k == dead)
		return k == open ? HCA_LIVE_YES : HCA_LIVE_DEAD;
	pthread_mutex_lock(&dev->lock);
	k = atomic_load_explicit(&p->known, memory_order_relaxed);
	if (k == open || k == dead)
		v = k == open ? HCA_LIVE_YES : HCA_LIVE_DEAD;
	else
		v = peer_open(dev, slot, gen);
	pthread_mutex_unlock(&dev->lock);
	return v;
}

/* Alive, and its pid vouched for by a pidfd (memory may be reached). */
bool hca_peer_alive(struct hca_dev *dev, uint16_t slot, uint32_t gen)
{
	return hca_peer_check(dev, slot, gen) == HCA_LIVE_YES;
}

pid_t hca_peer_pid(struct hca_dev *dev, uint16_t slot, uint32_t gen)
{
	if (!hca_peer_alive(dev, slot, gen))
		return 0;
	return dev->seg->procs[slot].pid;
}

/* ---- noticing deaths: reclaim (reclaim.c) whoever notices first ---- */

/*
 * Check every occupied slot: open a pidfd on new members, reclaim the
 * dead. Runs when the membership changed, or when a check could not be
 * made last time (dev->rescan). A slot left DEAD is a reclaim that its
 * reclaimer did not finish (it died in it): finish it.
 */
void hca_peers_scan(struct hca_dev *dev)
{
	struct hca_seg *seg = dev->seg;
	uint32_t m = atomic_load(&seg->members);

	if (m == dev->members_seen && !dev->rescan)
		return;
	dev->members_seen = m;
	dev->rescan = false;
	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		struct hca_proc *pr = &seg->procs[s];
		uint32_t st = atomic_load_explicit(&pr->state, memory_order_acquire);
		uint32_t gen = pr->gen;

		if (s == dev->slot || st == HCA_PROC_FREE)
			continue;
		if (st == HCA_PROC_DEAD || hca_peer_check(dev, s, gen) == HCA_LIVE_DEAD)
			hca_reclaim_slot(seg, s, gen);
	}
}

/*
 * Reclaim, now, every process of the host that is proven dead, whether
 * or not a progress thread has noticed yet: at device open (so that once
 * ibv_open_device returns, nothing of a process dead before it is left),
 * and before an XRC domain is looked up by its file.
 */
void hca_dev_reap(struct hca_dev *dev)
{
	struct hca_seg *seg = dev->seg;

	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		struct hca_proc *pr = &seg->procs[s];
		uint32_t st = atomic_load_explicit(&pr->state, memory_order_acquire);
		uint32_t gen = pr->gen;
		enum hca_live v;
		uint64_t start;
		pid_t pid;

		if (s == dev->slot || st == HCA_PROC_FREE)
			continue;
		if (st == HCA_PROC_DEAD) {
			hca_reclaim_slot(seg, s, gen);
			continue;
		}
		/* our pidfd if we watch it (its death may not have reached
		 * the progress thread yet), else a look of its own */
		pthread_mutex_lock(&dev->lock);
		if (atomic_load_explicit(&dev->peers[s].known, memory_order_relaxed) ==
		    ((uint64_t)gen << 32 | HCA_PEER_OPEN) && dev->peers[s].pidfd >= 0 &&
		    slot_read(seg, s, gen, &pid, &start))
			v = hca_proc_live(pid, start, dev->peers[s].pidfd);
		else
			v = peer_open(dev, s, gen);
		pthread_mutex_unlock(&dev->lock);
		if (v == HCA_LIVE_DEAD)
			hca_reclaim_slot(seg, s, gen);
	}
}

/* A pidfd turned readable: (slot, gen) has exited. */
void hca_peer_died(struct hca_dev *dev, uint16_t slot, uint32_t gen)
{
	struct hca_peer *p = &dev->peers[slot];

	pthread_mutex_lock(&dev->lock);
	/* the tag names the generation watched: a pidfd of an older one,
	 * closed since, may still have had its event queued */
	if (atomic_load_explicit(&p->known, memory_order_relaxed) ==
	    ((uint64_t)gen << 32 | HCA_PEER_OPEN) && p->pidfd >= 0) {
		atomic_store_explicit(&p->known, (uint64_t)gen << 32 | HCA_PEER_DEAD,
				      memory_order_release);
		epoll_ctl(dev->epfd, EPOLL_CTL_DEL, p->pidfd, NULL);
		close(p->pidfd);
		p->pidfd = -2; /* known dead, no fd */
	}
	pthread_mutex_unlock(&dev->lock);
	hca_reclaim_slot(dev->seg, slot, gen);
}

/* Peers whose pidfd the epoll set refused: polled at each tick. */
void hca_peers_poll_unwatched(struct hca_dev *dev)
{
	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		struct hca_peer *p = &dev->peers[s];
		struct pollfd pf = { .events = POLLIN };
		uint32_t gen = 0;
		bool dead = false;

		pthread_mutex_lock(&dev->lock); /* pidfd is read under it */
		pf.fd = p->pidfd;
		if (p->unwatched && pf.fd >= 0 && poll(&pf, 1, 0) > 0) {
			gen = (uint32_t)(atomic_load_explicit(&p->known,
							      memory_order_relaxed) >> 32);
			dead = true;
		}
		pthread_mutex_unlock(&dev->lock);
		if (dead)
			hca_peer_died(dev, s, gen);
	}
}
