/*
 * Completion queues. The ring lives in the segment: any process that
 * completes work for one of this CQ's QPs pushes the entry itself
 * (hca_cq_push), and wakes the owner's channel when the CQ is armed.
 * Polling is the owner's, under a private lock so that several threads
 * may poll one CQ.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hca_int.h"

struct hca_cq_ent *hca_cq_ent(struct hca_dev *dev, uint32_t idx)
{
	return idx < HCA_MAX_CQ ? &dev->seg->cqs[idx] : NULL;
}

static uint32_t cq_cap_for(int cqe)
{
	return 1u << hca_ilog2_ceil((uint32_t)cqe + 1);
}

/* Allocate a directory index and ring (seg->lock held). */
static int cq_publish(struct hca_dev *dev, struct hca_cq *cq, uint32_t cap)
{
	struct hca_seg *seg = dev->seg;
	uint64_t bytes = hca_ring_bytes(cap, sizeof(struct hca_cqe));
	uint64_t off;
	uint32_t idx;

	for (idx = 1; idx < HCA_MAX_CQ; idx++)
		if (!atomic_load(&seg->cqs[idx].handle))
			break;
	if (idx == HCA_MAX_CQ)
		return ENOMEM;
	off = hca_heap_alloc(seg, bytes);
	if (!off)
		return ENOMEM;
	hca_ring_init(hca_seg_ptr(seg, off), cap, sizeof(struct hca_cqe));
	struct hca_cq_ent *e = &seg->cqs[idx];
	e->owner = dev->slot;
	e->owner_gen = dev->gen;
	e->ring_off = off;
	e->chan = cq->chan ? cq->chan->id : 0;
	e->stamp = !!(cq->flags & HCA_CQ_TIMESTAMPS);
	atomic_store(&e->armed, 0);
	atomic_store(&e->overrun, 0);
	cq->handle = seg->next_handle++;
	if (!seg->next_handle)
		seg->next_handle = 1;
	cq->idx = idx;
	cq->ent = e;
	cq->ring = hca_seg_ptr(seg, off);
	cq->ring_size = bytes;
	dev->cq_tab[idx] = cq;
	atomic_store_explicit(&e->handle, cq->handle, memory_order_release);
	return 0;
}

struct hca_cq *hca_cq_create(struct hca_ctx *ctx, int cqe, struct hca_chan *chan,
			     int flags, void *user)
{
	struct hca_dev *dev = ctx->dev;
	struct hca_cq *cq;
	int rc;

	if (cqe < 1 || cqe > HCA_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	cq->ctx = ctx;
	cq->chan = chan;
	cq->flags = flags;
	cq->user = user;
	pthread_mutex_init(&cq->poll_lock, NULL);
	hca_seg_lock(dev->seg);
	rc = cq_publish(dev, cq, cq_cap_for(cqe));
	hca_seg_unlock(dev->seg);
	if (rc) {
		free(cq);
		errno = rc;
		return NULL;
	}
	cq->cqe = (int)cq->ring->cap - 1;
	if (chan)
		atomic_fetch_add(&chan->refs, 1);
	return cq;
}

int hca_cq_size(struct hca_cq *cq)
{
	return cq->cqe;
}

/*
 * Resize: a new ring, the pending entries moved over under the poll lock.
 * Producers in other processes may hold the old ring for a moment: it is
 * freed through the heap's quarantine, and entries they push into it
 * after the move are lost — resize while traffic flows into the CQ is
 * racy on hardware too, and the man page asks for a quiescent CQ.
 */
int hca_cq_resize(struct hca_cq *cq, int cqe)
{
	struct hca_dev *dev = cq->ctx->dev;
	struct hca_seg *seg = dev->seg;
	uint32_t cap = cq_cap_for(cqe);
	struct hca_cqe c;
	struct hca_ring *nr;
	uint64_t off, bytes = hca_ring_bytes(cap, sizeof(struct hca_cqe));

	if (cqe < 1 || cqe > HCA_MAX_CQE)
		return EINVAL;
	pthread_mutex_lock(&cq->poll_lock);
	if (hca_ring_count(cq->ring) > cap - 1) {
		pthread_mutex_unlock(&cq->poll_lock);
		return EINVAL;
	}
	hca_seg_lock(seg);
	off = hca_heap_alloc(seg, bytes);
	if (!off) {
		hca_seg_unlock(seg);
		pthread_mutex_unlock(&cq->poll_lock);
		return ENOMEM;
	}
	nr = hca_seg_ptr(seg, off);
	hca_ring_init(nr, cap, sizeof(struct hca_cqe));
	while (hca_ring_pop(cq->ring, &c, sizeof(c)) == 0)
		hca_ring_push(nr, &c, sizeof(c));
	hca_heap_free(seg, cq->ent->ring_off, cq->ring_size);
	cq->ent->ring_off = off;
	cq->ring = nr;
	cq->ring_size = bytes;
	cq->cqe = (int)cap - 1;
	hca_seg_unlock(seg);
	pthread_mutex_unlock(&cq->poll_lock);
	return 0;
}

int hca_cq_destroy(struct hca_cq *cq)
{
	struct hca_dev *dev = cq->ctx->dev;
	struct hca_seg *seg = dev->seg;

	if (atomic_load(&cq->refs))
		return EBUSY;
	hca_seg_lock(seg);
	atomic_store_explicit(&cq->ent->handle, 0, memory_order_release);
	dev->cq_tab[cq->idx] = NULL;
	hca_heap_free(seg, cq->ent->ring_off, cq->ring_size);
	hca_seg_unlock(seg);
	if (cq->chan)
		atomic_fetch_sub(&cq->chan->refs, 1);
	pthread_mutex_destroy(&cq->poll_lock);
	free(cq);
	return 0;
}

int hca_cq_arm(struct hca_cq *cq, int solicited_only)
{
	if (!cq->chan)
		return 0; /* no channel: nothing to wake, as hardware shrugs */
	cq->arm_solicited = solicited_only;
	/* "next completion" wins over "solicited only" if both are asked */
	uint32_t want = solicited_only ? 2 : 1, cur = atomic_load(&cq->ent->armed);

	if (cur != 1)
		atomic_store(&cq->ent->armed, want);
	/* the application is going to sleep: the progress thread takes the
	 * UDP socket now, not after a busy poller's grace */
	if (atomic_load_explicit(&cq->ctx->dev->udp_qps, memory_order_relaxed))
		hca_dev_link_handover(cq->ctx->dev);
	return 0;
}

/*
 * Push a completion into CQ cq_idx, from any process. On overrun the CQ
 * is marked in error and its owner told (IBV_EVENT_CQ_ERR); the entry is
 * not written over an unread one. Returns 0 or ENOSPC.
 */
int hca_cq_push(struct hca_dev *dev, uint32_t cq_idx, const struct hca_cqe *c,
		bool solicited)
{
	struct hca_cq_ent *e = hca_cq_ent(dev, cq_idx);
	uint32_t handle, armed;
	struct hca_cqe stamped;
	struct hca_ring *r;

	if (!e || !(handle = atomic_load_explicit(&e->handle, memory_order_acquire)))
		return ENOENT;
	r = hca_seg_ptr(dev->seg, e->ring_off);
	if (e->stamp) { /* only then: a clock read per completion is not free */
		stamped = *c;
		stamped.ts = hca_now_ns();
		c = &stamped;
	}
	if (atomic_load(&e->overrun) || hca_ring_push(r, c, sizeof(*c))) {
		if (!atomic_exchange(&e->overrun, 1))
			hca_raise_cq_event(dev, cq_idx, IBV_EVENT_CQ_ERR);
		return ENOSPC;
	}
	armed = atomic_load(&e->armed);
	if (armed == 1 || (armed == 2 && (solicited || c->status != IBV_WC_SUCCESS))) {
		if (atomic_exchange(&e->armed, 0))
			hca_chan_signal(dev, e->owner, e->owner_gen, e->chan,
					cq_idx, handle);
	}
	return 0;
}

static void cqe_to_wc(const struct hca_cqe *c, struct ibv_wc *wc)
{
	wc->wr_id = c->wr_id;
	wc->status = c->status;
	wc->opcode = c->opcode;
	wc->vendor_err = c->vendor_err;
	wc->byte_len = c->byte_len;
	wc->imm_data = c->imm;
	wc->qp_num = c->qp_num;
	wc->src_qp = c->src_qp;
	wc->wc_flags = c->wc_flags;
	wc->pkey_index = c->pkey_index;
	wc->slid = c->slid;
	wc->sl = c->sl;
	wc->dlid_path_bits = c->dlid_path_bits;
}

int hca_cq_poll(struct hca_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts)
{
	struct hca_dev *dev = cq->ctx->dev;
	struct hca_cqe c;
	int got = 0;

	if (n < 0) {
		errno = EINVAL;
		return -1;
	}
	/*
	 * Requests held back by RNR or retry timers make progress here too
	 * (every 16th poll: the progress thread runs them on time anyway),
	 * and a busy poller reads its own UDP answers without a thread hop.
	 * The clock is read once in 64 polls: a busy loop of polls is what
	 * the ping-pong latency is made of.
	 */
	uint32_t k = atomic_load_explicit(&dev->polls, memory_order_relaxed) + 1;

	atomic_store_explicit(&dev->polls, k, memory_order_relaxed);
	if (!(k & 15)) {
		hca_dev_run_waiting(dev);
		hca_link_acks_flush(dev, false, HCA_ACKS_SWEEP);
	}
	if (atomic_load_explicit(&dev->udp_qps, memory_order_relaxed)) {
		/* the polls right after arming a CQ are the application's
		 * last look before it sleeps: they do not make it a poller */
		if (!(k & 63) && k - atomic_load_explicit(&dev->polls_at_arm,
							  memory_order_relaxed) > 64) {
			atomic_store_explicit(&dev->poll_ns, hca_now_ns(),
					      memory_order_relaxed);
		}
		hca_link_rx(dev, false);
	}
	pthread_mutex_lock(&cq->poll_lock);
	while (got < n && hca_ring_pop(cq->ring, &c, sizeof(c)) == 0) {
		cqe_to_wc(&c, &wc[got]);
		if (ts)
			ts[got] = c.ts;
		got++;
	}
	pthread_mutex_unlock(&cq->poll_lock);
	if (!got) /* nothing new for the application: owed ACKs go now */
		hca_link_acks_flush(dev, false, HCA_ACKS_ASKED);
	return got;
}
