/*
 * The shared segment: mapping it, its robust lock, its heap and its
 * process slots. Layout and rules are in seg.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "die_at.h"
#include "seg.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

uint64_t hca_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int hca_robust_mutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int rc;

	/* a lock that is not process-shared and robust would wedge the
	 * host at the first death of a holder: each step is checked */
	rc = pthread_mutexattr_init(&a);
	if (rc)
		return rc;
	if (!(rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED)) &&
	    !(rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST)))
		rc = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return rc;
}

/*
 * Lock a robust mutex, never sleeping on it for good. When a holder dies
 * the kernel marks the word OWNER_DIED and wakes one waiter only; if that
 * waiter is killed too before it takes the lock (a launcher killing a
 * job's processes does that), the kernel wakes nobody else — its own
 * repair of a dead waiter applies only to a free word — and the other
 * waiters would sleep forever on a lock nobody holds (seen in
 * test_reclaim: a holder's progress thread in futex_wait under
 * hca_seg_lock, every other process dead). A waiter therefore sleeps at
 * most HCA_LOCK_RECHECK_NS at a time and then looks again, finding the
 * OWNER_DIED word and taking it (EOWNERDEAD).
 */
#define HCA_LOCK_RECHECK_NS (50ULL * 1000000ULL)

/*
 * After a recheck: a lock word that still names a thread which no longer
 * exists is marked OWNER_DIED here, as the kernel does at a holder's
 * death (the next look takes it with EOWNERDEAD). Only on proof of
 * death (no /proc/<tid>), in the one PID namespace that softib assumes for the
 * processes of a segment (as live.c does); a TID reused by a live thread
 * keeps the lock held, as it must. The word is glibc's futex word of the
 * mutex (the Linux robust-futex ABI: owner TID, WAITERS, OWNER_DIED).
 */
static void robust_unwedge(pthread_mutex_t *m)
{
	_Atomic uint32_t *word = (_Atomic uint32_t *)(void *)&m->__data.__lock;
	uint32_t v = atomic_load(word);
	pid_t tid = (pid_t)(v & FUTEX_TID_MASK);

	if (!tid || (v & FUTEX_OWNER_DIED))
		return;
	/* /proc/<tid> answers for every thread, not only a group's leader
	 * (kill(2) would say ESRCH of a live non-leader thread) */
	char path[32];

	snprintf(path, sizeof(path), "/proc/%d", (int)tid);
	if (access("/proc/self", F_OK))
		return; /* no /proc: death cannot be proven */
	if (access(path, F_OK) == 0 || errno != ENOENT)
		return;
	atomic_compare_exchange_strong(word, &v, (v & FUTEX_WAITERS) | FUTEX_OWNER_DIED);
}

/* ThreadSanitizer records a pthread_mutex_timedlock that returns
 * EOWNERDEAD as no lock at all (only the interceptors of lock and trylock
 * repair it) and then reports our unlock: in that build the recheck loop
 * takes the lock by trylock, sleeping 20 us between tries. */
#if defined(__SANITIZE_THREAD__)
#define SEG_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SEG_TSAN 1
#endif
#endif

/* One wait of about HCA_LOCK_RECHECK_NS: 0, EOWNERDEAD, or ETIMEDOUT. */
static int lock_within_recheck(pthread_mutex_t *m)
{
#ifdef SEG_TSAN
	for (uint32_t n = 0; n < HCA_LOCK_RECHECK_NS / 20000; n++) {
		int rc = pthread_mutex_trylock(m);

		if (rc != EBUSY)
			return rc;
		usleep(20);
	}
	return ETIMEDOUT;
#else
	struct timespec t;

	/* timedlock, not clocklock: the sanitizers know it. A step of the
	 * wall clock only changes one recheck's delay */
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_nsec += (long)HCA_LOCK_RECHECK_NS;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return pthread_mutex_timedlock(m, &t);
#endif
}

static int robust_lock(pthread_mutex_t *m)
{
	for (;;) {
		int rc = lock_within_recheck(m);

		if (rc != ETIMEDOUT)
			return rc;
		robust_unwedge(m);
	}
}

/*
 * A holder that died leaves EOWNERDEAD. The atomic locks guard one
 * 8-byte read-modify-write of the target's memory, which the next holder
 * may simply redo: the mutex is marked consistent and used.
 */
void hca_robust_lock(pthread_mutex_t *m)
{
	if (robust_lock(m) == EOWNERDEAD)
		pthread_mutex_consistent(m);
}

/*
 * The segment lock guards sequences of stores (the heap's free lists and
 * quarantine, directory entries) that a death can leave half made: the
 * heap is rebuilt from the directory (heap_check.c) before the mutex is
 * marked consistent, so that a locker dying while it rebuilds leaves
 * EOWNERDEAD to the next. Directory entries are published by one release
 * store of their id, after their other fields (seg.h): one half made is
 * not published, and its heap block is free again after the rebuild.
 */
void hca_seg_lock(struct hca_seg *seg)
{
	if (robust_lock(&seg->lock) == EOWNERDEAD) {
		hca_heap_rebuild(seg);
		atomic_fetch_add(&seg->heap_repairs, 1);
		pthread_mutex_consistent(&seg->lock);
	}
}

void hca_seg_unlock(struct hca_seg *seg)
{
	pthread_mutex_unlock(&seg->lock);
}

void hca_seg_name(char *buf, size_t len)
{
	struct stat st;
	unsigned long ino = 0;

	if (stat("/proc/self/ns/net", &st) == 0)
		ino = (unsigned long)st.st_ino;
	/* the layout is in the name: two builds of softib on one host keep
	 * to their own segments instead of replacing each other's */
	const char *tag = getenv("SOFTIB_SEG_TAG");

	/* SOFTIB_SEG_TAG keeps concurrent test runs (two work trees, two CI
	 * jobs) on segments of their own; [A-Za-z0-9_-] only */
	if (tag && *tag && strspn(tag, "abcdefghijklmnopqrstuvwxyz"
				  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == strlen(tag) &&
	    strlen(tag) <= 32)
		snprintf(buf, len, "/softib-%u-%lu-v%u.%zu-%s", (unsigned)getuid(), ino,
			 HCA_SEG_VERSION, sizeof(struct hca_seg), tag);
	else
		snprintf(buf, len, "/softib-%u-%lu-v%u.%zu", (unsigned)getuid(), ino,
			 HCA_SEG_VERSION, sizeof(struct hca_seg));
}

static int seg_init(struct hca_seg *seg, size_t len)
{
	uint64_t hdr = (sizeof(*seg) + 4095) & ~4095ULL;
	int rc;

	if (getrandom(&seg->nonce, sizeof(seg->nonce), 0) != sizeof(seg->nonce))
		seg->nonce = (uint32_t)hca_now_ns() ^ (uint32_t)getpid();
	seg->magic = HCA_SEG_MAGIC;
	seg->version = HCA_SEG_VERSION;
	seg->layout_size = sizeof(*seg);
	/* not ready (never published) without its robust locks */
	rc = hca_robust_mutex_init(&seg->lock);
	for (int i = 0; i < HCA_ATOMIC_LOCKS && !rc; i++)
		rc = hca_robust_mutex_init(&seg->atomic_locks[i]);
	if (rc)
		return rc;
	seg->next_pd = 1;
	seg->next_handle = 1;
	seg->heap_off = hdr;
	seg->heap_size = len - hdr;
	seg->heap_bump = 0;
	atomic_store_explicit(&seg->ready, 1, memory_order_release);
	return 0;
}

static int seg_valid(const struct hca_seg *seg)
{
	return seg->magic == HCA_SEG_MAGIC && seg->version == HCA_SEG_VERSION &&
	       seg->layout_size == sizeof(*seg);
}

static size_t seg_hdr_len(void)
{
	return (sizeof(struct hca_seg) + 4095) & ~4095ULL;
}

static int seg_len_ok(size_t len)
{
	return len >= seg_hdr_len() + HCA_HEAP_MIN_SIZE &&
	       len <= seg_hdr_len() + HCA_HEAP_MAX_SIZE;
}

/*
 * The heap is as large as the host's RAM (2 GiB at least): every QP, CQ
 * and SRQ the host's memory can hold fits, and an untouched page of the
 * sparse file costs nothing. Rounded to 2 GiB, the largest block.
 */
static size_t seg_new_len(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
	uint64_t heap = (ram + HCA_HEAP_MIN_SIZE - 1) & ~(HCA_HEAP_MIN_SIZE - 1);

	if (heap < HCA_HEAP_MIN_SIZE)
		heap = HCA_HEAP_MIN_SIZE;
	if (heap > HCA_HEAP_MAX_SIZE)
		heap = HCA_HEAP_MAX_SIZE;
	return seg_hdr_len() + heap;
}

/*
 * /dev/shm is writable by all: another user may have made a file of our
 * segment's name before us. Only a file of our own, that no one else can
 * open, is the segment; anything else is refused (never mapped: its
 * maker would read and write every queue we put in it).
 */
static bool seg_file_ours(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       st.st_uid == geteuid() && !(st.st_mode & 077);
}

/*
 * One segment per user, host and layout at any time (issue 15 item 7).
 * Beside the segment lives a lock file (the same name + ".lock", in the
 * same shm directory). Every process holds a shared flock on it for as
 * long as it maps the segment; only a holder of the exclusive lock
 * creates the segment, or unlinks one that is unusable. So:
 *  - a creator works alone: nobody maps a half-made segment, and a
 *    segment found not ready under the shared lock is one whose creator
 *    died (its exclusive lock went with it), not a slow one;
 *  - nothing is unlinked while any process maps it (the exclusive lock
 *    waits for every shared one to go), so no live process is left on an
 *    island of its own, and two recreators never unlink each other's
 *    segment (the second finds the first's, valid, and joins it).
 */
#define SEG_LOCK_WAIT_MS 10000

static int seg_flock(int fd, int how)
{
	for (int i = 0; i < SEG_LOCK_WAIT_MS; i++) {
		if (!flock(fd, how | LOCK_NB))
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return errno;
		usleep(1000);
	}
	return ETIMEDOUT;
}

/*
 * The header's pages (the object tables: MR, CQ, SRQ, XRC domain, process
 * slots) allocated in the tmpfs now, not when an entry is first written:
 * a page tmpfs cannot allocate then (a full /dev/shm) would be a SIGBUS in
 * the verb that writes it (ibv_reg_mr on a new page of the MR table). The
 * heap's blocks are populated as they are handed out (heap_populate).
 * Done by every process that maps the segment, not only its creator: a
 * segment made by an older build may have holes; on pages already there
 * it allocates nothing. ENOMEM where tmpfs has no room.
 */
static int seg_back_header(int fd)
{
	int rc = posix_fallocate(fd, 0, (off_t)seg_hdr_len());

	if (rc == ENOSPC || rc == EFBIG)
		return ENOMEM;
	/* EOPNOTSUPP: not a tmpfs (nothing to do here); EINTR: try again
	 * at the next open, the verbs then take their chance */
	return rc == EOPNOTSUPP || rc == EINTR ? 0 : rc;
}

/* Map the segment if it is there and usable (0), else ESTALE / ENOENT. */
static int seg_open_existing(const char *name, size_t *lenp, struct hca_seg **out)
{
	struct hca_seg *seg;
	struct stat st;
	size_t len;
	int err, fd = shm_open(name, O_RDWR, 0600);

	if (fd < 0)
		return errno;
	if (!seg_file_ours(fd)) { /* another user's: refused, never mapped */
		close(fd);
		return EACCES;
	}
	if (fstat(fd, &st) || !seg_len_ok((size_t)st.st_size)) {
		close(fd);
		return ESTALE;
	}
	len = (size_t)st.st_size;
	err = seg_back_header(fd);
	if (err) {
		close(fd);
		return err;
	}
	seg = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (seg == MAP_FAILED)
		return errno;
	if (!atomic_load_explicit(&seg->ready, memory_order_acquire) || !seg_valid(seg)) {
		munmap(seg, len);
		return ESTALE;
	}
	*out = seg;
	*lenp = len;
	return 0;
}

/* Under the exclusive lock: a new segment in place of none or a bad one. */
static int seg_create(const char *name, size_t *lenp, struct hca_seg **out)
{
	size_t len = seg_new_len();
	struct hca_seg *seg;
	int fd, err;

	shm_unlink(name); /* unusable, and nobody maps it: we hold the lock */
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return errno;
	if (ftruncate(fd, (off_t)len)) {
		err = errno;
		close(fd);
		shm_unlink(name);
		return err;
	}
	err = seg_back_header(fd);
	if (err) {
		close(fd);
		shm_unlink(name);
		return err;
	}
	seg = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	err = errno;
	close(fd);
	if (seg == MAP_FAILED) {
		shm_unlink(name);
		return err;
	}
	err = seg_init(seg, len);
	if (err) { /* its robust locks could not be made: not published */
		munmap(seg, len);
		shm_unlink(name);
		return err;
	}
	*out = seg;
	*lenp = len;
	return 0;
}

/*
 * Under the exclusive lock (taken, not waited for): map the segment, or
 * make it if it is still absent or unusable, then go back to shared (not
 * atomic, and need not be: whoever takes the exclusive lock in between
 * finds a usable segment and leaves it).
 */
static int seg_map_exclusive(int fd, const char *name, size_t *lenp,
			     struct hca_seg **out)
{
	int rc = seg_open_existing(name, lenp, out);

	if (rc == ENOENT || rc == ESTALE)
		rc = seg_create(name, lenp, out);
	if (!rc)
		rc = seg_flock(fd, LOCK_SH);
	if (rc) {
		if (*out)
			munmap(*out, *lenp);
		*out = NULL;
		flock(fd, LOCK_UN);
	}
	return rc;
}

/*
 * Shared lock and a usable segment (0), else try the exclusive lock once
 * to make it. Never *wait* for the exclusive lock: a process that found
 * the segment absent may lose the race to make it to another one, which
 * then holds its shared lock for as long as it lives; waiting for the
 * exclusive lock would wait for that process to exit (two processes
 * starting at once: the second timed out after 10 s, ETIMEDOUT from
 * ibv_open_device). So both locks are tried in turn, each without
 * blocking, with a random pause between rounds so that two openers of a
 * segment whose creator died do not keep meeting under the shared lock.
 */
static int seg_lock_and_map(int fd, const char *name, size_t *lenp,
			    struct hca_seg **out)
{
	unsigned seed = (unsigned)getpid() ^ (unsigned)hca_now_ns();
	uint64_t deadline = hca_now_ns() + SEG_LOCK_WAIT_MS * 1000000ULL;
	int rc;

	do {
		if (!flock(fd, LOCK_SH | LOCK_NB)) {
			rc = seg_open_existing(name, lenp, out);
			if (rc != ENOENT && rc != ESTALE) {
				if (rc)
					flock(fd, LOCK_UN);
				return rc;
			}
			/* absent, or made by a creator that died half-way */
			flock(fd, LOCK_UN);
		} else if (errno != EWOULDBLOCK && errno != EINTR) {
			return errno;
		}
		if (!flock(fd, LOCK_EX | LOCK_NB))
			return seg_map_exclusive(fd, name, lenp, out);
		if (errno != EWOULDBLOCK && errno != EINTR)
			return errno;
		usleep(200 + (unsigned)rand_r(&seed) % 1000);
	} while (hca_now_ns() < deadline);
	return ETIMEDOUT;
}

int hca_seg_map(struct hca_seg **out, size_t *lenp, int *lockfd)
{
	char name[96], lname[104];
	size_t len = 0;
	int fd, rc;

	hca_seg_name(name, sizeof(name));
	snprintf(lname, sizeof(lname), "%s.lock", name);
	fd = shm_open(lname, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno;
	if (!seg_file_ours(fd)) { /* another user's lock file */
		close(fd);
		return EACCES;
	}
	*out = NULL;
	rc = seg_lock_and_map(fd, name, &len, out);
	if (rc) {
		close(fd);
		return rc;
	}
	*lenp = len;
	*lockfd = fd;
	return 0;
}

void hca_seg_unmap(struct hca_seg *seg, size_t len, int lockfd)
{
	munmap(seg, len);
	if (lockfd >= 0)
		close(lockfd); /* our shared lock goes with it */
}

/* ---- heap ---- */

static unsigned heap_order(uint64_t size)
{
	unsigned o = HCA_HEAP_MIN_ORDER;

	while ((1ULL << o) < size)
		o++;
	return o;
}

static void heap_release(struct hca_seg *seg, uint64_t off, unsigned order)
{
	*(uint64_t *)hca_seg_ptr(seg, off) = seg->heap_free[order];
	seg->heap_free[order] = off;
}

/*
 * Blocks whose quarantine has expired go back to their free list. The
 * array stays in the order blocks were freed (a stable compaction), so
 * when it is full, force releases the oldest eighth: one compaction per
 * 512 frees rather than one per free when a process destroys tens of
 * thousands of QPs at once (65,536 RQ rings and directory pages).
 */
static void heap_drain_quarantine(struct hca_seg *seg, int force)
{
	uint64_t now = hca_now_ns();
	uint32_t keep = 0, forced = force ? HCA_QUARANTINE_LEN / 8 : 0;

	for (uint32_t i = 0; i < seg->nquar; i++) {
		struct hca_quarantine *q = &seg->quar[i];

		if (q->free_at_ns <= now || i < forced) {
			heap_release(seg, q->off, q->order);
			hca_die_at(HCA_DIE_HEAP_DRAIN);
		} else
			seg->quar[keep++] = *q;
	}
	seg->nquar = keep;
}

static int heap_populate(struct hca_seg *seg, uint64_t off, uint64_t len)
{
	uintptr_t a = (uintptr_t)hca_seg_ptr(seg, off), end = a + len;
	uintptr_t pg = 4096;

	a &= ~(pg - 1);
	end = (end + pg - 1) & ~(pg - 1);
	if (!madvise((void *)a, end - a, MADV_POPULATE_WRITE))
		return 0;
	/* EINVAL: a kernel older than 5.14; the zeroing then takes its chance */
	return errno == EINVAL ? 0 : ENOMEM;
}

uint64_t hca_heap_alloc(struct hca_seg *seg, uint64_t size)
{
	return hca_heap_alloc_rec(seg, size, NULL);
}

/* Record the block taken before the slow part (issue 18: a death in it). */
static void heap_rec(struct hca_heap_rec *rec, uint64_t off, unsigned order)
{
	if (rec) {
		rec->order = (uint8_t)order;
		rec->off = off;
	}
}

uint64_t hca_heap_alloc_rec(struct hca_seg *seg, uint64_t size, struct hca_heap_rec *rec)
{
	unsigned order = heap_order(size);
	uint64_t off, bsize = 1ULL << order;

	if (order > HCA_HEAP_MAX_ORDER)
		return 0;
	heap_drain_quarantine(seg, 0);
	off = seg->heap_free[order];
	if (off) {
		/* a block of an alignment gap (below) was never touched past
		 * its first word: its pages too are allocated before the
		 * zeroing, or the allocation fails with the block kept */
		if (heap_populate(seg, off, size < bsize ? size : bsize))
			return 0;
		seg->heap_free[order] = *(uint64_t *)hca_seg_ptr(seg, off);
		heap_rec(rec, off, order);
		hca_die_at(HCA_DIE_HEAP_POP);
	} else {
		/* bump allocation keeps blocks aligned to their size */
		uint64_t start = (seg->heap_bump + bsize - 1) & ~(bsize - 1);

		if (start + bsize > seg->heap_size)
			return 0;
		/* the alignment gap is not lost: give it to smaller lists */
		for (uint64_t g = seg->heap_bump; g < start;) {
			unsigned go = HCA_HEAP_MIN_ORDER;

			while (go < order && !(g & (1ULL << go)) &&
			       g + (2ULL << go) <= start)
				go++;
			/* the free-list link is the block's first word: its
			 * page too is allocated before it is written (a full
			 * tmpfs: SIGBUS otherwise). On failure the bump stops
			 * where the gaps given so far end */
			if (heap_populate(seg, seg->heap_off + g, sizeof(uint64_t))) {
				seg->heap_bump = g;
				return 0;
			}
			heap_release(seg, seg->heap_off + g, go);
			hca_die_at(HCA_DIE_HEAP_GAP);
			g += 1ULL << go;
		}
		off = seg->heap_off + start;
		/* a page of the sparse file is allocated when first touched,
		 * and a full tmpfs then kills with SIGBUS: have the pages
		 * the zeroing below touches allocated now, or fail */
		if (heap_populate(seg, off, size < bsize ? size : bsize))
			return 0;
		seg->heap_bump = start + bsize;
		heap_rec(rec, off, order);
	}
	memset(hca_seg_ptr(seg, off), 0, size < bsize ? size : bsize);
	return off;
}

void hca_heap_free(struct hca_seg *seg, uint64_t off, uint64_t size)
{
	if (!off)
		return;
	if (seg->nquar == HCA_QUARANTINE_LEN)
		heap_drain_quarantine(seg, 1);
	seg->quar[seg->nquar].off = off;
	seg->quar[seg->nquar].order = (uint8_t)heap_order(size);
	seg->quar[seg->nquar].free_at_ns = hca_now_ns() + HCA_QUARANTINE_NS;
	hca_die_at(HCA_DIE_HEAP_QUAR);
	seg->nquar++;
}

/* ---- process slots ---- */

/*
 * A process's start time (field 22 of /proc/<pid>/stat, clock ticks since
 * boot) and state (field 3: 'Z' zombie, 'X' dead...). Returns 0, ENOENT
 * or ESRCH when no process has that pid (proof that it is gone), or
 * another errno when the file could not be read (EMFILE, ENFILE, ENOMEM,
 * EACCES): that proves nothing either way.
 */
int hca_proc_stat(pid_t pid, uint64_t *start, char *state)
{
	char path[64], buf[1024];
	unsigned long long st = 0;
	ssize_t n;
	int fd, err;
	char *p, c;

	if (pid <= 0)
		return EINVAL;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	n = read(fd, buf, sizeof(buf) - 1);
	err = n < 0 ? errno : EIO;
	close(fd);
	if (n <= 0)
		return err == ESRCH ? ESRCH : err; /* ESRCH: it went meanwhile */
	buf[n] = 0;
	/* the command name may hold spaces: fields restart after ')' */
	p = strrchr(buf, ')');
	if (!p)
		return EIO;
	/* field 3 is the state; starttime is field 22 */
	if (sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
			  "%*d %*d %*d %*d %*d %*d %llu", &c, &st) != 2)
		return EIO;
	*start = st;
	if (state)
		*state = c;
	return 0;
}

uint64_t hca_proc_starttime(pid_t pid)
{
	uint64_t st;

	return hca_proc_stat(pid, &st, NULL) ? 0 : st;
}

/*
 * Take a free slot, the one freed longest ago, so that a dead process's
 * slot (and the QP numbers derived from it) is not reused at once.
 */
int hca_proc_attach(struct hca_seg *seg, uint16_t *slot, uint32_t *gen)
{
	uint64_t start;
	int best = -1, rc;

	for (int i = 0; i < HCA_PROC_SLOTS; i++) {
		struct hca_proc *p = &seg->procs[i];

		if (atomic_load(&p->state) != HCA_PROC_FREE)
			continue;
		if (best < 0 || p->freed_ns < seg->procs[best].freed_ns)
			best = i;
	}
	if (best < 0)
		return ENOSPC;
	/* our own start time is what proves us alive to the others: a slot
	 * without it would be taken for dead (a process short of file
	 * descriptors gets EMFILE here, and its open fails with it) */
	rc = hca_proc_stat(getpid(), &start, NULL);
	if (rc)
		return rc;
	struct hca_proc *p = &seg->procs[best];
	p->gen++;
	p->pid = getpid();
	p->starttime = start;
	atomic_store_explicit(&p->state, HCA_PROC_LIVE, memory_order_release);
	atomic_fetch_add(&seg->members, 1);
	*slot = (uint16_t)best;
	*gen = p->gen;
	return 0;
}
