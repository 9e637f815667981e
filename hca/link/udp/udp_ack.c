/*
 * The responder's ACKs for whole messages, deferred.
 *
 * An ACK costs a datagram: on a veth pair, a send() that runs the whole
 * receive path of the other side, and a receive there. In a ping-pong the
 * requester's application waits for the reply, not the ACK; sent at
 * once, the ACK would go out (and be read on the other side) before the
 * reply, on the critical path. So the ACK at a message's end is owed, in
 * one of two ways:
 *
 *   asked (the last packet has AckReq: the requester wants a completion
 *   soon) — it goes out after the next packet this QP sends
 *   (hca_udp_sq_progress), or when the application polls and finds
 *   nothing new, or when the progress thread runs;
 *
 *   not asked (an unsignaled message that did not fill the window) — it
 *   is coalesced with the ACKs of the messages that follow, as the IB
 *   spec allows: the time it was first owed is noted, and the ACK goes
 *   alone at the first sweep of the poll path (every 16 polls)
 *   HCA_ACK_COALESCE_NS later, or with an asked one, or before the
 *   application sleeps, or when the progress thread runs. It rides with
 *   a packet of its QP (hca_udp_ack_rides) once half that time has
 *   passed — or at once when the application sleeps for completions,
 *   since it would go alone before the next sleep anyway. The
 *   requester's early go-back waits at least 200 us, well beyond.
 *   In a ping-pong of unsignaled SENDs (perftest's, bench/udp_rc's),
 *   an ACK then rides with one reply in several instead of every one:
 *   each is a datagram the peer's kernel and receive path handle.
 *   (Before 2026-11-25: the ACK rode with every reply, and went alone
 *   at the second sweep.)
 *
 * NAKs, duplicate ACKs, coalesced ACKs inside a long message and the
 * answers to READs and atomics go at once (udp_resp.c).
 *
 * A QP's owed ACK is one word (the latest PSN and MSN), which any thread
 * may swap out and send; the list of QPs that owe one is under the link's
 * receive lock.
 */
#include "udp_link.h"

#define HCA_ACK_OWED  (1ULL << 63)
#define HCA_ACK_ASKED (1ULL << 62)
/* an ACK not asked for waits about this long (a sweep or a send of its
 * QP must come); the requester's early go-back (HCA_PROBE_MIN_NS) is 4
 * times longer. Timed from when it was owed, not from a sweep: a poller
 * that the machine's load lets run a few polls per message would sweep
 * too rarely, and the requester would go back for nothing. */
#define HCA_ACK_COALESCE_NS 50000ULL
/* another QP's ACK not asked for rides with a packet to its host once
 * owed this long: later than a QP's own (HCA_ACK_COALESCE_NS / 2), so that
 * in a ping-pong of 20-25 us round trips it rides with every second
 * reply rather than every one (each is a datagram the peer reads), and
 * still before the sweep would send it alone */
#define HCA_ACK_HOST_RIDE_NS (HCA_ACK_COALESCE_NS * 4 / 5)
/*
 * An XRC receive QP sends no packet of its own: an ACK it was asked for
 * would go alone at the requester's next empty poll of any CQ — in the
 * MPI component's ping-pong (every send signalled: its callback) before
 * the reply is even posted, a send() and a datagram per message. It
 * waits this long for a packet to that host (the reply) to ride with.
 */
#define HCA_ACK_TGT_ASKED_NS 20000ULL
/*
 * ... and one not asked for goes alone only after this long (not
 * HCA_ACK_COALESCE_NS): it rides from HCA_ACK_HOST_RIDE_NS on, and with
 * the MPI component's round trips of 25-30 us the sweep at 50 us came
 * before the second reply after it was owed (about 3,000 lone ACKs in
 * 10,200 round trips a side). Still well below the requester's early
 * go-back (HCA_PROBE_MIN_NS, 200 us).
 */
#define HCA_ACK_TGT_COALESCE_NS 75000ULL
/* an application that woke from a sleep for completions this recently
 * sleeps again soon: its ACKs ride (as dev.c's HCA_POLL_GRACE_NS) */
#define HCA_ACK_SLEEPER_NS 200000ULL

void hca_udp_ack_owe(struct hca_qp *qp, uint32_t daddr, uint32_t psn, bool asked)
{
	struct hca_link *l = &qp->dev->link;
	uint64_t v = HCA_ACK_OWED | (uint64_t)qp->msn << 24 | psn;

	uint64_t old = atomic_load(&qp->ack_owed);

	qp->ack_daddr = daddr;
	/* a later ACK covers the earlier one; "asked" sticks until sent, and
	 * the age counts from the first ACK owed */
	if (asked || (old & HCA_ACK_ASKED))
		v |= HCA_ACK_ASKED;
	if (!old) { /* the age counts from the first ACK owed */
		uint64_t seen = hca_now_ns();

		atomic_store_explicit(&qp->ack_seen_ns, seen, memory_order_relaxed);
		if (seen + HCA_ACK_HOST_RIDE_NS <
		    atomic_load_explicit(&l->ride_from_ns, memory_order_relaxed))
			atomic_store_explicit(&l->ride_from_ns, seen + HCA_ACK_HOST_RIDE_NS,
					      memory_order_relaxed);
	}
	atomic_store(&qp->ack_owed, v);
	if (v & HCA_ACK_ASKED)
		atomic_store_explicit(&l->acks_asked, true, memory_order_relaxed);
	if (qp->ack_listed)
		return;
	int n = atomic_load_explicit(&l->nowed, memory_order_relaxed);

	if (n == HCA_OWED_MAX) {
		hca_udp_ack_flush(qp);
		return;
	}
	l->owed[n] = qp;
	atomic_store_explicit(&l->nowed, n + 1, memory_order_relaxed);
	qp->ack_listed = true;
}

/*
 * Take the QP's owed ACK, if it owes one (asked_only: one the requester
 * asked for; one not asked for waits to be coalesced): its header into h,
 * its destination into *daddr. The caller sends it (with a packet of its
 * own: udp_req.c, one system call for both).
 */
bool hca_udp_ack_take(struct hca_qp *qp, bool asked_only, struct hca_wire_hdr *h,
		      uint32_t *daddr)
{
	uint64_t v;

	if (asked_only && !(atomic_load(&qp->ack_owed) & HCA_ACK_ASKED))
		return false;
	v = atomic_exchange(&qp->ack_owed, 0);
	if (!v)
		return false;
	*h = (struct hca_wire_hdr){ .opcode = hca_wire_transport(qp->type) |
					      HCA_WOP_ACKNOWLEDGE,
				    .syndrome = hca_aeth_make(HCA_AETH_ACK,
							      HCA_AETH_CREDIT_INVALID),
				    .psn = (uint32_t)v & 0xffffff,
				    .msn = (uint32_t)(v >> 24) & 0xffffff };
	*daddr = qp->ack_daddr;
	return true;
}

/*
 * Does the ACK this QP owes go with the packet it sends now? Asked for:
 * yes. Not asked: once owed for half the coalescing time, or
 * when the application sleeps for its completions (it would go alone
 * before the next sleep).
 */
static bool rides_after(struct hca_qp *qp, uint64_t age_ns)
{
	uint64_t v = atomic_load_explicit(&qp->ack_owed, memory_order_relaxed), seen, now;
	uint64_t slept;

	if (!v)
		return false;
	if (v & HCA_ACK_ASKED)
		return true;
	seen = atomic_load_explicit(&qp->ack_seen_ns, memory_order_relaxed);
	slept = atomic_load_explicit(&qp->dev->sleeper_ns, memory_order_relaxed);
	now = hca_now_ns();
	return now - seen >= age_ns || (slept && now - slept < HCA_ACK_SLEEPER_NS);
}

bool hca_udp_ack_rides(struct hca_qp *qp)
{
	return rides_after(qp, HCA_ACK_COALESCE_NS / 2);
}

/*
 * The ACK another QP of this device owes the host at daddr, when it is
 * due to ride (as hca_udp_ack_rides), for `self` to carry in its send:
 * its headers into *h (ready to seal). An XRC receive QP (TGT) never sends
 * a packet of its own — the replies to the requests it receives go out on
 * our XRC send QP to the peer's TGT — so its ACK never rode, and went
 * alone: a send() here, a datagram read there, about one per two round
 * trips of libsib's 8 B ping-pong (per-thread system calls: 1.4 sendto
 * per round trip, no sendmmsg). An RC QP's own ACK is taken by its own
 * sends first. rx_lock is only tried: whoever holds it (the progress
 * thread, a poller) flushes the owed list itself.
 */
bool hca_udp_ack_take_host(struct hca_qp *self, uint32_t daddr, struct hca_wire_hdr *h)
{
	struct hca_link *l = &self->dev->link;
	uint64_t next = UINT64_MAX, seen, slept, now;
	bool found = false;
	uint32_t a;

	if (!atomic_load_explicit(&l->nowed, memory_order_relaxed))
		return false;
	/* none asked for and none old enough (ride_from_ns), the application
	 * not sleeping for its completions (rides_after): most sends of a
	 * ping-pong, which so take no lock on their way out */
	now = hca_now_ns();
	slept = atomic_load_explicit(&self->dev->sleeper_ns, memory_order_relaxed);
	if (!atomic_load_explicit(&l->acks_asked, memory_order_relaxed) &&
	    now < atomic_load_explicit(&l->ride_from_ns, memory_order_relaxed) &&
	    !(slept && now - slept < HCA_ACK_SLEEPER_NS))
		return false;
	if (pthread_mutex_trylock(&l->rx_lock))
		return false;
	int n = atomic_load_explicit(&l->nowed, memory_order_relaxed);

	for (int i = 0; i < n; i++) {
		struct hca_qp *qp = l->owed[i];

		if (found || qp == self || qp->ack_daddr != daddr ||
		    !rides_after(qp, HCA_ACK_HOST_RIDE_NS) ||
		    !hca_udp_ack_take(qp, false, h, &a)) {
			/* the hint for the ones left */
			seen = atomic_load_explicit(&qp->ack_seen_ns, memory_order_relaxed);
			if (atomic_load_explicit(&qp->ack_owed, memory_order_relaxed) &&
			    seen + HCA_ACK_HOST_RIDE_NS < next)
				next = seen + HCA_ACK_HOST_RIDE_NS;
			continue;
		}
		/* under rx_lock: the QP cannot go away (hca_link_forget) */
		h->pkey = HCA_DEFAULT_PKEY;
		h->dqpn = qp->attr->dest_qp_num;
		HCA_COUNT(qp->ent, tx_pkts);
		found = true;
	}
	atomic_store_explicit(&l->ride_from_ns, next, memory_order_relaxed);
	pthread_mutex_unlock(&l->rx_lock);
	return found;
}

/* Send the QP's owed ACK, if it still owes one. */
void hca_udp_ack_flush(struct hca_qp *qp)
{
	struct hca_wire_hdr h;
	uint32_t daddr;

	if (hca_udp_ack_take(qp, false, &h, &daddr))
		hca_udp_send_answer(qp, daddr, &h, NULL, 0);
}

/* ... only if the requester asked for it. */
void hca_udp_ack_flush_asked(struct hca_qp *qp)
{
	if (atomic_load(&qp->ack_owed) & HCA_ACK_ASKED)
		hca_udp_ack_flush(qp);
}

/* Does QP i's owed ACK go in this flush (now: the sweep's clock)? */
static bool due(struct hca_qp *qp, enum hca_ack_flush what, uint64_t now)
{
	uint64_t v = atomic_load(&qp->ack_owed), seen;

	if (!v || what == HCA_ACKS_ALL)
		return true; /* nothing owed: leaves the list */
	if ((v & HCA_ACK_ASKED) && qp->type != IBV_QPT_XRC_RECV)
		return true;
	if (what == HCA_ACKS_ASKED && !(v & HCA_ACK_ASKED))
		return false;
	if (!now)
		now = hca_now_ns();
	seen = atomic_load_explicit(&qp->ack_seen_ns, memory_order_relaxed);
	/* an XRC receive QP's asked ACK waits a little for a packet to its
	 * host to ride with (hca_udp_ack_take_host) */
	if (v & HCA_ACK_ASKED)
		return now - seen >= HCA_ACK_TGT_ASKED_NS;
	return what == HCA_ACKS_SWEEP &&
	       now - seen >= (qp->type == IBV_QPT_XRC_RECV ? HCA_ACK_TGT_COALESCE_NS :
							   HCA_ACK_COALESCE_NS);
}

/* The owed ACKs that `what` says go now (rx_lock held). */
void hca_link_acks_flush_locked(struct hca_dev *dev, enum hca_ack_flush what)
{
	struct hca_link *l = &dev->link;

	int n = atomic_load_explicit(&l->nowed, memory_order_relaxed);
	uint64_t now = n && what == HCA_ACKS_SWEEP ? hca_now_ns() : 0;
	bool asked = false;

	for (int i = 0; i < n; i++) {
		struct hca_qp *qp = l->owed[i];

		if (!due(qp, what, now)) {
			asked |= (atomic_load(&qp->ack_owed) & HCA_ACK_ASKED) != 0;
			continue;
		}
		hca_udp_ack_flush(qp);
		qp->ack_listed = false;
		l->owed[i--] = l->owed[--n];
	}
	atomic_store_explicit(&l->nowed, n, memory_order_relaxed);
	/* what stays owed is asked for only if seen so (a QP that owes one
	 * sets it again, under this lock too) */
	atomic_store_explicit(&l->acks_asked, asked, memory_order_relaxed);
}

/* wait: queue behind a receiver (progress thread), or leave it to it. */
void hca_link_acks_flush(struct hca_dev *dev, bool wait, enum hca_ack_flush what)
{
	struct hca_link *l = &dev->link;

	/* a peek without rx_lock: a miss is flushed by the next caller.
	 * A busy poll that found nothing asks for the asked ones only, and
	 * in a ping-pong of unsignaled SENDs an ACK not asked for is owed
	 * nearly always: without the second peek, every empty poll took and
	 * gave back rx_lock for nothing (a fifth of the instructions of an
	 * empty poll outside the kernel, callgrind) */
	if (!atomic_load_explicit(&l->nowed, memory_order_relaxed) ||
	    (what == HCA_ACKS_ASKED &&
	     !atomic_load_explicit(&l->acks_asked, memory_order_relaxed)))
		return;
	if (wait)
		pthread_mutex_lock(&l->rx_lock);
	else if (pthread_mutex_trylock(&l->rx_lock))
		return;
	hca_link_acks_flush_locked(dev, what);
	pthread_mutex_unlock(&l->rx_lock);
}

/* A QP going away leaves the owed list (rx_lock held; hca_qp_destroy). */
void hca_link_forget(struct hca_dev *dev, struct hca_qp *qp)
{
	struct hca_link *l = &dev->link;

	atomic_store(&qp->ack_owed, 0);
	int n = atomic_load_explicit(&l->nowed, memory_order_relaxed);

	for (int i = 0; i < n; i++)
		if (l->owed[i] == qp)
			l->owed[i--] = l->owed[--n];
	atomic_store_explicit(&l->nowed, n, memory_order_relaxed);
	qp->ack_listed = false;
}
