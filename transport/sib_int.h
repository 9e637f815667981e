/*
 * sib_int.h: what the files of libsib share (not installed).
 *
 *   context.c  parameters (named keys, checked), the hwloc topology
 *   worker.c   a worker's verbs objects, progress, sleeping, async events
 *   host.c     XRC send QPs (one per remote host), receive QPs, the UD
 *              handshake that connects them, failure and reconnection
 *   proto.c    the protocol table (short, eager, rendezvous)
 *              and the receive path
 *   tag.c      requests, endpoints, tagged operations, active messages
 *   rndv.c     the rendezvous protocol (RTS / RTR / FIN, READ or WRITE)
 *   rma.c      put / get / atomics, user-buffer registrations
 *   mem.c      regions (sib_mem_map) and their keys
 *   stats.c    counters, sib_worker_query, the diagnostics file
 *   pmix.c     sib_init_pmix
 *
 * Only the public verbs API is used (<infiniband/verbs.h>).
 */
#ifndef SIB_INT_H
#define SIB_INT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "sib.h"
#include "sib_mq.h"

#define SIB_LOCAL __attribute__((visibility("hidden")))
#define SIB_CONTAINER(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

/* A copy of a small message's bytes, inline: up to 16 bytes by two
 * overlapping loads and stores (no call); above, memcpy. An 8-byte
 * message's copy through the library memcpy cost ~26 instructions (the
 * call, its size dispatch), this ~8 (callgrind, docs/transport.md). */
static inline void sib_copy(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	if (n > 16) {
		memcpy(d, s, n);
	} else if (n >= 8) {
		uint64_t a, b;

		memcpy(&a, s, 8);
		memcpy(&b, s + n - 8, 8);
		memcpy(d, &a, 8);
		memcpy(d + n - 8, &b, 8);
	} else if (n >= 4) {
		uint32_t a, b;

		memcpy(&a, s, 4);
		memcpy(&b, s + n - 4, 4);
		memcpy(d, &a, 4);
		memcpy(d + n - 4, &b, 4);
	} else if (n) {   /* 1..3: first, middle, last */
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

/* ---- intrusive lists (same node type as the matching engine's) ---- */
typedef struct sib_mq_link sib_link_t;

static inline void sib_list_init(sib_link_t *h) { h->prev = h->next = h; }
static inline bool sib_list_empty(const sib_link_t *h) { return h->next == h; }
static inline void sib_list_del(sib_link_t *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->prev = e->next = e;
}
static inline void sib_list_add_tail(sib_link_t *h, sib_link_t *e)
{
	e->prev = h->prev;
	e->next = h;
	h->prev->next = e;
	h->prev = e;
}
static inline void sib_list_add_head(sib_link_t *h, sib_link_t *e)
{
	sib_list_add_tail(h->next, e);
}
/* Every node of `from`, in its order, to the front of h; `from` is left
 * empty. */
static inline void sib_list_splice_head(sib_link_t *h, sib_link_t *from)
{
	sib_link_t *first = from->next, *last = from->prev, *at = h->next;

	if (first == from)
		return;
	first->prev = h;
	last->next = at;
	at->prev = last;
	h->next = first;
	sib_list_init(from);
}

/* ---- the wire header, at the start of every SEND's payload ----
 * Carried in the payload (not in immediate data): 24 bytes, so that the
 * short protocol's single inline SEND holds header and message together. */
enum sib_msg_type { SIB_MSG_TAG = 1, SIB_MSG_AM = 2,
		   /* rendezvous control (rndv.c): ready-to-send of a tagged
		    * message or of an active message, and the receiver's
		    * "done reading, reuse your buffer" */
		   SIB_MSG_RTS = 3, SIB_MSG_AM_RTS = 4, SIB_MSG_FIN = 5,
		   /* the WRITE variant: the receiver's buffer (RTR), and the
		    * sender's "written" (FIN_W) */
		   SIB_MSG_RTR = 6, SIB_MSG_FIN_W = 7,
		   /* nothing: a signalled WR behind unsignalled ones (host.c
		    * sib_host_close_tail); the receiver drops it in order */
		   SIB_MSG_NOP = 8,
		   /* several small tagged and active messages in one SEND
		    * (batch.c): hdr.ctx is their count, sib_bitem +
		    * payload each */
		   SIB_MSG_BATCH = 9 };

struct sib_hdr {
	uint8_t type;       /* enum sib_msg_type */
	uint8_t proto;      /* enum sib_proto_id that carried it */
	uint16_t am_id;     /* AM: handler id */
	uint32_t src;       /* sender's worker id */
	uint32_t ctx;       /* tag: context id; AM: header length */
	uint32_t seq;       /* per (sender, receiver) sequence */
	uint64_t tag;
};
#define SIB_HDR ((uint32_t)sizeof(struct sib_hdr))

/* One message of a batch (batch.c): this header, then `len` bytes of
 * payload padded to 8. The batch's sib_hdr gives source and sequence.
 * A tagged item carries its context and tag; an active message (bit
 * SIB_BITEM_AM of len) its header length in ctx and its handler id in
 * tag, the payload being header then data, as a lone AM's. */
struct sib_bitem {
	uint32_t len;       /* payload bytes; bits 24..30: the proto id the
			       message would have gone by (counters); bit
			       31: SIB_BITEM_AM */
	uint32_t ctx;       /* tagged: context id; AM: header length */
	uint64_t tag;       /* tagged: tag; AM: handler id */
};
#define SIB_BITEM ((uint32_t)sizeof(struct sib_bitem))
#define SIB_BITEM_LEN_MASK 0xffffffu
#define SIB_BITEM_AM 0x80000000u
#define SIB_BITEM_PROTO(l) (((l) >> 24) & 0x7fu)

/* The wr_id of an SRQ receive: this bit, the class << 32, the index. A
 * send's wr_id is its request's address (a user-space pointer: bit 63
 * clear). */
#define SIB_WR_RECV (1ull << 63)
/* WRs on all send QPs at once: the CQ keeps room for them */
#define SIB_SCQ_DEPTH 2048
/* receive buffers given back to an SRQ in one post, at most (and never
 * more than an eighth of the class's depth): worker.c */
#define SIB_REPOST_BATCH 16
/* at least one in this many short sends in a row is signalled (proto.c);
 * the SIB_SIGNAL_EVERY key, 1..64 */
#define SIB_SIGNAL_EVERY 16
/* the largest batch of small tagged and active messages in one SEND, bytes (batch.c;
 * docs/transport.md "Batching"); the SIB_BATCH_MAX key, 0 turns it off */
#define SIB_BATCH_MAX 2048
/* the largest message a batch takes (256 until the MPI component's
 * AMs joined: its 256-512 B messages, with their headers, fit in 1 KiB;
 * across hosts a datagram each cost more than the copy; docs/transport.md) */
#define SIB_BATCH_ITEM_MAX 1024
/* ... to an endpoint on another host: there every SEND is a system call
 * and a datagram or more on each side, and a whole batch leaves in one
 * GSO send. The SIB_BATCH_MAX_REMOTE key; a batch takes messages of up to
 * a quarter of it and their headers' 512 B (an MPI message of a quarter,
 * with the MPI component's and ob1's headers) (docs/transport.md
 * "Batching across hosts") */
#define SIB_BATCH_MAX_REMOTE 32768
#define SIB_BATCH_ITEM_HDRS 512
/* a waiting request spins this long (us) after the last event before it
 * yields the core every 64 empty polls (tag.c); the SIB_SPIN_US key */
#define SIB_SPIN_US 50

/* ---- the UD handshake ---- */
enum sib_hs_type { SIB_HS_REQ = 1, SIB_HS_REP = 2, SIB_HS_PING = 3,
		   SIB_HS_PONG = 4 };
#define SIB_HS_MAGIC 0x53494231u   /* "SIB1" */

struct sib_hs {
	uint32_t magic;
	uint32_t type;
	uint32_t from_id, to_id;
	uint64_t from_host;
	uint32_t send_qpn;  /* REQ: the requester's XRC send QP */
	uint32_t recv_qpn;  /* REP: the XRC receive QP made for it */
	uint32_t psn;
	uint32_t token;     /* REP echoes REQ's */
	uint32_t ud_qpn;    /* where to answer */
	uint16_t lid;
	uint16_t pad;
	uint8_t gid[16];
};

/* ---- the address blob ---- */
#define SIB_ADDR_MAGIC 0x53494241u  /* "SIBA" */
struct sib_addr {
	uint32_t magic;
	uint32_t id;
	uint32_t pid;
	int32_t package;     /* hwloc package of the process, -1 unknown */
	uint64_t host;       /* host key: netns inode ^ hostname hash */
	uint8_t gid[16];
	uint16_t lid;
	uint16_t nclasses;
	uint32_t ud_qpn;
	uint64_t job;        /* hash of the job key: one job, one XRC domain */
	uint32_t class_size[SIB_MAX_CLASSES];
	uint32_t srqn[SIB_MAX_CLASSES];
};

/* ---- context ---- */
struct sib_context {
	char job_key[128];
	char device[64];
	uint32_t nclasses;
	struct sib_class_param classes[SIB_MAX_CLASSES];
	uint32_t short_max;      /* 0: short protocol off */
	uint32_t batch_max;      /* SIB_BATCH_MAX key: 0 no batching (batch.c) */
	uint32_t batch_max_remote; /* SIB_BATCH_MAX_REMOTE key: other hosts' */
	uint32_t signal_every;   /* SIB_SIGNAL_EVERY key (proto.c) */
	uint32_t spin_us;        /* SIB_SPIN_US key: spin before yielding (tag.c) */
	sib_thread_mode_t thread_mode;
	sib_progress_mode_t progress_mode;
	void *topo;              /* hwloc_topology_t, NULL if it failed */
	int package;             /* package of the cpus we run on, -1 unknown */
	uint64_t host_key;
	uint64_t job_hash;
	unsigned nworkers;
};

/* ---- a remote host: my one XRC send QP toward it ---- */
enum sib_conn_state { SIB_CONN_IDLE, SIB_CONN_WAIT_REP, SIB_CONN_UP,
		      SIB_CONN_DRAIN };

struct sib_host {
	sib_link_t link;         /* worker->hosts */
	uint64_t key;
	bool local;              /* my own host: no handshake */
	bool ever_sent;
	enum sib_conn_state state;
	struct ibv_qp *sqp;      /* XRC send QP */
	struct ibv_qp *tqp;      /* local host: the receive QP I made */
	uint32_t inflight;       /* WRs posted and not completed */
	/* unsignalled short sends posted since the last signalled WR: they
	 * complete with the next signalled one (host.c); tail_posts and
	 * tail_seen tell the timer the tail has sat a whole tick */
	uint32_t unsig;
	uint64_t tail_posts, tail_seen;
	sib_link_t sent;         /* requests posted, oldest first */
	sib_link_t pending;      /* requests waiting for the connection */
	sib_link_t retry;        /* flushed by a failed QP: sent again first */
	struct sib_ep *hs_ep;    /* handshake partner */
	uint32_t token, psn;
	int hs_tries;
	uint64_t hs_start_ms;    /* the handshake's first request */
	uint64_t hs_next_ms;
	uint64_t reconnects;
};

/* ---- a remote worker (endpoint); also the receive state of a sender ---- */
struct sib_ep {
	sib_link_t link;         /* worker->eps */
	sib_link_t hlink;        /* worker->ep_hash[id % SIB_EP_BUCKETS] */
	sib_worker_t *w;
	uint32_t id;
	int refs;                /* user handles (sib_ep_create calls) */
	bool has_addr;
	bool failed;
	struct sib_addr addr;
	struct sib_host *host;
	struct ibv_ah *ah;       /* UD address handle for handshakes */
	uint32_t tx_seq;         /* next sequence I send it */
	uint32_t rx_seq;         /* next sequence I expect from it */
	uint64_t tx_issued, tx_done;
	uint64_t rx_named;       /* posted receives naming it */
	uint64_t ping_next_ms;
	int ping_missed;
	uint32_t rndv_wait;      /* my rendezvous sends waiting for its FIN */
	/* batching (batch.c): the open batch (not yet submitted) and the
	 * progress generation of the last send that went on its own */
	struct sib_request *batch;
	sib_link_t blink;        /* worker->batch_eps while batch is open */
	uint64_t tx_gen;
	sib_link_t flushes;      /* flush requests waiting */
};

/* ---- requests ---- */
enum sib_req_kind { SIB_REQ_SEND, SIB_REQ_RECV, SIB_REQ_FLUSH };

#define SIB_SHORT_CAP 256        /* the largest short payload ever kept */
#define SIB_EP_BUCKETS 1024      /* power of two */

struct sib_request {
	enum sib_req_kind kind;
	sib_worker_t *w;
	struct sib_ep *ep;
	/* done: set, with release, under the worker lock once st is final;
	 * test and wait read it without the lock (acquire), then st */
	_Atomic bool done;
	bool freed, wild;
	/* a send completed when posted (its bytes copied, no callback asked):
	 * the library still holds it until its work completion */
	bool early;
	bool posted;             /* on its send QP (host.c) */
	/* may be posted unsignalled: set by sib_send_start for the call's
	 * own post only (a short send that completes when posted, or one
	 * whose callback is lazy: SIB_OP_LAZY_CB) */
	bool unsig_ok;
	bool unsig;              /* posted unsignalled: no completion of its own */
	bool is_batch;           /* a batch (batch.c): the library's */
	struct sib_request *next_free;   /* the worker's cache of requests */
	struct sib_tag_status st;
	sib_send_cb_t send_cb;
	sib_recv_cb_t recv_cb;
	void *cb_arg;
	sib_link_t qlink;        /* host sent/pending list, or ep flush list */
	/* receive */
	struct sib_mq_recv mrecv;
	void *buf;
	size_t len;
	/* send */
	enum sib_proto_id proto;
	uint32_t cls;            /* receiver's size class */
	uint32_t wire_len;       /* header + payload */
	int slot;                /* bounce slot (eager), -1 none */
	uint64_t flush_target;
	int resends;
	uint64_t broken_ms;      /* when a send QP first broke under it */
	uint8_t *data;           /* header + payload (short: inline copy) */
	/* a batch: how many messages, and those of them with a callback
	 * (linked by next_free), completed when the batch is */
	uint32_t nitems;
	struct sib_request *members;
	/* rendezvous and RMA (rndv.c, rma.c) */
	struct sib_rdma *rdma;   /* an RDMA WR, posted by the rndv row */
	struct sib_rndv_rx *rndv;/* receive: a matched rendezvous reading */
	const struct sib_iov *iov;   /* receive with SIB_OP_IOV */
	size_t niov;
	uint8_t inl[SIB_HDR + SIB_SHORT_CAP];
};

/* An arrived message nobody waited for (copied out of the SRQ buffer). */
struct sib_message {
	struct sib_mq_msg m;
	size_t len;
	bool rndv;               /* data is an RTS: m.len the message's length */
	uint8_t data[] __attribute__((aligned(8)));
};

struct sib_am_slot {
	sib_am_handler_t cb;
	void *arg;
};

/* The counters, per protocol and per event. */
struct sib_counters {
	uint64_t tx_msgs[SIB_PROTO_MAX], tx_bytes[SIB_PROTO_MAX];
	uint64_t rx_msgs[SIB_PROTO_MAX], rx_bytes[SIB_PROTO_MAX];
	uint64_t unexpected, srq_limit_events, srq_refills, reconnects;
	uint64_t handshakes, resent, dup_dropped, seq_gaps;
	uint64_t unsignaled, tail_nops;
	uint64_t tx_batches, tx_batched, rx_batches;
	uint32_t send_qps_max, recv_qps;
};

struct sib_srq_class {
	struct ibv_srq *srq;
	uint32_t srqn, size, depth;
	uint8_t *buf;            /* sib_mem_alloc'd: a sealed memfd if it can */
	int buf_fd;
	struct ibv_mr *mr;
	uint32_t posted;         /* buffers in the SRQ now */
	uint32_t held;           /* kept by AM handlers */
	/* per buffer: the batched AMs in it a handler kept (batch.c), plus
	 * one while the batch is unpacked; 0 for a buffer of one message */
	uint32_t *refs;
	/* buffers given back and not posted yet: they go together, when the
	 * worker finds nothing to do or when `batch` wait (worker.c) */
	uint32_t pend[SIB_REPOST_BATCH];
	uint32_t npend, batch;
};

struct sib_worker {
	sib_context_t *ctx;
	uint32_t id;
	pthread_mutex_t lock;    /* taken by every call in SIB_THREAD_MULTI */
	bool mt;
	struct ibv_context *dev;
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_xrcd *xrcd;
	int xrcd_fd;
	struct ibv_comp_channel *chan;
	struct ibv_cq *cq;       /* sends and every SRQ (wr_id: SIB_WR_RECV) */
	struct ibv_cq *ucq;      /* the UD QP's */
	struct sib_srq_class cls[SIB_MAX_CLASSES];
	uint32_t nclasses;
	uint32_t repost_pend;    /* the classes' npend, summed */
	uint32_t max_inline;
	/* send bounce slots (eager), registered */
	uint8_t *sbuf;
	struct ibv_mr *smr;
	uint32_t nslots, slot_size;
	int *free_slots;
	uint32_t nfree;
	sib_link_t slot_wait;    /* requests waiting for a slot */
	/* UD handshake QP */
	struct ibv_qp *ud;
	uint8_t *ubuf;
	struct ibv_mr *umr;
	uint32_t ud_nrecv;
	uint32_t ud_send_next;
	/* receive QPs I made for other hosts' send QPs */
	sib_link_t tqps;
	sib_link_t hosts, eps;
	sib_link_t ep_hash[SIB_EP_BUCKETS];   /* eps by id: found per arrival */
	/* the sender of the last arrival (proto.c: a ping-pong's or a
	 * stream's next one is from it; endpoints live as long as the
	 * worker) */
	struct sib_ep *rx_ep;
	/* requests released, kept for the next (no malloc per message) */
	struct sib_request *req_cache;
	uint32_t nreq_cache;
	size_t short_lim;        /* short row, rendezvous thresholds applied */
	uint32_t send_qps;
	uint32_t inflight;       /* WRs on every send QP (bounded by the CQ) */
	uint32_t rx_wild;        /* posted receives from any source */
	sib_link_t ahs;          /* UD address handles, cached */
	/* batching (batch.c): progress calls so far (a send in the same
	 * generation as another to its endpoint is batched), open batches */
	uint64_t pgen;
	sib_link_t batch_eps;
	uint32_t nbatch;
	struct sib_mq mq;
	struct sib_am_slot am[SIB_AM_MAX_ID];
	struct sib_counters c;
	int epfd;
	uint64_t next_timer_ms, next_publish_ms;
	uint32_t timer_polls;   /* progress calls since the clock was read */
	uint32_t peer_timeout_ms;   /* unreachable that long: failed */
	char stats_path[256];
	char xrcd_path[320];     /* the job's XRC domain file on this host */
	uint32_t token_next;
	/* deaths reported from another thread (PMIx events) */
	pthread_mutex_t dead_lock;
	uint32_t dead_ids[64];
	uint32_t ndead;
	struct sib_rma_w *rma;   /* rendezvous and RMA state (rma.c) */
	/* the connection thread and its gate (async.c) */
	bool async_on;
	bool in_cm;              /* the thread runs host.c: no callbacks */
	bool gate_strong;        /* no membarrier: seq_cst on both sides */
	uint32_t gate_depth;     /* the application's nested calls */
	_Atomic uint32_t app_in, cm_in;
	_Atomic uint64_t app_calls;   /* calls left: the thread's clue */
	pthread_t async_th;
	int async_efd;           /* eventfd: the thread's stop */
};

/* Batching to ep (batch.c): is it to another host (the remote ceilings)? */
static inline bool sib_ep_remote(const struct sib_ep *ep)
{
	return ep->host && !ep->host->local;
}

static inline uint32_t sib_batch_item_max(const struct sib_ep *ep)
{
	uint32_t r;

	if (!sib_ep_remote(ep))
		return SIB_BATCH_ITEM_MAX;
	r = ep->w->ctx->batch_max_remote / 4 + SIB_BATCH_ITEM_HDRS;
	return r > SIB_BATCH_ITEM_MAX ? r : SIB_BATCH_ITEM_MAX;
}

struct sib_tqp {             /* an XRC receive QP I hold for a remote sender */
	sib_link_t link;
	struct ibv_qp *qp;
	uint32_t recv_qpn;
	uint64_t host;
	uint32_t send_qpn, from_id;
	uint32_t psn;            /* of the REQ: a new send QP under a reused
				    number comes with another */
};

/* ---- context.c ---- */
SIB_LOCAL uint64_t sib_now_ms(void);
SIB_LOCAL uint64_t sib_now_us(void);
SIB_LOCAL void sib_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- worker.c ---- */
SIB_LOCAL int sib_progress_locked(sib_worker_t *w);
SIB_LOCAL void sib_srq_repost(sib_worker_t *w, uint32_t cls, uint32_t idx);
SIB_LOCAL void sib_srq_flush(sib_worker_t *w);

/* ---- async.c: the gate (its reasoning is there), inline here: every
 * call on a worker passes it, twice per message at least ---- */

/* The application enters a call (sib_lock; nested calls count once). */
static inline void sib_gate_enter(sib_worker_t *w)
{
	if (w->gate_depth++)
		return;
	if (w->gate_strong) {
		atomic_store_explicit(&w->app_in, 1, memory_order_seq_cst);
	} else {
		atomic_store_explicit(&w->app_in, 1, memory_order_relaxed);
		/* the compiler keeps the order; the thread's membarrier
		 * makes it a fence when it matters */
		atomic_signal_fence(memory_order_seq_cst);
	}
	while (atomic_load_explicit(&w->cm_in, memory_order_acquire))
		sched_yield();
}

static inline void sib_gate_leave(sib_worker_t *w)
{
	if (--w->gate_depth)
		return;
	atomic_store_explicit(&w->app_calls,
			      atomic_load_explicit(&w->app_calls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_store_explicit(&w->app_in, 0, memory_order_release);
}

/* Every call on a worker: the lock (SIB_THREAD_MULTI), then the gate that
 * keeps the connection thread out (async.c). */
static inline void sib_lock(sib_worker_t *w)
{
	if (w->mt)
		pthread_mutex_lock(&w->lock);
	if (w->async_on)
		sib_gate_enter(w);
}

static inline void sib_unlock(sib_worker_t *w)
{
	if (w->async_on)
		sib_gate_leave(w);
	if (w->mt)
		pthread_mutex_unlock(&w->lock);
}

SIB_LOCAL void sib_async_start(sib_worker_t *w);
SIB_LOCAL void sib_async_stop(sib_worker_t *w);

/* ---- host.c ---- */
SIB_LOCAL void sib_hosts_cm(sib_worker_t *w);
SIB_LOCAL struct sib_host *sib_host_get(sib_worker_t *w, const struct sib_addr *a);
SIB_LOCAL void sib_host_submit(sib_worker_t *w, struct sib_host *h,
			       struct sib_request *r);
SIB_LOCAL void sib_host_send_done(sib_worker_t *w, struct ibv_wc *wc);
/* Unsignalled sends wait on the host's QP for a signalled WR behind them:
 * post a NOP (a flush asks; the timer, when the tail sat a whole tick). */
SIB_LOCAL void sib_host_close_tail(sib_worker_t *w, struct sib_host *h);
SIB_LOCAL void sib_hosts_tails(sib_worker_t *w);
SIB_LOCAL void sib_ud_rx(sib_worker_t *w, struct ibv_wc *wc);
SIB_LOCAL void sib_hosts_timer(sib_worker_t *w, uint64_t now);
SIB_LOCAL void sib_hosts_destroy(sib_worker_t *w);
SIB_LOCAL int sib_ud_setup(sib_worker_t *w);
/* ud.c */
SIB_LOCAL void sib_ud_post_recv(sib_worker_t *w, uint32_t i);
SIB_LOCAL uint8_t *sib_ud_buf(sib_worker_t *w, uint64_t i);
SIB_LOCAL void sib_av_fill(sib_worker_t *w, struct ibv_ah_attr *av,
			   const uint8_t gid[16], uint16_t lid);
SIB_LOCAL int sib_ud_send(sib_worker_t *w, const uint8_t gid[16], uint16_t lid,
			  uint32_t qpn, struct sib_hs *m);
SIB_LOCAL void sib_ud_ahs_destroy(sib_worker_t *w);
SIB_LOCAL void sib_ep_fail(sib_worker_t *w, struct sib_ep *ep,
			    const char *why);
SIB_LOCAL int sib_tqps_count(sib_worker_t *w);
SIB_LOCAL int sib_inline_probe(sib_worker_t *w);

/* ---- proto.c ---- */
struct sib_proto {
	const char *name;
	/* largest payload (bytes, header excluded) it carries on worker w */
	size_t (*max_payload)(const sib_worker_t *w);
	/* post r on h's send QP: 0 or an errno */
	int (*post)(sib_worker_t *w, struct sib_host *h, struct sib_request *r);
};
SIB_LOCAL extern const struct sib_proto sib_protos[SIB_PROTO_MAX];
SIB_LOCAL sib_status_t sib_proto_select(const sib_worker_t *w, size_t len,
					enum sib_proto_id *id);
SIB_LOCAL void sib_rx(sib_worker_t *w, struct ibv_wc *wc);
SIB_LOCAL size_t sib_eager_max(const sib_worker_t *w);
SIB_LOCAL void *sib_mem_alloc(size_t len, int *fd);
SIB_LOCAL void sib_mem_release(void *addr, size_t len, int fd);
SIB_LOCAL size_t sib_short_max(const sib_worker_t *w);

/* ---- tag.c ---- */
SIB_LOCAL struct sib_ep *sib_ep_find(sib_worker_t *w, uint32_t id);
SIB_LOCAL struct sib_ep *sib_ep_get(sib_worker_t *w, uint32_t id);
SIB_LOCAL void sib_req_complete(struct sib_request *r, sib_status_t st);
SIB_LOCAL void sib_send_finished(sib_worker_t *w, struct sib_request *r,
				 sib_status_t st);
SIB_LOCAL void sib_deliver(sib_worker_t *w, struct sib_ep *src,
			   const struct sib_hdr *h, uint8_t *payload,
			   size_t len, uint32_t cls, uint32_t idx, bool *keep);
SIB_LOCAL void sib_deliver_tag(sib_worker_t *w, uint32_t src, uint32_t ctx,
			       uint64_t tag, const uint8_t *payload, size_t len);
SIB_LOCAL void sib_slot_release(sib_worker_t *w, int slot);
SIB_LOCAL void sib_requests_destroy(sib_worker_t *w);

#include "request.h"
SIB_LOCAL sib_status_t sib_send_start(struct sib_ep *ep, struct sib_hdr *h,
				      const void *a, size_t alen,
				      const void *b, size_t blen,
				      const struct sib_op_params *op,
				      sib_request_t **out);

SIB_LOCAL uint32_t sib_class_for(const struct sib_ep *ep, uint32_t wire);

/* ---- batch.c: small tagged and active messages packed into one SEND ---- */
/* h's message (tagged or AM), its payload a then b: SIB_OK: batched (*out
 * set); SIB_DONE: batched, no request (SIB_OP_NOREQ, no callback; *out
 * NULL); SIB_INPROGRESS: send it alone; or an error */
SIB_LOCAL sib_status_t sib_batch_add(struct sib_ep *ep, const struct sib_hdr *h,
				     const void *a, size_t alen,
				     const void *b, size_t blen,
				     const struct sib_op_params *op,
				     sib_request_t **out);
SIB_LOCAL void sib_batch_close(sib_worker_t *w, struct sib_ep *ep);

static inline uint32_t sib_pad8(uint32_t n)
{
	return (n + 7u) & ~7u;
}

/* One message into the open batch b (room checked by the caller): its
 * item header (lenw: length, proto and kind bits; ctx; tag or handler
 * id), its payload a then b, padded to 8; counted. Inline: once per
 * batched message (sib_tag_send_nb's fast path, sib_batch_add). */
static inline void sib_batch_item(sib_worker_t *w, struct sib_request *b,
				  uint32_t lenw, uint32_t ctx, uint64_t tag,
				  const void *a, size_t alen,
				  const void *bp, size_t blen)
{
	struct sib_bitem it = { .len = lenw, .ctx = ctx, .tag = tag };
	uint8_t *p = b->data + b->wire_len;
	size_t len = alen + blen;

	memcpy(p, &it, SIB_BITEM);
	sib_copy(p + SIB_BITEM, a, alen);
	if (blen)
		sib_copy(p + SIB_BITEM + alen, bp, blen);
	b->wire_len += SIB_BITEM + sib_pad8((uint32_t)len);
	b->nitems++;
	w->c.tx_batched++;
	w->c.tx_msgs[SIB_BITEM_PROTO(lenw)]++;
	w->c.tx_bytes[SIB_BITEM_PROTO(lenw)] += len;
}
SIB_LOCAL void sib_batches_close(sib_worker_t *w);
SIB_LOCAL void sib_batch_drop(sib_worker_t *w, struct sib_ep *ep,
			      sib_status_t st);
SIB_LOCAL void sib_batch_finished(sib_worker_t *w, struct sib_request *r,
				  sib_status_t st);
/* the batch in receive buffer idx of class cls: true when a handler
 * kept part of it (the buffer stays out of the SRQ, batch.c) */
SIB_LOCAL bool sib_batch_rx(sib_worker_t *w, struct sib_ep *src,
			    uint32_t cls, uint32_t idx,
			    const uint8_t *p, size_t len, uint32_t n);
/* an AM payload kept from receive buffer idx of class cls is released:
 * true when that was the buffer's last hold (the caller reposts it) */
SIB_LOCAL bool sib_batch_release(sib_worker_t *w, uint32_t cls, uint32_t idx);

/* ---- rndv.c: the rendezvous protocol ---- */
SIB_LOCAL size_t sib_rndv_thresh(const struct sib_ep *ep);
SIB_LOCAL size_t sib_short_lim(const sib_worker_t *w);
SIB_LOCAL sib_status_t sib_rndv_send(struct sib_ep *ep, struct sib_hdr *h,
				     const void *hdr, size_t hlen,
				     const struct sib_iov *iov, size_t niov,
				     const struct sib_op_params *op,
				     sib_request_t **out);
SIB_LOCAL sib_status_t sib_tag_send_iov(struct sib_ep *ep,
					const struct sib_iov *iov, size_t niov,
					uint64_t tag, uint32_t ctx_id,
					const struct sib_op_params *op,
					sib_request_t **req);
SIB_LOCAL void sib_rndv_rx(sib_worker_t *w, struct sib_ep *src,
			   const struct sib_hdr *h, const uint8_t *p, size_t len);
SIB_LOCAL void sib_rndv_matched(sib_worker_t *w, struct sib_request *r,
				struct sib_message *m);
SIB_LOCAL sib_status_t sib_rndv_cancel(sib_worker_t *w, struct sib_request *r);
SIB_LOCAL void sib_rndv_ep_failed(sib_worker_t *w, struct sib_ep *ep);
SIB_LOCAL bool sib_rndv_am_release(sib_worker_t *w, void *data);
SIB_LOCAL void sib_rndv_fini(sib_worker_t *w);
SIB_LOCAL bool sib_rndv_fin_void(const struct sib_request *r);
SIB_LOCAL size_t sib_iov_copy(const struct sib_iov *iov, size_t niov,
			      size_t off, const void *src, size_t n);

/* ---- rma.c, mem.c: registrations, one-sided WRs, mem_map / rkeys ---- */
SIB_LOCAL int sib_rdma_post(sib_worker_t *w, struct sib_host *h,
			    struct sib_request *r);
SIB_LOCAL bool sib_rdma_access_error(sib_worker_t *w, struct sib_request *r,
				     enum ibv_wc_status s);
SIB_LOCAL bool sib_rdma_outcome_lost(sib_worker_t *w, struct sib_request *r,
				     enum ibv_wc_status s);
SIB_LOCAL int sib_rd_atomic(sib_worker_t *w);
SIB_LOCAL int sib_rma_init(sib_worker_t *w);
SIB_LOCAL void sib_rma_fini(sib_worker_t *w);
SIB_LOCAL void sib_rma_query(sib_worker_t *w, struct sib_worker_attr *a);

/* ---- stats.c ---- */
SIB_LOCAL void sib_stats_publish(sib_worker_t *w);
SIB_LOCAL void sib_stats_remove(sib_worker_t *w);

#endif
