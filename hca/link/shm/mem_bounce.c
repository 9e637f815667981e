/*
 * The bounce path: moving bytes to or from another process of the host
 * when cross-memory attach is refused (ptrace policy, seccomp) or
 * SOFTIB_NO_CMA=1 asks for it. Slower (two copies and a wake-up per
 * chunk) but the same results.
 *
 * Each process owns a mailbox in the segment. A requester takes the
 * target's mailbox lock, and per chunk: describes the target ranges,
 * copies outgoing bytes into the mailbox, sets state REQ (release) and
 * rings the target's doorbell; the target's progress thread copies
 * between the mailbox and its own memory, stores the result and sets
 * state DONE (release); the requester (acquire) copies incoming bytes
 * out. While it waits, a requester serves its own mailbox, so two
 * processes bouncing toward each other never wait on each other.
 *
 * Keys: each target range comes with the memory key the requester checked
 * it against, and the target checks every key again, inside a copy
 * section of its own, before it copies (fence.c). The requester may have
 * died since its check — its own section then no longer holds the owner's
 * dereg — or the key may have been invalidated while the request waited:
 * either way the server's section, in the owner's process, is what the
 * dereg waits for, and a key gone by then refuses the chunk (EFAULT).
 *
 * The mailbox's lock is a word naming its holder (requester slot and
 * generation), taken by CAS and taken over only on proof of the holder's
 * death — not a robust pthread mutex (issue 18). A mailbox is a heap
 * block: its target's reclaim frees it while a requester may still hold
 * it, and the block then becomes another process's mailbox or ring. A
 * robust mutex there stays linked, through its own bytes, in the robust
 * list of each thread that holds it (glibc; the kernel walks that list
 * when the thread dies, and that walk is what makes the mutex robust):
 * once the bytes are reused, the list runs through someone else's
 * memory. The holder's later locks and unlocks of the segment lock then
 * write list pointers into that memory, the new owner of a mutex placed
 * there unlinks through pointers of another process, and at a death the
 * kernel's walk stops at the first bad link — the robust mutexes behind
 * it, the segment lock among them, are left locked by a dead thread,
 * with nobody to mark them, and every later locker waits for ever. A
 * plain word cannot be linked anywhere: a holder's release after the
 * block has gone is a CAS that fails (the block is zeroed when reused).
 * Robust pthread mutexes live only in memory that is never freed: the
 * segment lock and the atomic locks in the segment's header.
 */
#include <errno.h>
#include <sched.h>
#include <poll.h>
#include <string.h>

#include "shm_link.h"

#define BOUNCE_BYTES (256 * 1024)
#define BOUNCE_SEGS  HCA_MAX_SGE

enum { BOUNCE_IDLE = 0, BOUNCE_REQ = 1, BOUNCE_DONE = 2, BOUNCE_BUSY = 3 };

struct hca_bounce {
	/* one requester at a time: 0, or (slot + 1) << 32 | gen of the
	 * requester holding the mailbox (CAS; see the head of this file) */
	_Atomic uint64_t holder;
	_Atomic uint32_t state;
	uint32_t write;                  /* 1: mailbox -> target memory */
	int32_t result;
	uint32_t nseg;
	struct { uint64_t addr, len; uint32_t key, pad; } seg[BOUNCE_SEGS];
	uint8_t data[BOUNCE_BYTES];
};

int hca_bounce_attach(struct hca_dev *dev)
{
	struct hca_seg *seg = dev->seg;
	uint64_t off;
	int rc = ENOMEM;

	hca_seg_lock(seg);
	/* zeroed by the heap: no holder, state IDLE */
	off = hca_dev_heap_alloc(dev, sizeof(struct hca_bounce));
	if (off) {
		rc = 0;
		seg->bounce_bytes = sizeof(struct hca_bounce); /* heap_check.c */
		seg->procs[dev->slot].bounce_off = off;
	}
	hca_dev_heap_done(dev);
	hca_seg_unlock(seg);
	return rc;
}

/* Every range's key still names its registration (a copy section held). */
static bool bounce_keys_live(struct hca_seg *seg, const struct hca_bounce *b)
{
	for (uint32_t i = 0; i < b->nseg && i < BOUNCE_SEGS; i++) {
		uint32_t key = b->seg[i].key;

		if (!key || atomic_load(&seg->mrs[key & (HCA_MAX_MR - 1)].key) != key)
			return false;
	}
	return true;
}

/* In the target: do what our mailbox asks, on our own memory. */
void hca_bounce_serve(struct hca_dev *dev)
{
	struct hca_bounce *b = hca_seg_ptr(dev->seg, dev->seg->procs[dev->slot].bounce_off);
	uint32_t want = BOUNCE_REQ;
	struct hca_fence f;
	uint64_t done = 0;

	/* the progress thread and a waiting requester of ours may both try:
	 * one claims the request, the other leaves it */
	if (!b || !atomic_compare_exchange_strong_explicit(&b->state, &want, BOUNCE_BUSY,
							   memory_order_acquire,
							   memory_order_relaxed))
		return;
	hca_fence_enter(dev, &f);
	b->result = bounce_keys_live(dev->seg, b) ? 0 : EFAULT;
	for (uint32_t i = 0; !b->result && i < b->nseg && i < BOUNCE_SEGS; i++) {
		void *p = (void *)(uintptr_t)b->seg[i].addr;

		if (b->write)
			memcpy(p, b->data + done, b->seg[i].len);
		else
			memcpy(b->data + done, p, b->seg[i].len);
		done += b->seg[i].len;
	}
	hca_fence_exit(&f);
	atomic_store_explicit(&b->state, BOUNCE_DONE, memory_order_release);
}

/*
 * Is the target gone? Its pidfd turns readable when it exits (a zombie
 * included, unlike kill(pid, 0)), and its slot changes when it is
 * reclaimed. Asked directly: the waiter may be the progress thread, which
 * is the one that would otherwise notice.
 */
static bool target_gone(struct hca_dev *dev, uint16_t slot, uint32_t gen)
{
	struct hca_proc *p = &dev->seg->procs[slot];
	struct pollfd pf = { .events = POLLIN };
	bool watched, gone = false;

	if (atomic_load(&p->state) != HCA_PROC_LIVE || p->gen != gen)
		return true;
	/* under dev->lock: the progress thread may close the pidfd (a
	 * death), and the number be reused, between our read and the poll */
	pthread_mutex_lock(&dev->lock);
	pf.fd = dev->peers[slot].pidfd;
	watched = pf.fd >= 0 && atomic_load_explicit(&dev->peers[slot].known,
						     memory_order_relaxed) ==
				 ((uint64_t)gen << 32 | HCA_PEER_OPEN);
	if (watched)
		gone = poll(&pf, 1, 0) != 0;
	pthread_mutex_unlock(&dev->lock);
	/* no pidfd on it (none to spare): only proof of death ends the wait */
	return watched ? gone : hca_peer_check(dev, slot, gen) == HCA_LIVE_DEAD;
}

static int bounce_wait(struct hca_dev *dev, struct hca_bounce *b, uint16_t slot,
		       uint32_t gen)
{
	for (unsigned spin = 0;; spin++) {
		if (atomic_load_explicit(&b->state, memory_order_acquire) == BOUNCE_DONE)
			return 0;
		hca_bounce_serve(dev);
		if ((spin & 255) == 255 && target_gone(dev, slot, gen))
			return ESRCH;
		sched_yield();
	}
}

static uint64_t holder_word(uint16_t slot, uint32_t gen)
{
	return ((uint64_t)slot + 1) << 32 | gen;
}

/*
 * A mailbox whose holder died: a request it left that the target has not
 * taken is withdrawn, one the target is serving runs to its end (short:
 * a memcpy), so that the next chunk's fields are not rewritten under the
 * server. ESRCH if the target goes meanwhile.
 */
static int bounce_settle(struct hca_dev *dev, struct hca_bounce *b, uint16_t slot,
			 uint32_t gen)
{
	uint32_t want = BOUNCE_REQ;

	atomic_compare_exchange_strong(&b->state, &want, BOUNCE_IDLE);
	for (unsigned spin = 0;
	     atomic_load_explicit(&b->state, memory_order_acquire) == BOUNCE_BUSY; spin++) {
		if ((spin & 255) == 255 && target_gone(dev, slot, gen))
			return ESRCH;
		sched_yield();
	}
	atomic_store(&b->state, BOUNCE_IDLE);
	return 0;
}

/*
 * Take the target's mailbox: free, or its holder proven dead (a holder
 * only "unknown" may still be using it). While another requester has it,
 * serve our own mailbox: that requester may be waiting on us.
 */
static int bounce_acquire(struct hca_dev *dev, struct hca_bounce *b, uint16_t slot,
			  uint32_t gen)
{
	const uint64_t me = holder_word(dev->slot, dev->gen);

	for (unsigned spin = 0;; spin++) {
		uint64_t cur = 0;

		/* acquire: pairs with the previous holder's release store */
		if (atomic_compare_exchange_strong_explicit(&b->holder, &cur, me,
							    memory_order_acquire,
							    memory_order_relaxed))
			return 0;
		if ((spin & 15) == 15 && (cur >> 32) - 1 < HCA_MAX_PROCS &&
		    hca_peer_check(dev, (uint16_t)((cur >> 32) - 1), (uint32_t)cur) ==
			    HCA_LIVE_DEAD &&
		    atomic_compare_exchange_strong(&b->holder, &cur, me))
			return bounce_settle(dev, b, slot, gen);
		hca_bounce_serve(dev);
		if ((spin & 255) == 255 && target_gone(dev, slot, gen))
			return ESRCH;
		sched_yield();
	}
}

/*
 * One chunk: the target ranges [r, r + len) taken from the remote iovec
 * cursor, the local bytes from the local cursor.
 */
struct iov_cursor {
	const struct iovec *v;
	int n, i;
	size_t off;
};

static size_t cursor_take(struct iov_cursor *c, size_t max, uint64_t *addr)
{
	while (c->i < c->n && c->off == c->v[c->i].iov_len) {
		c->i++;
		c->off = 0;
	}
	if (c->i == c->n)
		return 0;
	size_t n = c->v[c->i].iov_len - c->off;

	if (n > max)
		n = max;
	*addr = (uint64_t)(uintptr_t)c->v[c->i].iov_base + c->off;
	c->off += n;
	return n;
}

static void local_move(struct iov_cursor *c, uint8_t *data, size_t len, bool to_box)
{
	uint64_t a;
	size_t n, done = 0;

	while (done < len && (n = cursor_take(c, len - done, &a))) {
		if (to_box)
			memcpy(data + done, (void *)(uintptr_t)a, n);
		else
			memcpy((void *)(uintptr_t)a, data + done, n);
		done += n;
	}
}

static int bounce_chunk(struct hca_dev *dev, uint16_t slot, uint32_t gen,
			struct hca_bounce *b, bool write, struct iov_cursor *lc,
			struct iov_cursor *rc_, const uint32_t *keys, size_t *left)
{
	struct hca_db_msg m = { .kind = HCA_DB_BOUNCE };
	size_t len = 0, n;
	uint64_t a;
	int rc;

	b->nseg = 0;
	while (len < BOUNCE_BYTES && b->nseg < BOUNCE_SEGS &&
	       (n = cursor_take(rc_, BOUNCE_BYTES - len, &a))) {
		b->seg[b->nseg].addr = a;
		b->seg[b->nseg].key = keys ? keys[rc_->i] : 0; /* the range's iovec */
		b->seg[b->nseg++].len = n;
		len += n;
	}
	if (!len)
		return EFAULT;
	b->write = write;
	if (write)
		local_move(lc, b->data, len, true);
	atomic_store_explicit(&b->state, BOUNCE_REQ, memory_order_release);
	hca_dev_notify(dev, slot, gen, &m, sizeof(m));
	hca_die_at(HCA_DIE_BOUNCE_HELD); /* the next requester takes over */
	rc = bounce_wait(dev, b, slot, gen);
	if (rc)
		return rc; /* the mailbox is the dead target's: leave it be */
	if (!write && !b->result)
		local_move(lc, b->data, len, false);
	atomic_store(&b->state, BOUNCE_IDLE);
	*left -= len;
	return b->result;
}

int hca_bounce_move(struct hca_dev *dev, uint16_t slot, uint32_t gen, bool write,
		    const struct iovec *local, int nlocal,
		    const struct iovec *remote, const uint32_t *keys, int nremote)
{
	struct hca_proc *p = &dev->seg->procs[slot];
	struct hca_bounce *b = hca_seg_ptr(dev->seg, p->bounce_off);
	struct iov_cursor lc = { local, nlocal, 0, 0 }, rc_ = { remote, nremote, 0, 0 };
	size_t left = hca_iov_len(remote, nremote);
	int rc = 0;

	if (!b || hca_peer_check(dev, slot, gen) == HCA_LIVE_DEAD)
		return ESRCH;
	rc = bounce_acquire(dev, b, slot, gen);
	if (rc)
		return rc;
	while (left && !rc)
		rc = bounce_chunk(dev, slot, gen, b, write, &lc, &rc_, keys, &left);
	/* ESRCH: the target is gone, and its mailbox with it (freed by
	 * its reclaim, perhaps someone's already): not written again */
	if (rc != ESRCH)
		atomic_store_explicit(&b->holder, 0, memory_order_release);
	return rc;
}

uint64_t hca_bounce_bytes(void)
{
	return sizeof(struct hca_bounce);
}
