/*
 * rcache_dlopen: the registration cache loaded as a plug-in, the way the
 * MPI component loads libsib. This program links neither the cache nor
 * the hooks; it allocates a large block with malloc before loading them,
 * dlopens build/test/rcache_plugin.so (transport/rcache.c + memhook.c),
 * caches a registration of the block, frees the block with free() (glibc
 * unmaps it from inside libc, through no PLT and no symbol of ours), and
 * checks that the cache dropped the entry; then malloc gives the same
 * address back and the cache registers it anew. Last, it dlcloses the
 * plug-in and unmaps again: libc's patched entry points still jump into
 * the plug-in's code, which must therefore have stayed loaded.
 *
 *   rcache_dlopen PLUGIN.so
 */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rcache.h"

#define LEN (8u << 20)

static struct {
	struct sib_rcache *(*create)(struct ibv_pd *,
				     const struct sib_rcache_params *);
	int (*destroy)(struct sib_rcache *);
	struct sib_rcache_entry *(*get)(struct sib_rcache *, void *, size_t,
					int, struct ibv_mr **);
	void (*put)(struct sib_rcache *, struct sib_rcache_entry *);
	uint64_t (*serial)(const struct sib_rcache_entry *);
	void (*stats)(struct sib_rcache *, struct sib_rcache_stats *);
	const char *(*describe)(const struct sib_rcache *);
} F;

static int fails;

#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond)) {                                           \
			printf("FAIL %s: ", #cond);                      \
			printf(__VA_ARGS__);                             \
			putchar('\n');                                   \
			fails++;                                         \
		}                                                        \
	} while (0)

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (!p) {
		fprintf(stderr, "rcache_dlopen: %s: %s\n", name, dlerror());
		exit(1);
	}
	return p;
}

static uint64_t use(struct sib_rcache *c, void *p)
{
	struct ibv_mr *mr;
	struct sib_rcache_entry *e = F.get(c, p, LEN, IBV_ACCESS_LOCAL_WRITE,
					   &mr);

	if (!e) {
		fprintf(stderr, "rcache_dlopen: get: %s\n", strerror(errno));
		exit(1);
	}
	uint64_t s = F.serial(e);

	F.put(c, e);
	return s;
}

static inline __attribute__((unused)) void *map_block(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

int main(int argc, char **argv)
{
	struct sib_rcache_stats st;

	if (argc != 2) {
		fprintf(stderr, "usage: rcache_dlopen PLUGIN.so\n");
		return 2;
	}
#if defined(__SANITIZE_ADDRESS__) || defined(SOFTIB_TSAN)
	/* ASan's malloc/free bypass libc (raw system calls, quarantine):
	 * the program's own block is then an mmap/munmap of its own. */
	printf("ASan build: the block is mmap'ed, freed with munmap\n");
#define malloc(n) map_block(n)
#define free(p) munmap((p), LEN)
#endif
	mallopt(M_MMAP_THRESHOLD, 1 << 20); /* large blocks: mmap, munmap */
	char *buf = malloc(LEN);

	if (!buf)
		return 1;
	memset(buf, 1, LEN);
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stderr, "rcache_dlopen: %s\n", dlerror());
		return 1;
	}
	F.create = sym(h, "sib_rcache_create");
	F.destroy = sym(h, "sib_rcache_destroy");
	F.get = sym(h, "sib_rcache_get");
	F.put = sym(h, "sib_rcache_put");
	F.serial = sym(h, "sib_rcache_entry_serial");
	F.stats = sym(h, "sib_rcache_stats");
	F.describe = sym(h, "sib_rcache_describe");

	struct ibv_device **devs = ibv_get_device_list(NULL);
	struct ibv_context *ctx = devs && devs[0] ? ibv_open_device(devs[0])
						  : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;

	if (!pd) {
		fprintf(stderr, "rcache_dlopen: no device or PD\n");
		return 1;
	}
	struct sib_rcache *c = F.create(pd, NULL);

	if (!c)
		return 1;
	printf("plug-in rcache: %s\n", F.describe(c));
	uint64_t s1 = use(c, buf);

	CHECK(use(c, buf) == s1, "a second use registered again");
	uintptr_t old = (uintptr_t)buf;

	free(buf); /* glibc: munmap from inside libc */
	F.stats(c, &st);
	CHECK(st.invalidations == 1 && st.entries == 0,
	      "free() of the block: invalidations %llu, entries %llu",
	      (unsigned long long)st.invalidations,
	      (unsigned long long)st.entries);
	buf = malloc(LEN);
#ifndef __SANITIZE_ADDRESS__
	CHECK((uintptr_t)buf == old, "malloc did not give the same address");
#else
	(void)old;
#endif
	memset(buf, 2, LEN);
	CHECK(use(c, buf) != s1, "the old registration served the new block");
	free(buf);
	CHECK(F.destroy(c) == 0, "destroy");
	F.stats = NULL;
	dlclose(h);
	/* The plug-in is closed: unmapping must still work. */
	void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED && munmap(p, LEN) == 0, "mmap/munmap after "
	      "dlclose");
	buf = malloc(LEN);
	free(buf);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	if (fails)
		return 1;
	printf("PASSED\n");
	return 0;
}
