/*
 * request.c: the life of a request: taken from the worker's cache, made
 * final once (sib_req_complete), and the application's calls on it:
 * test, wait, cancel, free.  What starts one is tag.c's (sends,
 * receives, probes, flushes) or rma.c's.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "sib_int.h"

/* Requests released are kept (up to SIB_REQ_CACHE, sib_int.h) for the
 * next ones: no malloc and free per message. Under the worker lock, as
 * every caller. */

/* The cache miss of sib_req_take (sib_int.h). */
struct sib_request *sib_req_alloc(void)
{
	return malloc(sizeof(struct sib_request));
}

struct sib_request *sib_req_new(sib_worker_t *w, enum sib_req_kind k,
				const struct sib_op_params *op)
{
	struct sib_request *r = sib_req_take(w);

	if (!r)
		return NULL;
	memset(r, 0, offsetof(struct sib_request, inl));
	r->kind = k;
	r->w = w;
	r->slot = -1;
	sib_list_init(&r->qlink);
	if (op) {
		r->send_cb = op->send_cb;
		r->recv_cb = op->recv_cb;
		r->cb_arg = op->cb_arg;
	}
	return r;
}

void sib_req_free_mem(struct sib_request *r)
{
	free(r);
}

void sib_req_cache_fini(sib_worker_t *w)
{
	while (w->req_cache) {
		struct sib_request *r = w->req_cache;

		w->req_cache = r->next_free;
		free(r);
	}
	w->nreq_cache = 0;
}

void sib_req_complete(struct sib_request *r, sib_status_t st)
{
	r->st.status = st;
	atomic_store_explicit(&r->done, true, memory_order_release);
	if (r->kind == SIB_REQ_RECV && r->recv_cb)
		r->recv_cb(r, &r->st, r->cb_arg);
	else if (r->kind != SIB_REQ_RECV && r->send_cb)
		r->send_cb(r, st, r->cb_arg);
	if (r->freed && !r->early)
		sib_req_put(r->w, r);
}

/* Read without the worker lock: acquire, pairing with sib_req_complete's
 * release, so that st is final when done is seen. */
static bool req_done(sib_request_t *r)
{
	return atomic_load_explicit(&r->done, memory_order_acquire);
}

/* A wait on a send already complete (copied, maybe batched) is the
 * application saying it waits: open batches go (batch.c). A test is not
 * (a loop of send-and-test would send every message alone). */
static void __attribute__((noinline)) batches_close_locked(sib_worker_t *w)
{
	sib_lock(w);
	if (w->nbatch)
		sib_batches_close(w);
	sib_unlock(w);
}

static inline void batches_go(sib_worker_t *w)
{
	/* single thread: only this thread opens batches, so the peek
	 * is exact for the ones it opened (the connection thread may be
	 * closing one: the lock's second look decides); SIB_THREAD_MULTI
	 * reads it under the lock */
	if (w->mt || w->nbatch)
		batches_close_locked(w);
}

SIB_API sib_status_t sib_request_test(sib_request_t *r, struct sib_tag_status *st)
{
	if (!r)
		return SIB_ERR_INVALID_PARAM;
	if (!req_done(r))
		sib_worker_progress(r->w);
	if (!req_done(r))
		return SIB_INPROGRESS;
	if (st)
		*st = r->st;
	return r->st.status;
}

/*
 * Polling: spin for spin_us (SIB_SPIN_US, default 50) after the last
 * event, then yield the core
 * every 64 empty polls (others may need it to answer: the peer on an
 * oversubscribed host, softib's progress thread). Yielding after a count
 * of polls instead (64, ~2 us) gave the core away inside every
 * intra-host round trip on a loaded machine (docs/transport.md).
 */

static sib_status_t __attribute__((noinline))
wait_poll(sib_request_t *r, struct sib_tag_status *st)
{
	unsigned idle = 0;
	uint64_t since = 0;

	while (!req_done(r)) {
		if (sib_worker_progress(r->w) > 0 || req_done(r)) {
			idle = 0;
			continue;
		}
		if (r->w->ctx->progress_mode == SIB_PROGRESS_BLOCKING) {
			sib_worker_wait(r->w, -1);
		} else if (!(++idle & 63)) {   /* the clock once in 64 polls */
			uint64_t now = sib_now_us();

			if (idle == 64)
				since = now;
			else if (now - since >= r->w->ctx->spin_us)
				sched_yield();
		}
	}
	if (st)
		*st = r->st;
	return r->st.status;
}

/* The request done already (a window's receives after the first's
 * progress took them all) costs a few loads: the polling loop is out of
 * line. */
SIB_API sib_status_t sib_request_wait(sib_request_t *r, struct sib_tag_status *st)
{
	if (!r || r->freed)
		return SIB_ERR_INVALID_PARAM;
	if (!req_done(r))
		return wait_poll(r, st);
	batches_go(r->w);
	if (st)
		*st = r->st;
	return r->st.status;
}

SIB_API sib_status_t sib_request_cancel(sib_request_t *r)
{
	sib_status_t st = SIB_OK;
	sib_worker_t *w;

	if (!r)
		return SIB_ERR_INVALID_PARAM;
	w = r->w;   /* r may be released by its completion */
	sib_lock(w);
	if (r->done)
		st = SIB_OK;   /* too late: nothing to do */
	else if (r->kind != SIB_REQ_RECV)
		st = SIB_ERR_BUSY;
	else if (r->rndv)   /* matched, reading: rndv.c stops it */
		st = sib_rndv_cancel(w, r);
	else if (sib_mq_cancel(&w->mq, &r->mrecv) == 0) {
		if (r->ep && r->ep->rx_named)
			r->ep->rx_named--;
		if (r->wild && w->rx_wild)
			w->rx_wild--;
		sib_req_complete(r, SIB_ERR_CANCELED);
	}
	sib_unlock(w);
	return st;
}

/*
 * Under the worker lock in SIB_THREAD_MULTI: another thread's progress may
 * be completing r (its callback running, its freed flag about to be read).
 * Not through the gate (async.c): the connection thread never completes,
 * frees or takes a request, nor reads a request's freed flag, so what this
 * touches (the flag, the worker's request cache) is the application's
 * alone; the gate's two stores and load were a third of the call.
 */
SIB_API void sib_request_free(sib_request_t *r)
{
	sib_worker_t *w;

	if (!r)
		return;
	w = r->w;
	if (w->mt)
		pthread_mutex_lock(&w->lock);
	if (r->freed)
		;
	else if (atomic_load_explicit(&r->done, memory_order_relaxed) && !r->early)
		sib_req_put(w, r);
	else
		r->freed = true;
	if (w->mt)
		pthread_mutex_unlock(&w->lock);
}
