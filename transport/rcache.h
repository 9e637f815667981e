/*
 * rcache: a per-protection-domain cache of memory registrations of user
 * buffers, so that sending from (or exposing) the same buffer again does
 * not register it again. Public verbs API only (ibv_reg_mr/ibv_dereg_mr).
 *
 * Correctness on a real HCA: a registration pins the physical pages that
 * were under the range when it was made; if the range is unmapped and
 * something else is mapped at the same address, the old registration still
 * reads (and writes) the old pages. So the cache listens to the memory
 * hooks (memhook.h) and drops every entry that overlaps a range before it
 * is unmapped. Without hooks (another architecture, SIB_RCACHE=off) it
 * does not cache: every get registers and the last put deregisters.
 *
 * Entries cover page-aligned ranges; the ranges in the cache never overlap
 * each other (a miss that overlaps entries registers their union and
 * replaces them; adjacent entries are joined while the union stays under
 * merge_max). An entry in use (got and not yet put) is never deregistered:
 * if it is invalidated, evicted or replaced, it leaves the cache and is
 * deregistered at its last put.
 *
 * Thread safe: any thread may get, put, or unmap memory.
 */
#ifndef SIB_RCACHE_H
#define SIB_RCACHE_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

struct sib_rcache;
struct sib_rcache_entry;

/* Limits and switches; sib_rcache_params_init gives the defaults and then
 * what the environment says (keys below). */
struct sib_rcache_params {
	int enable;          /* SIB_RCACHE=on|off (default on) */
	size_t max_entries;  /* SIB_RCACHE_MAX_ENTRIES (default 4096) */
	size_t max_bytes;    /* SIB_RCACHE_MAX_BYTES, k/m/g suffix (4g) */
	size_t merge_max;    /* SIB_RCACHE_MERGE_MAX: join adjacent entries
				while the union is at most this (8m; 0: never) */
};

#define SIB_RCACHE_DEFAULT_MAX_ENTRIES 4096
#define SIB_RCACHE_DEFAULT_MAX_BYTES   (4ull << 30)
#define SIB_RCACHE_DEFAULT_MERGE_MAX   (8ull << 20)

/* Defaults, then the environment. 0, or EINVAL when a key's value is not
 * valid (a message on stderr names it; *p then holds the defaults). */
int sib_rcache_params_init(struct sib_rcache_params *p);

struct sib_rcache_stats {
	uint64_t hits;          /* gets answered by a cached entry */
	uint64_t misses;        /* gets that registered */
	uint64_t evictions;     /* entries dropped for the size bounds */
	uint64_t invalidations; /* entries dropped for an unmap report */
	uint64_t merges;        /* entries replaced by a wider one */
	uint64_t uncached;      /* registrations made outside the cache
				   (caching off, or larger than max_bytes) */
	uint64_t retries;       /* misses started again: the range was
				   unmapped while being registered */
	uint64_t miss_ns;       /* total time of the misses (get to return) */
	uint64_t miss_ns_max;
	uint64_t entries;       /* entries in the cache now */
	uint64_t bytes;         /* bytes they cover */
	uint64_t in_use;        /* entries got and not put (in or out) */
};

/* A cache on pd. params NULL: sib_rcache_params_init's. NULL and errno
 * (EINVAL, ENOMEM) on failure. Caching is off (each get registers) when
 * params say so or when the memory hooks cannot be installed: see
 * sib_rcache_describe. */
struct sib_rcache *sib_rcache_create(struct ibv_pd *pd,
				     const struct sib_rcache_params *params);

/* Frees every entry. EBUSY (and nothing done) while an entry is in use. */
int sib_rcache_destroy(struct sib_rcache *c);

/* A registration covering [addr, addr + len) with at least the access
 * flags asked (IBV_ACCESS_*), in use until sib_rcache_put; *mr is its
 * memory region (lkey, rkey). NULL and errno: EINVAL (len 0), or what
 * ibv_reg_mr failed with. */
struct sib_rcache_entry *sib_rcache_get(struct sib_rcache *c, void *addr,
					size_t len, int access,
					struct ibv_mr **mr);

/* Ends one use of e. */
void sib_rcache_put(struct sib_rcache *c, struct sib_rcache_entry *e);

/* The entry's region, and the serial number of the registration (one per
 * ibv_reg_mr the cache made: a new number means a new registration). */
struct ibv_mr *sib_rcache_entry_mr(const struct sib_rcache_entry *e);
uint64_t sib_rcache_entry_serial(const struct sib_rcache_entry *e);

/* Drops the entries overlapping [addr, addr + len), as an unmap report
 * does (for a runtime that learns of a release some other way). */
void sib_rcache_invalidate(struct sib_rcache *c, const void *addr,
			   size_t len);

void sib_rcache_stats(struct sib_rcache *c, struct sib_rcache_stats *s);

/* "caching, <how memory events are caught>" or "not caching: <why>". */
const char *sib_rcache_describe(const struct sib_rcache *c);

#endif
