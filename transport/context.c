/*
 * context.c: a process's libsib context: its parameters (from the params
 * struct, else one named environment key each, else a default; every value
 * is checked), the hwloc topology loaded once, and the host key that tells
 * processes of one host from those of another.
 */
#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sib_int.h"

/*
 * Defaults: see docs/transport.md for the measurements behind them. The
 * largest class holds a power-of-two payload and the headers in front of
 * it (libsib's, and those of a layer above: the MPI component's and
 * ob1's), so that a 32 KiB message goes eager, not by the rendezvous.
 */
#define CLASS_SLACK 512
static const struct sib_class_param default_classes[] = {
	{ 256, 1024 }, { 2048, 256 }, { 8192, 128 }, { 32768 + CLASS_SLACK, 64 },
};
#define DEFAULT_NCLASSES 4
/* ... and for a process whose peers are all on other hosts */
static const struct sib_class_param remote_class = { 131072 + CLASS_SLACK, 16 };
#define DEFAULT_SHORT_MAX 160

static const char *const status_names[] = {
	[0] = "success",
	[1] = "operation in progress",
	[-SIB_ERR_INVALID_PARAM + 1] = "invalid parameter",
	[-SIB_ERR_NO_MEMORY + 1] = "out of memory",
	[-SIB_ERR_TRUNCATED + 1] = "message truncated (longer than the receive buffer)",
	[-SIB_ERR_PEER_FAILED + 1] = "peer failed (process dead or unreachable)",
	[-SIB_ERR_CANCELED + 1] = "request canceled",
	[-SIB_ERR_NO_DEVICE + 1] = "no RDMA device",
	[-SIB_ERR_IO + 1] = "device (verbs) call failed",
	[-SIB_ERR_MSG_TOO_LONG + 1] = "message longer than the largest protocol carries",
	[-SIB_ERR_NO_RESOURCE + 1] = "out of device or runtime resources",
	[-SIB_ERR_UNSUPPORTED + 1] = "operation not supported",
	[-SIB_ERR_BUSY + 1] = "busy (operations in flight)",
	[-SIB_ERR_TIMEOUT + 1] = "timed out",
	[-SIB_ERR_NO_MESSAGE + 1] = "no matching message",
	[-SIB_ERR_BOOTSTRAP + 1] = "bootstrap (PMIx) failed",
	[-SIB_ERR_REMOTE_ACCESS + 1] = "remote access error (outside an exposed region, or an unmapped key)",
};

SIB_API const char *sib_status_string(sib_status_t st)
{
	if (st == SIB_OK || st == SIB_INPROGRESS)
		return status_names[st];
	if (st == SIB_DONE)
		return "done already (no request)";
	if (st < 0 && st > SIB_STATUS_LAST)
		return status_names[-st + 1];
	return "unknown status";
}

uint64_t sib_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t sib_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void sib_log(const char *fmt, ...)
{
	va_list ap;

	if (getenv("SIB_QUIET"))
		return;
	va_start(ap, fmt);
	fprintf(stderr, "libsib[%d]: ", (int)getpid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* An unsigned environment key within [lo, hi]: 0 and *v set, 0 if absent
 * (*v untouched), -1 if present and bad. */
static int env_u32(const char *key, uint32_t lo, uint32_t hi, uint32_t *v)
{
	const char *s = getenv(key);
	char *end;
	unsigned long x;

	if (!s || !*s)
		return 0;
	errno = 0;
	x = strtoul(s, &end, 0);
	if (errno || *end || x < lo || x > hi) {
		sib_log("%s=%s: not a number in [%u, %u]", key, s, lo, hi);
		return -1;
	}
	*v = (uint32_t)x;
	return 0;
}

static int classes_check(const struct sib_class_param *c, uint32_t n)
{
	if (n < 1 || n > SIB_MAX_CLASSES)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		if (c[i].size < 64 || c[i].size > (1u << 20) ||
		    c[i].depth < 16 || c[i].depth > 16384)
			return -1;
		if (i && c[i].size <= c[i - 1].size)
			return -1;
	}
	return 0;
}

static int env_classes(sib_context_t *c)
{
	char key[32];
	uint32_t n = c->nclasses;

	if (env_u32("SIB_SRQ_CLASSES", 1, SIB_MAX_CLASSES, &n))
		return -1;
	for (uint32_t i = c->nclasses; i < n; i++)   /* new classes: grow x4 */
		c->classes[i] = (struct sib_class_param){
			c->classes[i - 1].size * 4, 64 };
	c->nclasses = n;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "SIB_SRQ%u_SIZE", i);
		if (env_u32(key, 64, 1u << 20, &c->classes[i].size))
			return -1;
		snprintf(key, sizeof(key), "SIB_SRQ%u_DEPTH", i);
		if (env_u32(key, 16, 16384, &c->classes[i].depth))
			return -1;
	}
	return 0;
}

/* Processes in one network namespace of one machine are one host: the key
 * mixes the hostname with the namespace's inode. */
static uint64_t host_key(void)
{
	char name[256] = "";
	struct stat st;
	uint64_t h = 1469598103934665603ull;

	gethostname(name, sizeof(name) - 1);
	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	if (!stat("/proc/self/ns/net", &st))
		h ^= (uint64_t)st.st_ino * 0x9e3779b97f4a7c15ull;
	return h ? h : 1;
}

static void topo_load(sib_context_t *c)
{
	hwloc_topology_t t;
	hwloc_bitmap_t set;
	hwloc_obj_t pkg;

	c->package = -1;
	if (hwloc_topology_init(&t))
		return;
	if (hwloc_topology_load(t)) {
		hwloc_topology_destroy(t);
		return;
	}
	c->topo = t;
	set = hwloc_bitmap_alloc();
	if (set && !hwloc_get_cpubind(t, set, HWLOC_CPUBIND_PROCESS)) {
		pkg = hwloc_get_next_obj_covering_cpuset_by_type(
			t, set, HWLOC_OBJ_PACKAGE, NULL);
		/* a process spread over several packages has none of its own */
		if (pkg && !hwloc_get_next_obj_covering_cpuset_by_type(
				   t, set, HWLOC_OBJ_PACKAGE, pkg))
			c->package = (int)pkg->logical_index;
	}
	hwloc_bitmap_free(set);
}

static int params_resolve(sib_context_t *c, const struct sib_context_params *p)
{
	const char *s;
	uint32_t v;

	s = p && p->job_key ? p->job_key : getenv("SIB_JOB_KEY");
	snprintf(c->job_key, sizeof(c->job_key), "%s", s && *s ? s : "default");
	for (char *q = c->job_key; *q; q++)   /* it becomes a file name */
		if (*q == '/' || *q == ' ')
			*q = '_';
	s = p && p->device ? p->device : getenv("SIB_DEVICE");
	snprintf(c->device, sizeof(c->device), "%s", s ? s : "");
	c->nclasses = DEFAULT_NCLASSES;
	memcpy(c->classes, default_classes, sizeof(default_classes));
	if (p && p->remote_peers_only)
		c->classes[c->nclasses++] = remote_class;
	if (p && p->nclasses) {
		if (classes_check(p->classes, p->nclasses))
			return -1;
		c->nclasses = p->nclasses;
		memcpy(c->classes, p->classes, sizeof(c->classes[0]) * p->nclasses);
	} else if (env_classes(c) || classes_check(c->classes, c->nclasses)) {
		sib_log("SIB_SRQ* keys: sizes must increase, 64 B..1 MiB, depths 16..16384");
		return -1;
	}
	v = DEFAULT_SHORT_MAX;
	if (p && p->short_max) {
		if (p->short_max > SIB_SHORT_CAP)
			return -1;
		v = p->short_max < 0 ? 0 : (uint32_t)p->short_max;
	} else if (env_u32("SIB_SHORT_MAX", 0, SIB_SHORT_CAP, &v)) {
		return -1;
	}
	c->short_max = v;
	/* 1: every send signalled (as before 2026-11-25), for A/B runs */
	c->signal_every = SIB_SIGNAL_EVERY;
	c->spin_us = SIB_SPIN_US;
	if (env_u32("SIB_SPIN_US", 0, 10000000, &c->spin_us))
		return -1;
	if (env_u32("SIB_SIGNAL_EVERY", 1, 64, &c->signal_every))
		return -1;
	/* the largest batch SEND (batch.c); 0: every message alone */
	c->batch_max = SIB_BATCH_MAX;
	if (env_u32("SIB_BATCH_MAX", 0, 1u << 20, &c->batch_max))
		return -1;
	c->batch_max_remote = SIB_BATCH_MAX_REMOTE;
	if (env_u32("SIB_BATCH_MAX_REMOTE", 0, 1u << 20, &c->batch_max_remote))
		return -1;
	if (p && (p->thread_mode != SIB_THREAD_SINGLE &&
		  p->thread_mode != SIB_THREAD_MULTI))
		return -1;
	c->thread_mode = p ? p->thread_mode : SIB_THREAD_SINGLE;
	c->progress_mode = SIB_PROGRESS_POLL;
	if (p && p->progress_mode_set) {
		if (p->progress_mode != SIB_PROGRESS_POLL &&
		    p->progress_mode != SIB_PROGRESS_BLOCKING)
			return -1;
		c->progress_mode = p->progress_mode;
	} else if ((s = getenv("SIB_PROGRESS")) && *s) {
		if (!strcmp(s, "blocking"))
			c->progress_mode = SIB_PROGRESS_BLOCKING;
		else if (strcmp(s, "poll")) {
			sib_log("SIB_PROGRESS=%s: 'poll' or 'blocking'", s);
			return -1;
		}
	}
	return 0;
}

SIB_API sib_status_t sib_context_create(const struct sib_context_params *p,
					sib_context_t **out)
{
	sib_context_t *c;

	if (!out)
		return SIB_ERR_INVALID_PARAM;
	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return SIB_ERR_NO_MEMORY;
	if (params_resolve(c, p)) {
		free(c);
		return SIB_ERR_INVALID_PARAM;
	}
	c->host_key = host_key();
	c->job_hash = 1469598103934665603ull;
	for (const char *q = c->job_key; *q; q++)
		c->job_hash = (c->job_hash ^ (uint8_t)*q) * 1099511628211ull;
	topo_load(c);
	*out = c;
	return SIB_OK;
}

SIB_API sib_status_t sib_context_destroy(sib_context_t *c)
{
	if (!c)
		return SIB_ERR_INVALID_PARAM;
	if (c->nworkers)
		return SIB_ERR_BUSY;
	if (c->topo)
		hwloc_topology_destroy((hwloc_topology_t)c->topo);
	free(c);
	return SIB_OK;
}
