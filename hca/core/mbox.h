/*
 * A receive QP's mailbox (mbox.c states the protocol): a ring of 64-byte
 * slots in the segment, written by the one requester the QP is connected
 * to and read by the QP's own process as it polls. Each line has one
 * writer: the header's first line the receiver at open, its second a
 * lane's requester (prod), its third the receiver as it consumes, a slot
 * the requester (its word also the receiver's CAS to TAKEN, or the
 * requester's to RETRACTED).
 */
#ifndef HCA_MBOX_H
#define HCA_MBOX_H

#include <stdatomic.h>
#include <stdint.h>

#include "hca_int.h"
#include "ring.h"

#define HCA_MB_SLOTS 256         /* a power of two: 16 KiB of slots */
#define HCA_MB_LAZY_N 32         /* unsignalled sends a poll lets wait */
#define HCA_MB_HEAD 24           /* a message's first slot, before its bytes */
#define HCA_MB_FIRST (64 - HCA_MB_HEAD)
/* SOFTIB_MBOX_MAX's ceiling: a message of 64 slots, four in flight */
#define HCA_MB_LIMIT (HCA_MB_FIRST + 63 * 64)
#define HCA_MB_DEFAULT 1064      /* 17 slots: measured, docs/datapath.md */

enum hca_mb_state { HCA_MB_EMPTY = 0, HCA_MB_READY, HCA_MB_TAKEN, HCA_MB_RETRACTED };
#define HCA_MB_F_IMM 1u
#define HCA_MB_F_SOLICITED 2u
#define HCA_MB_F_SIGNALED 4u     /* the requester wants the completion */

struct hca_mb_slot {
	_Atomic uint64_t word;   /* pos << 8 | enum hca_mb_state */
	uint32_t len;            /* payload bytes (first slot only) */
	uint32_t imm;            /* network order, as in the WR */
	uint16_t nslots;         /* slots the message spans */
	uint16_t flags;
	uint32_t scq;            /* the requester's send CQ: woken if armed */
	uint8_t data[HCA_MB_FIRST]; /* then the next slots, whole */
};

struct hca_mbox {
	/* the receiver's, at each open (INIT -> RTR): nonzero; the sender
	 * binds to it and sees a reopen as a new connection */
	_Atomic uint32_t epoch;
	uint32_t pad0;
	uint64_t pad0a[7];
	/* a lane's: the requester's next position, stored after each of its
	 * messages (a QP that comes back to its lane, or the next to claim
	 * it, starts there: never below a slot not yet passed). A line of
	 * its own: the receiver reads epoch at every take, and sharing the
	 * line made each message's store here cost that read a miss */
	_Atomic uint64_t prod;
	uint64_t pad1a[7];
	/* the receiver's, as it consumes: read by the sender's polls */
	_Atomic uint64_t cons;   /* positions consumed (or skipped) */
	_Atomic uint64_t rnr;    /* pos + 1 of a message found with no WQE */
	_Atomic uint64_t nak;    /* (pos + 1) << 8 | ibv_wc_status refused */
	uint64_t pad1[5];
	struct hca_mb_slot slot[HCA_MB_SLOTS];
};

/*
 * An XRC SRQ's lanes, after its ring in its heap block (struct hca_ring's
 * extra): each a mailbox that one requester QP of this host claims by CAS
 * of its owner word (0 -> hca_mb_owner) and keeps while it lives; the
 * SRQ's owner consumes every lane as it polls the SRQ's CQ, and frees
 * the lanes of QPs that are gone (its sweep). tgt_qpn (the XRC receive
 * QP the requester is connected to) and src_qpn are the claimer's,
 * written before its first message (whose word's release covers them):
 * the receive completion's qp_num and src_qp, as the ring path gives.
 */
struct hca_mb_lanes {
	_Atomic uint64_t owner[HCA_MB_LANES];
	_Atomic uint32_t tgt_qpn[HCA_MB_LANES];
	_Atomic uint32_t src_qpn[HCA_MB_LANES];
	uint8_t pad[64 - HCA_MB_LANES * 16];
	struct hca_mbox lane[HCA_MB_LANES];
};

static inline uint64_t hca_mb_owner(uint16_t slot, uint32_t gen, uint32_t qpn)
{
	return (uint64_t)slot << 48 | (uint64_t)(gen & 0xffffff) << 24 | (qpn & 0xffffff);
}

/* Where the lanes of an SRQ's ring block are (NULL: it has none). */
static inline struct hca_mb_lanes *hca_mb_lanes_of(struct hca_ring *r)
{
	uint64_t at = (hca_ring_bytes(r->cap, r->stride - 8) + 63) & ~63ULL;

	if (r->extra < at - hca_ring_bytes(r->cap, r->stride - 8) + sizeof(struct hca_mb_lanes))
		return NULL;
	return (struct hca_mb_lanes *)((char *)r + at);
}

static inline uint64_t hca_mb_word(uint64_t pos, unsigned st)
{
	return pos << 8 | st;
}

static inline struct hca_mb_slot *hca_mb_at(struct hca_mbox *mb, uint64_t pos)
{
	return &mb->slot[pos & (HCA_MB_SLOTS - 1)];
}

static inline uint32_t hca_mb_nslots(uint32_t len)
{
	return len <= HCA_MB_FIRST ? 1 : 1 + (len - HCA_MB_FIRST + 63) / 64;
}

/*
 * Where the bytes of the message at pos begin, and how many of them can
 * lie there before the ring's end; the rest continue at the first slot.
 */
static inline uint8_t *hca_mb_bytes(struct hca_mbox *mb, uint64_t pos, uint32_t *room)
{
	uint8_t *p = hca_mb_at(mb, pos)->data;

	*room = (uint32_t)((uint8_t *)&mb->slot[HCA_MB_SLOTS] - p);
	return p;
}

/* Does WQE w of qp ask for its completion? */
static inline bool hca_mb_wqe_sig(const struct hca_qp *qp, const struct hca_swqe *w)
{
	return qp->sq_sig_all || (w->wr.send_flags & IBV_SEND_SIGNALED);
}

/* The requester forgets its mailbox sends (sq_lock held): none pending. */
static inline void hca_mb_tx_forget(struct hca_qp *qp)
{
	if (qp->mb_n)
		atomic_fetch_sub_explicit(&qp->scq->mb_txp, qp->mb_n, memory_order_relaxed);
	if (qp->mb_nsig)
		atomic_fetch_sub_explicit(&qp->scq->mb_txsig, qp->mb_nsig, memory_order_relaxed);
	qp->mb_n = qp->mb_nsig = 0;
}

/*
 * n bytes between p and the slots at *at (*room of them before the ring's
 * end), on from the first slot past the end: into the slots (to_slots)
 * or out of them. *at and *room move on.
 */
static inline void hca_mb_run(struct hca_mbox *mb, uint8_t **at, uint32_t *room, uint8_t *p,
			      size_t n, bool to_slots)
{
	while (n) {
		size_t run = n < *room ? n : *room;

		if (to_slots)
			memcpy(*at, p, run);
		else
			memcpy(p, *at, run);
		*at += run;
		p += run;
		n -= run;
		*room -= (uint32_t)run;
		if (!*room) { /* the slots wrap: on at the first */
			*at = (uint8_t *)mb->slot;
			*room = sizeof(mb->slot);
		}
	}
}

/*
 * The slot a requester's next mailbox message goes to, asked for
 * exclusive (PREFETCHW) as its post begins (sq_lock held): the receiver
 * reads that line while it waits, and the post's work hides the trip
 * that takes it back. A mailbox unbound since costs a useless prefetch,
 * which never faults.
 */
static inline void hca_mb_own_next(struct hca_mbox *mb, uint64_t prod)
{
	if (mb)
		hca_prefetchw(hca_mb_at(mb, prod));
}

/* The mailboxes' entry points (mbox.c, mbox_lanes.c). */
uint32_t hca_mb_max(void);
bool hca_mb_rx_want(struct hca_qp *qp);
void hca_mb_attach(struct hca_qp *qp, uint64_t mb_off);
void hca_mb_detach(struct hca_qp *qp);
void hca_mb_open(struct hca_qp *qp);
void hca_mb_close(struct hca_qp *qp);
void hca_mb_retract(struct hca_qp *qp);
void hca_mb_tx_drop(struct hca_qp *qp);
bool hca_mb_still_named(struct hca_qp *qp);
bool hca_mb_lanes_want(const struct hca_srq *srq);
uint64_t hca_mb_lanes_block(uint64_t ring_bytes);
void hca_mb_lanes_init(struct hca_srq *srq);
void hca_mb_lanes_fini(struct hca_srq *srq);
bool hca_mb_begin(struct hca_cq *cq, struct hca_ring *ring, uint32_t n, unsigned *mask,
		  uint64_t *rx_end);
int hca_mb_end(struct hca_cq *cq, unsigned mask, int n, struct ibv_wc *wc, uint64_t *ts,
	       int got, bool peeked_only);
bool hca_mb_waiting(struct hca_cq *cq);
bool hca_mb_late(struct hca_cq *cq);
uint32_t hca_mb_count(struct hca_cq *cq);
void hca_mb_sweep(struct hca_dev *dev);

/*
 * Shared by mbox.c (RC mailboxes, the polls) and mbox_lanes.c (XRC):
 * one scanner of a CQ's mailboxes at a time (mb_busy); a mailbox onto
 * and off its CQ's scan; an epoch for a new one.
 */
void hca_mb_busy_take(struct hca_cq *cq);
bool hca_mb_busy_try(struct hca_cq *cq);
void hca_mb_busy_drop(struct hca_cq *cq);
int hca_mb_rx_list_add(struct hca_cq *cq, struct hca_mb_rx *x);
void hca_mb_rx_publish(struct hca_cq *cq, struct hca_mb_rx *x, struct hca_ring *rq);
void hca_mb_rx_unpublish(struct hca_cq *cq, struct hca_mb_rx *x);
uint32_t hca_mb_new_epoch(struct hca_dev *dev);
/* ... and the lanes' parts of the receiver and the requester */
void hca_mb_lane_sweep(struct hca_dev *dev, struct hca_cq *cq, int i, struct hca_mb_rx *x);
void hca_mb_lane_srq_limit(struct hca_srq *srq);
void hca_mb_lane_est(struct hca_dev *dev, struct hca_mb_rx *x, uint32_t tgt);
void hca_mb_lane_release(struct hca_qp *qp);

/* ... taking one message (mbox_take.c), for the polls and the sweep */
enum mb_take { MB_NONE, MB_GOT, MB_SKIPPED };
/* A message taken, its position not yet given back (mb_commit). */
struct mb_done {
	uint64_t pos;           /* past it */
	uint32_t flags, scq;
};
enum mb_take hca_mb_take(struct hca_cq *cq, int i, struct hca_mb_rx *x, uint64_t lim,
			 struct hca_cqe *c, bool *err, struct mb_done *d);
void hca_mb_commit(struct hca_cq *cq, int i, struct hca_mb_rx *x, const struct mb_done *d);

#endif
