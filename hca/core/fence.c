/*
 * Memory keys fenced against copies in flight.
 *
 * Every move of bytes into or out of a registered region — by whichever
 * process of the host acts as the device: a requester's cross-memory
 * attach, the UDP responder's memcpy, the inline pool's copy-out, the
 * bounce server — checks the key and then copies. Without more, a copier
 * that passed the check may still be inside process_vm_writev when the
 * owner's ibv_dereg_mr returns, and its bytes land in memory the
 * application has taken back. What holds instead: after ibv_dereg_mr or
 * ibv_rereg_mr returns, no byte lands through the old registration.
 *
 * Copy sections. A copier brackets "look the key up .. last byte moved"
 * with hca_fence_enter / hca_fence_exit. A section is marked in a record
 * of the copier's process slot in the segment (seg->fence[slot][i]): a
 * word gen << 32 | seq, seq odd while the section runs. A section takes a
 * free record for its length (the caller keeps which in a struct
 * hca_fence); two sections never share one. A section inside another
 * (the bounce server run by a waiting requester) takes a record of its
 * own; the shared-memory requester's section covers the responder it runs
 * (hca_msg.fenced), which then opens none. A thread inside a section
 * never invalidates a key: it would wait for itself.
 *
 * Invalidation. The owner invalidates the key (dereg stores 0, rereg a
 * new key), then hca_fence_wait scans the records of every process slot
 * (up to the slot's high-water mark) and waits until each that was
 * inside a section has left it, or its process is proven dead. A
 * record's seq only grows, so "changed" means "that section is over".
 *
 * Ordering (Dekker's pattern, every access below seq_cst):
 *   copier:  record := odd (CAS)    ;  load key (hca_mr_lookup)
 *   owner:   key := 0 / new         ;  load record (hca_fence_wait)
 * In the single total order of seq_cst operations, either the copier's
 * key load comes after the owner's store — it sees the key gone and
 * copies nothing — or the owner's record load comes after the copier's
 * CAS — it sees the section and waits for its end, and the copier's exit
 * store (release) orders its bytes before the owner's return (the owner's
 * load that sees it is acquire). A section that starts after the owner
 * looked at its record loads the key after the owner's store: it fails.
 * The per-slot high-water mark of records in use (fence_hi) follows the
 * same pattern: raised before the record's CAS, read after the key store.
 *
 * A copier that dies inside a section leaves its record odd. The owner
 * then waits only as long as the copier's process lives: its death
 * (hca_peer_alive, then its pidfd, which turns readable once every thread
 * of it has exited — and with them any system call that was copying)
 * ends the wait. A slot's next occupant has another gen and ignores the
 * old words. The bounce path copies in the target's own progress thread
 * on behalf of a requester that may be dead by then: the server opens its
 * own section and checks the keys again (mem_bounce.c), so the owner,
 * live in the same process, waits for the server's section instead.
 *
 * Cost: a copier pays a CAS and a store on a cache line of its own per
 * section; the owner pays the scan (64 B per record in use, per live
 * process) and the wait for the copies in flight — at most the longest
 * copy of another process that is inside a section at that moment
 * (docs/shared-segment.md, "Keys fenced against copies in flight").
 */
#include <poll.h>
#include <sched.h>
#include <time.h>

#include "hca_int.h"

/* Raise the slot's high-water mark to cover record i (seq_cst: see above). */
static void fence_hi_cover(_Atomic uint32_t *hi, uint32_t i)
{
	uint32_t cur = atomic_load(hi);

	while (cur <= i && !atomic_compare_exchange_weak(hi, &cur, i + 1))
		;
}

/* The other records, when the thread's own (hca_fence_enter) is taken. */
void hca_fence_enter_slow(struct hca_dev *dev, struct hca_fence *f)
{
	struct hca_seg *seg = dev->seg;
	struct hca_fence_rec *recs = seg->fence[dev->slot];
	uint64_t gen = dev->gen;
	unsigned hint = hca_fence_hint();

	for (;;) {
		for (unsigned n = 0; n < HCA_FENCE_RECS; n++) {
			unsigned i = (hint + n) % HCA_FENCE_RECS;
			_Atomic uint64_t *w = &recs[i].word;
			uint64_t cur = atomic_load_explicit(w, memory_order_relaxed), next;

			if (cur >> 32 == gen && (cur & 1))
				continue; /* another section of ours is inside */
			/* a word of the slot's previous occupant starts over */
			next = cur >> 32 == gen ? cur + 1 : gen << 32 | 1;
			if (i >= atomic_load(&seg->fence_hi[dev->slot]))
				fence_hi_cover(&seg->fence_hi[dev->slot], i);
			if (atomic_compare_exchange_strong(w, &cur, next)) {
				f->word = w;
				f->mark = next;
				return;
			}
		}
		/* every record of ours is inside a section: they are short */
		sched_yield();
	}
}

/*
 * Is the process that held slot s at generation g gone? Its slot says so
 * once reclaimed; before that, its pidfd (the progress thread may not have
 * noticed yet: asked directly, as mem_bounce.c's target_gone does).
 */
static bool copier_gone(struct hca_dev *dev, uint16_t s, uint32_t g)
{
	struct pollfd pf;
	bool gone;

	if (s == dev->slot)
		return g != dev->gen;
	/* reclaimed (or being): its process is dead, or closed the device */
	if (atomic_load(&dev->seg->procs[s].state) != HCA_PROC_LIVE)
		return true;
	/* proven dead only: a copier we cannot check (no descriptor to
	 * spare: HCA_LIVE_UNKNOWN) may still be copying */
	if (hca_peer_check(dev, s, g) == HCA_LIVE_DEAD)
		return true;
	/* the pidfd under dev->lock (hca_peer): the progress thread may close
	 * it, and its number be reused, between our read and the poll */
	pf.events = POLLIN;
	pthread_mutex_lock(&dev->lock);
	pf.fd = dev->peers[s].pidfd;
	gone = pf.fd >= 0 && poll(&pf, 1, 0) > 0;
	pthread_mutex_unlock(&dev->lock);
	return gone;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ __volatile__("pause" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/*
 * A copy in flight lasts microseconds (a MiB of CMA: ~70 us): spin a
 * little, then sleep in growing steps up to 1 ms. Not sched_yield: on a
 * loaded host it sends us behind every runnable thread, tens of ms.
 */
static void backoff(unsigned k)
{
	struct timespec ts = { 0, 0 };

	if (k < 32) {
		for (int i = 0; i < 64; i++)
			cpu_relax();
		return;
	}
	ts.tv_nsec = k < 40 ? 10000L << (k - 32) : 1000000L;
	if (ts.tv_nsec > 1000000L)
		ts.tv_nsec = 1000000L;
	nanosleep(&ts, NULL);
}

/* Wait until the section that record w was in (word cur) is over. */
static void wait_record(struct hca_dev *dev, uint16_t s, _Atomic uint64_t *w, uint64_t cur)
{
	for (unsigned k = 0; atomic_load_explicit(w, memory_order_acquire) == cur; k++) {
		/* a dead copier's record never changes: asked at once (a
		 * record left odd by a death is met by every later dereg until
		 * the slot is reused), then now and then */
		if ((k & 15) == 0 && copier_gone(dev, s, (uint32_t)(cur >> 32)))
			return;
		backoff(k);
	}
}

void hca_fence_wait(struct hca_dev *dev)
{
	struct hca_seg *seg = dev->seg;

	/* the key store before the record loads: see the head of this file */
	atomic_thread_fence(memory_order_seq_cst);
	/* every slot, free ones too: a process may attach and enter a
	 * section while we look (it then fails on the key); only the
	 * records' words, all seq_cst, carry the argument */
	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		uint32_t hi = atomic_load(&seg->fence_hi[s]);

		for (uint32_t i = 0; i < hi && i < HCA_FENCE_RECS; i++) {
			_Atomic uint64_t *w = &seg->fence[s][i].word;
			uint64_t cur = atomic_load(w);

			if (!(cur & 1))
				continue; /* not inside a section */
			wait_record(dev, s, w, cur);
		}
	}
}
