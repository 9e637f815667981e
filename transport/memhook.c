/*
 * memhook.c: patches the entry points of libc's memory-releasing calls
 * with a jump to hooks that report the range to listeners, then make the
 * system call themselves (see memhook.h for the contract).
 *
 * The patch is 13 bytes: "movabs $hook, %r11; jmp *%r11". r11 is a
 * scratch register of the x86_64 System V ABI that a call may clobber (the
 * syscall instruction itself clobbers it), so it is free at any function
 * entry. The patched libc code is never run again: each hook does what
 * the libc function did (glibc 2.36's wrappers: checks, the syscall, errno;
 * brk also stores the new break in libc's __curbrk, which sbrk reads).
 * If another library (UCX, Open MPI) patched a function first, our hook
 * calls the jump target it found there instead of the system call, so both
 * listeners see the event.
 */
#include "memhook.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GLIBC__)
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MEMHOOK_SUPPORTED 1
#endif

/* Built with ThreadSanitizer (GCC says so with a macro, clang with a
 * feature test). */
#if defined(__SANITIZE_THREAD__)
#define MEMHOOK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MEMHOOK_TSAN 1
#endif
#endif

/* Listeners: a fixed table under a reader-writer lock. Reports take it
 * for reading (nested reports from a listener read-lock again: glibc's
 * default rwlock prefers readers, so that cannot wait on a writer);
 * add/remove take it for writing, so remove returns only when no report
 * runs the listener. n_listeners lets a report skip the lock when nobody
 * listens (relaxed: a listener added concurrently with an unmap cannot
 * care about that unmap). */
struct listener {
	sib_memhook_fn fn;
	void *arg;
};
static struct listener listeners[SIB_MEMHOOK_MAX_LISTENERS];
static pthread_rwlock_t listeners_lock = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int n_listeners;
static atomic_uint_least64_t counts[SIB_MEM_EVENT_MAX];

/* Odd while a takeover is being repaired (sib_memhook_verify), one more
 * when the repair is done and every listener has forgotten everything. */
static atomic_uint takeover_seq;

static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int install_status = ENOTSUP;
static char describe_buf[256] = "memory hooks not installed";

static void report(uintptr_t start, size_t len, enum sib_mem_event ev)
{
	if (len == 0)
		return;
	atomic_fetch_add_explicit(&counts[ev], 1, memory_order_relaxed);
	if (atomic_load_explicit(&n_listeners, memory_order_relaxed) == 0)
		return;
	int saved = errno; /* a listener's failures are not the caller's */

	pthread_rwlock_rdlock(&listeners_lock);
	for (int i = 0; i < SIB_MEMHOOK_MAX_LISTENERS; i++) {
		if (listeners[i].fn)
			listeners[i].fn(listeners[i].arg, start, len, ev);
	}
	pthread_rwlock_unlock(&listeners_lock);
	errno = saved;
}

uint64_t sib_memhook_count(enum sib_mem_event ev)
{
	if ((unsigned)ev >= SIB_MEM_EVENT_MAX)
		return 0;
	return atomic_load_explicit(&counts[ev], memory_order_relaxed);
}

unsigned sib_memhook_seq(void)
{
	return atomic_load_explicit(&takeover_seq, memory_order_acquire);
}

const char *sib_memhook_describe(void)
{
	return describe_buf;
}

#ifdef MEMHOOK_SUPPORTED

#define PATCH_LEN 13

enum { P_MUNMAP, P_MMAP, P_MREMAP, P_MADVISE, P_BRK, P_SHMDT, P_MAX };

struct patch {
	const char *sym;
	void *hook;
	uint8_t *target;        /* libc's entry point */
	uint8_t len;            /* bytes of our jump: 5 (rel32) or 13 (r11) */
	uint8_t saved[PATCH_LEN];
	/* Another library's hook found there (at install, or written over
	 * ours later: sib_memhook_verify), or NULL. */
	void *_Atomic chain;
	uint8_t code[PATCH_LEN]; /* our jump, as written */
	bool applied;
};

static void **libc_curbrk;  /* libc's __curbrk: what sbrk believes */

/* A system call without libc (whose wrappers are what we replaced):
 * returns the kernel's value, -errno on failure. */
static inline __attribute__((always_inline)) long
sys6(long nr, long a1, long a2, long a3, long a4, long a5, long a6)
{
	long ret;
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10),
			   "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

static bool sys_failed(long r)
{
	return (unsigned long)r > -4096UL;
}

static long sys_result(long r)
{
	if (sys_failed(r)) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

static struct patch patches[P_MAX];

/* How deep this thread is inside our hook of each function. A nested
 * call of the same function does not chain: a patcher that copied our
 * jump into a trampoline of its own would otherwise bring us back to
 * itself forever. initial-exec: no allocation on first use in a thread
 * (the hooks run inside malloc). */
static __thread unsigned char hook_depth[P_MAX]
	__attribute__((tls_model("initial-exec")));

static void *chain_enter(int i)
{
	return hook_depth[i]++ ? NULL :
		atomic_load_explicit(&patches[i].chain, memory_order_acquire);
}

static void chain_leave(int i)
{
	hook_depth[i]--;
}

static int hook_munmap(void *addr, size_t len)
{
	report((uintptr_t)addr, len, SIB_MEM_UNMAP);
	void *chain = chain_enter(P_MUNMAP);
	int r = chain ? ((int (*)(void *, size_t))chain)(addr, len)
		      : (int)sys_result(sys6(SYS_munmap, (long)addr,
					     (long)len, 0, 0, 0, 0));

	chain_leave(P_MUNMAP);
	return r;
}

static void *hook_mmap(void *addr, size_t len, int prot, int flags, int fd,
		       off_t off)
{
	/* MAP_FIXED (not MAP_FIXED_NOREPLACE, which fails instead) removes
	 * whatever was mapped in the range first. */
	if (flags & MAP_FIXED)
		report((uintptr_t)addr, len, SIB_MEM_MAP_FIXED);
	void *chain = chain_enter(P_MMAP), *res;

	if (chain) {
		res = ((void *(*)(void *, size_t, int, int, int, off_t))chain)(
			addr, len, prot, flags, fd, off);
	} else if (off & (sysconf(_SC_PAGESIZE) - 1)) { /* as glibc checks */
		errno = EINVAL;
		res = MAP_FAILED;
	} else {
		long r = sys6(SYS_mmap, (long)addr, (long)len, prot, flags,
			      fd, off);

		if (sys_failed(r))
			errno = (int)-r;
		res = sys_failed(r) ? MAP_FAILED : (void *)r;
	}
	chain_leave(P_MMAP);
	return res;
}

static void *hook_mremap(void *old, size_t old_len, size_t new_len,
			 int flags, ...)
{
	void *new_addr = NULL;

	if (flags & (MREMAP_FIXED | 4 /* MREMAP_DONTUNMAP */)) {
		va_list ap;

		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
	}
	/* The old pages may move (or, shrinking, go): whatever registration
	 * covers them no longer describes the range. */
	report((uintptr_t)old, old_len, SIB_MEM_REMAP);
	if (flags & MREMAP_FIXED)
		report((uintptr_t)new_addr, new_len, SIB_MEM_REMAP);
	void *chain = chain_enter(P_MREMAP), *res;

	if (chain) {
		res = ((void *(*)(void *, size_t, size_t, int, ...))chain)(
			old, old_len, new_len, flags, new_addr);
	} else {
		long r = sys6(SYS_mremap, (long)old, (long)old_len,
			      (long)new_len, flags, (long)new_addr, 0);

		if (sys_failed(r))
			errno = (int)-r;
		res = sys_failed(r) ? MAP_FAILED : (void *)r;
	}
	chain_leave(P_MREMAP);
	return res;
}

static bool advice_drops_pages(int advice)
{
	switch (advice) {
	case MADV_DONTNEED:
	case MADV_REMOVE:
#ifdef MADV_FREE
	case MADV_FREE:
#endif
	case 24: /* MADV_DONTNEED_LOCKED (Linux 5.18) */
		return true;
	default:
		return false;
	}
}

#ifdef MEMHOOK_TSAN
/*
 * TSan builds only. glibc's thread exit drops the unused part of the dying
 * thread's stack (madvise DONTNEED, just below its own stack pointer)
 * after ThreadSanitizer has retired the thread: any instrumented code
 * there (a function entry, a lock taken through an interceptor) faults in
 * the runtime. That call is recognised by its range, without
 * instrumentation, and goes straight to the kernel, unreported and
 * unchained: a registration on the stack of a thread that is exiting is
 * the one event the TSan tree misses (the unit tests never make one; the
 * plain and ASan trees report it).
 */
#if defined(__clang__)
#define MEMHOOK_UNINSTRUMENTED __attribute__((disable_sanitizer_instrumentation))
#else
#define MEMHOOK_UNINSTRUMENTED __attribute__((no_sanitize("thread")))
#endif

static int hook_madvise_seen(void *addr, size_t len, int advice);

MEMHOOK_UNINSTRUMENTED
static int hook_madvise(void *addr, size_t len, int advice)
{
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	uintptr_t end = (uintptr_t)addr + len;

	if (end <= sp && sp - end < (1u << 20)) {
		long r = sys6(SYS_madvise, (long)addr, (long)len, advice, 0, 0, 0);

		if ((unsigned long)r > -4096UL) {
			errno = (int)-r;
			return -1;
		}
		return 0;
	}
	return hook_madvise_seen(addr, len, advice);
}
#else
#define hook_madvise_seen hook_madvise
#endif

static int hook_madvise_seen(void *addr, size_t len, int advice)
{
	if (advice_drops_pages(advice))
		report((uintptr_t)addr, len, SIB_MEM_DONTNEED);
	void *chain = chain_enter(P_MADVISE);
	int r = chain ? ((int (*)(void *, size_t, int))chain)(addr, len,
							       advice)
		      : (int)sys_result(sys6(SYS_madvise, (long)addr,
					     (long)len, advice, 0, 0, 0));

	chain_leave(P_MADVISE);
	return r;
}

static int hook_brk(void *addr)
{
	if (addr) {
		uintptr_t cur = (uintptr_t)sys6(SYS_brk, 0, 0, 0, 0, 0, 0);

		if ((uintptr_t)addr < cur)
			report((uintptr_t)addr, cur - (uintptr_t)addr,
			       SIB_MEM_BRK);
	}
	void *chain = chain_enter(P_BRK);
	int res = 0;

	if (chain) {
		res = ((int (*)(void *))chain)(addr);
	} else {
		/* The kernel answers the break it has: the new one, or the
		 * old one when it refuses. glibc keeps it in __curbrk for
		 * sbrk. */
		uintptr_t r = (uintptr_t)sys6(SYS_brk, (long)addr, 0, 0, 0, 0,
					      0);

		*libc_curbrk = (void *)r;
		if (r < (uintptr_t)addr) {
			errno = ENOMEM;
			res = -1;
		}
	}
	chain_leave(P_BRK);
	return res;
}

/* The length of the System V segment attached at addr: the mappings of
 * /proc/self/maps that start there and continue it with the same inode.
 * Read with plain read(2) into the stack: no allocation in a hook. */
static size_t shm_length(uintptr_t addr)
{
	char buf[4096];
	size_t have = 0, len = 0;
	uintptr_t next = addr;
	unsigned long inode = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);

		if (n <= 0)
			break;
		have += n;
		buf[have] = 0;
		char *line = buf, *nl;

		while ((nl = strchr(line, '\n'))) {
			unsigned long lo, hi, ino;

			*nl = 0;
			if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &lo, &hi,
				   &ino) == 3 && lo == next &&
			    (len == 0 || ino == inode)) {
				inode = ino;
				len += hi - lo;
				next = hi;
			} else if (len) {
				close(fd);
				return len;
			}
			line = nl + 1;
		}
		have = buf + have - line;
		memmove(buf, line, have);
	}
	close(fd);
	return len;
}

static int hook_shmdt(const void *addr)
{
	size_t len = shm_length((uintptr_t)addr);

	/* Unknown length (no /proc): report up to the end of the address
	 * space rather than nothing. */
	report((uintptr_t)addr, len ? len : (size_t)-(uintptr_t)addr - 1,
	       SIB_MEM_SHMDT);
	void *chain = chain_enter(P_SHMDT);
	int r = chain ? ((int (*)(const void *))chain)(addr)
		      : (int)sys_result(sys6(SYS_shmdt, (long)addr, 0, 0, 0,
					     0, 0));

	chain_leave(P_SHMDT);
	return r;
}

/* Decodes a jump another patcher left at an entry point: the 13-byte r11
 * form, "jmp *0(%rip)" followed by the address, or a jmp rel32. */
static void *existing_jump(const uint8_t *p)
{
	uint64_t a;
	int32_t rel;

	if (p[0] == 0x49 && p[1] == 0xbb && p[10] == 0x41 && p[11] == 0xff &&
	    p[12] == 0xe3) {
		memcpy(&a, p + 2, 8);
		return (void *)a;
	}
	if (p[0] == 0xff && p[1] == 0x25 && !p[2] && !p[3] && !p[4] && !p[5]) {
		memcpy(&a, p + 6, 8);
		return (void *)a;
	}
	if (p[0] == 0xe9) {
		memcpy(&rel, p + 1, 4);
		return (void *)(p + 5 + rel);
	}
	return NULL;
}

#ifdef MEMHOOK_TSAN
/* The runtime's annotation entry points: atomics of this thread pass
 * unobserved between the two. */
void AnnotateIgnoreSyncBegin(const char *file, int line);
void AnnotateIgnoreSyncEnd(const char *file, int line);
#define TSAN_IGNORE_BEGIN() AnnotateIgnoreSyncBegin(__FILE__, __LINE__)
#define TSAN_IGNORE_END() AnnotateIgnoreSyncEnd(__FILE__, __LINE__)
#else
#define TSAN_IGNORE_BEGIN() ((void)0)
#define TSAN_IGNORE_END() ((void)0)
#endif

/*
 * Code bytes are no object threads share, and ThreadSanitizer keeps no
 * shadow for libc's text (an instrumented store there faults): copied
 * byte by byte out of its sight, the head word's atomic store with the
 * runtime told to ignore it.
 */
__attribute__((no_sanitize("thread")))
static void code_copy(uint8_t *to, const uint8_t *from, size_t n)
{
	volatile uint8_t *t = to;

	for (size_t i = 0; i < n; i++)
		t[i] = from[i];
}

static int write_code(uint8_t *at, const uint8_t *bytes, size_t n)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)at & ~(uintptr_t)(page - 1);
	size_t span = (uintptr_t)at + (n > 8 ? n : 8) - lo;
	uint64_t head;

	if (mprotect((void *)lo, span, PROT_READ | PROT_WRITE | PROT_EXEC))
		return errno;
	/* The tail first, then the first 8 bytes in one store: a thread
	 * entering the function meanwhile sees the old entry or the whole
	 * jump (a thread already past the entry is the limit documented).
	 * A jump shorter than 8 bytes keeps the bytes after it as they are. */
	memcpy(&head, at, 8);
	memcpy(&head, bytes, n < 8 ? n : 8);
	if (n > 8)
		code_copy(at + 8, bytes + 8, n - 8);
	/* code bytes, not an object: viewed as an atomic word for this store */
	TSAN_IGNORE_BEGIN();
	atomic_store_explicit((_Atomic uint64_t *)(void *)at, head, memory_order_seq_cst);
	TSAN_IGNORE_END();
	mprotect((void *)lo, span, PROT_READ | PROT_EXEC);
	__builtin___clear_cache((char *)at, (char *)at + n);
	return 0;
}

/*
 * The trampolines: one page within a rel32 jump (+-2 GiB) of libc's text,
 * a 16-byte slot per entry point holding "movabs $hook, %r11; jmp *%r11".
 * The entry point itself then gets a 5-byte "jmp rel32" to its slot, which
 * replaces exactly glibc's first instruction in munmap, madvise, brk and
 * shmdt ("mov $nr, %eax"): a thread sleeping in the wrapper's system call
 * when the patch is written returns to bytes the patch did not touch. The
 * 13-byte form written at the entry itself covered that return address,
 * and such a thread went on into the middle of our movabs (seen: Open
 * MPI's event thread, in munmap from malloc's trim, crashed while the
 * BTL's libsib patched). NULL if no page could be placed near enough:
 * then the 13-byte form goes at the entry, as before.
 */
#define TRAMP_SLOT 16
static uint8_t *tramp;

static bool rel32_reach(const uint8_t *from, const uint8_t *to)
{
	int64_t d = (int64_t)((intptr_t)to - (intptr_t)(from + 5));

	return d >= INT32_MIN && d <= INT32_MAX;
}

static uint8_t *tramp_map(void)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t base = (uintptr_t)patches[0].target & ~(uintptr_t)(page - 1);

	/* 1 MiB steps out from libc, below then above, up to 1 GiB away */
	for (uintptr_t step = 1u << 20; step <= (1u << 30); step += 1u << 20)
		for (int dir = -1; dir <= 1; dir += 2) {
			uintptr_t hint = dir < 0 ? base - step : base + step;
			uint8_t *p = mmap((void *)hint, (size_t)page,
					  PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS |
						  MAP_FIXED_NOREPLACE, -1, 0);
			bool ok = p != MAP_FAILED;

			for (int i = 0; ok && i < P_MAX; i++)
				ok = rel32_reach(patches[i].target, p + i * TRAMP_SLOT) &&
				     rel32_reach(p + i * TRAMP_SLOT, patches[i].target);
			if (ok)
				return p;
			if (p != MAP_FAILED)
				munmap(p, (size_t)page);
		}
	return NULL;
}

/* The r11 form: movabs $to, %r11; jmp *%r11 (13 bytes). */
static void r11_jump(uint8_t *code, const void *to)
{
	uint64_t dest = (uint64_t)(uintptr_t)to;

	code[0] = 0x49; /* movabs $imm64, %r11 */
	code[1] = 0xbb;
	memcpy(code + 2, &dest, 8);
	code[10] = 0x41; /* jmp *%r11 */
	code[11] = 0xff;
	code[12] = 0xe3;
}

/* Fills the slots and makes the page executable; false: no trampolines. */
static bool tramp_setup(void)
{
	long page = sysconf(_SC_PAGESIZE);

	tramp = tramp_map();
	if (!tramp)
		return false;
	for (int i = 0; i < P_MAX; i++)
		r11_jump(tramp + i * TRAMP_SLOT, patches[i].hook);
	if (mprotect(tramp, (size_t)page, PROT_READ | PROT_EXEC)) {
		munmap(tramp, (size_t)page);
		tramp = NULL;
		return false;
	}
	return true;
}

static int resolve(void *libc, struct patch *p)
{
	Dl_info info;
	const ElfW(Sym) *sym = NULL;

	p->target = dlsym(libc, p->sym);
	if (!p->target)
		return ENOENT;
	/* The patch must not run past the end of a short function. */
	if (dladdr1(p->target, &info, (void **)&sym, RTLD_DL_SYMENT) &&
	    sym && sym->st_size && sym->st_size < PATCH_LEN)
		return ENOTSUP;
	memcpy(p->saved, p->target, PATCH_LEN);
	atomic_store(&p->chain, existing_jump(p->target));
	return 0;
}

static int apply(struct patch *p)
{
	uint8_t code[PATCH_LEN];

	if (tramp) { /* jmp rel32 to the slot */
		const uint8_t *slot = tramp + (p - patches) * TRAMP_SLOT;
		int32_t rel = (int32_t)((intptr_t)slot - (intptr_t)(p->target + 5));

		code[0] = 0xe9;
		memcpy(code + 1, &rel, 4);
		p->len = 5;
	} else {
		r11_jump(code, p->hook);
		p->len = PATCH_LEN;
	}
	memcpy(p->code, code, p->len);
	int rc = write_code(p->target, code, p->len);

	p->applied = rc == 0;
	return rc;
}

static void install(void)
{
	static const char *const names[P_MAX] = {
		"munmap", "mmap", "mremap", "madvise", "brk", "shmdt"};
	void *const hooks[P_MAX] = {
		(void *)hook_munmap, (void *)hook_mmap, (void *)hook_mremap,
		(void *)hook_madvise, (void *)hook_brk, (void *)hook_shmdt};
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	int rc = 0, i;
	Dl_info self;

	if (!libc) {
		install_status = ENOTSUP;
		snprintf(describe_buf, sizeof(describe_buf),
			 "memory hooks off: libc.so.6 not found");
		return;
	}
	libc_curbrk = dlsym(libc, "__curbrk");
	const char *bad = libc_curbrk ? NULL : "__curbrk";

	for (i = 0; i < P_MAX && !bad; i++) {
		patches[i].sym = names[i];
		patches[i].hook = hooks[i];
		rc = resolve(libc, &patches[i]);
		if (rc)
			bad = names[i];
	}
	if (bad) {
		install_status = ENOTSUP;
		snprintf(describe_buf, sizeof(describe_buf),
			 "memory hooks off: libc symbol %s unusable (%s)", bad,
			 rc == ENOTSUP ? "too short to patch" : "not found");
		dlclose(libc);
		return;
	}
	/* Our code must outlive any dlclose of the library it is in: libc
	 * will jump into it for the rest of the process. */
	if (dladdr((void *)hook_munmap, &self) && self.dli_fname)
		dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
	tramp_setup();
	for (i = 0; i < P_MAX; i++) {
		rc = apply(&patches[i]);
		if (rc)
			break;
	}
	if (rc) {
		while (--i >= 0)
			write_code(patches[i].target, patches[i].saved,
				   patches[i].len);
		install_status = rc;
		snprintf(describe_buf, sizeof(describe_buf),
			 "memory hooks off: cannot write libc's code (%s)",
			 strerror(rc));
		return;
	}
	int chained = 0;

	for (i = 0; i < P_MAX; i++)
		chained += atomic_load(&patches[i].chain) != NULL;
	install_status = 0;
	snprintf(describe_buf, sizeof(describe_buf),
		 "libc entry points patched (munmap mmap mremap madvise brk "
		 "shmdt)%s", chained ? ", chained to an earlier patch" : "");
	/* libc stays open: the patches live in it. */
}

static pthread_mutex_t verify_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool hooks_lost;

int sib_memhook_verify(void)
{
	int repatched = 0, lost = 0;

	if (sib_memhook_install() || atomic_load(&hooks_lost))
		return -1;
	for (int i = 0; i < P_MAX; i++) { /* the common case: all ours */
		if (memcmp(patches[i].target, patches[i].code, patches[i].len))
			goto check;
	}
	return 0;
check:
	pthread_mutex_lock(&verify_lock);
	for (int i = 0; i < P_MAX; i++) {
		struct patch *p = &patches[i];

		if (!memcmp(p->target, p->code, p->len))
			continue;
		if (!(atomic_load(&takeover_seq) & 1)) /* odd: at work */
			atomic_fetch_add_explicit(&takeover_seq, 1,
						  memory_order_acq_rel);
		/* Written over since: by another patcher (chain to its
		 * hook), or back to libc's original bytes (chain to what
		 * was there before us). Anything else we cannot follow. */
		void *other = existing_jump(p->target);

		if (!other && memcmp(p->target, p->saved, p->len)) {
			lost++;
			continue;
		}
		if (!other)
			other = existing_jump(p->saved);
		atomic_store_explicit(&p->chain, other, memory_order_release);
		if (apply(p))
			lost++;
		else
			repatched++;
	}
	if (lost) {
		atomic_store(&hooks_lost, true);
		snprintf(describe_buf, sizeof(describe_buf),
			 "memory hooks lost: libc's code was changed under "
			 "them");
	}
	if (!repatched && !lost) { /* another thread put them back */
		pthread_mutex_unlock(&verify_lock);
		return 0;
	}
	/* Events went elsewhere for a while: every listener forgets all;
	 * then the sequence turns even again. */
	report(0, SIZE_MAX, SIB_MEM_UNMAP);
	atomic_fetch_add_explicit(&takeover_seq, 1, memory_order_acq_rel);
	pthread_mutex_unlock(&verify_lock);
	return lost ? -1 : repatched;
}

#else /* !MEMHOOK_SUPPORTED */

int sib_memhook_verify(void)
{
	return -1;
}

static void install(void)
{
	(void)report; /* the hooks that call it are x86_64 only */
	install_status = ENOTSUP;
	snprintf(describe_buf, sizeof(describe_buf),
		 "memory hooks off: only x86_64 with glibc is supported");
}

#endif

int sib_memhook_install(void)
{
	pthread_once(&install_once, install);
	return install_status;
}

int sib_memhook_add(sib_memhook_fn fn, void *arg, int *id)
{
	int rc = sib_memhook_install();

	if (rc)
		return rc;
	if (!fn || !id)
		return EINVAL;
	rc = EAGAIN;
	pthread_rwlock_wrlock(&listeners_lock);
	for (int i = 0; i < SIB_MEMHOOK_MAX_LISTENERS; i++) {
		if (!listeners[i].fn) {
			listeners[i].fn = fn;
			listeners[i].arg = arg;
			*id = i;
			atomic_fetch_add_explicit(&n_listeners, 1,
						  memory_order_relaxed);
			rc = 0;
			break;
		}
	}
	pthread_rwlock_unlock(&listeners_lock);
	return rc;
}

void sib_memhook_remove(int id)
{
	if (id < 0 || id >= SIB_MEMHOOK_MAX_LISTENERS)
		return;
	pthread_rwlock_wrlock(&listeners_lock);
	if (listeners[id].fn) {
		listeners[id].fn = NULL;
		listeners[id].arg = NULL;
		atomic_fetch_sub_explicit(&n_listeners, 1,
					  memory_order_relaxed);
	}
	pthread_rwlock_unlock(&listeners_lock);
}
