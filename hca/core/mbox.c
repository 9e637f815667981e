/*
 * Mailboxes: the fast path of a small RC SEND between two QPs of one
 * host (docs/datapath.md, "A mailbox per connection").
 *
 * The ring path has the requester run the responder: it takes the
 * target's receive WQE from the shared receive ring and pushes the
 * receive completion into the target's CQ ring, so that about six cache
 * lines cross between the processes per message. A receive QP made on a
 * CQ that has room (its first HCA_MB_PER_CQ QPs) gets a mailbox beside
 * its receive ring (struct hca_mbox, mbox.h): a ring of 64-byte slots
 * that only its connected requester writes. The requester stores the
 * message (payload, length, immediate) and releases the slot's word; the
 * receiver's own ibv_poll_cq finds it, takes its own receive WQE from its
 * own ring (no line crosses: post_recv and the take are both its own),
 * copies the payload and returns the completion. The consumer index the
 * receiver publishes is read by the requester's polls, which complete
 * the send WQEs it passed (engine/mbox_send.c). One slot line and the
 * consumer index line cross per message.
 *
 * Memory ordering, by field:
 * - slot word (pos << 8 | state): READY stored with release by the
 *   requester after the slot's other fields and bytes (and the slots a
 *   message spans); the receiver's acquire load pairs with it. READY ->
 *   TAKEN is the receiver's acquire CAS, READY -> RETRACTED the
 *   requester's: exactly one wins, so a message is either delivered here
 *   or sent again by the ring path, never both.
 * - cons: the receiver's release store once a message's completion is
 *   out (or a retracted one skipped), after nak; the requester's acquire
 *   load pairs with it and only then reuses slots below it.
 * - nak / rnr: written by the receiver, before cons (nak) or alone (rnr,
 *   a hint: the requester retracts and the ring path answers RNR).
 * - epoch: stored with release by the receiver at each open, after the
 *   slots and indexes are reset; the requester binds with an acquire load
 *   and re-checks it at every post.
 * - a requester that finds the target's CQ armed after its release
 *   (seq_cst fence, then the armed load) rings the channel; hca_cq_arm
 *   stores armed, fences, and looks at the mailboxes (Dekker: one of the
 *   two sees the other).
 *
 * Order with the ring path: a WQE takes the mailbox only if every WQE
 * before it on its QP is complete or in the mailbox; a WQE for the ring
 * path waits until none is in the mailbox (the requester retracts what
 * it can, and waits for the consumer index past what the receiver took).
 * A poll peeks at the mailboxes first (acquire), then drains the CQ's
 * rings, then consumes what it peeked — only that (peek_end: a message
 * put later may follow a ring-path one this drain did not see), and
 * nothing if the drain left a published entry behind (it stops at an
 * entry another producer has claimed and not yet published): a receive
 * completion the ring path pushed before a mailbox message is returned
 * before it. A poll stops at a retracted message (its replacement may be
 * in the ring by now). The sweep pushes a message's completion into the
 * CQ's ring before it gives the message's slots back.
 *
 * XRC (struct hca_mb_lanes, mbox.h): an XRC SRQ made on a CQ with room
 * gets HCA_MB_LANES mailboxes, "lanes", after its ring. An XRC send QP
 * of this host claims one lane of each SRQ it sends to (CAS of the
 * lane's owner word) and keeps it; it is bound to one at a time, and a
 * SEND for another SRQ goes by the ring path until nothing of ours waits
 * in the bound lane. A lane goes on from its stored producer position,
 * never back over slots not yet passed. The SRQ's owner consumes its
 * lanes as it polls the CQ (a lane's receive WQE comes from the SRQ, its
 * completion names the XRC receive QP the claimer is connected to), and
 * its sweep frees the lanes of QPs that are gone.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "env.h"
#include "hca_int.h"
#include "link_ops.h"
#include "mbox.h"

static _Atomic int mb_max_env = -1, mb_off_env = -1, mb_on_env = -1;

/*
 * The largest payload a mailbox carries: SOFTIB_MBOX_MAX. On unless
 * SOFTIB_MBOX=0 or SOFTIB_NO_MBOX=1 (either turns it off).
 */
uint32_t hca_mb_max(void)
{
	if (hca_env_once(&mb_off_env, "SOFTIB_NO_MBOX", 0, 0, 1) ||
	    !hca_env_once(&mb_on_env, "SOFTIB_MBOX", 1, 0, 1))
		return 0;
	return (uint32_t)hca_env_once(&mb_max_env, "SOFTIB_MBOX_MAX", HCA_MB_DEFAULT, 0,
				      HCA_MB_LIMIT);
}

void hca_mb_busy_take(struct hca_cq *cq)
{
	while (atomic_exchange(&cq->mb_busy, 1))
		sched_yield();
}

bool hca_mb_busy_try(struct hca_cq *cq)
{
	return !atomic_exchange(&cq->mb_busy, 1);
}

void hca_mb_busy_drop(struct hca_cq *cq)
{
	atomic_store_explicit(&cq->mb_busy, 0, memory_order_release);
}

static int tx_list_add(struct hca_qp *_Atomic *list, struct hca_qp *qp)
{
	for (int i = 0; i < HCA_MB_PER_CQ; i++) {
		struct hca_qp *none = NULL;

		if (atomic_compare_exchange_strong(&list[i], &none, qp))
			return i;
	}
	return -1;
}

int hca_mb_rx_list_add(struct hca_cq *cq, struct hca_mb_rx *x)
{
	for (int i = 0; i < HCA_MB_PER_CQ; i++) {
		struct hca_mb_rx *none = NULL;

		if (atomic_compare_exchange_strong(&cq->mb_rx[i], &none, x))
			return i;
	}
	return -1;
}

/* A receive mailbox onto its CQ's scan (its place taken by rx_list_add). */
void hca_mb_rx_publish(struct hca_cq *cq, struct hca_mb_rx *x, struct hca_ring *rq)
{
	atomic_store(&cq->mb_pos[x->ri], atomic_load(&x->mb->cons));
	atomic_store(&cq->mb_rq[x->ri], rq);
	atomic_store(&cq->mb_own[x->ri], x->srq && x->srq->lanes ?
					 &x->srq->lanes->owner[x->k] : NULL);
	atomic_store(&cq->mb_box[x->ri], x->mb);
	/* peeked at from now on, until a look at its owner word says no
	 * requester holds it */
	atomic_fetch_or(&cq->mb_bound, 1u << x->ri);
	atomic_fetch_or(&cq->mb_rxlive, 1u << x->ri);
	atomic_fetch_add(&cq->mb_nrx, 1);
}

/* ... and off it; no scanner holds it once this returns. */
void hca_mb_rx_unpublish(struct hca_cq *cq, struct hca_mb_rx *x)
{
	if (x->ri < 0)
		return;
	if (x->mb) {
		atomic_store(&cq->mb_box[x->ri], NULL);
		atomic_fetch_and(&cq->mb_rxlive, ~(1u << x->ri));
		atomic_fetch_sub(&cq->mb_nrx, 1);
	}
	atomic_store(&cq->mb_rx[x->ri], NULL);
	hca_mb_busy_take(cq);
	hca_mb_busy_drop(cq);
	x->ri = -1;
}

/*
 * At create, before the directory entry is made: does this QP get a
 * receive mailbox? Its place on the receive CQ is taken now.
 */
bool hca_mb_rx_want(struct hca_qp *qp)
{
	qp->mb_ri = qp->mb_ti = -1;
	qp->mb_ent = (struct hca_mb_rx){ .qp = qp, .ri = -1 };
	if (qp->type != IBV_QPT_RC || !qp->rcq || qp->srq || !hca_mb_max() ||
	    (qp->rcq->flags & HCA_CQ_TIMESTAMPS))
		return false;
	qp->mb_ri = qp->mb_ent.ri = hca_mb_rx_list_add(qp->rcq, &qp->mb_ent);
	return qp->mb_ri >= 0;
}

/* The entry is made (mb_off: the mailbox in its ring's block, or 0). */
void hca_mb_attach(struct hca_qp *qp, uint64_t mb_off)
{
	if (qp->mb_ri >= 0) {
		struct hca_cq *cq = qp->rcq;

		qp->mb_rx = qp->mb_ent.mb = hca_seg_ptr(qp->dev->seg, mb_off);
		if (!qp->mb_rx) {
			atomic_store(&cq->mb_rx[qp->mb_ri], NULL);
			qp->mb_ri = qp->mb_ent.ri = -1;
		} else {
			memset(qp->mb_rx, 0, sizeof(*qp->mb_rx));
			hca_mb_rx_publish(cq, &qp->mb_ent, qp->rq);
		}
	}
	if ((qp->type == IBV_QPT_RC || qp->type == IBV_QPT_XRC_SEND) && qp->scq &&
	    hca_mb_max()) {
		qp->mb_ti = tx_list_add(qp->scq->mb_tx, qp);
		qp->mb_tx_ok = qp->mb_ti >= 0;
		if (qp->mb_tx_ok)
			atomic_fetch_or(&qp->scq->mb_txlive, 1u << qp->mb_ti);
	}
}

/* Destroy (or a failed create): off the lists, no scanner holds it. */
void hca_mb_detach(struct hca_qp *qp)
{
	if (qp->mb_ri >= 0) {
		if (qp->mb_rx)
			atomic_store(&qp->mb_rx->epoch, 0);
		hca_mb_rx_unpublish(qp->rcq, &qp->mb_ent);
		qp->mb_ri = -1;
	}
	hca_mb_lane_release(qp);
	if (qp->mb_ti >= 0) {
		struct hca_cq *cq = qp->scq;

		atomic_fetch_and(&cq->mb_txlive, ~(1u << qp->mb_ti));
		atomic_store(&cq->mb_tx[qp->mb_ti], NULL);
		hca_mb_busy_take(cq);
		hca_mb_tx_forget(qp);
		hca_mb_busy_drop(cq);
		qp->mb_ti = -1;
		qp->mb_tx_ok = false;
	}
}

/*
 * INIT -> RTR: a new connection. No scanner runs (mb_busy), the slots
 * and indexes start over, and the new epoch is published last.
 */
uint32_t hca_mb_new_epoch(struct hca_dev *dev)
{
	static _Atomic uint32_t epochs;
	uint32_t ep;

	do
		ep = atomic_fetch_add(&epochs, 1) + 1 + ((uint32_t)dev->slot << 20);
	while (!ep);
	return ep;
}

void hca_mb_open(struct hca_qp *qp)
{
	struct hca_mbox *mb = qp->mb_rx;

	if (!mb)
		return;
	hca_mb_busy_take(qp->rcq);
	for (int i = 0; i < HCA_MB_SLOTS; i++)
		atomic_store_explicit(&mb->slot[i].word, 0, memory_order_relaxed);
	atomic_store_explicit(&mb->cons, 0, memory_order_relaxed);
	atomic_store_explicit(&mb->rnr, 0, memory_order_relaxed);
	atomic_store_explicit(&mb->nak, 0, memory_order_relaxed);
	atomic_store(&qp->rcq->mb_pos[qp->mb_ri], 0);
	atomic_store_explicit(&mb->epoch, hca_mb_new_epoch(qp->dev), memory_order_release);
	hca_mb_busy_drop(qp->rcq);
}

/* To RESET: the connection is over; what waits in it is not taken. */
void hca_mb_close(struct hca_qp *qp)
{
	if (qp->mb_rx) {
		hca_mb_busy_take(qp->rcq);
		atomic_store(&qp->mb_rx->epoch, 0);
		hca_mb_busy_drop(qp->rcq);
	}
}

#define SQ_SLOT(qp, i) (&(qp)->sq[(i) & ((qp)->cap.max_send_wr - 1)])

/*
 * Requester (sq_lock held): take back what the receiver has not taken,
 * newest first, so that what it did take is a prefix (it takes in
 * order); those stay pending, the rest go by the ring path, and no WQE
 * posted so far may take the mailbox again.
 */
void hca_mb_retract(struct hca_qp *qp)
{
	uint32_t k = qp->mb_n, sig = 0;

	while (k) {
		struct hca_swqe *w = SQ_SLOT(qp, qp->sq_head + k - 1);
		uint64_t want = hca_mb_word(w->mb_pos, HCA_MB_READY);

		if (!atomic_compare_exchange_strong_explicit(
			    &hca_mb_at(qp->mb, w->mb_pos)->word, &want,
			    hca_mb_word(w->mb_pos, HCA_MB_RETRACTED),
			    memory_order_acq_rel, memory_order_acquire))
			break;
		sig += hca_mb_wqe_sig(qp, w);
		k--;
	}
	if (qp->mb_n != k)
		atomic_fetch_sub_explicit(&qp->scq->mb_txp, qp->mb_n - k, memory_order_relaxed);
	if (sig)
		atomic_fetch_sub_explicit(&qp->scq->mb_txsig, sig, memory_order_relaxed);
	qp->mb_n = k;
	qp->mb_nsig -= sig;
	qp->mb_block = qp->sq_tail;
}

/* Requester (sq_lock held): the QP errs or resets; nothing is pending. */
void hca_mb_tx_drop(struct hca_qp *qp)
{
	if (qp->mb_n) {
		/* only while the target's entry still names the mailbox */
		if (hca_mb_still_named(qp))
			hca_mb_retract(qp);
		hca_mb_tx_forget(qp);
	}
	qp->mb_block = qp->sq_tail;
	qp->mb = NULL;
	qp->mb_epoch = 0;
	qp->mb_srqn = 0;
}

/* ---- the receiver (taking one message: mbox_take.c) ---- */

static bool mb_reap_tx(struct hca_cq *cq, bool timed);

/*
 * A message waits at the head of mailbox i (a peek, no lock); takeable:
 * and a poll would make a completion of it now (a receive WQE is there).
 */
static inline __attribute__((always_inline)) bool mb_ready(struct hca_cq *cq, int i,
							    bool takeable)
{
	struct hca_mbox *mb = atomic_load_explicit(&cq->mb_box[i], memory_order_acquire);
	struct hca_ring *rq;
	uint64_t pos, d;

	if (!mb)
		return false;
	/* the word at the head, against (pos, READY or RETRACTED): every
	 * poll looks at each mailbox of its CQ, in a few instructions */
	pos = atomic_load_explicit(&cq->mb_pos[i], memory_order_relaxed);
	d = atomic_load_explicit(&hca_mb_at(mb, pos)->word, memory_order_acquire) ^ (pos << 8);
	if (d != HCA_MB_READY && d != HCA_MB_RETRACTED)
		return false;
	return !takeable || (d == HCA_MB_READY &&
			     (rq = atomic_load_explicit(&cq->mb_rq[i], memory_order_relaxed)) &&
			     hca_ring_count(rq));
}

/*
 * The head slot of mailbox i, which holds a message: asked for in the
 * exclusive state now (PREFETCHW), so that the take's CAS of its word,
 * after the rings are drained, finds the line ours. The peek read it
 * shared; without this the CAS waits a second trip between the cores.
 * The consumer line too: the requester's reaps read it, and the commit's
 * store would wait for it at the next locked instruction (the answer's
 * post).
 */
static inline void mb_own_early(struct hca_cq *cq, int i)
{
	struct hca_mbox *mb = atomic_load_explicit(&cq->mb_box[i], memory_order_relaxed);
	uint64_t pos = atomic_load_explicit(&cq->mb_pos[i], memory_order_relaxed);

	hca_prefetchw(hca_mb_at(mb, pos));
	hca_prefetchw(&mb->cons);
}

/* A message a poll would take waits in a mailbox of cq (the arm's last look). */
bool hca_mb_waiting(struct hca_cq *cq)
{
	for (uint32_t m = atomic_load(&cq->mb_rxlive); m; m &= m - 1)
		if (mb_ready(cq, __builtin_ctz(m), true)) {
			/* a lane bound since the polls last looked at the
			 * owner words: the poll this wake-up makes peeks at
			 * it (not 16 wake-ups later) */
			atomic_fetch_or(&cq->mb_bound, m & -m);
			return true;
		}
	return false;
}

/*
 * A message waits at the head of a mailbox of cq that the polls peek at
 * (mb_bound): an empty poll's last look (hca_cq_poll). A peek, no lock.
 */
bool hca_mb_late(struct hca_cq *cq)
{
	uint32_t l = atomic_load_explicit(&cq->mb_rxlive, memory_order_relaxed) &
		     atomic_load_explicit(&cq->mb_bound, memory_order_relaxed);

	for (; l; l &= l - 1)
		if (mb_ready(cq, __builtin_ctz(l), false))
			return true;
	return false;
}

/*
 * For a completion channel's reader, which drops an event whose CQ holds
 * nothing (chan.c): the mailbox sends the receivers took are retired now
 * (their completions go to the private ring, counted there), and a
 * message waiting counts as one.
 */
uint32_t hca_mb_count(struct hca_cq *cq)
{
	if (atomic_load_explicit(&cq->mb_txp, memory_order_relaxed) && hca_mb_busy_try(cq)) {
		mb_reap_tx(cq, false);
		hca_mb_busy_drop(cq);
	}
	return atomic_load_explicit(&cq->mb_nrx, memory_order_relaxed) && hca_mb_waiting(cq);
}

/*
 * The requesters of cq with mailbox sends pending: retire what was taken.
 * false when one's send queue was busy (its lock held elsewhere): a send
 * the peer has taken may then still be pending here.
 */
static bool mb_reap_tx(struct hca_cq *cq, bool timed)
{
	bool all = true;

	for (uint32_t m = atomic_load_explicit(&cq->mb_txlive, memory_order_acquire); m;
	     m &= m - 1) {
		struct hca_qp *qp = atomic_load(&cq->mb_tx[__builtin_ctz(m)]);

		if (qp && !hca_engine.sq_reap(qp, timed))
			all = false;
	}
	return all;
}

/*
 * A poll's first step: peek at the receive mailboxes (mask: which have a
 * message) and retire mailbox sends; true if it holds mb_busy, which
 * hca_mb_end gives back after the rings are drained.
 *
 * The order a program sees: a send of ours that went by the mailbox
 * completes when a poll reads the receiver's consumer index, so the
 * peer's answer to it (by its mailbox or the CQ's shared ring) can be
 * visible before its completion is. On a wire the ACK comes first, and
 * programs take the answer as proof their send is done (test_live_peers'
 * nofile_pair does). So while sends of ours are pending, what this poll
 * may return from the mailboxes and from the shared ring (*rx_end: the
 * ring's positions below it) is only what it saw published before it
 * read the consumer indexes: its producer took our send before, and the
 * reap put that send's completion in the private ring, which the poll
 * drains first. When a reap cannot run (mb_busy or a send queue's lock
 * held), the poll returns no receive completion at all this time.
 */
/*
 * Past the messages published at the head of mailbox i now (at most 16):
 * a poll takes only those. One published later may come after a message
 * of the ring path that this poll's drain did not see: its requester put
 * it there once we had taken the one before (docs/datapath.md).
 */
static uint64_t peek_end(struct hca_cq *cq, int i)
{
	struct hca_mbox *mb = atomic_load_explicit(&cq->mb_box[i], memory_order_acquire);
	uint64_t pos = atomic_load_explicit(&cq->mb_pos[i], memory_order_relaxed);

	for (int k = 0; mb && k < 16; k++) {
		struct hca_mb_slot *s = hca_mb_at(mb, pos);
		uint32_t n;

		if (atomic_load_explicit(&s->word, memory_order_acquire) !=
		    hca_mb_word(pos, HCA_MB_READY))
			break;
		n = s->nslots;
		pos += n && n <= HCA_MB_SLOTS ? n : 1;
	}
	return pos;
}

/*
 * The receive mailboxes of cq a requester holds now (mb_bound). A lane
 * bound since the last look waits for the next one (at most
 * HCA_MB_BOUND_EVERY polls): its messages stay in it meanwhile, as they
 * would for a poller that came later; the arm's last look
 * (hca_mb_waiting) and the progress thread's sweep see every lane.
 */
#define HCA_MB_BOUND_EVERY 16

static uint32_t mb_scan_set(struct hca_cq *cq)
{
	uint32_t live = atomic_load_explicit(&cq->mb_rxlive, memory_order_relaxed);
	uint32_t t = atomic_load_explicit(&cq->mb_scans, memory_order_relaxed) + 1, b = 0;

	atomic_store_explicit(&cq->mb_scans, t, memory_order_relaxed);
	if (t % HCA_MB_BOUND_EVERY)
		return live & atomic_load_explicit(&cq->mb_bound, memory_order_relaxed);
	for (uint32_t l = live; l; l &= l - 1) {
		_Atomic uint64_t *own = atomic_load_explicit(&cq->mb_own[__builtin_ctz(l)],
							     memory_order_relaxed);

		if (!own || atomic_load_explicit(own, memory_order_relaxed))
			b |= l & -l;
	}
	atomic_store_explicit(&cq->mb_bound, b, memory_order_relaxed);
	return b;
}

bool hca_mb_begin(struct hca_cq *cq, struct hca_ring *ring, uint32_t n, unsigned *mask,
		  uint64_t *rx_end)
{
	/* order: sends of ours whose completions must come before answers
	 * (the comment above); reap: this poll retires mailbox sends */
	bool order = atomic_load_explicit(&cq->mb_txp, memory_order_relaxed), reap = order;
	unsigned m = 0;

	/*
	 * Only unsignalled sends of ours wait (libsib's short messages): no
	 * completion of theirs must come before an answer, and nobody waits
	 * for one, so they are reaped once in 16 polls (their slots, a
	 * receiver that stalls), and the polls between take no lock for them.
	 */
	if (order && !atomic_load_explicit(&cq->mb_txsig, memory_order_relaxed)) {
		uint32_t t = atomic_load_explicit(&cq->mb_txtick, memory_order_relaxed) + 1;

		atomic_store_explicit(&cq->mb_txtick, t, memory_order_relaxed);
		order = false;
		reap = !(t & 15);
	}
	for (uint32_t l = mb_scan_set(cq); l; l &= l - 1)
		if (mb_ready(cq, __builtin_ctz(l), false)) {
			m |= l & -l;
			mb_own_early(cq, __builtin_ctz(l));
		}
	*mask = m;
	if (!m && !reap)
		return false;
	if (order)
		*rx_end = hca_ring_published_end(ring, n);
	if (!hca_mb_busy_try(cq)) {
		*mask = 0;
		if (order)
			*rx_end = 0;
		return false;
	}
	if (reap && !mb_reap_tx(cq, false) && order) {
		*mask = 0;
		*rx_end = 0;
	}
	for (unsigned l = *mask; l; l &= l - 1)
		cq->mb_lim[__builtin_ctz(l)] = peek_end(cq, __builtin_ctz(l));
	return true;
}

/* A receive that failed: whose QP must go to the error state. */
struct mb_fail {
	struct hca_qp *qp;      /* RC: the receiving QP */
	uint32_t tgt;           /* a lane: the XRC receive QP, by number */
};

static struct mb_fail fail_of(const struct hca_mb_rx *x, const struct hca_cqe *c)
{
	return (struct mb_fail){ .qp = x->qp, .tgt = x->qp ? 0 : c->qp_num };
}

/*
 * The QP errs once its completion is out (the flushes come after). An
 * XRC receive QP is the domain's: its entry goes to the error state and
 * its owner is told to flush, as the ring path's responder does.
 */
static void mb_err(struct hca_dev *dev, const struct mb_fail *f)
{
	struct hca_qp_ent *e;

	if (f->qp) {
		hca_qp_to_error(f->qp);
		return;
	}
	e = hca_qp_lookup(dev->seg, f->tgt);
	if (e && atomic_load(&e->qpn) == f->tgt) {
		struct hca_db_msg m = { .kind = HCA_DB_QP_FLUSH,
					.idx = f->tgt & (HCA_MAX_QP - 1), .id = f->tgt };

		atomic_store(&e->state, IBV_QPS_ERR);
		hca_dev_notify(dev, e->owner, e->owner_gen, &m, sizeof(m));
	}
}

/*
 * Consume what hca_mb_begin peeked, after the rings; give mb_busy back.
 * peeked_only: sends of ours were pending, so a mailbox gives only the
 * message seen at the peek (what came after may answer a send not yet
 * retired).
 */
int hca_mb_end(struct hca_cq *cq, unsigned mask, int n, struct ibv_wc *wc, uint64_t *ts,
	       int got, bool peeked_only)
{
	struct mb_fail failed[HCA_MB_PER_CQ];
	int nf = 0;

	/* what the ring path published before a message we peeked must come
	 * out first: if the drain left any (it stops at an entry another
	 * producer has claimed and not yet published, and at n), the
	 * mailboxes wait for the next poll */
	if (mask && hca_ring_any_full(atomic_load_explicit(&cq->ring, memory_order_acquire)))
		mask = 0;

	for (unsigned l = mask; l && got < n; l &= l - 1) {
		int i = __builtin_ctz(l);
		struct hca_mb_rx *x;

		if (!(x = atomic_load(&cq->mb_rx[i])) || !x->mb)
			continue;
		while (got < n) {
			struct hca_cqe c;
			struct mb_done d;
			bool err = false;

			if (hca_mb_take(cq, i, x, cq->mb_lim[i], &c, &err, &d) != MB_GOT)
				break;
			hca_cqe_to_wc(&c, &wc[got]);
			hca_mb_commit(cq, i, x, &d);
			if (ts)
				ts[got] = 0;
			got++;
			if (err) {
				failed[nf++] = fail_of(x, &c);
				break;
			}
			/* past what was peeked: the next take would refuse */
			if (peeked_only || (int64_t)(d.pos - cq->mb_lim[i]) >= 0)
				break;
		}
	}
	hca_mb_busy_drop(cq);
	for (int k = 0; k < nf; k++)
		mb_err(cq->ctx->dev, &failed[k]);
	return got;
}

/*
 * Progress thread: messages of a process that does not poll land in its
 * receive buffers all the same, their completions in the CQ's ring (as
 * the ring path's would). At the inline sweep's pace. A lane whose QP is
 * gone is freed for another.
 */
static void mb_sweep_cq(struct hca_cq *cq)
{
	struct hca_dev *dev = cq->ctx->dev;
	struct mb_fail failed[HCA_MB_PER_CQ];
	int nf = 0;

	/* sends first: what they answered came before what arrives now
	 * (hca_mb_begin); a send queue busy elsewhere: the next sweep */
	if (atomic_load_explicit(&cq->mb_txp, memory_order_relaxed) &&
	    !mb_reap_tx(cq, true)) {
		hca_mb_busy_drop(cq);
		return;
	}
	for (int i = 0; i < HCA_MB_PER_CQ; i++) {
		struct hca_mb_rx *x = atomic_load(&cq->mb_rx[i]);
		struct hca_cqe c;
		struct mb_done d;
		bool err = false;
		enum mb_take t;

		if (!x || !x->mb)
			continue;
		while ((t = hca_mb_take(cq, i, x, UINT64_MAX, &c, &err, &d)) != MB_NONE) {
			if (t == MB_SKIPPED)
				continue;
			hca_cq_push(dev, cq->idx, &c, false);
			hca_mb_commit(cq, i, x, &d); /* after: it came first */
			if (err) {
				failed[nf++] = fail_of(x, &c);
				break;
			}
		}
		if (x->srq)
			hca_mb_lane_sweep(dev, cq, i, x);
	}
	hca_mb_busy_drop(cq);
	for (int k = 0; k < nf; k++)
		mb_err(dev, &failed[k]);
}

void hca_mb_sweep(struct hca_dev *dev)
{
	struct hca_seg *seg = dev->seg;
	uint64_t now;

	if (!hca_mb_max())
		return;
	now = hca_now_ns();
	if (now - dev->mb_swept_ns < HCA_INL_SWEEP_NS)
		return;
	dev->mb_swept_ns = now;
	for (uint32_t i = 1; i < HCA_MAX_CQ; i++) {
		struct hca_cq *cq = atomic_load_explicit(&dev->cq_tab[i], memory_order_acquire);
		bool mine;

		if (!cq)
			continue;
		/* the CQ stays while we hold it busy: destroy waits it out */
		hca_seg_lock(seg);
		cq = atomic_load(&dev->cq_tab[i]);
		mine = cq && (atomic_load(&cq->mb_nrx) || atomic_load(&cq->mb_txp)) &&
		       hca_mb_busy_try(cq);
		hca_seg_unlock(seg);
		if (mine)
			mb_sweep_cq(cq);
	}
}
