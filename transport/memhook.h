/*
 * memhook: tells the runtime when memory is about to leave the process, so
 * that a cached registration of it is dropped before the address range can
 * hold anything else (transport/rcache.c is the listener).
 *
 * Mechanism (x86_64, glibc): the entry points of libc's munmap, mmap,
 * mremap, madvise, brk and shmdt are overwritten with an absolute jump to
 * a hook of ours that reports the range, then issues the system call itself
 * and returns what libc would have. Because the code of libc is changed,
 * not a symbol lookup, calls made inside libc (free() of a large block
 * calls __munmap, malloc's trim calls __brk, both without a PLT) are seen
 * too, and so are calls of programs that never link the runtime (the MPI
 * component dlopens it). docs/registration-cache.md describes the details
 * and what this cannot see.
 *
 * Events are reported BEFORE the system call: once the call returns, a
 * listener holds nothing under the range. A report may be wider than what
 * the kernel ends up removing (a call that fails is still reported): that
 * costs a registration, never correctness.
 *
 * Thread safety: any thread may unmap at any time; listeners are called in
 * the unmapping thread, possibly nested (a listener that frees memory may
 * cause another report), so a listener must not hold its own lock while it
 * calls anything that may unmap (ibv_dereg_mr, free).
 */
#ifndef SIB_MEMHOOK_H
#define SIB_MEMHOOK_H

#include <stddef.h>
#include <stdint.h>

enum sib_mem_event {
	SIB_MEM_UNMAP,     /* munmap */
	SIB_MEM_MAP_FIXED, /* mmap MAP_FIXED replaces what was there */
	SIB_MEM_REMAP,     /* mremap: the old range (and a MREMAP_FIXED target) */
	SIB_MEM_DONTNEED,  /* madvise DONTNEED / FREE / REMOVE: new pages */
	SIB_MEM_BRK,       /* brk / sbrk shrink: the released top of the heap */
	SIB_MEM_SHMDT,     /* shmdt: the detached segment */
	SIB_MEM_EVENT_MAX
};

/* Called with the range [start, start + len) about to be unmapped. */
typedef void (*sib_memhook_fn)(void *arg, uintptr_t start, size_t len,
			       enum sib_mem_event ev);

/* Installs the hooks once per process (later calls return the first
 * call's result). 0 when installed; ENOTSUP on another architecture or C
 * library, or when an entry point is too short to patch; EACCES when the
 * system refuses to make libc's code writable. Without hooks a cache must
 * not cache (rcache.c then registers per use). */
int sib_memhook_install(void);

/* Adds a listener; *id identifies it for sib_memhook_remove. 0, EAGAIN
 * when all SIB_MEMHOOK_MAX_LISTENERS slots are taken, or the error of
 * sib_memhook_install. */
#define SIB_MEMHOOK_MAX_LISTENERS 32
int sib_memhook_add(sib_memhook_fn fn, void *arg, int *id);

/* Removes a listener: once this returns, it is not running and will not be
 * called again. */
void sib_memhook_remove(int id);

/* Checks that libc's entry points still jump to our hooks. Another
 * library may patch them after us (UCX's ucm, Open MPI's patcher): then
 * events go to its hooks only. Where it wrote a jump we can follow, our
 * patch goes back on top and chains to it; either way every listener is
 * told to forget everything (a report of the whole address space), since
 * events were missed meanwhile. 0: all in place; > 0: that many patched
 * again; -1: no hooks (never installed, or changed into code we cannot
 * follow: a cache must stop caching). Cheap when all is in place (six
 * 13-byte compares): rcache.c calls it on every get. */
int sib_memhook_verify(void);

/* A sequence number, odd while sib_memhook_verify repairs a takeover and
 * its flush is under way. A lookup whose result should be trusted reads it
 * before, and after a verify that returned 0 checks that it is even and
 * unchanged: otherwise the lookup may predate the flush. */
unsigned sib_memhook_seq(void);

/* One line saying how events are caught, or why they are not. */
const char *sib_memhook_describe(void);

/* Reports so far by kind (for tests and counters). */
uint64_t sib_memhook_count(enum sib_mem_event ev);

#endif
