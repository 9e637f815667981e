/*
 * rcache.c: the registration cache (contract in rcache.h).
 *
 * Structure: the entries in the cache sit in a skip list ordered by start
 * address (their ranges never overlap, so the entry that may contain an
 * address is the last one starting at or below it: O(log n) expected), and
 * those not in use also on an LRU list, from which the size bounds evict.
 *
 * Locking: one mutex per cache guards the list, the LRU, the counts and
 * every entry's refs/in_cache. It is never held across ibv_reg_mr,
 * ibv_dereg_mr, malloc or free: each of those may unmap memory, and the
 * memory hook then calls sib_rcache_invalidate in this same thread. So the
 * code under the lock only links and unlinks; entries to deregister are
 * collected on a local list and released after the unlock.
 *
 * A miss registers outside the lock. An unmap report that arrives
 * meanwhile and overlaps the range being registered marks it stale
 * (c->pending), and the get starts again: what was registered may describe
 * pages that are gone.
 */
#include "rcache.h"
#include "memhook.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SKIP_LEVELS 20
#define GET_RETRIES 8

struct sib_rcache_entry {
	uintptr_t start, end;   /* page-aligned, registered range */
	int access;
	struct ibv_mr *mr;
	uint64_t serial;
	unsigned refs;          /* uses not yet put (cache lock) */
	bool in_cache;          /* in the skip list (cache lock) */
	bool uncached;          /* registered for one use, never cached */
	struct sib_rcache_entry *lru_prev, *lru_next; /* in_cache && !refs */
	struct sib_rcache_entry *dead_next;           /* to deregister */
	int levels;
	struct sib_rcache_entry *next[]; /* skip list links, levels of them */
};

/* A registration being made outside the lock (see the file comment). */
struct pending {
	uintptr_t start, end;
	bool stale;
	struct pending *next;
};

struct sib_rcache {
	struct ibv_pd *pd;
	struct sib_rcache_params params;
	atomic_bool caching;            /* false for good once hooks are lost */
	int hook_id;
	pthread_mutex_t lock;
	struct sib_rcache_entry *head;  /* skip list sentinel, all levels */
	int levels;                     /* levels in use */
	uint64_t rng;                   /* level choice (xorshift) */
	struct sib_rcache_entry lru;    /* sentinel: next newest, prev oldest */
	struct pending *pending;
	uint64_t serial;
	struct sib_rcache_stats st;
	char describe[200];
};

static size_t page_size(void)
{
	static size_t ps;

	if (!ps)
		ps = (size_t)sysconf(_SC_PAGESIZE);
	return ps;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

/* ---- parameters ---- */

static int parse_size(const char *key, const char *s, size_t min, size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || errno)
		goto bad;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end || v < min || s[0] == '-')
		goto bad;
	*out = v;
	return 0;
bad:
	fprintf(stderr, "libsib: %s='%s': expected a number >= %zu with an "
			"optional k, m or g suffix\n", key, s, min);
	return EINVAL;
}

static int parse_env_size(const char *key, size_t min, size_t *out)
{
	const char *s = getenv(key);

	return s && *s ? parse_size(key, s, min, out) : 0;
}

int sib_rcache_params_init(struct sib_rcache_params *p)
{
	struct sib_rcache_params d = {
		.enable = 1,
		.max_entries = SIB_RCACHE_DEFAULT_MAX_ENTRIES,
		.max_bytes = SIB_RCACHE_DEFAULT_MAX_BYTES,
		.merge_max = SIB_RCACHE_DEFAULT_MERGE_MAX,
	};
	struct sib_rcache_params e = d;
	const char *s = getenv("SIB_RCACHE");
	int rc = 0;

	*p = d;
	if (s && *s) {
		if (!strcmp(s, "on") || !strcmp(s, "1") || !strcmp(s, "yes")) {
			e.enable = 1;
		} else if (!strcmp(s, "off") || !strcmp(s, "0") ||
			   !strcmp(s, "no")) {
			e.enable = 0;
		} else {
			fprintf(stderr, "libsib: SIB_RCACHE='%s': expected on "
					"or off\n", s);
			return EINVAL;
		}
	}
	rc = parse_env_size("SIB_RCACHE_MAX_ENTRIES", 1, &e.max_entries);
	if (!rc)
		rc = parse_env_size("SIB_RCACHE_MAX_BYTES", page_size(),
				    &e.max_bytes);
	if (!rc)
		rc = parse_env_size("SIB_RCACHE_MERGE_MAX", 0, &e.merge_max);
	if (!rc)
		*p = e;
	return rc;
}

/* ---- skip list (cache lock held) ---- */

static int random_level(struct sib_rcache *c)
{
	uint64_t x = c->rng;
	int lvl = 1;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	c->rng = x;
	/* One level more with probability 1/4. */
	while (lvl < SKIP_LEVELS && (x & 3) == 0) {
		lvl++;
		x >>= 2;
	}
	return lvl;
}

/* preds[l]: the last entry at level l starting below key (or the head). */
static void find_preds(struct sib_rcache *c, uintptr_t key,
		       struct sib_rcache_entry **preds)
{
	struct sib_rcache_entry *x = c->head;

	for (int l = SKIP_LEVELS - 1; l >= 0; l--) {
		while (x->next[l] && x->next[l]->start < key)
			x = x->next[l];
		preds[l] = x;
	}
}

/* The first entry that overlaps [start, end), or NULL. */
static struct sib_rcache_entry *first_overlap(struct sib_rcache *c,
					      uintptr_t start, uintptr_t end)
{
	struct sib_rcache_entry *preds[SKIP_LEVELS], *x;

	find_preds(c, start + 1, preds); /* preds[0]: last start <= start */
	x = preds[0];
	if (x == c->head || x->end <= start)
		x = x->next[0];
	return x && x->start < end ? x : NULL;
}

static void list_insert(struct sib_rcache *c, struct sib_rcache_entry *e)
{
	struct sib_rcache_entry *preds[SKIP_LEVELS];

	find_preds(c, e->start, preds);
	for (int l = 0; l < e->levels; l++) {
		e->next[l] = preds[l]->next[l];
		preds[l]->next[l] = e;
	}
	e->in_cache = true;
	c->st.entries++;
	c->st.bytes += e->end - e->start;
}

static void lru_unlink(struct sib_rcache_entry *e)
{
	if (e->lru_next) {
		e->lru_next->lru_prev = e->lru_prev;
		e->lru_prev->lru_next = e->lru_next;
		e->lru_next = e->lru_prev = NULL;
	}
}

static void lru_push(struct sib_rcache *c, struct sib_rcache_entry *e)
{
	e->lru_next = c->lru.lru_next;
	e->lru_prev = &c->lru;
	c->lru.lru_next->lru_prev = e;
	c->lru.lru_next = e;
}

/* Takes e out of the cache; if nobody uses it, onto *dead. */
static void list_remove(struct sib_rcache *c, struct sib_rcache_entry *e,
			struct sib_rcache_entry **dead)
{
	struct sib_rcache_entry *preds[SKIP_LEVELS];

	find_preds(c, e->start, preds);
	for (int l = 0; l < e->levels; l++) {
		if (preds[l]->next[l] == e)
			preds[l]->next[l] = e->next[l];
	}
	e->in_cache = false;
	c->st.entries--;
	c->st.bytes -= e->end - e->start;
	lru_unlink(e);
	if (e->refs == 0) {
		e->dead_next = *dead;
		*dead = e;
	}
}

/* Evicts the least recently used idle entries while over a bound. */
static void enforce_bounds(struct sib_rcache *c, struct sib_rcache_entry **dead)
{
	while ((c->st.entries > c->params.max_entries ||
		c->st.bytes > c->params.max_bytes) &&
	       c->lru.lru_prev != &c->lru) {
		list_remove(c, c->lru.lru_prev, dead);
		c->st.evictions++;
	}
}

/* Deregisters and frees a list of entries (cache lock NOT held). */
static void release(struct sib_rcache_entry *dead)
{
	while (dead) {
		struct sib_rcache_entry *next = dead->dead_next;

		if (dead->mr)
			ibv_dereg_mr(dead->mr);
		free(dead);
		dead = next;
	}
}

/* ---- invalidation ---- */

void sib_rcache_invalidate(struct sib_rcache *c, const void *addr,
			   size_t len)
{
	uintptr_t start = (uintptr_t)addr, end = start + len;
	struct sib_rcache_entry *dead = NULL, *e;

	if (!c || len == 0)
		return;
	if (end < start)
		end = UINTPTR_MAX;
	pthread_mutex_lock(&c->lock);
	for (struct pending *p = c->pending; p; p = p->next) {
		if (p->start < end && start < p->end)
			p->stale = true;
	}
	while ((e = first_overlap(c, start, end))) {
		list_remove(c, e, &dead);
		c->st.invalidations++;
	}
	pthread_mutex_unlock(&c->lock);
	release(dead);
}

static void on_unmap(void *arg, uintptr_t start, size_t len,
		     enum sib_mem_event ev)
{
	sib_rcache_invalidate(arg, (const void *)start, len);
}

/* ---- get / put ---- */

static struct sib_rcache_entry *entry_new(struct sib_rcache *c)
{
	int levels;

	pthread_mutex_lock(&c->lock);
	levels = random_level(c);
	pthread_mutex_unlock(&c->lock);
	struct sib_rcache_entry *e =
		calloc(1, sizeof(*e) + levels * sizeof(e->next[0]));

	if (e)
		e->levels = levels;
	return e;
}

/* Registers [start, end) for one use, outside the cache. */
static struct sib_rcache_entry *get_uncached(struct sib_rcache *c,
					     uintptr_t start, uintptr_t end,
					     int access, struct ibv_mr **mr)
{
	struct sib_rcache_entry *e = entry_new(c);

	if (!e)
		return NULL;
	e->mr = ibv_reg_mr(c->pd, (void *)start, end - start, access);
	if (!e->mr) {
		int err = errno;

		free(e);
		errno = err;
		return NULL;
	}
	e->start = start;
	e->end = end;
	e->access = access;
	e->refs = 1;
	e->uncached = true;
	pthread_mutex_lock(&c->lock);
	e->serial = ++c->serial;
	c->st.uncached++;
	c->st.in_use++;
	pthread_mutex_unlock(&c->lock);
	*mr = e->mr;
	return e;
}

/* Under the lock: the range and access a miss on [*start, *end) registers:
 * its union with every entry it overlaps, and with adjacent entries while
 * the union stays within merge_max. */
static void miss_range(struct sib_rcache *c, uintptr_t *start, uintptr_t *end,
		       int *access)
{
	uintptr_t s = *start, e = *end;
	struct sib_rcache_entry *x;

	for (x = first_overlap(c, s, e); x && x->start < *end;
	     x = x->next[0]) {
		s = x->start < s ? x->start : s;
		e = x->end > e ? x->end : e;
		*access |= x->access;
	}
	if (c->params.merge_max) {
		x = s > 0 ? first_overlap(c, s - 1, s) : NULL;
		if (x && e - x->start <= c->params.merge_max) {
			s = x->start;
			*access |= x->access;
		}
		x = first_overlap(c, e, e + 1);
		if (x && x->end - s <= c->params.merge_max) {
			e = x->end;
			*access |= x->access;
		}
	}
	*start = s;
	*end = e;
}

static struct sib_rcache_entry *get_once(struct sib_rcache *c, void *addr,
					 size_t len, int access,
					 struct ibv_mr **mr)
{
	uint64_t t0 = now_ns();
	uintptr_t ps = page_size();
	uintptr_t start = (uintptr_t)addr & ~(ps - 1);
	uintptr_t end = ((uintptr_t)addr + len + ps - 1) & ~(ps - 1);
	struct sib_rcache_entry *e, *dead = NULL;

	if (!c || !mr || len == 0 || end <= start) {
		errno = EINVAL;
		return NULL;
	}
	if (!atomic_load_explicit(&c->caching, memory_order_relaxed) ||
	    end - start > c->params.max_bytes)
		return get_uncached(c, start, end, access, mr);

	for (int attempt = 0; attempt < GET_RETRIES; attempt++) {
		uintptr_t rs = start, re = end;
		int racc = access;
		struct pending pend;

		pthread_mutex_lock(&c->lock);
		e = first_overlap(c, start, end);
		if (e && e->start <= start && e->end >= end &&
		    (e->access & access) == access) {
			if (e->refs++ == 0) {
				lru_unlink(e);
				c->st.in_use++;
			}
			c->st.hits++;
			pthread_mutex_unlock(&c->lock);
			*mr = e->mr;
			return e;
		}
		miss_range(c, &rs, &re, &racc);
		if (re - rs > c->params.max_bytes) { /* merged: too wide */
			rs = start;
			re = end;
			racc = access;
		}
		pend = (struct pending){.start = rs, .end = re,
					.next = c->pending};
		c->pending = &pend;
		pthread_mutex_unlock(&c->lock);

		e = entry_new(c);
		struct ibv_mr *m = e ? ibv_reg_mr(c->pd, (void *)rs, re - rs,
						  racc) : NULL;
		int err = errno;

		pthread_mutex_lock(&c->lock);
		for (struct pending **pp = &c->pending; *pp; pp = &(*pp)->next) {
			if (*pp == &pend) {
				*pp = pend.next;
				break;
			}
		}
		if (!m || pend.stale) {
			c->st.retries += m != NULL;
			pthread_mutex_unlock(&c->lock);
			if (m)
				ibv_dereg_mr(m);
			free(e);
			if (!m && (rs != start || re != end)) {
				/* The wider range may hold a hole now:
				 * fall back to exactly what was asked. */
				return get_uncached(c, start, end, access, mr);
			}
			if (!m) {
				errno = err;
				return NULL;
			}
			continue; /* unmapped meanwhile: start again */
		}
		e->start = rs;
		e->end = re;
		e->access = racc;
		e->mr = m;
		e->refs = 1;
		e->serial = ++c->serial;
		/* Whatever overlaps now (found above, or put there by another
		 * thread meanwhile) is covered by or conflicts with e: out. */
		struct sib_rcache_entry *x;

		while ((x = first_overlap(c, rs, re))) {
			list_remove(c, x, &dead);
			c->st.merges++;
		}
		list_insert(c, e);
		c->st.in_use++;
		c->st.misses++;
		enforce_bounds(c, &dead);
		uint64_t dt = now_ns() - t0;

		c->st.miss_ns += dt;
		if (dt > c->st.miss_ns_max)
			c->st.miss_ns_max = dt;
		pthread_mutex_unlock(&c->lock);
		release(dead);
		*mr = m;
		return e;
	}
	/* Unmapped under us again and again: one registration of our own. */
	return get_uncached(c, start, end, access, mr);
}

/*
 * An entry is trusted only if our hooks were in place the whole time:
 * another library may patch libc's entry points over ours (memhook.h), and
 * the unmaps made since went to it alone. So after finding (or making) the
 * entry, the hooks are checked; if they had been taken over, every
 * listener has just dropped everything, this entry included, and the get
 * starts again. Lost for good: caching stops.
 */
struct sib_rcache_entry *sib_rcache_get(struct sib_rcache *c, void *addr,
					size_t len, int access,
					struct ibv_mr **mr)
{
	for (int attempt = 0;; attempt++) {
		bool cached = c && atomic_load_explicit(&c->caching,
							memory_order_relaxed);
		unsigned seq = sib_memhook_seq();
		struct sib_rcache_entry *e = get_once(c, addr, len, access, mr);

		if (!e || !cached || e->uncached)
			return e;
		int v = sib_memhook_verify();

		if (v == 0 && !(seq & 1) && sib_memhook_seq() == seq)
			return e;
		if (v < 0 && atomic_exchange(&c->caching, false)) {
			sib_rcache_invalidate(c, NULL, SIZE_MAX);
			snprintf(c->describe, sizeof(c->describe),
				 "not caching: %s", sib_memhook_describe());
		}
		sib_rcache_put(c, e);
		if (attempt == 3) { /* taken over again and again */
			uintptr_t ps = page_size();

			return get_uncached(
				c, (uintptr_t)addr & ~(ps - 1),
				((uintptr_t)addr + len + ps - 1) & ~(ps - 1),
				access, mr);
		}
	}
}

void sib_rcache_put(struct sib_rcache *c, struct sib_rcache_entry *e)
{
	struct sib_rcache_entry *dead = NULL;

	if (!c || !e)
		return;
	pthread_mutex_lock(&c->lock);
	if (e->refs == 0) { /* a put too many: ignore rather than corrupt */
		pthread_mutex_unlock(&c->lock);
		return;
	}
	if (--e->refs == 0) {
		c->st.in_use--;
		if (e->in_cache) {
			lru_push(c, e);
			enforce_bounds(c, &dead);
		} else {
			e->dead_next = dead;
			dead = e;
		}
	}
	pthread_mutex_unlock(&c->lock);
	release(dead);
}

struct ibv_mr *sib_rcache_entry_mr(const struct sib_rcache_entry *e)
{
	return e ? e->mr : NULL;
}

uint64_t sib_rcache_entry_serial(const struct sib_rcache_entry *e)
{
	return e ? e->serial : 0;
}

/* ---- life cycle ---- */

struct sib_rcache *sib_rcache_create(struct ibv_pd *pd,
				     const struct sib_rcache_params *params)
{
	struct sib_rcache_params p;
	struct sib_rcache *c;
	int rc;

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	if (params) {
		p = *params;
	} else if ((rc = sib_rcache_params_init(&p))) {
		errno = rc;
		return NULL;
	}
	if (p.max_entries < 1 || p.max_bytes < page_size()) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->head = calloc(1, sizeof(*c->head) +
				    SKIP_LEVELS * sizeof(c->head->next[0]));
	if (!c->head) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->head->levels = SKIP_LEVELS;
	c->pd = pd;
	c->params = p;
	c->hook_id = -1;
	c->rng = (uintptr_t)c ^ 0x9e3779b97f4a7c15ull;
	c->lru.lru_next = c->lru.lru_prev = &c->lru;
	pthread_mutex_init(&c->lock, NULL);
	if (!p.enable) {
		snprintf(c->describe, sizeof(c->describe),
			 "not caching: SIB_RCACHE=off");
	} else if ((rc = sib_memhook_add(on_unmap, c, &c->hook_id))) {
		snprintf(c->describe, sizeof(c->describe),
			 "not caching: %s", sib_memhook_describe());
	} else {
		atomic_store(&c->caching, true);
		snprintf(c->describe, sizeof(c->describe), "caching, %s",
			 sib_memhook_describe());
	}
	return c;
}

int sib_rcache_destroy(struct sib_rcache *c)
{
	struct sib_rcache_entry *dead = NULL;

	if (!c)
		return 0;
	pthread_mutex_lock(&c->lock);
	if (c->st.in_use) {
		pthread_mutex_unlock(&c->lock);
		return EBUSY;
	}
	pthread_mutex_unlock(&c->lock);
	if (c->hook_id >= 0)
		sib_memhook_remove(c->hook_id);
	pthread_mutex_lock(&c->lock);
	while (c->head->next[0])
		list_remove(c, c->head->next[0], &dead);
	pthread_mutex_unlock(&c->lock);
	release(dead);
	pthread_mutex_destroy(&c->lock);
	free(c->head);
	free(c);
	return 0;
}

void sib_rcache_stats(struct sib_rcache *c, struct sib_rcache_stats *s)
{
	pthread_mutex_lock(&c->lock);
	*s = c->st;
	pthread_mutex_unlock(&c->lock);
}

const char *sib_rcache_describe(const struct sib_rcache *c)
{
	return c->describe;
}
