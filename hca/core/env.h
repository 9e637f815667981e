/*
 * A number from the environment, read once per process and clamped:
 * the tunables of the data path (SOFTIB_INLINE_MAX, SOFTIB_CQE_LINES)
 * are read on hot paths, so the value is cached in an atomic int (-1:
 * not read yet; every reader computes the same value, so a race between
 * two first readers is harmless).
 */
#ifndef HCA_ENV_H
#define HCA_ENV_H

#include <stdatomic.h>
#include <stdlib.h>

static inline int hca_env_once(_Atomic int *cache, const char *name, long def,
			       long lo, long hi)
{
	int v = atomic_load_explicit(cache, memory_order_relaxed);

	if (v < 0) {
		const char *s = getenv(name);
		long l = s ? strtol(s, NULL, 0) : def;

		v = (int)(l < lo ? lo : l > hi ? hi : l);
		atomic_store_explicit(cache, v, memory_order_relaxed);
	}
	return v;
}

#endif
