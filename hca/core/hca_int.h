/*
 * Private structures of the HCA, shared by the files of hca/ only.
 *
 * Each process has one struct hca_dev: its view of the host's shared
 * segment (seg.h), its process slot, its doorbell socket and its progress
 * thread. Objects (QPs, CQs, ...) have a private part here and a directory
 * entry in the segment; the private tables dev->qp_tab etc. map a
 * directory index back to the private object, and are how a message that
 * names an object by index + id is checked before it is acted on.
 */
#ifndef HCA_INT_H
#define HCA_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "cq_inline.h"
#include "dev_attr.h"
#include "die_at.h"
#include "hca.h"
#include "link_state.h"
#include "ring.h"
#include "seg.h"

/* room in a QP for a link's message header (struct hca_wire_hdr) */
#define HCA_QP_LINK_HDR 96

struct hca_fault;
struct hca_pcap;
struct hca_link_ops;

/*
 * A peer process as this process knows it: its pidfd, opened once.
 * `known` packs the slot generation the verdict is about with the verdict
 * (gen << 32 | HCA_PEER_OPEN or HCA_PEER_DEAD; 0: nothing known), so that
 * a reader without dev->lock sees both from one load, never the gen of one
 * incarnation with the verdict of another. Written only under dev->lock,
 * with release stores; read by the fast path of hca_peer_check (any
 * thread) with an acquire load. `pidfd` and the "unknown" fields are read
 * and written only under dev->lock (and by dev_free once the progress
 * thread has stopped).
 */
#define HCA_PEER_OPEN 1ULL  /* a pidfd watches it: alive until it fires */
#define HCA_PEER_DEAD 2ULL  /* proven dead */
struct hca_peer {
	_Atomic uint64_t known;
	int pidfd;              /* -1 when not opened, -2 known dead */
	bool unwatched;         /* the epoll set refused pidfd: polled at ticks */
	/* a check that could not be made (no descriptor to spare): not
	 * tried again for that generation until then */
	uint32_t unknown_gen;
	uint64_t unknown_until;
};

/*
 * Wake datagrams whose send failed, kept until they go (wake.c): a
 * doorbell or a channel's wake is never dropped.
 */
#define HCA_WAKE_MSG_MAX 16
struct hca_wake_retry {
	struct sockaddr_un a;
	socklen_t al;
	uint16_t slot;          /* the receiving process: stale once it is gone */
	uint32_t gen;
	uint32_t len;
	uint8_t msg[HCA_WAKE_MSG_MAX];
};
struct hca_wake {
	pthread_mutex_t lock;   /* the list; a leaf lock */
	bool lock_ok;
	struct hca_wake_retry *q;
	uint32_t n, cap;
	int timer_fd;           /* the retries' timer (progress thread) */
	uint64_t backoff_ns;
	_Atomic uint64_t deferred, retried, timer_errors;
	uint32_t members_seen;  /* hca_wake_flush_backstop (progress thread) */
};

struct hca_dev {
	struct hca_seg *seg;
	size_t seg_len;
	int seg_lock_fd;        /* shared flock: one segment at a time (seg.c) */
	uint16_t slot;
	uint32_t gen;
	pid_t pid;
	int refcnt;
	struct hca_host_net net;
	__be64 guid;
	uint16_t lid;
	enum ibv_mtu mtu;
	bool no_cma;

	int db_fd;              /* doorbell: abstract AF_UNIX datagram socket */
	int epfd, timer_fd, stop_fd;
	pthread_t progress;
	bool progress_started;

	pthread_mutex_t lock;   /* private tables, peers, waiting list */
	struct hca_peer peers[HCA_MAX_PROCS];
	uint32_t members_seen;
	_Atomic bool rescan;    /* a liveness check could not be made: again */
	struct hca_qp *waiting;     /* QPs with a send WQE held back */
	_Atomic uint64_t next_wake_ns;

	/* our objects by directory index (obj_tab.c: who reads them how) */
	struct hca_qp *_Atomic *qp_tab; /* by QPN: HCA_MAX_QP, sparse (mmap) */
	struct hca_cq *_Atomic cq_tab[HCA_MAX_CQ];
	struct hca_srq *_Atomic srq_tab[HCA_MAX_SRQ];
	uint16_t *xrc_local;    /* by QPN, sparse: our handles on each XRC target QP */
	struct hca_ctx *ctxs;
	struct hca_link link;
	int links_opened;       /* rows of hca_links whose open was tried */
	_Atomic int udp_qps;    /* QPs whose path is the UDP link: poll reads it */
	_Atomic uint64_t poll_ns;  /* when a CQ poll last read the link (0:
				    * the application is going to sleep) */
	_Atomic uint32_t polls;    /* CQ polls, counted without a lock */
	_Atomic uint32_t polls_at_arm; /* ... when a CQ was last armed */
	/* the receive queue our responder last took a WQE of for our own
	 * memory (its ring's heap offset, 0: none; SRQ index and handle, or
	 * HCA_NONE and the QPN): an idle poll prefetches the buffer its next
	 * WQE names (cq.c, rx_prefetch_next) */
	_Atomic uint64_t rx_pf_off;
	_Atomic uint32_t rx_pf_idx, rx_pf_handle, rx_pf_srq; /* a hint: relaxed */
	/* progress thread leaves the socket to pollers: set and cleared by
	 * it and by a waking sleeper, read by pollers and timers, each under
	 * a different lock or none; a hint (a stale value costs a wake-up or
	 * a recheck), atomic so that it is never a torn or racing access */
	_Atomic bool link_paused;
	_Atomic int inl_cqs;    /* our CQs with an inline pool (cq_inline.c) */
	_Atomic uint32_t claim_bits; /* our claim cells in use (claim.c) */
	_Atomic uint32_t inl_cq_hi; /* above the highest index of one of them,
				     * or of one with wide slots (emb_cqs) */
	_Atomic int emb_cqs;    /* our CQs whose slots carry payloads (cq_embed.c) */
	uint64_t inl_swept_ns;  /* the progress thread's last sweep */
	uint64_t mb_swept_ns;   /* ... of the mailboxes (mbox.c) */
	/* the progress thread's one-shot watch of the link socket: whether
	 * it is armed, and how many application threads sleep on the socket
	 * themselves meanwhile (hca_chan_get_event), under link_watch_lock */
	pthread_mutex_t link_watch_lock;
	bool link_watched;
	int link_sleepers;
	_Atomic uint64_t sleeper_ns; /* when the last sleeper woke */
	uint64_t timer_at;      /* the timer's next expiry, under lock */
	_Atomic bool timer_failed; /* timerfd_settime failed: epoll_wait ticks
				      (set by any thread that arms, read by the
				      progress thread) */
	uint64_t backstop_ns;   /* the progress thread's last backstop run */
	struct hca_wake wake;   /* failed wake sends, retried (wake.c) */
	struct hca_chan *chans; /* our completion channels (dev->lock) */
};

/*
 * The async event queue of a context: events wait in memory (never
 * dropped), and an eventfd in semaphore mode counts them, so the fd
 * applications poll is readable exactly while one waits.
 */
struct hca_ctx {
	struct hca_dev *dev;
	void *user;
	int ev_fd;              /* eventfd (EFD_SEMAPHORE): events queued */
	pthread_mutex_t ev_lock;
	struct hca_async_ev *evq;   /* ring of evq_cap, grown when full */
	uint32_t evq_cap, evq_head, evq_n;
	struct hca_ctx *next;
};

struct hca_pd {
	struct hca_ctx *ctx;
	uint32_t id;
	_Atomic int refs;       /* MRs, QPs, SRQs, AHs on it */
};

struct hca_mr {
	struct hca_pd *pd;
	uint32_t idx;
	uint32_t key;
};

struct hca_xrcd {
	struct hca_ctx *ctx;
	uint32_t idx, handle;
	_Atomic int refs;       /* SRQs and target QPs made through it */
};

/*
 * A completion channel. Its CQs are listed here so that a wake (any
 * datagram on fd, or none at all) is answered by looking at every CQ's
 * owed-event word (hca_cq_ent.ev_pending): the datagram is only a hint.
 */
struct hca_chan {
	struct hca_ctx *ctx;
	uint32_t id;
	int fd;
	_Atomic int refs;       /* CQs on it */
	pthread_mutex_t lock;   /* cqs, ncq, next_scan */
	struct hca_cq **cqs;
	uint32_t ncq, cqcap, next_scan;
	struct hca_chan *next;  /* dev->chans */
	/* the fd's O_NONBLOCK as last read, and when (chan.c chan_blocking):
	 * any sleeper reads and writes them, relaxed — a stale value only
	 * costs a read of the flags */
	_Atomic uint64_t fl_ns;
	_Atomic bool fl_nonblock;
};

/* One completion as it sits in a CQ ring. */
struct hca_cqe {
	uint64_t wr_id;
	uint64_t ts;
	uint32_t status, opcode, vendor_err, byte_len;
	uint32_t imm, qp_num, src_qp, wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
	uint16_t inl;            /* payload waits in inline slot inl - 1 of the
				  * CQ's pool (cq_inline.c); 0: none */
};

/* Receive mailboxes a CQ's polls scan (mbox.c): those of the first RC
 * QPs made on it, and the lanes of its first XRC SRQs. */
#define HCA_MB_PER_CQ 8
#define HCA_MB_LANES 4          /* per XRC SRQ: one per requester QP bound */
struct hca_mbox;
struct hca_mb_lanes;

/* One receive mailbox on a CQ's list: an RC QP's, or lane k of an SRQ. */
struct hca_mb_rx {
	struct hca_mbox *mb;
	struct hca_qp *qp;
	struct hca_srq *srq;
	int k;
	int ri;                 /* its place in the CQ's lists, or -1 */
	uint32_t est_qpn;       /* a lane: the receive QP whose COMM_EST is out */
};

/*
 * Ask for the line at p to be brought in owned, ready to be written: the
 * post path's prefetches of lines another process wrote last (resp.c,
 * cq.c). __builtin_prefetch(p, 1) emits a plain read prefetch unless the
 * compiler is told the CPU has PREFETCHW (-mprfchw), and a line that
 * arrives shared still costs a second trip at the CAS that writes it.
 * PREFETCHW is a no-op hint on x86-64 CPUs without it.
 */
static inline void hca_prefetchw(const void *p)
{
#if defined(__x86_64__)
	__asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#else
	__builtin_prefetch(p, 1);
#endif
}

/*
 * A receive completion that carries its payload (cq_embed.c states the
 * protocol): a CQ's ring slots span HCA_EMB_LINES cache lines, and a
 * small SEND's target ranges and bytes follow the completion in the slot
 * the requester claims, with no inline-pool slot at all.
 */
#define HCA_INL_EMBED     0xffffu /* hca_cqe.inl: the payload follows it */
#define HCA_EMB_LINES     2       /* measured (docs/datapath.md) */
#define HCA_EMB_LINES_MAX 4       /* SOFTIB_CQE_LINES may ask up to this */
#define HCA_EMB_CAP_MAX   65536   /* larger CQs keep one-line slots */
#define HCA_EMB_EXT_MAX   (HCA_EMB_LINES_MAX * 64 - 64)
struct hca_cqe_emb {
	_Atomic uint64_t state;  /* pos << 8 | kind */
	uint32_t len, niov;
	struct hca_inl_iov iov[]; /* niov ranges, then len bytes */
};
/* A completion and what may follow it in its slot, as pushed. */
struct hca_cqe_buf {
	struct hca_cqe c;
	uint64_t ext[HCA_EMB_EXT_MAX / 8];
};

struct hca_cq {
	struct hca_ctx *ctx;
	uint32_t idx, handle;
	struct hca_cq_ent *ent;
	struct hca_ring *_Atomic ring;  /* swapped by resize; polls load it */
	uint64_t ring_size;
	/* our own send queues' completions: a ring in our private memory,
	 * so that the shared ring's head and slots are written by the
	 * remote producers alone (cq.c hca_cq_push_sq); resize swaps it and
	 * keeps the old ones until destroy (a lock-free poll may hold one) */
	struct hca_ring *_Atomic sq_ring;
	struct hca_ring **sq_old;
	int nsq_old;
	int cqe;
	int flags;
	struct hca_chan *chan;
	int arm_solicited;      /* how the consumer last armed it */
	void *user;
	pthread_mutex_t poll_lock;  /* resize only: polls take no lock */
	_Atomic int pin;        /* doorbell dispatches acting on it (obj_tab.c) */
	_Atomic int refs;       /* QPs on it */
	_Atomic int udp_qps;    /* of them, with a UDP path: polls read the link */
	/* mailboxes (mbox.c): the QPs whose receive mailbox this CQ's polls
	 * scan, and those whose mailbox sends its polls retire; slots
	 * written by create and destroy (destroy then waits out mb_busy),
	 * read by pollers and the progress thread while they hold mb_busy */
	struct hca_mb_rx *_Atomic mb_rx[HCA_MB_PER_CQ];
	struct hca_qp *_Atomic mb_tx[HCA_MB_PER_CQ];
	/* ... each receive mailbox and its next position, as a poll peeks
	 * at them without mb_busy (the box is segment memory, always mapped;
	 * the position is written under mb_busy) */
	struct hca_mbox *_Atomic mb_box[HCA_MB_PER_CQ];
	struct hca_ring *_Atomic mb_rq[HCA_MB_PER_CQ]; /* its receive ring (RQ, SRQ) */
	_Atomic uint64_t mb_pos[HCA_MB_PER_CQ];
	uint64_t mb_lim[HCA_MB_PER_CQ]; /* a poll's: past what it peeked (mb_busy) */
	_Atomic int mb_nrx;           /* receive slots in use: a poll's quick skip */
	/* bit i: mb_box[i] (mb_tx[i]) is set; a poll visits only those
	 * (eight empty looks were a third of an idle poll) */
	_Atomic uint32_t mb_rxlive, mb_txlive;
	/* ... of mb_rxlive, those a requester holds (an RC QP's mailbox, or
	 * an XRC SRQ's lane whose owner word is set): the polls peek only at
	 * these. An SRQ's lanes are all published at its create, but only
	 * the host's requesters that send to it bind one: in a 2-process job
	 * one of eight, and the seven empty peeks were a third of an empty
	 * poll. mb_own[i]: lane i's owner word (segment memory, always
	 * mapped; NULL for an RC QP's mailbox), looked at once in
	 * HCA_MB_BOUND_EVERY polls (hca_mb_begin) */
	_Atomic uint32_t mb_bound;
	_Atomic uint32_t mb_scans;
	_Atomic uint64_t *_Atomic mb_own[HCA_MB_PER_CQ];
	_Atomic uint32_t mb_txp;      /* mailbox sends of its QPs not yet retired */
	_Atomic uint32_t mb_txsig;    /* ... of them, signalled (hca_mb_begin) */
	_Atomic uint32_t mb_txtick;   /* polls, for the lazy reaps */
	_Atomic int mb_busy;          /* one mailbox scanner at a time */
};

/* One receive WQE as it sits in an RQ or SRQ ring. */
struct hca_rsge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};
struct hca_rwqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
	struct hca_rsge sge[];
};

struct hca_srq {
	struct hca_pd *pd;
	uint32_t idx, handle;
	uint32_t num;           /* what peers name it by: hca_srq_num */
	struct hca_srq_ent *ent;
	struct hca_ring *ring;
	uint64_t ring_size;
	uint32_t max_wr, max_sge;
	void *user;
	_Atomic int pin;        /* doorbell dispatches acting on it (obj_tab.c) */
	_Atomic int refs;       /* QPs on it */
	struct hca_xrcd *xrcd;
	struct hca_cq *cq;      /* XRC SRQ */
	/* its lanes (mbox.c), after the ring in its block (NULL: none) */
	struct hca_mb_lanes *lanes;
	struct hca_mb_rx lane[HCA_MB_LANES];
};

/* A send WQE held by the requester until it completes. */
struct hca_swqe {
	struct ibv_send_wr wr;      /* sg_list points at sge[] or inline */
	struct hca_ah ah;           /* UD: copied at post */
	uint32_t total_len;
	struct ibv_sge *sge;        /* num_sge entries, private copy */
	uint8_t *inl;               /* inline payload copy */
	/* UDP link: the PSNs it was given, what its responses brought */
	bool psn_set;
	bool done;                  /* READ / atomic: response complete */
	uint32_t first_psn, npkts;
	uint32_t sent;              /* request packets sent in this pass */
	uint32_t rd_pkts;           /* READ response packets received */
	uint32_t rd_asked;          /* READ: asked for up to here in this pass */
	uint32_t rd_hi;             /* ... and in any pass (the responder took) */
	uint32_t reasks;            /* asked again, nothing more arriving */
	uint64_t reask_ns;          /* when last asked again */
	uint64_t rd_bytes;
	uint64_t atomic_orig;
	uint64_t mb_pos;            /* in a mailbox: its first slot's position */
	uint32_t mb_slots;          /* ... and how many slots it took */
};

struct hca_qp {
	struct hca_ctx *ctx;
	struct hca_pd *pd;          /* NULL for an XRC target QP */
	struct hca_dev *dev;
	uint32_t idx, qpn;
	struct hca_qp_ent *ent;
	enum ibv_qp_type type;
	struct hca_cq *scq, *rcq;
	struct hca_srq *srq;
	struct hca_xrcd *xrcd;      /* XRC target QPs */
	struct ibv_qp_cap cap;
	int sq_sig_all;
	void *user;

	struct ibv_qp_attr *attr;   /* in the directory entry (XRC targets
				     * are modified by any process) */

	struct hca_ring *rq;
	uint64_t rq_size;

	/* send queue: private, only this process executes it */
	pthread_mutex_t sq_lock;
	struct hca_swqe *sq;
	uint32_t sq_head, sq_tail;  /* head = oldest pending */
	uint8_t *sq_inl;            /* cap.max_inline_data per slot */
	struct ibv_sge *sq_sge;     /* cap.max_send_sge per slot */
	/* The three below are written under sq_lock by the requester and
	 * under dev->lock by the waiting list (hca_dev_*), read under either:
	 * relaxed atomics, hints that whoever acts on them re-checks under
	 * sq_lock (a lost kick or a stale time only moves a retry). */
	_Atomic uint64_t wait_until_ns; /* head WQE held back until then */
	int rnr_left, retry_left;
	_Atomic bool waiting;       /* on dev->waiting */
	_Atomic bool rnr_wait;      /* held by an RNR NAK: a kick may resume it */
	struct hca_qp *next_wait;
	bool sqd_event_due;
	_Atomic int pin;            /* progress thread is running it, or
				     * dispatching an event to it (obj_tab.c) */
	_Atomic bool dying;         /* being destroyed: no list takes it */

	/* the link that carries its packets (link_ops.h attach); NULL: the
	 * engine runs its WQEs against the responder itself (shared memory) */
	const struct hca_link_ops *link;
	/* UDP link, requester (sq_lock) */
	bool udp;                   /* RC/UC/XRC path leads over UDP */
	int8_t path_route;          /* host link: 1 local, -1 not, 0 unknown */
	uint32_t udp_daddr;
	uint32_t sq_next;           /* next WQE to transmit */
	uint32_t psn;               /* next PSN to assign */
	uint32_t send_psn;          /* next PSN to (re)transmit */
	uint32_t high_psn;          /* highest PSN ever sent: retransmissions */
	uint32_t cwnd;              /* packets allowed in flight (loss-adaptive) */
	uint32_t nak_stall;         /* NAKs in a row that moved nothing */
	uint32_t acked_psn;         /* acknowledged, as far as sending goes */
	uint32_t acked_high;        /* the highest PSN ever acknowledged */
	uint64_t last_progress_ns;
	uint64_t rnr_until_ns;
	/* early retransmission (udp_req.c): the round trip, measured */
	uint64_t srtt_ns, rttvar_ns;
	uint64_t rtt_sent_ns;       /* when rtt_psn went; 0: no sample pending */
	uint32_t rtt_psn;
	uint64_t last_probe_ns;     /* the last early go-back */
	uint64_t goback_ns;         /* the last go-back after a NAK ... */
	uint32_t goback_psn;        /* ... and the PSN it went back to */
	uint32_t probes;            /* early go-backs since progress */
	/* The application's modify against the progress thread's acting on
	 * an error a responder reported (event.c): a reset made between its
	 * check and its act would otherwise be undone. Taken before sq_lock
	 * and resp_lock. */
	pthread_mutex_t state_lock;
	/* UDP link, responder (resp_lock) */
	pthread_mutex_t resp_lock;
	uint32_t epsn, msn;
	bool nak_sent, in_msg;
	uint64_t nak_ns;            /* when the last sequence NAK went */
	uint32_t msg_psn;           /* first PSN of the message being assembled */
	/* its first packet's headers (struct hca_wire_hdr): the UDP link's
	 * own layout, kept here as bytes so that core needs no wire.h
	 * (link/udp/udp_resp.c asserts that it fits) */
	_Alignas(8) uint8_t msg_hdr[HCA_QP_LINK_HDR];
	uint8_t *rbuf;
	size_t rlen, rcap;
	/* a deferred ACK (udp_ack.c): flags | msn << 24 | psn, or 0 (any
	 * thread may send it: whoever swaps it out) */
	_Atomic uint64_t ack_owed;
	uint32_t ack_daddr;
	bool ack_listed;            /* on link.owed (rx_lock) */
	/* when the owed ACK was first owed; written under rx_lock, read
	 * by the sender deciding whether it rides */
	_Atomic uint64_t ack_seen_ns;
	uint8_t *rdbuf;             /* READ responses are built here */
	size_t rdcap;
	struct { uint32_t psn; uint64_t orig; bool valid; } replay[16];
	unsigned replay_next;
	int mcast_count;
	/* mailbox, sender side (mbox.c; under sq_lock): the peer's mailbox
	 * this QP writes, as bound (the entry, its offset, its epoch), our
	 * next position and the last consumer index read; the WQEs
	 * [sq_head, sq_head + mb_n) sit in the mailbox, none before
	 * mb_block may go there (a retract sends them by the ring path) */
	bool mb_tx_ok;              /* on its send CQ's list */
	struct hca_mbox *mb;
	struct hca_qp_ent *mb_e;
	uint64_t mb_boff;
	uint32_t mb_epoch;
	uint32_t mb_srqn;           /* XRC: the SRQ whose lane is bound (else 0) */
	uint32_t mb_last_srqn;      /* ... and the SRQ of the last SEND looked at */
	struct hca_mb_lanes *mb_lanes; /* ... its lanes, and ours among them */
	int mb_lane;
	uint32_t mb_cq;             /* the receiver's CQ: woken if armed */
	uint64_t mb_prod, mb_cons;
	uint32_t mb_n;
	uint32_t mb_block;
	uint32_t mb_stall;          /* reaps that saw no progress */
	uint32_t mb_nsig;           /* of the mb_n, those signalled */
	/* a hint, written under sq_lock, read by polls without it: nothing
	 * a poll must do here now (hca_sq_reap); and its polls since */
	_Atomic bool mb_idle;
	_Atomic uint32_t mb_idle_polls;
	uint64_t mb_stall_ns;       /* when they began (0: not timed yet) */
	uint64_t mb_rnr_seen;
	bool mb_held;               /* wait_until_ns is a mailbox wait */
	int mb_ti;                  /* its place in scq->mb_tx, or -1 */
	/* mailbox, receiver side: ours, in the RQ's block (NULL: none), and
	 * its place in rcq->mb_rx / mb_box / mb_pos (-1: none) */
	struct hca_mbox *mb_rx;
	int mb_ri;
	struct hca_mb_rx mb_ent;    /* what rcq->mb_rx[mb_ri] points at */
};

#define HCA_COUNT_DROP(e, why) \
	atomic_fetch_add_explicit(&(e)->cnt.drops[why], 1, memory_order_relaxed)

/* sock_cred.c: datagrams to our abstract names, from our user only */
int hca_sock_pass_creds(int fd);
ssize_t hca_sock_recv_checked(int fd, void *buf, size_t len, int flags,
			      _Atomic uint64_t *foreign);
_Atomic uint64_t *hca_dev_foreign_counter(struct hca_dev *dev);

/*
 * Heap blocks for this process's objects (seg->lock held): the block is
 * recorded in our slot while it is being taken (seg.h, struct
 * hca_heap_rec); hca_dev_heap_done once the object holds it.
 */
static inline uint64_t hca_dev_heap_alloc(struct hca_dev *dev, uint64_t size)
{
	return hca_heap_alloc_rec(dev->seg, size, &dev->seg->procs[dev->slot].alloc);
}

static inline void hca_dev_heap_done(struct hca_dev *dev)
{
	dev->seg->procs[dev->slot].alloc.off = 0;
}

/* live.c: proof of death only (a peer taken for dead is reclaimed) */
enum hca_live { HCA_LIVE_YES, HCA_LIVE_DEAD, HCA_LIVE_UNKNOWN };
enum hca_live hca_proc_live(pid_t pid, uint64_t start, int pidfd);
enum hca_live hca_proc_watch(pid_t pid, uint64_t start, int *fdp);

/* reclaim.c */
void hca_reclaim_slot(struct hca_seg *seg, uint16_t slot, uint32_t gen);

/* peers.c: who is alive; the dead are reclaimed by whoever notices */
#define HCA_PEER_EPOLL_TAG 0x8000000000000000ULL /* epoll tag: slot | gen << 16 */
void hca_peers_scan(struct hca_dev *dev);
void hca_peers_poll_unwatched(struct hca_dev *dev);
void hca_peer_died(struct hca_dev *dev, uint16_t slot, uint32_t gen);

/* dev.c (the doorbell), progress.c (the waiting list, the links' sockets) */
int hca_dev_notify(struct hca_dev *dev, uint16_t slot, uint32_t gen,
		   const void *msg, size_t len);
void hca_dev_wait_add(struct hca_dev *dev, struct hca_qp *qp);
enum hca_live hca_peer_check(struct hca_dev *dev, uint16_t slot, uint32_t gen);
bool hca_peer_alive(struct hca_dev *dev, uint16_t slot, uint32_t gen);
pid_t hca_peer_pid(struct hca_dev *dev, uint16_t slot, uint32_t gen);
void hca_dev_run_waiting(struct hca_dev *dev);
void hca_dev_wait_remove(struct hca_dev *dev, struct hca_qp *qp);
void hca_dev_kick(struct hca_dev *dev);
void hca_dev_reap(struct hca_dev *dev);
void hca_rnr_kick(struct hca_dev *dev, _Atomic uint64_t *waiters);
/* ... the links' sockets, shared by the progress thread, pollers and sleepers */
void hca_dev_link_handover(struct hca_dev *dev);
void hca_dev_poller_extend(struct hca_dev *dev);
void hca_dev_poller_busy(struct hca_dev *dev);
bool hca_dev_link_sleep_begin(struct hca_dev *dev);
void hca_dev_link_sleep_end(struct hca_dev *dev);

/* Doorbell messages to an object's owner process. */
/* HCA_DB_QP_FLUSH: a responder put the QP in error; flush, no event */
enum hca_db_kind { HCA_DB_ASYNC_QP = 1, HCA_DB_ASYNC_SRQ, HCA_DB_ASYNC_CQ,
		   HCA_DB_QP_FLUSH, HCA_DB_BOUNCE, HCA_DB_KICK };
struct hca_db_msg {
	uint32_t kind;
	uint32_t event;          /* enum ibv_event_type */
	uint32_t idx;
	uint32_t id;             /* qpn / handle: stale-message guard */
};

/* obj_tab.c: our objects by index, pinned against their destruction */
/* a test's hook: set by the test thread, read by the progress thread */
extern void (*_Atomic hca_db_dispatch_hook)(const struct hca_db_msg *m);
void hca_pin_wait(_Atomic int *pin);
void hca_qp_tab_set(struct hca_dev *dev, uint32_t idx, struct hca_qp *qp);
struct hca_qp *hca_qp_get(struct hca_dev *dev, uint32_t idx, uint32_t qpn);
void hca_qp_put(struct hca_qp *qp);
void hca_cq_tab_set(struct hca_dev *dev, uint32_t idx, struct hca_cq *cq);
struct hca_cq *hca_cq_get(struct hca_dev *dev, uint32_t idx, uint32_t handle);
void hca_cq_put(struct hca_cq *cq);
void hca_srq_tab_set(struct hca_dev *dev, uint32_t idx, struct hca_srq *srq);
struct hca_srq *hca_srq_get(struct hca_dev *dev, uint32_t idx, uint32_t handle);
void hca_srq_put(struct hca_srq *srq);

/* wake.c */
enum hca_fail_kind { HCA_FAIL_SEND, HCA_FAIL_EPOLL, HCA_FAIL_TIMERFD, HCA_FAIL_MUTEX,
		     HCA_FAIL_MAX };
extern _Atomic int hca_test_fail[HCA_FAIL_MAX];
void hca_test_fail_env(void);
bool hca_test_fail_take(enum hca_fail_kind k);
int hca_mutex_init(pthread_mutex_t *m);
struct epoll_event;
struct itimerspec;
int hca_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int hca_timerfd_settime(int fd, const struct itimerspec *its);
int hca_wake_init(struct hca_dev *dev);
void hca_wake_fini(struct hca_dev *dev);
int hca_wake_post(struct hca_dev *dev, uint16_t slot, uint32_t gen,
		  const struct sockaddr_un *a, socklen_t al, const void *msg, size_t len);
uint32_t hca_wake_retry_run(struct hca_dev *dev, bool timer);
uint32_t hca_wake_retry_pending(struct hca_dev *dev);
void hca_wake_flush_backstop(struct hca_dev *dev);

/* chan.c */
void hca_chan_backstop(struct hca_dev *dev);
int hca_chan_add_cq(struct hca_chan *ch, struct hca_cq *cq);
void hca_chan_del_cq(struct hca_chan *ch, struct hca_cq *cq);

/* event.c */
void hca_raise_qp_event(struct hca_dev *dev, struct hca_qp_ent *e,
			enum ibv_event_type type);
void hca_raise_srq_event(struct hca_dev *dev, uint32_t srq_idx,
			 enum ibv_event_type type);
void hca_raise_cq_event(struct hca_dev *dev, uint32_t cq_idx,
			enum ibv_event_type type);
void hca_ctx_queue_event(struct hca_ctx *ctx, enum ibv_event_type type,
			 void *user, int port);
void hca_db_dispatch(struct hca_dev *dev, const struct hca_db_msg *m);
int hca_chan_signal(struct hca_dev *dev, uint16_t owner, uint32_t owner_gen,
		    uint32_t chan, uint32_t cq_idx, uint32_t handle);

/* cq.c */
int hca_cq_push_sq(struct hca_cq *cq, const struct hca_cqe *c);
uint32_t hca_cq_count(struct hca_cq *cq);
int hca_cq_push(struct hca_dev *dev, uint32_t cq_idx, const struct hca_cqe *c,
		bool solicited);
void hca_cq_prefetch(struct hca_dev *dev, uint32_t cq_idx);
int hca_cq_push_claim(struct hca_dev *dev, struct hca_claim *cl, uint32_t cq_idx,
		      const struct hca_cqe *c, bool solicited, bool releases);
int hca_cq_push_body(struct hca_dev *dev, struct hca_claim *cl, uint32_t cq_idx,
		     const struct hca_cqe_buf *b, uint32_t len, bool solicited,
		     bool releases);
struct hca_cq_ent *hca_cq_ent(struct hca_dev *dev, uint32_t cq_idx);
void hca_rx_prefetch_note(struct hca_dev *dev, const struct hca_claim_ring *ref);
void hca_cq_ent_free(struct hca_seg *seg, struct hca_cq_ent *e);
bool hca_cq_event_take(struct hca_cq *cq);

/* claim.c */
enum hca_claim_kind { HCA_CLAIM_CQ = 1, HCA_CLAIM_SRQ, HCA_CLAIM_RQ };
struct hca_claim *hca_claim_get(struct hca_dev *dev);
void hca_claim_put(struct hca_dev *dev, struct hca_claim *c);
void hca_claim_drop(struct hca_claim *c);
uint32_t hca_claim_who(struct hca_seg *seg, const struct hca_claim *c);
bool hca_claim_take_wqe(struct hca_seg *seg, struct hca_claim *c, struct hca_ring *r,
			const struct hca_claim_ring *ref);
int hca_claim_push(struct hca_seg *seg, struct hca_claim *c, struct hca_ring *r,
		   const struct hca_claim_ring *ref, const void *body, uint32_t len,
		   bool releases, uint32_t stamp_at);
uint64_t hca_claim_inl_begin(struct hca_seg *seg, struct hca_claim *c, uint32_t cq,
			     uint32_t handle, uint64_t pool_off);
void hca_claim_inl_try(struct hca_claim *c, uint32_t k);
void hca_claims_recover(struct hca_seg *seg, uint16_t slot);

/* cq_inline.c */
uint32_t hca_inl_max(void);
bool hca_inl_copying(uint64_t state);
uint64_t hca_inl_pool_bytes(uint32_t cq_cap, uint32_t *nslots, uint32_t *max_len);
void hca_inl_pool_init(struct hca_inl_pool *p, uint32_t nslots, uint32_t max_len);
void hca_inl_prefetch(struct hca_dev *dev, uint32_t cq_idx);
uint16_t hca_inl_put(struct hca_dev *dev, struct hca_claim *cl, uint32_t cq_idx,
		     const struct iovec *src, int nsrc,
		     const struct iovec *dst, const uint32_t *lkeys, int ndst,
		     uint32_t len);
void hca_inl_take(struct hca_dev *dev, struct hca_cq *cq, struct hca_cqe *c);
void hca_inl_drop(struct hca_dev *dev, uint32_t cq_idx, uint16_t inl);
void hca_inl_sweep(struct hca_dev *dev);
bool hca_inl_copy_in(struct hca_dev *dev, const struct hca_inl_iov *v, uint32_t niov,
		     uint32_t len, const void *data);

/* cq_embed.c */
uint32_t hca_emb_body(uint32_t cap);
uint32_t hca_emb_room(struct hca_dev *dev, uint32_t cq_idx, int ndst);
uint32_t hca_emb_build(struct hca_cqe_buf *b, const struct iovec *src, int nsrc,
		       const struct iovec *dst, const uint32_t *lkeys, int ndst,
		       uint32_t len);
void hca_emb_take(struct hca_dev *dev, struct hca_ring *r, uint64_t pos, void *body,
		  struct hca_cqe *c);
void hca_emb_sweep_ring(struct hca_dev *dev, struct hca_ring *r);
void hca_emb_restamp(void *body, uint64_t pos);
uint64_t hca_emb_ready(uint64_t pos);

/* mbox.c, mbox_lanes.c: their entry points are in mbox.h */
void hca_cq_wake_at(struct hca_dev *dev, uint32_t cq_idx, bool solicited);
void hca_cqe_to_wc(const struct hca_cqe *c, struct ibv_wc *wc);

/* iov.c */
void hca_iov_copy(const struct iovec *dst, int ndst,
		  const struct iovec *src, int nsrc);
size_t hca_iov_len(const struct iovec *v, int n);

/* srq.c */
uint32_t hca_rwqe_body(uint32_t max_sge);
int hca_ring_post_recv(struct hca_ring *r, uint32_t max_sge,
		       struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
void hca_srq_ent_free(struct hca_seg *seg, struct hca_srq_ent *e);
struct hca_srq_ent *hca_srq_lookup(struct hca_seg *seg, uint32_t srqn);
struct hca_srq *hca_srq_make(struct hca_pd *pd, struct hca_xrcd *xrcd,
			     struct hca_cq *cq, struct ibv_srq_attr *attr, void *user);

/* mr.c */
struct hca_mr_ent *hca_mr_lookup(struct hca_seg *seg, uint32_t key);

/* fence.c: copy sections against key invalidation */
struct hca_fence {
	_Atomic uint64_t *word;  /* the record held */
	uint64_t mark;           /* the odd value stored in it */
};
void hca_fence_enter_slow(struct hca_dev *dev, struct hca_fence *f);
void hca_fence_wait(struct hca_dev *dev);

/*
 * The record a thread tries first: from its thread pointer, so that a
 * thread keeps meeting the same line and two threads mostly do not (no
 * thread-local variable: in this shared library one costs a call to
 * __tls_get_addr, as much as the rest of the fence per message).
 */
static inline unsigned hca_fence_hint(void)
{
	uintptr_t t = (uintptr_t)__builtin_thread_pointer();

	return (unsigned)((t >> 12) ^ (t >> 20)) % HCA_FENCE_RECS;
}

/*
 * Enter a copy section: the thread's record, when free and already
 * counted by the slot's high-water mark, with one CAS (seq_cst: the
 * copier's half of the fence's Dekker pattern); any other case the slow
 * path takes. Every key looked up after this, and every byte moved with
 * what they gave, is covered until hca_fence_exit.
 */
static inline void hca_fence_enter(struct hca_dev *dev, struct hca_fence *f)
{
	unsigned i = hca_fence_hint();
	_Atomic uint64_t *w = &dev->seg->fence[dev->slot][i].word;
	uint64_t cur = atomic_load_explicit(w, memory_order_relaxed);

	if (cur >> 32 == dev->gen && !(cur & 1) &&
	    i < atomic_load(&dev->seg->fence_hi[dev->slot]) &&
	    atomic_compare_exchange_strong(w, &cur, cur + 1)) {
		f->word = w;
		f->mark = cur + 1;
		return;
	}
	hca_fence_enter_slow(dev, f);
}

/* Leave a copy section: release, the bytes moved before anyone sees us out. */
static inline void hca_fence_exit(struct hca_fence *f)
{
	atomic_store_explicit(f->word, f->mark + 1, memory_order_release);
}

/* xrc.c */
void hca_xrc_reg(struct hca_seg *seg, struct hca_qp_ent *e, uint16_t slot, bool on);
bool hca_xrc_unreg_last(struct hca_seg *seg, struct hca_qp_ent *e, uint16_t slot);
void hca_xrc_reclaim(struct hca_seg *seg, uint16_t slot);

/* qp_num.c */
struct hca_qp_ent *hca_qp_lookup(struct hca_seg *seg, uint32_t qpn);
struct hca_qp_ent *hca_qp_num_alloc(struct hca_seg *seg, uint16_t slot, int *err);
void hca_qp_num_unalloc(struct hca_seg *seg, struct hca_qp_ent *e);
void hca_qp_ent_free(struct hca_seg *seg, struct hca_qp_ent *e, uint64_t rq_bytes);
void hca_qp_ent_each(struct hca_seg *seg, uint32_t first_pg, uint32_t npg,
		     void (*fn)(struct hca_seg *, struct hca_qp_ent *, void *), void *arg);

/* qp.c */
void hca_qp_to_error(struct hca_qp *qp);
void hca_qp_flush(struct hca_qp *qp);
void hca_qp_flush_sq(struct hca_qp *qp);
void hca_qp_flush_rq(struct hca_qp *qp);

static inline int hca_ilog2_ceil(uint32_t v)
{
	int o = 0;

	while ((1u << o) < v)
		o++;
	return o;
}

#endif
