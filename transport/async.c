/*
 * The connection thread: a worker's connections complete while its
 * application is away.
 *
 * A connection to another host is a handshake over the worker's UD QP
 * (host.c): a request, an answer, and only then do the messages queued for
 * that host go out. Both ends must be running libsib for it. An
 * application that queued a send and then blocked outside libsib (Open MPI
 * does, in PMIx, inside MPI_Comm_accept) would leave its receiver waiting
 * for ever, and a peer's request would go unanswered while it is away.
 *
 * So each worker has a thread that looks every SIB_ASYNC_MS. When the
 * application has not left a libsib call since the thread's last look, the
 * thread takes the worker: it answers handshake requests, completes its
 * own handshakes, sends the open batches of small messages (batch.c),
 * posts what the connections held back and asks again where an answer is
 * late (sib_hosts_cm). It never runs a callback and
 * never completes a request: completions, receives and failures stay with
 * the application's own progress, on the application's thread, which is
 * what single-threaded callers (an MPI library) require. Off with
 * SIB_ASYNC=0.
 *
 * Exclusion (the gate): an application call and the thread each announce
 * themselves in a word of their own, then read the other's: Dekker's
 * pattern, which needs a full fence between each side's store and load
 * (x86 lets a load pass an earlier store). The application's side is on
 * every call, so its fence is the thread's business: the thread, which
 * enters at most once per look, issues membarrier(PRIVATE_EXPEDITED)
 * between its store and its load, which runs a full barrier on every
 * thread of the process. Either the application's store came before that
 * barrier and the thread sees it (and backs off), or its load comes after
 * and sees the thread's word (and the application waits the short while
 * the thread is in: a few posts and UD sends). The application pays two
 * plain stores and a plain (acquire) load per call. Where membarrier is
 * refused, both sides use seq_cst stores instead (one atomic exchange per
 * call). Leaving is a release store, entering an acquire load: what one
 * side wrote in the worker is visible to the other when it gets in.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sib_int.h"

#define SIB_ASYNC_MS 20

/* membarrier(PRIVATE_EXPEDITED), registered once per process: 1 if the
 * kernel gives it, 0 if not (then the gate is seq_cst on both sides). */
static int barrier_ok = -1;
static pthread_once_t barrier_once = PTHREAD_ONCE_INIT;

static void barrier_register(void)
{
	barrier_ok = syscall(SYS_membarrier,
			     MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

static bool cm_enter(sib_worker_t *w)
{
	if (w->gate_strong) {
		atomic_store_explicit(&w->cm_in, 1, memory_order_seq_cst);
	} else {
		atomic_store_explicit(&w->cm_in, 1, memory_order_relaxed);
		if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0)) {
			atomic_store_explicit(&w->cm_in, 0, memory_order_relaxed);
			return false;
		}
	}
	if (!atomic_load_explicit(&w->app_in, memory_order_acquire))
		return true;
	atomic_store_explicit(&w->cm_in, 0, memory_order_release);
	return false;
}

static void cm_leave(sib_worker_t *w)
{
	atomic_store_explicit(&w->cm_in, 0, memory_order_release);
}

static void *async_main(void *arg)
{
	sib_worker_t *w = arg;
	struct pollfd p = { .fd = w->async_efd, .events = POLLIN };
	uint64_t seen = UINT64_MAX;

	for (;;) {
		if (poll(&p, 1, SIB_ASYNC_MS) != 0) /* stop (or poll failed) */
			break;
		uint64_t calls = atomic_load_explicit(&w->app_calls,
						      memory_order_relaxed);

		/* the application came by since the last look: its own
		 * progress runs the handshakes */
		if (calls != seen) {
			seen = calls;
			continue;
		}
		if (!cm_enter(w))
			continue;
		w->in_cm = true;
		/* a burst's open batches go too (batch.c): their tail
		 * waits at most one look for an application gone away */
		if (w->nbatch)
			sib_batches_close(w);
		sib_hosts_cm(w);
		w->in_cm = false;
		cm_leave(w);
	}
	return NULL;
}

/* Whether the context wants the thread: SIB_ASYNC=0 says no. */
static bool async_wanted(void)
{
	const char *s = getenv("SIB_ASYNC");

	return !s || strcmp(s, "0") != 0;
}

/* Starts the thread (after worker_setup). Failing to is not fatal: the
 * worker runs as it would with SIB_ASYNC=0, and says so. */
void sib_async_start(sib_worker_t *w)
{
	int err;

	w->async_efd = -1;
	if (!async_wanted())
		return;
	w->async_efd = eventfd(0, EFD_CLOEXEC);
	if (w->async_efd < 0) {
		sib_log("connection thread: eventfd: errno %d", errno);
		return;
	}
	pthread_once(&barrier_once, barrier_register);
	w->gate_strong = barrier_ok != 1;
#ifdef __SANITIZE_THREAD__
	/* ThreadSanitizer does not know membarrier: the seq_cst gate, whose
	 * release stores and acquire loads it follows */
	w->gate_strong = true;
#endif
	/* the gate is on before the thread can look */
	w->async_on = true;
	err = pthread_create(&w->async_th, NULL, async_main, w);
	if (err) {
		sib_log("connection thread: pthread_create: errno %d", err);
		w->async_on = false;
		close(w->async_efd);
		w->async_efd = -1;
	}
}

/* Stops it (before the worker goes); not under the worker's gate. */
void sib_async_stop(sib_worker_t *w)
{
	uint64_t one = 1;

	if (!w->async_on)
		return;
	if (write(w->async_efd, &one, sizeof(one)) != sizeof(one))
		sib_log("connection thread: stop: errno %d", errno);
	pthread_join(w->async_th, NULL);
	close(w->async_efd);
	w->async_efd = -1;
	w->async_on = false;
}
