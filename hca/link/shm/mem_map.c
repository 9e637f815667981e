/*
 * The mapping route: RDMA WRITE, READ and atomics on a registered range of
 * another process of the host as memcpy through a mapping of the same
 * pages, without a system call per message — where both sides allow it.
 *
 * Which ranges. A registration with remote access whose range lies in one
 * shared, readable and writable mapping of a memfd sealed against
 * shrinking (F_SEAL_SHRINK), of which the owner has a descriptor open.
 * The seal is what makes a mapping in another process safe: a file that
 * could shrink would turn our stores into SIGBUS (so would a hugetlbfs
 * memfd whose pool runs dry: those keep CMA too). /dev/shm files and
 * unsealed memfds cannot be sealed so, and keep cross-memory attach;
 * so does private memory (malloc, anonymous mappings). libsib's
 * sib_mem_map(NULL) allocates such a memfd (transport/rma.c).
 *
 * When (in a requester, at the first move through a key): PROCMAP_QUERY
 * on the owner's /proc/PID/maps (Linux 6.11; older kernels: no mapping
 * route) finds the mapping under the registered range; only when it is a
 * shared, readable and writable file mapping do we look for a descriptor
 * of that file (inode and device) among the owner's (/proc/PID/fd), take
 * a duplicate with pidfd_getfd on the owner's pidfd (the one that vouches
 * for its pid, peers.c; the same ptrace rule as cross-memory attach),
 * check its seals and the file's size, and map the range. Whatever the
 * answer, it is cached per (owner slot and generation, key, range): a
 * private registration costs its requester one ioctl, once.
 *
 * Not at registration, in the owner: the same query there cost every
 * registration with remote access 1-6 us more (0.11 -> 5.9 us median on
 * this VM, bench/reg_cost, docs/transport.md), for a route that serves
 * only ranges some peer will actually reach. The price of asking late:
 * the range is taken as it is mapped at the first move, not at
 * registration (see "Semantics" below).
 *
 * Stale mappings cannot be used. The caller (resp.c) checked the key
 * inside a copy section (fence.c) that lasts until we return, so the
 * owner's dereg waits for our copy; a hit is used only when the key's
 * entry in the segment still says what it said when we mapped (key with
 * its generation, range, owner slot and generation): a new registration
 * of the same key index, a re-registration or a dead owner's reclaimed
 * keys all miss. (A key is 16 bits of index and 16 of generation: one
 * coming back with the same range, owner and generation takes 2^32
 * registrations on the host, each index taken in turn, while the stale
 * entry survives; the sweep below, which runs at each miss, every 4096
 * moves and every progress-thread tick, never lets one live that long.)
 * Mappings whose key has gone or whose owner died are unmapped by that
 * sweep. A mapping outliving its owner's memory only keeps the file's
 * pages alive; nothing writes through it.
 *
 * Semantics, exactly those of cross-memory attach and the bounce path:
 * the copy completes while the target sleeps; atomics run under the
 * segment's atomic locks (resp.c), so they are atomic with respect to
 * every softib atomic on the host. One difference, the one a real HCA
 * has too: a registration holds the pages it was first reached on. Where
 * the owner unmaps the range and maps something else at the same address
 * without deregistering, cross-memory attach follows the address, the
 * mapping route (like a NIC's pinned pages) keeps writing the old pages.
 *
 * SOFTIB_NO_MAP=1 turns the route off (A/B runs, tests).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "shm_link.h"
#include "mem_map.h"

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef F_SEAL_SHRINK
#define F_ADD_SEALS   1033
#define F_GET_SEALS   1034
#define F_SEAL_SHRINK 0x0002
#endif

/* The kernel's PROCMAP_QUERY (uapi linux/fs.h, 6.11), spelled out: the
 * build's headers may be older than the kernel it runs on. */
struct hca_procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset;
	uint64_t inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define HCA_PROCMAP_QUERY _IOWR('f', 17, struct hca_procmap_query)
#define PMQ_READABLE    0x01
#define PMQ_WRITABLE    0x02
#define PMQ_SHARED      0x08
#define PMQ_FILE_BACKED 0x20
#define HUGETLBFS_FS_MAGIC 0x958458f6u

_Static_assert(sizeof(struct hca_procmap_query) == 104, "procmap_query ABI");

#define MAP_SETS 1024
#define MAP_WAYS 4
#define MAP_MAX_REMOTE 8       /* longer remote lists go by CMA */
#define MAP_SWEEP_EVERY 4096

struct map_ent {
	const struct hca_seg *seg;   /* NULL: empty */
	uint32_t key, gen;           /* the key; its owner's generation */
	uint16_t slot;
	bool none;                   /* not mappable (cached refusal) */
	_Atomic uint32_t refs;       /* copies in progress through it: taken
				      * under map_lock, given back without it */
	uint64_t raddr, rlen, used;
	uint8_t *base;               /* our image of raddr */
	void *map;
	size_t maplen;
	uint64_t neg_start, neg_end; /* ent_map: the private mapping found */
};

/*
 * Mappings of owners found private (anonymous, or not a shared file): a
 * new key inside one is refused without asking /proc again. An MPI
 * library that registers each large message's buffer anew (a new key
 * every time) would otherwise pay an open, an ioctl and a close per
 * message. An entry that has gone stale (the owner mapped a memfd where
 * its heap was) only sends those bytes by cross-memory attach, which is
 * always right; the owner's generation keeps a new process out of it.
 */
#define NEG_MAX 64
struct neg_ent {
	const struct hca_seg *seg;   /* NULL: empty */
	uint32_t gen;
	uint16_t slot;
	uint64_t start, end;
};
static struct neg_ent neg_tab[NEG_MAX];   /* under map_lock */
static unsigned neg_next;

/* One table per process (a process has one segment at a time, but the
 * segment is part of the key all the same), under one lock held only to
 * find, insert or drop an entry — never during a copy (refs). */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct map_ent map_tab[MAP_SETS][MAP_WAYS];
static uint64_t map_tick, map_moves;
static _Atomic uint64_t map_live;   /* mappings held (read unlocked by the sweep) */
static uint64_t map_miss_sweeps;    /* misses (map_lock), for their sweeps */
static _Atomic uint64_t st_moves, st_maps, st_unmaps, st_refused;
static _Atomic int map_off = -1;   /* SOFTIB_NO_MAP, read once */

/* A fork while another thread holds the table's lock would leave the
 * child's copy locked for ever: the lock is taken across fork. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&map_lock);
}

static void fork_after(void)
{
	pthread_mutex_unlock(&map_lock);
}

static void fork_hooks(void)
{
	pthread_atfork(fork_prepare, fork_after, fork_after);
}

static bool route_off(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, fork_hooks);
	int off = atomic_load_explicit(&map_off, memory_order_relaxed);

	if (off < 0) {
		const char *v = getenv("SOFTIB_NO_MAP");

		off = v && *v && strcmp(v, "0");
		atomic_store_explicit(&map_off, off, memory_order_relaxed);
	}
	return off;
}

static int query(int mapsfd, uint64_t addr, uint64_t flags,
		 struct hca_procmap_query *q)
{
	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	q->query_addr = addr;
	q->query_flags = flags;
	return ioctl(mapsfd, HCA_PROCMAP_QUERY, q) ? errno : 0;
}

/* Whether this kernel answers PROCMAP_QUERY (6.11 and later): asked once,
 * of our own maps, for an address that is surely mapped. */
bool hca_mem_map_available(void)
{
	static _Atomic int ok = -1;
	int v = atomic_load_explicit(&ok, memory_order_relaxed);

	if (v < 0) {
		struct hca_procmap_query q;
		int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

		memset(&q, 0, sizeof(q));
		q.size = sizeof(q);
		q.query_addr = (uintptr_t)&hca_mem_map_available;
		v = fd >= 0 && ioctl(fd, HCA_PROCMAP_QUERY, &q) == 0;
		if (fd >= 0)
			close(fd);
		atomic_store_explicit(&ok, v, memory_order_relaxed);
	}
	return v;
}

/* Sealed against shrinking, and not hugetlbfs (whose page faults fail
 * with SIGBUS when the pool of huge pages runs dry). */
static bool sealed(int fd)
{
	int s = fcntl(fd, F_GET_SEALS);
	struct statfs fs;

	return s >= 0 && (s & F_SEAL_SHRINK) && !fstatfs(fd, &fs) &&
	       (uint32_t)fs.f_type != HUGETLBFS_FS_MAGIC;
}

/* The number of a descriptor of the owner's open on (ino, dev), or -1. */
static int owner_fd(pid_t pid, uint64_t ino, uint32_t maj, uint32_t min)
{
	char path[64];
	DIR *d;
	struct dirent *de;
	int found = -1;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while (found < 0 && (de = readdir(d))) {
		struct stat st;
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || end == de->d_name)
			continue;
		/* stat follows the link to the open file itself */
		if (fstatat(dirfd(d), de->d_name, &st, 0) || !S_ISREG(st.st_mode) ||
		    st.st_ino != ino || major(st.st_dev) != maj || minor(st.st_dev) != min)
			continue;
		found = (int)fd;
	}
	closedir(d);
	return found;
}

/* ---------------- the requester's side ---------------- */

static void ent_drop(struct map_ent *m)
{
	if (m->map) {
		munmap(m->map, m->maplen);
		atomic_fetch_add(&st_unmaps, 1);
		map_live--;
	}
	memset(m, 0, sizeof(*m));
}

/* Does the key's entry still say what it said when m was made? (The
 * caller checked the key inside its copy section: the fields are stable.) */
static bool ent_current(const struct map_ent *m, const struct hca_mr_ent *e)
{
	return atomic_load_explicit(&e->key, memory_order_relaxed) == m->key &&
	       e->addr == m->raddr && e->length == m->rlen &&
	       e->owner == m->slot && e->owner_gen == m->gen;
}

static struct map_ent *ent_find(const struct hca_seg *seg, uint16_t slot,
				uint32_t gen, uint32_t key)
{
	struct map_ent *set = map_tab[key % MAP_SETS];

	for (int i = 0; i < MAP_WAYS; i++)
		if (set[i].seg == seg && set[i].key == key && set[i].slot == slot &&
		    set[i].gen == gen)
			return &set[i];
	return NULL;
}

/* A way for key: an empty one, else the least recently used idle one. */
static struct map_ent *ent_victim(uint32_t key)
{
	struct map_ent *set = map_tab[key % MAP_SETS], *v = NULL;

	for (int i = 0; i < MAP_WAYS; i++) {
		if (!set[i].seg)
			return &set[i];
		if (!set[i].refs && (!v || set[i].used < v->used))
			v = &set[i];
	}
	return v;
}

/* Map the owner's range of m (its fields filled from the key's entry);
 * 0, or an errno: the route is refused for this registration. */
static int ent_map(struct hca_dev *dev, struct map_ent *m)
{
	struct hca_procmap_query q;
	struct stat st;
	char path[64];
	pid_t pid = dev->seg->procs[m->slot].pid;
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t off, pgoff;
	int fd = -1, ofd, mapsfd, rc;
	void *p;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	mapsfd = open(path, O_RDONLY | O_CLOEXEC);
	if (mapsfd < 0)
		return errno;
	rc = query(mapsfd, m->raddr,
		   PMQ_FILE_BACKED | PMQ_SHARED | PMQ_READABLE | PMQ_WRITABLE, &q);
	if (rc == ENOENT && !query(mapsfd, m->raddr, 0, &q)) {
		/* private or anonymous: the whole mapping is, for keys to come */
		m->neg_start = q.vma_start;
		m->neg_end = q.vma_end;
	}
	close(mapsfd);
	if (rc)
		return rc;   /* private or anonymous memory; ENOTTY: kernel < 6.11 */
	if (q.vma_end < m->raddr + m->rlen)
		return ERANGE;   /* the range spans several mappings */
	ofd = owner_fd(pid, q.inode, q.dev_major, q.dev_minor);
	if (ofd < 0)
		return EBADF;    /* the owner keeps no descriptor of the file */
	pthread_mutex_lock(&dev->lock);   /* the progress thread closes pidfds */
	if (dev->peers[m->slot].pidfd >= 0)
		fd = (int)syscall(SYS_pidfd_getfd, dev->peers[m->slot].pidfd, ofd, 0);
	rc = fd < 0 ? (errno ? errno : ESRCH) : 0;
	pthread_mutex_unlock(&dev->lock);
	if (rc)
		return rc;
	/* the descriptor may have been closed and its number reused since
	 * the walk: what we hold must be the file under the range, sealed */
	if (fstat(fd, &st) || st.st_ino != q.inode || major(st.st_dev) != q.dev_major ||
	    minor(st.st_dev) != q.dev_minor || !sealed(fd))
		rc = EPERM;
	off = q.vma_offset + (m->raddr - q.vma_start);
	if (!rc && off + m->rlen > (uint64_t)st.st_size)
		rc = EFAULT;
	if (rc) {
		close(fd);
		return rc;
	}
	pgoff = off & ~((uint64_t)pg - 1);
	m->maplen = (size_t)(off - pgoff + m->rlen);
	p = mmap(NULL, m->maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)pgoff);
	close(fd);
	if (p == MAP_FAILED)
		return errno;
	m->map = p;
	m->base = (uint8_t *)p + (off - pgoff);
	return 0;
}

/* Drop the idle entries whose registration has gone (deregistered,
 * re-registered, or reclaimed with its dead owner's keys). */
static void sweep_locked(struct hca_dev *dev)
{
	for (int s = 0; s < MAP_SETS; s++)
		for (int i = 0; i < MAP_WAYS; i++) {
			struct map_ent *m = &map_tab[s][i];

			if (m->seg && !m->refs &&
			    (m->seg != dev->seg ||
			     !ent_current(m, &dev->seg->mrs[m->key & (HCA_MAX_MR - 1)])))
				ent_drop(m);
		}
}

void hca_mem_map_sweep(struct hca_dev *dev)
{
	if (!atomic_load_explicit(&map_live, memory_order_relaxed) ||
	    pthread_mutex_trylock(&map_lock))
		return;
	sweep_locked(dev);
	pthread_mutex_unlock(&map_lock);
}

static bool neg_has(const struct hca_seg *seg, uint16_t slot, uint32_t gen,
		    uint64_t addr, uint64_t len)
{
	for (int i = 0; i < NEG_MAX; i++) {
		const struct neg_ent *g = &neg_tab[i];

		if (g->seg == seg && g->slot == slot && g->gen == gen &&
		    addr >= g->start && addr + len <= g->end)
			return true;
	}
	return false;
}

static void neg_add(const struct map_ent *m)
{
	neg_tab[neg_next++ % NEG_MAX] = (struct neg_ent){
		.seg = m->seg, .gen = m->gen, .slot = m->slot,
		.start = m->neg_start, .end = m->neg_end };
}

/* The entry for remote range r of key, with a reference taken; NULL if
 * the route does not apply. Called with map_lock held; drops it while it
 * maps, so the entry is inserted only then. */
static struct map_ent *ent_get(struct hca_dev *dev, uint16_t slot, uint32_t gen,
			       uint32_t key)
{
	const struct hca_mr_ent *e = &dev->seg->mrs[key & (HCA_MAX_MR - 1)];
	struct map_ent *m = ent_find(dev->seg, slot, gen, key), n, *v;
	int rc;

	if (m && ent_current(m, e)) {
		if (m->none)
			return NULL;
		m->refs++;
		m->used = ++map_tick;
		return m;
	}
	if (m && !m->refs)
		ent_drop(m);   /* stale: its registration has gone */
	memset(&n, 0, sizeof(n));
	n.seg = dev->seg;
	n.key = key;
	n.gen = gen;
	n.slot = slot;
	n.raddr = e->addr;
	n.rlen = e->length;
	if (e->owner != slot || e->owner_gen != gen || !n.rlen ||
	    atomic_load_explicit(&e->key, memory_order_acquire) != key)
		return NULL;
	/* mappings to give back: a miss is the time, once in 64 of them.
	 * At every miss, a process holding a few mappings for good (libsib's
	 * receive buffers) swept the whole table at each registration Open
	 * MPI makes for a large message: 5-8 us more per 64-256 KiB message */
	if (map_live && !(++map_miss_sweeps % 64))
		sweep_locked(dev);
	if (neg_has(n.seg, slot, gen, n.raddr, n.rlen)) {
		rc = ENOENT;
	} else {
		pthread_mutex_unlock(&map_lock);
		rc = ent_map(dev, &n);
		pthread_mutex_lock(&map_lock);
		if (rc && n.neg_end)
			neg_add(&n);
	}
	if (rc) {
		n.none = true;
		atomic_fetch_add(&st_refused, 1);
	} else {
		atomic_fetch_add(&st_maps, 1);
		map_live++;
	}
	m = ent_find(dev->seg, slot, gen, key);
	if (m && !m->refs)
		ent_drop(m);
	v = m && m->refs ? NULL : ent_victim(key);
	if (!v) {   /* every way busy (threads copying): CMA this time */
		if (n.map) {
			munmap(n.map, n.maplen);
			map_live--;
		}
		return NULL;
	}
	if (v->seg)
		ent_drop(v);
	*v = n;   /* a refusal is cached too: no system call per message */
	if (v->none)
		return NULL;
	v->refs = 1;
	v->used = ++map_tick;
	return v;
}

/* No lock: a reference is only taken under map_lock, and an entry is
 * dropped only under it with no reference left, so once the count reaches
 * 0 nobody uses the mapping (release: our copy is done before). */
static void ent_put(struct map_ent **held, int n)
{
	for (int i = 0; i < n; i++)
		atomic_fetch_sub_explicit(&held[i]->refs, 1, memory_order_release);
}

int hca_mem_map_move(struct hca_dev *dev, uint16_t slot, uint32_t gen, bool write,
		     const struct iovec *local, int nlocal,
		     const struct iovec *remote, const uint32_t *keys, int nremote)
{
	struct map_ent *held[MAP_MAX_REMOTE];
	struct iovec tr[MAP_MAX_REMOTE];
	bool ok = true;
	int n = 0;

	if (nremote > MAP_MAX_REMOTE || nremote < 1 || !keys || route_off())
		return ENOENT;
	pthread_mutex_lock(&map_lock);
	if (++map_moves % MAP_SWEEP_EVERY == 0)
		sweep_locked(dev);
	for (; ok && n < nremote; n++) {
		uint64_t a = (uint64_t)(uintptr_t)remote[n].iov_base;
		struct map_ent *m = ent_get(dev, slot, gen, keys[n]);

		if (!m) {
			ok = false;
			break;
		}
		held[n] = m;
		/* the responder checked the range against the key: a range
		 * outside what we mapped is refused here all the same */
		ok = a >= m->raddr && a - m->raddr <= m->rlen &&
		     remote[n].iov_len <= m->rlen - (a - m->raddr);
		tr[n].iov_base = m->base + (a - m->raddr);
		tr[n].iov_len = remote[n].iov_len;
	}
	pthread_mutex_unlock(&map_lock);
	if (!ok) {
		ent_put(held, n);
		return ENOENT;
	}
	if (write)
		hca_iov_copy(tr, nremote, local, nlocal);
	else
		hca_iov_copy(local, nlocal, tr, nremote);
	ent_put(held, n);
	atomic_fetch_add_explicit(&st_moves, 1, memory_order_relaxed);
	return 0;
}

void hca_mem_map_stats(struct hca_mem_map_stats *s)
{
	s->moves = atomic_load(&st_moves);
	s->maps = atomic_load(&st_maps);
	s->unmaps = atomic_load(&st_unmaps);
	s->refused = atomic_load(&st_refused);
}
