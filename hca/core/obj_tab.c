/*
 * The process's tables of its own objects (dev->qp_tab, cq_tab, srq_tab):
 * how a message that names an object by index + id finds it without
 * racing its destruction.
 *
 * Two kinds of readers:
 *  - the data paths (post, poll, the UDP receive path) hold the object by
 *    other means — the application's handle, or the link's receive lock,
 *    which hca_qp_destroy takes after unpublishing (qp_link_barrier) — and
 *    read a table slot with one atomic load, no lock;
 *  - the doorbell dispatch of the progress thread (event.c) acts on an
 *    object the application may be destroying at that very moment. It
 *    takes a pin: under dev->lock it finds the object, checks its id and
 *    increments the object's pin count; it acts with the lock released
 *    (acting takes other locks: a QP's flush takes its send lock and
 *    pushes completions) and unpins.
 *
 * Destruction (hca_qp_destroy, hca_cq_destroy, hca_srq_destroy) clears the
 * slot under dev->lock, then waits for the pin count to reach zero before
 * it frees anything the dispatch may touch. The argument: a reader pins
 * only under dev->lock, after reading the slot; the destroyer clears the
 * slot under dev->lock. Either the reader's critical section came first
 * (its increment is visible to the destroyer once it holds the lock, and
 * the destroyer waits for the matching decrement) or the destroyer's did
 * (the reader finds the slot empty, or another object there whose id
 * differs). The decrement is a release, the destroyer's load an acquire:
 * everything the dispatch did with the object happens before the free.
 * Nothing holds a pin while waiting for the destroying thread, so the wait
 * is bounded by one dispatch.
 */
#include <sched.h>

#include "hca_int.h"

/* Test hook (unit tests only): called by the dispatch with the object
 * found and pinned, before it acts on it. NULL otherwise. */
void (*_Atomic hca_db_dispatch_hook)(const struct hca_db_msg *m);

void hca_pin_wait(_Atomic int *pin)
{
	while (atomic_load_explicit(pin, memory_order_acquire))
		sched_yield();
}

/* ---- QPs ---- */

void hca_qp_tab_set(struct hca_dev *dev, uint32_t idx, struct hca_qp *qp)
{
	pthread_mutex_lock(&dev->lock);
	atomic_store_explicit(&dev->qp_tab[idx], qp, memory_order_release);
	pthread_mutex_unlock(&dev->lock);
}

/* Our QP at directory index idx whose number is qpn (HCA_NONE: any), pinned. */
struct hca_qp *hca_qp_get(struct hca_dev *dev, uint32_t idx, uint32_t qpn)
{
	struct hca_qp *qp;

	if (idx >= HCA_MAX_QP)
		return NULL;
	/* an empty slot needs no lock: most of a CQ overrun's scan */
	if (!atomic_load_explicit(&dev->qp_tab[idx], memory_order_relaxed))
		return NULL;
	pthread_mutex_lock(&dev->lock);
	qp = atomic_load_explicit(&dev->qp_tab[idx], memory_order_relaxed);
	if (qp && ((qpn != HCA_NONE && qp->qpn != qpn) || atomic_load(&qp->dying)))
		qp = NULL;
	if (qp)
		atomic_fetch_add_explicit(&qp->pin, 1, memory_order_relaxed);
	pthread_mutex_unlock(&dev->lock);
	return qp;
}

void hca_qp_put(struct hca_qp *qp)
{
	atomic_fetch_sub_explicit(&qp->pin, 1, memory_order_release);
}

/* ---- CQs ---- */

void hca_cq_tab_set(struct hca_dev *dev, uint32_t idx, struct hca_cq *cq)
{
	pthread_mutex_lock(&dev->lock);
	atomic_store_explicit(&dev->cq_tab[idx], cq, memory_order_release);
	pthread_mutex_unlock(&dev->lock);
}

struct hca_cq *hca_cq_get(struct hca_dev *dev, uint32_t idx, uint32_t handle)
{
	struct hca_cq *cq;

	if (idx >= HCA_MAX_CQ)
		return NULL;
	pthread_mutex_lock(&dev->lock);
	cq = atomic_load_explicit(&dev->cq_tab[idx], memory_order_relaxed);
	if (cq && cq->handle != handle)
		cq = NULL;
	if (cq)
		atomic_fetch_add_explicit(&cq->pin, 1, memory_order_relaxed);
	pthread_mutex_unlock(&dev->lock);
	return cq;
}

void hca_cq_put(struct hca_cq *cq)
{
	atomic_fetch_sub_explicit(&cq->pin, 1, memory_order_release);
}

/* ---- SRQs ---- */

void hca_srq_tab_set(struct hca_dev *dev, uint32_t idx, struct hca_srq *srq)
{
	pthread_mutex_lock(&dev->lock);
	atomic_store_explicit(&dev->srq_tab[idx], srq, memory_order_release);
	pthread_mutex_unlock(&dev->lock);
}

struct hca_srq *hca_srq_get(struct hca_dev *dev, uint32_t idx, uint32_t handle)
{
	struct hca_srq *srq;

	if (idx >= HCA_MAX_SRQ)
		return NULL;
	pthread_mutex_lock(&dev->lock);
	srq = atomic_load_explicit(&dev->srq_tab[idx], memory_order_relaxed);
	if (srq && srq->handle != handle)
		srq = NULL;
	if (srq)
		atomic_fetch_add_explicit(&srq->pin, 1, memory_order_relaxed);
	pthread_mutex_unlock(&dev->lock);
	return srq;
}

void hca_srq_put(struct hca_srq *srq)
{
	atomic_fetch_sub_explicit(&srq->pin, 1, memory_order_release);
}
