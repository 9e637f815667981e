/*
 * The per-user, per-host shared segment: what must be node-wide.
 *
 * One POSIX shm object per (uid, network namespace) — a network namespace
 * is a host — named /softib-<uid>-<netns inode>. Every process that opens
 * softib0 maps it, holding a shared flock on the lock file beside it
 * (<name>.lock) while it does; only the holder of the exclusive lock
 * creates the object or unlinks an unusable one, so there is one segment
 * at a time (seg.c). It holds the process slots, the directory of QPs, CQs,
 * SRQs, memory keys and multicast groups, and a heap from which the rings
 * (receive queues, SRQs, CQs) are carved, so that any process of the host
 * can act as the device for any queue (DESIGN decision 4).
 *
 * Concurrency rules (who writes what):
 *  - seg->lock (robust, process-shared) guards every directory mutation:
 *    allocating or freeing an entry, the heap, process slots. It is never
 *    taken on the data path.
 *  - A directory entry is published by a release store of its id field
 *    (qpn, key, handle) after every other field is written; readers load
 *    the id with acquire and compare it with the id they look for, so a
 *    freed or reused entry is never mistaken for the one they want.
 *  - Fields a data path reads while the owner may change them (QP state,
 *    attributes the responder needs) are atomics or are only changed while
 *    the QP cannot receive (modify before RTR).
 *  - Heap blocks of dead or destroyed objects go through a quarantine
 *    before reuse, so a peer still finishing a transfer into a ring that
 *    was just destroyed writes into memory nobody else owns yet.
 */
#ifndef HCA_SEG_H
#define HCA_SEG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <infiniband/verbs.h>

#include "hca_limits.h"

#define HCA_SEG_MAGIC   0x534f46544942ULL /* "SOFTIB" */
#define HCA_SEG_VERSION 19
/* The heap is sized at creation to the host's RAM (sparse: tmpfs pages on
 * touch), at least HCA_HEAP_MIN_SIZE and at most HCA_HEAP_MAX_SIZE. */
#define HCA_HEAP_MIN_SIZE (1ULL << 31)
#define HCA_HEAP_MAX_SIZE (1ULL << 40)
#define HCA_HEAP_MIN_ORDER 12
#define HCA_HEAP_MAX_ORDER 31
#define HCA_QUARANTINE_LEN 4096
#define HCA_QUARANTINE_NS  (2ULL * 1000000000ULL)
#define HCA_ATOMIC_LOCKS   64
#define HCA_NONE           0xffffffffu

enum hca_proc_state { HCA_PROC_FREE = 0, HCA_PROC_LIVE = 1, HCA_PROC_DEAD = 2 };

/* Why a QP dropped what reached it (softib counters). */
enum hca_qp_drop {
	HCA_DROP_QKEY,      /* UD: Q_Key mismatch */
	HCA_DROP_PSN,       /* out of the PSN window: duplicate or ahead */
	HCA_DROP_ACCESS,    /* UC: bad rkey / range; XRC: bad SRQ number;
			     * RC: a duplicate READ refused so (resp.c) */
	HCA_DROP_NO_WQE,    /* UC/UD: no receive WQE */
	HCA_DROP_STATE,     /* QP cannot receive in its state */
	HCA_DROP_LENGTH,    /* payload against path MTU or DMA length */
	HCA_DROP_MAX
};

/* Per-QP counters, written by whichever process acts for the QP. */
struct hca_qp_counters {
	_Atomic uint64_t tx_pkts, rx_pkts;   /* UDP link packets */
	_Atomic uint64_t retrans;            /* packets sent again */
	_Atomic uint64_t naks_sent, naks_rcvd;
	_Atomic uint64_t rnr_sent, rnr_rcvd;
	_Atomic uint64_t drops[HCA_DROP_MAX];
};

/* Per-process link counters (the UDP socket is the process's). */
struct hca_link_counters {
	_Atomic uint64_t tx_pkts, rx_pkts, tx_errors;
	_Atomic uint64_t bad[8];             /* by enum hca_wire_err */
	_Atomic uint64_t unknown_qp;
	/* the bound socket's receive buffer: asked (SOFTIB_UDP_RCVBUF) and
	 * granted (the kernel clamps to net.core.rmem_max), in bytes; set
	 * once at link start, shown by softib status */
	_Atomic uint64_t rcvbuf_want, rcvbuf_got;
};

/*
 * The block a process's heap allocation took last (hca_heap_alloc_rec),
 * recorded by the allocator as soon as the block is off its free list or
 * past the bump pointer, before the slow part (populating and zeroing),
 * and cleared by the creator once the block is recorded in its object. A
 * process killed in between leaves it here: its reclaim frees the block
 * unless an object of the host holds it (reclaim.c).
 */
struct hca_heap_rec {
	uint64_t off;          /* 0: none */
	uint8_t order;
};

/* A process slot. Written under seg->lock; state read lock-free. A slot
 * is freed only by its reclaim (reclaim.c), which only proof of its
 * process's death (live.c) or the process's own close starts. */
struct hca_proc {
	_Atomic uint32_t state;
	uint32_t gen;          /* bumped at each reuse of the slot */
	pid_t pid;
	uint64_t starttime;    /* /proc/<pid>/stat field 22: pid reuse guard */
	uint64_t freed_ns;     /* when the slot was last freed (delayed reuse) */
	uint64_t bounce_off;   /* its bounce mailbox (mem_bounce.c), 0 if none */
	struct hca_heap_rec alloc; /* a block being taken (seg->lock held) */
	struct hca_link_counters link;
	/* datagrams from another user dropped at our doorbell and channels
	 * (sock_cred.c); written by the slot's process, read by softib */
	_Atomic uint64_t foreign_dgrams;
};

/*
 * A QP directory entry. The responder reads it from any process. Entries
 * live in directory pages (HCA_QP_PAGE of them) in the heap; an entry's
 * place is its number (num), so qpn is either 0 (free) or num.
 */
struct hca_qp_ent {
	_Atomic uint32_t qpn;          /* 0 = free; release-published */
	uint32_t num;                  /* the QPN of this place, set with the page */
	uint16_t owner;                /* process slot */
	uint32_t owner_gen;
	uint64_t cookie;               /* owner's private struct hca_qp * */
	uint8_t type;                  /* enum ibv_qp_type */
	_Atomic uint8_t state;         /* enum ibv_qp_state */
	_Atomic uint8_t comm_est;      /* COMM_EST raised once */
	uint8_t sq_sig_all;
	uint32_t pd;                   /* PD id */
	uint32_t rcq;                  /* CQ index of the receive CQ */
	uint32_t srq;                  /* SRQ index or HCA_NONE */
	uint64_t rq_off;               /* receive ring offset, 0 if SRQ */
	uint64_t mb_off;               /* its mailbox (mbox.c) in the ring's
					* block, 0 if none: set before publish */
	/* RC/UC: connected peer. In the first line, with what a mailbox
	 * requester reads at each post (mb_target): the second holds the
	 * counters the receiver adds to at each message */
	_Atomic uint32_t dest_qpn;
	_Atomic uint32_t qkey;
	_Atomic uint32_t access;       /* qp_access_flags */
	_Atomic uint8_t min_rnr_timer;
	_Atomic uint8_t path_mtu;
	_Atomic uint8_t max_dest_rd_atomic;
	_Atomic uint16_t port_lid;     /* our port's LID (for wc.slid) */
	uint32_t rq_max_sge;
	_Atomic uint64_t rx_msgs, rx_bytes; /* messages taken by the responder */
	struct hca_qp_counters cnt;
	uint32_t xrcd;                 /* XRC: domain index, else HCA_NONE */
	_Atomic uint64_t regs[HCA_MAX_PROCS / 64]; /* XRC target: registered slots */
	_Atomic uint64_t rnr_waiters[HCA_MAX_PROCS / 64]; /* slots held by RNR on it */
	int attr_set;                  /* attributes ever set by modify */
	struct ibv_qp_attr attr;       /* what modify set: query returns it */
} __attribute__((aligned(64))); /* a line per 64 bytes: see dest_qpn */

/* A CQ directory entry: the producer side of a CQ lives here. */
struct hca_cq_ent {
	_Atomic uint32_t handle;       /* 0 = free */
	uint16_t owner;
	uint32_t owner_gen;
	uint64_t cookie;               /* owner's private struct hca_cq * */
	uint64_t ring_off;
	_Atomic uint32_t armed;        /* 0, 1 = next, 2 = solicited only */
	uint32_t chan;                 /* channel id in owner, 0 = none */
	_Atomic uint32_t overrun;
	uint32_t stamp;                /* completions carry a timestamp */
	/* inline receive pool (cq_inline.c), 0 if none: written at create */
	uint64_t inl_off, inl_bytes;
	/* a channel datagram for this CQ is queued and not yet read: set
	 * 0 -> 1 by the producer that sends it, cleared by the owner as it
	 * reads it (so a burst never overflows the channel's queue) */
	_Atomic uint32_t ev_pending;
};

struct hca_srq_ent {
	_Atomic uint32_t handle;       /* 0 = free */
	_Atomic uint32_t srqn;         /* its number (generation | index), 0
					* while none: published last, cleared
					* first (docs/shared-segment.md) */
	uint32_t xrcd;                 /* XRC SRQ: domain index, else HCA_NONE */
	uint32_t cq;                   /* XRC SRQ: its CQ index */
	uint16_t owner;
	uint32_t owner_gen;
	uint64_t cookie;
	uint64_t ring_off;
	uint32_t pd;
	uint32_t max_sge;
	_Atomic uint32_t limit;        /* armed SRQ limit, 0 = disarmed */
	_Atomic uint64_t rnr_waiters[HCA_MAX_PROCS / 64]; /* slots held by RNR on it */
	_Atomic uint8_t error;
};

/* A memory key. lkey == rkey == key. */
struct hca_mr_ent {
	_Atomic uint32_t key;          /* 0 = free */
	uint16_t owner;
	uint32_t owner_gen;
	uint32_t pd;
	uint32_t access;
	uint64_t addr;                 /* start in the owner's address space */
	uint64_t length;
	uint64_t iova;                 /* what remote addresses are relative to */
};

struct hca_mcg {
	uint8_t gid[16];
	uint16_t lid;
	uint16_t nqp;
	uint32_t qpn[HCA_MAX_QP_PER_MCG];
};

/*
 * An XRC domain: node-wide, found by the (device, inode) of the file it
 * was opened on (0/0: a private domain). opens[] counts each process
 * slot's open handles; the domain dies with its last open.
 */
struct hca_xrcd_ent {
	_Atomic uint32_t handle;       /* 0 = free */
	uint64_t fdev, fino;
	uint16_t opens[HCA_MAX_PROCS];
};

/*
 * A copier thread's record (fence.c): gen << 32 | seq, seq odd while the
 * thread is inside a copy section. Written by the threads of the slot's
 * process (CAS to enter, release store to leave), read by any process
 * that invalidates a memory key. One cache line each: the threads of a
 * process do not share a line.
 */
#define HCA_FENCE_RECS 32
struct hca_fence_rec {
	_Alignas(64) _Atomic uint64_t word;
};

/*
 * Claim records (claim.c): what a process is doing to another process's
 * rings, so that whoever reclaims it after a death completes or undoes
 * it. HCA_CLAIM_CELLS per process slot; a thread holds a cell for one
 * operation (one completion pushed; one receive WQE taken, its payload
 * moved and its completion pushed). Written only by the thread holding
 * the cell; read by a reclaimer once the process is dead. Fields:
 *  - state: HCA_CLAIM_* bits (claim.c states the machine);
 *  - op: the ring slot being claimed (position stored before the claim);
 *  - from: the RQ/SRQ the held WQE came from, and its position;
 *  - inl_*: the inline slot claimed for the held WQE's payload, and the
 *    tag its state word carries while it is ours;
 *  - wqe: the held receive WQE, a copy of its ring body.
 */
#define HCA_CLAIM_CELLS 32
#define HCA_CLAIM_WQE_MAX (16 + HCA_MAX_SGE * 16 + 16) /* + ring stride rounding */

struct hca_claim_ring {
	uint32_t kind;                 /* enum hca_claim_kind (claim.c) */
	uint32_t idx;                  /* CQ or SRQ index, or the QPN of an RQ */
	uint32_t handle;               /* CQ or SRQ handle; 0 for an RQ */
	uint32_t body;                 /* bytes of the body */
	uint64_t off;                  /* the ring's heap offset */
	uint64_t pos;                  /* the position claimed or tried */
};

struct hca_claim {
	_Atomic uint32_t state;
	uint32_t inl_seq;              /* inline claims made by this cell */
	struct hca_claim_ring op;
	struct hca_claim_ring from;
	uint32_t inl_cq, inl_handle;   /* the inline slot's CQ */
	uint64_t inl_pool;             /* its pool's heap offset */
	uint32_t inl_k;                /* the slot tried or claimed */
	uint32_t pad;
	uint64_t inl_tag;              /* its state word's upper bits while ours */
	uint8_t wqe[HCA_CLAIM_WQE_MAX];
};

struct hca_quarantine {
	uint64_t off;
	uint64_t free_at_ns;
	uint8_t order;
};

struct hca_seg {
	uint64_t magic;
	uint32_t version;
	uint32_t layout_size;          /* sizeof(struct hca_seg): layout check */
	_Atomic uint32_t ready;
	uint32_t nonce;                /* names this segment's sockets: a
					* segment made anew (another layout)
					* never meets the old one's names */
	pthread_mutex_t lock;          /* robust, process-shared */
	_Atomic uint32_t members;      /* bumped when a process joins/leaves */
	uint32_t next_pd;
	uint32_t next_handle;

	/* heap: power-of-two blocks; free lists are offset-linked */
	uint64_t heap_off, heap_size, heap_bump;
	uint64_t heap_free[HCA_HEAP_MAX_ORDER + 1];
	struct hca_quarantine quar[HCA_QUARANTINE_LEN];
	uint32_t nquar;

	/* QP numbers: each slot owns HCA_QP_PER_PROC numbers and hands them
	 * out round-robin from qp_next, so a freed one comes back last.
	 * The directory: qp_pages[qpn >> 8] is the heap offset of the page
	 * holding entries qpn & ~255 .. | 255, 0 if none; it is published
	 * with release after the page is initialised, readers load it with
	 * acquire. A page with no live entry is freed once the slot's
	 * cursor has left it (through the quarantine, like a ring). */
	_Atomic uint64_t qp_pages[HCA_QP_PAGES];
	uint16_t qp_page_live[HCA_QP_PAGES];
	uint16_t qp_next[HCA_MAX_PROCS];
	uint32_t qp_live[HCA_MAX_PROCS];
	uint16_t mr_gen[HCA_MAX_MR];
	uint32_t mr_hint;
	uint16_t srq_gen[HCA_MAX_SRQ];   /* SRQ numbers: as mr_gen, 12 bits */
	uint32_t srq_hint;

	struct hca_proc procs[HCA_MAX_PROCS];
	struct hca_cq_ent cqs[HCA_MAX_CQ];
	struct hca_srq_ent srqs[HCA_MAX_SRQ];
	struct hca_mr_ent mrs[HCA_MAX_MR];
	struct hca_mcg mcgs[HCA_MAX_MCAST_GRP];
	struct hca_xrcd_ent xrcds[HCA_MAX_XRCD];
	pthread_mutex_t atomic_locks[HCA_ATOMIC_LOCKS];
	struct hca_claim claims[HCA_MAX_PROCS][HCA_CLAIM_CELLS];
	_Atomic uint64_t claims_lost;  /* WQEs a reclaimer could not re-post */
	_Atomic uint64_t heap_repairs; /* heap rebuilds after a holder's death */
	uint64_t bounce_bytes;         /* size of a bounce mailbox (mem_bounce.c),
					* set with the first one */

	/* copy sections (fence.c states the protocol): per process slot, how
	 * many records its processes ever used, and the records */
	_Atomic uint32_t fence_hi[HCA_MAX_PROCS];
	struct hca_fence_rec fence[HCA_MAX_PROCS][HCA_FENCE_RECS];
};

/* The shm name of the segment of this user, host and layout. */
void hca_seg_name(char *buf, size_t len);

/* Map (creating if needed) the segment of this user and host; *lockfd
 * holds a shared flock while it is mapped (one segment at a time). */
int hca_seg_map(struct hca_seg **out, size_t *len, int *lockfd);
void hca_seg_unmap(struct hca_seg *seg, size_t len, int lockfd);

/* Robust lock: a holder's death leaves the lock usable. */
void hca_seg_lock(struct hca_seg *seg);
void hca_seg_unlock(struct hca_seg *seg);
void hca_robust_lock(pthread_mutex_t *m);
int hca_robust_mutex_init(pthread_mutex_t *m);

/* Heap (call with seg->lock held). Returns 0 on failure. */
uint64_t hca_heap_alloc(struct hca_seg *seg, uint64_t size);
uint64_t hca_heap_alloc_rec(struct hca_seg *seg, uint64_t size, struct hca_heap_rec *rec);
void hca_heap_free(struct hca_seg *seg, uint64_t off, uint64_t size);

/*
 * The heap checked (heap_check.c; seg->lock held): 0 if every block in
 * use, quarantined or free is in place, none overlaps another and they
 * cover the bumped part exactly; else EFAULT and what was found first.
 */
enum hca_heap_kind { HCA_HEAP_LIVE, HCA_HEAP_QUAR, HCA_HEAP_FREE, HCA_HEAP_KINDS };
struct hca_heap_report {
	uint64_t size, bump;                 /* heap size, bytes bumped so far */
	uint64_t blocks[HCA_HEAP_KINDS], bytes[HCA_HEAP_KINDS];
	uint64_t overlaps;                   /* blocks two owners would share */
	uint64_t lost;                       /* bumped bytes in no block */
	uint64_t problems;
	char first[160];                     /* the first problem found */
};
int hca_heap_check(struct hca_seg *seg, struct hca_heap_report *rep);
/* Free lists made again from the directory and the quarantine. */
int hca_heap_rebuild(struct hca_seg *seg);

static inline void *hca_seg_ptr(struct hca_seg *seg, uint64_t off)
{
	return off ? (char *)seg + off : NULL;
}

/* The slot that owns a QP number (HCA_NONE: no process's). */
static inline uint32_t hca_qpn_slot(uint32_t qpn)
{
	uint32_t hi = (qpn >> HCA_QPN_K_BITS) & 0xff;

	return hi && hi <= HCA_PROC_SLOTS ? hi - 1 : HCA_NONE;
}

/* The directory page of entry n's page index (NULL: none), lock-free. */
static inline struct hca_qp_ent *hca_qp_page(struct hca_seg *seg, uint32_t page)
{
	uint64_t off = atomic_load_explicit(&seg->qp_pages[page], memory_order_acquire);

	return (struct hca_qp_ent *)hca_seg_ptr(seg, off);
}

/* The entry at number qpn whether live or not (NULL: no page). */
static inline struct hca_qp_ent *hca_qp_ent_at(struct hca_seg *seg, uint32_t qpn)
{
	struct hca_qp_ent *p;

	if (qpn >= HCA_MAX_QP)
		return NULL;
	p = hca_qp_page(seg, qpn >> HCA_QP_PAGE_BITS);
	return p ? p + (qpn & (HCA_QP_PAGE - 1)) : NULL;
}

/* Process slots (seg->lock held). */
int hca_proc_attach(struct hca_seg *seg, uint16_t *slot, uint32_t *gen);
uint64_t hca_proc_starttime(pid_t pid);   /* 0: unreadable */
int hca_proc_stat(pid_t pid, uint64_t *start, char *state);
uint64_t hca_now_ns(void);

#endif
