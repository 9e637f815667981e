/*
 * sib.h: the public interface of libsib, softib's message runtime.
 *
 * Shape (after UCX's ucp, in our own names):
 *   context  - one per process: parameters, the hardware topology.
 *   worker   - a progress engine with its own device context, XRC SRQs,
 *              send QPs (one per remote host) and a UD QP for handshakes.
 *              Its address is an opaque blob the application exchanges.
 *   endpoint - a worker's view of one remote worker, made from its address;
 *              the connection to the peer's host is made at the first send.
 *   request  - a non-blocking operation in flight: test, wait, cancel, free.
 *
 * Every call validates its arguments and returns a sib_status_t (negative
 * values are errors; sib_status_string() names them).  Nothing aborts.
 * Thread mode SIB_THREAD_MULTI serialises every call on a worker with the
 * worker's lock; SIB_THREAD_SINGLE leaves it to the caller.
 */
#ifndef SIB_H
#define SIB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIB_API __attribute__((visibility("default")))

typedef enum {
	SIB_OK = 0,
	SIB_INPROGRESS = 1,
	SIB_DONE = 2,               /* complete already: no request was made
				       (a send with SIB_OP_NOREQ) */
	SIB_ERR_INVALID_PARAM = -1,
	SIB_ERR_NO_MEMORY = -2,
	SIB_ERR_TRUNCATED = -3,
	SIB_ERR_PEER_FAILED = -4,
	SIB_ERR_CANCELED = -5,
	SIB_ERR_NO_DEVICE = -6,
	SIB_ERR_IO = -7,            /* a verbs call failed (errno in the log) */
	SIB_ERR_MSG_TOO_LONG = -8,  /* above every protocol in the table */
	SIB_ERR_NO_RESOURCE = -9,   /* a limit of the device or the runtime */
	SIB_ERR_UNSUPPORTED = -10,
	SIB_ERR_BUSY = -11,         /* e.g. destroy with requests in flight */
	SIB_ERR_TIMEOUT = -12,
	SIB_ERR_NO_MESSAGE = -13,   /* probe: nothing matches (yet) */
	SIB_ERR_BOOTSTRAP = -14,    /* PMIx failed or is absent */
	SIB_ERR_REMOTE_ACCESS = -15, /* RMA outside an exposed region, or
					through an unmapped key */
	SIB_STATUS_LAST = -16,
} sib_status_t;

SIB_API const char *sib_status_string(sib_status_t st);

#define SIB_ANY_SOURCE UINT32_MAX
#define SIB_MAX_CLASSES 8
#define SIB_AM_MAX_ID 64

typedef struct sib_context sib_context_t;
typedef struct sib_worker sib_worker_t;
typedef struct sib_ep sib_ep_t;
typedef struct sib_request sib_request_t;
typedef struct sib_message sib_message_t;   /* taken by a matched probe */

typedef enum { SIB_THREAD_SINGLE = 0, SIB_THREAD_MULTI = 1 } sib_thread_mode_t;
typedef enum { SIB_PROGRESS_POLL = 0, SIB_PROGRESS_BLOCKING = 1 } sib_progress_mode_t;

/* One receive-buffer size class: an XRC SRQ of `depth` buffers of `size`
 * bytes each (header included). */
struct sib_class_param {
	uint32_t size;
	uint32_t depth;
};

/*
 * Context parameters.  Zero means "the default" for every field; defaults
 * can also come from the environment, one named key each (checked: a bad
 * value is an error, not silently ignored):
 *   SIB_JOB_KEY        name of the job (the XRC domain file derives from it)
 *   SIB_SRQ_CLASSES    number of size classes (1..8)
 *   SIB_SRQ<i>_SIZE    buffer size of class i (bytes, 64..1 MiB, increasing)
 *   SIB_SRQ<i>_DEPTH   buffers of class i (16..16384)
 *   SIB_SHORT_MAX      largest message sent by the short protocol (inline)
 *   SIB_PROGRESS       "poll" or "blocking"
 *   SIB_ASYNC          0: no connection thread (handshakes then complete
 *                      only inside the calls; docs/transport.md)
 *   SIB_DEVICE         device name (default: the first)
 * Parameters given here win over the environment.
 */
struct sib_context_params {
	const char *job_key;
	const char *device;
	uint32_t nclasses;
	struct sib_class_param classes[SIB_MAX_CLASSES];
	int32_t short_max;             /* -1: short protocol off; 0: default */
	sib_thread_mode_t thread_mode;
	sib_progress_mode_t progress_mode;
	int progress_mode_set;         /* 1: progress_mode given here */
	/* 1: every peer of this process is on another host (a rank alone
	 * on its host): the default classes gain one of 128 KiB (depth 16),
	 * so that messages to 128 KiB go eager — one trip across hosts,
	 * where a rendezvous takes three; on one host a rendezvous is one
	 * copy and the defaults stay (docs/transport.md, "Size classes") */
	int remote_peers_only;
};

SIB_API sib_status_t sib_context_create(const struct sib_context_params *p,
					sib_context_t **ctx);
SIB_API sib_status_t sib_context_destroy(sib_context_t *ctx);

/* Worker parameters.  `id` names this worker to its peers (the source of
 * its messages as the receiver sees it: a rank, say); it must be unique in
 * the job.  id_set = 0 derives one from the host and the pid.
 * peer_timeout_ms: how long a peer on another host may stay unreachable
 * (pings unanswered, a connection request unanswered, a send that cannot
 * be delivered) before its endpoint fails with SIB_ERR_PEER_FAILED; 0 is
 * the default, SIB_DEFAULT_PEER_TIMEOUT_MS.  The environment variable
 * SIB_PEER_TIMEOUT_MS, where set, overrides both.  A peer on this host is
 * failed as soon as its process is gone, whatever the timeout. */
#define SIB_DEFAULT_PEER_TIMEOUT_MS 10000
struct sib_worker_params {
	uint32_t id;
	int id_set;
	uint32_t peer_timeout_ms;
};

SIB_API sib_status_t sib_worker_create(sib_context_t *ctx,
				       const struct sib_worker_params *p,
				       sib_worker_t **w);
SIB_API sib_status_t sib_worker_destroy(sib_worker_t *w);
/* Make progress; returns how many events it handled (>= 0) or an error. */
SIB_API int sib_worker_progress(sib_worker_t *w);
/* An fd that becomes readable when the worker has something to do (put it
 * in your epoll; call sib_worker_arm() before sleeping on it, then
 * sib_worker_progress when it fires). */
SIB_API sib_status_t sib_worker_fd(sib_worker_t *w, int *fd);
/* SIB_OK: safe to sleep on the fd; SIB_ERR_BUSY: progress first. */
SIB_API sib_status_t sib_worker_arm(sib_worker_t *w);
/* Sleep until there is something to do or timeout_ms passes (-1: none). */
SIB_API sib_status_t sib_worker_wait(sib_worker_t *w, int timeout_ms);
/* The address blob: *addr is malloc'd, release with sib_address_free. */
SIB_API sib_status_t sib_worker_get_address(sib_worker_t *w, void **addr,
					    size_t *len);
SIB_API void sib_address_free(void *addr);
SIB_API uint32_t sib_worker_id(const sib_worker_t *w);

/* Endpoints.  Creating one makes no connection: the first send does. */
SIB_API sib_status_t sib_ep_create(sib_worker_t *w, const void *addr,
				   size_t len, sib_ep_t **ep);
/* Flush: every send on the endpoint has completed (*req NULL and SIB_OK)
 * or will, when the returned request completes. */
SIB_API sib_status_t sib_ep_flush(sib_ep_t *ep, sib_request_t **req);
/* Destroy: its requests still in flight fail with SIB_ERR_CANCELED. */
SIB_API sib_status_t sib_ep_destroy(sib_ep_t *ep);
/* SIB_OK, or SIB_ERR_PEER_FAILED once the peer is known to be dead. */
SIB_API sib_status_t sib_ep_status(const sib_ep_t *ep);
SIB_API uint32_t sib_ep_peer_id(const sib_ep_t *ep);

/* Completion of a tagged operation. */
struct sib_tag_status {
	sib_status_t status;
	uint32_t source;      /* sender's worker id */
	uint32_t ctx_id;
	uint64_t tag;
	size_t length;        /* bytes of the message (for a truncated receive:
				 the sender's length; the buffer holds what fit) */
};

typedef void (*sib_send_cb_t)(sib_request_t *req, sib_status_t st, void *arg);
typedef void (*sib_recv_cb_t)(sib_request_t *req,
			      const struct sib_tag_status *st, void *arg);

/* A piece of a non-contiguous buffer (datatype SIB_OP_IOV). */
struct sib_iov {
	void *base;
	size_t len;
};
#define SIB_IOV_MAX 256      /* pieces per buffer */

/* op flags */
#define SIB_OP_IOV 1u        /* buf is a `const struct sib_iov *` and len
				the number of pieces (send and receive; the
				array must stay valid until completion) */
#define SIB_OP_LAZY_CB 2u    /* send: the callback is for failures; on
				success it may run late (with a later send's
				completion, at a flush, within ~40 ms while
				the request is held, or as SIB_ERR_CANCELED
				at worker destroy once it is freed), which
				lets a short send go unsignalled
				(docs/transport.md "Across hosts") */
#define SIB_OP_NOREQ 4u      /* send (tagged or active): if the call can
				complete it (copied, no callback: short,
				eager or batched), return SIB_DONE with *req
				NULL instead of a request to wait for and
				free, as UCX's send returns no request for
				a send done at once; otherwise SIB_OK and a
				request as always. Ignored by receives. */

/* Optional per-operation parameters (NULL: none). */
struct sib_op_params {
	sib_send_cb_t send_cb;
	sib_recv_cb_t recv_cb;
	void *cb_arg;
	uint32_t flags;      /* SIB_OP_* */
};

/*
 * Non-blocking tagged send of `len` bytes at `buf`.  Up to the path's
 * rendezvous threshold (sib_worker_attr.rndv_thresh_*) the message is
 * copied and the buffer may be reused as soon as the call returns; above
 * it the receiver reads it straight from the buffer (rendezvous, RDMA
 * READ): keep the buffer unchanged until the request completes.  Returns SIB_OK with
 * *req set (complete it with test/wait, then sib_request_free; or free it
 * at once and let it go by itself), or an error with *req NULL.  A send
 * without a send callback that is copied (short or eager) and posted at
 * once is complete when the call returns (SIB_OK: the buffer is free; a
 * later delivery failure shows in sib_ep_status, and sib_ep_flush waits
 * for delivery).  Any other send completes when the receiver's HCA has
 * the message (SIB_OK) or with SIB_ERR_PEER_FAILED, and its callback, if
 * any, carries that status.  The same for every call below that makes a
 * request.  With SIB_OP_NOREQ in op->flags such a send returns SIB_DONE
 * and no request (*req NULL): nothing to wait for or free, no call after
 * it (docs/transport.md "The small-message path, per call").
 * A callback (op) runs exactly once per request, from progress,
 * or from inside the starting call when it completes at once (a receive
 * whose message has already arrived).
 */
SIB_API sib_status_t sib_tag_send_nb(sib_ep_t *ep, const void *buf,
				     size_t len, uint64_t tag, uint32_t ctx_id,
				     const struct sib_op_params *op,
				     sib_request_t **req);
/* Receive into buf (up to len bytes) the oldest message of context ctx_id
 * with (msg_tag & mask) == (tag & mask) from source `src` (a worker id or
 * SIB_ANY_SOURCE).  MPI's rules: oldest posted receive first, per-sender
 * order kept, a longer message fills the buffer and completes with
 * SIB_ERR_TRUNCATED. */
SIB_API sib_status_t sib_tag_recv_nb(sib_worker_t *w, void *buf, size_t len,
				     uint32_t src, uint64_t tag, uint64_t mask,
				     uint32_t ctx_id,
				     const struct sib_op_params *op,
				     sib_request_t **req);
/* Probe: SIB_OK and *st filled when a matching message has arrived,
 * SIB_ERR_NO_MESSAGE otherwise.  With msg != NULL the message is taken
 * (matched probe): receive it with sib_tag_mrecv_nb. */
SIB_API sib_status_t sib_tag_probe_nb(sib_worker_t *w, uint32_t src,
				      uint64_t tag, uint64_t mask,
				      uint32_t ctx_id,
				      struct sib_tag_status *st,
				      sib_message_t **msg);
SIB_API sib_status_t sib_tag_mrecv_nb(sib_worker_t *w, void *buf, size_t len,
				      sib_message_t *msg,
				      const struct sib_op_params *op,
				      sib_request_t **req);

/* Requests.  test: SIB_INPROGRESS or the final status.  wait: progresses
 * (or sleeps, in blocking mode) until the request completes.  cancel: a
 * receive not yet matched completes with SIB_ERR_CANCELED (a send cannot
 * be cancelled once posted: SIB_ERR_BUSY).  free: after completion, or
 * before (then it is released when it completes, callback still run). */
SIB_API sib_status_t sib_request_test(sib_request_t *req,
				      struct sib_tag_status *st);
SIB_API sib_status_t sib_request_wait(sib_request_t *req,
				      struct sib_tag_status *st);
SIB_API sib_status_t sib_request_cancel(sib_request_t *req);
SIB_API void sib_request_free(sib_request_t *req);

/* Active messages.  Any payload size: above the path's rendezvous threshold
 * the receiver fetches the payload (keep `data` untouched until the request
 * completes; the header travels in the RTS) and the handler runs once all
 * of it is there.  The handler runs from progress with the header and the
 * payload.  It returns SIB_OK (payload no longer needed after return) or
 * SIB_INPROGRESS (it keeps the payload: release it later with
 * sib_am_data_release(w, data)).  Small active messages sent in a burst
 * share one SEND with the endpoint's other small messages (batching,
 * docs/transport.md), in order; a kept payload of one holds its whole
 * receive buffer until every kept payload in it is released, in any
 * order (a handler may release one kept earlier, even from the same
 * batch). */
typedef sib_status_t (*sib_am_handler_t)(void *arg, uint32_t source,
					 const void *header, size_t hlen,
					 void *data, size_t dlen);
SIB_API sib_status_t sib_am_register(sib_worker_t *w, unsigned id,
				     sib_am_handler_t h, void *arg);
SIB_API sib_status_t sib_am_send_nb(sib_ep_t *ep, unsigned id,
				    const void *header, size_t hlen,
				    const void *data, size_t dlen,
				    const struct sib_op_params *op,
				    sib_request_t **req);
SIB_API void sib_am_data_release(sib_worker_t *w, void *data);

/* Limits and counters, for tests and tools. */
enum sib_proto_id { SIB_PROTO_SHORT, SIB_PROTO_EAGER, SIB_PROTO_RNDV,
		    SIB_PROTO_MAX };

struct sib_worker_attr {
	size_t short_max;       /* largest short-protocol payload */
	size_t eager_max;       /* largest eager payload (= largest message) */
	uint32_t nclasses;
	struct sib_class_param classes[SIB_MAX_CLASSES];
	uint32_t id;
	int progress_mode, thread_mode;
	uint32_t send_qps;      /* XRC send QPs this worker holds now */
	uint32_t send_qps_max;  /* ... at most, over its life */
	uint32_t recv_qps;      /* XRC receive QPs it created (and holds) */
	uint32_t hosts_sent_to; /* distinct hosts it has sent to */
	uint32_t eps, eps_failed;
	uint64_t tx_msgs[SIB_PROTO_MAX], tx_bytes[SIB_PROTO_MAX];
	uint64_t rx_msgs[SIB_PROTO_MAX], rx_bytes[SIB_PROTO_MAX];
	uint64_t unexpected, unexpected_now, posted_now;
	uint64_t srq_limit_events, srq_refills, reconnects, handshakes;
	uint64_t resent;        /* sends re-posted after a connection failed */
	uint64_t unsignaled;    /* short sends posted without a completion */
	uint64_t tail_nops;     /* NOPs sent to close an unsignalled tail */
	uint64_t tx_batches;    /* SENDs that carried a batch of messages */
	uint64_t tx_batched;    /* messages sent in batches */
	uint64_t rx_batches;    /* batches received */
	/* rendezvous and RMA (rndv.c, rma.c) */
	size_t rndv_thresh_local;  /* above: rendezvous, same host */
	size_t rndv_thresh_remote; /* above: rendezvous, other hosts */
	uint32_t rndv_tx_active;   /* rendezvous sends waiting for FIN */
	uint32_t rndv_rx_active;   /* rendezvous receives reading */
	uint32_t regs_active;      /* user-buffer registrations held now */
	uint32_t mem_maps, rkeys;  /* sib_mem_map'd regions, unpacked keys */
	uint64_t regs_total;       /* registrations made (misses) */
	uint64_t reg_hits;         /* registrations answered by the cache */
	uint64_t reg_miss_ns;      /* time spent registering (misses) */
	uint64_t rndv_tx, rndv_rx; /* rendezvous completed, each side */
	uint64_t rma_ops;          /* put / get / atomic requests issued */
	uint64_t rma_access_errors;/* of which SIB_ERR_REMOTE_ACCESS */
	/* receive buffers per size class: in the SRQ now, and taken and
	 * waiting to go back (they go together when the worker is idle) */
	uint32_t srq_posted[SIB_MAX_CLASSES], srq_waiting[SIB_MAX_CLASSES];
};

SIB_API sib_status_t sib_worker_query(sib_worker_t *w,
				      struct sib_worker_attr *attr);
/* Publish the diagnostics file now (softib sib reads it). */
SIB_API sib_status_t sib_worker_publish(sib_worker_t *w);

/*
 * One-sided operations (RMA).  A process exposes memory with sib_mem_map
 * (addr NULL: libsib allocates `len` zeroed, page-aligned bytes: a memfd
 * sealed against resizing, mapped shared, which other processes of the
 * host reach with plain loads and stores instead of a system call per
 * operation — the fast route for put, get and atomics; sib_mem_fd gives
 * its descriptor, -1 when libsib fell back to private memory or
 * SIB_MEM_ALLOC=anon asked for it; the pages stay shared with a child
 * after fork), packs
 * its key into a blob (sib_rkey_pack) and gives it to others; each unpacks
 * it on its endpoint to that process (sib_rkey_unpack) and then puts,
 * gets and runs 64-bit atomics on remote addresses inside the region.
 * The buffers of put and get must stay untouched until the request
 * completes.  Atomics: 8-byte aligned remote address, IBV_ATOMIC_HCA
 * semantics (atomic with respect to other libsib atomics, not to the
 * target's own CPU stores); *result (may be NULL) receives the value the
 * word held before.  An access outside the region, or through a key whose
 * region was unmapped, completes with SIB_ERR_REMOTE_ACCESS; the target
 * and the other endpoints are not disturbed.  A put has completed when the
 * target's HCA has written it (flush waits for every operation issued).
 */
typedef struct sib_mem sib_mem_t;
typedef struct sib_rkey sib_rkey_t;

SIB_API sib_status_t sib_mem_map(sib_worker_t *w, void *addr, size_t len,
				 sib_mem_t **mem);
/*
 * sib_mem_map with flags. SIB_MEM_CACHED (addr not NULL): the region's
 * registration comes from the worker's registration cache, and unmapping
 * the region gives it back there instead of revoking it: a key packed
 * from it may go on working after sib_mem_unmap, until the memory is
 * freed or the cache evicts the entry. For a transport that exposes each
 * large message's buffer for one transfer (an MPI BTL's register_mem);
 * a region whose key must die at unmap takes no flag.
 */
#define SIB_MEM_CACHED 1u
SIB_API sib_status_t sib_mem_map_flags(sib_worker_t *w, void *addr, size_t len,
				       unsigned flags, sib_mem_t **mem);
SIB_API sib_status_t sib_mem_unmap(sib_mem_t *mem);
SIB_API void *sib_mem_addr(const sib_mem_t *mem);
SIB_API size_t sib_mem_length(const sib_mem_t *mem);
SIB_API int sib_mem_fd(const sib_mem_t *mem);
/* *blob is malloc'd: release with sib_rkey_buffer_free. */
SIB_API sib_status_t sib_rkey_pack(sib_mem_t *mem, void **blob, size_t *len);
SIB_API void sib_rkey_buffer_free(void *blob);
/* The key, for operations through ep (the endpoint to the process that
 * mapped the region: SIB_ERR_INVALID_PARAM otherwise). */
SIB_API sib_status_t sib_rkey_unpack(sib_ep_t *ep, const void *blob,
				     size_t len, sib_rkey_t **rkey);
SIB_API void sib_rkey_destroy(sib_rkey_t *rkey);

SIB_API sib_status_t sib_put_nb(sib_ep_t *ep, const void *buf, size_t len,
				uint64_t raddr, sib_rkey_t *rkey,
				const struct sib_op_params *op,
				sib_request_t **req);
SIB_API sib_status_t sib_get_nb(sib_ep_t *ep, void *buf, size_t len,
				uint64_t raddr, sib_rkey_t *rkey,
				const struct sib_op_params *op,
				sib_request_t **req);
SIB_API sib_status_t sib_atomic_fadd64_nb(sib_ep_t *ep, uint64_t raddr,
					  sib_rkey_t *rkey, uint64_t add,
					  uint64_t *result,
					  const struct sib_op_params *op,
					  sib_request_t **req);
SIB_API sib_status_t sib_atomic_cswap64_nb(sib_ep_t *ep, uint64_t raddr,
					   sib_rkey_t *rkey, uint64_t compare,
					   uint64_t swap, uint64_t *result,
					   const struct sib_op_params *op,
					   sib_request_t **req);
/* Every RMA operation and rendezvous send of the worker issued before the
 * call has completed (SIB_OK, *req NULL) or will when *req completes
 * (SIB_INPROGRESS).  sib_ep_flush covers sends and RMA on one endpoint. */
SIB_API sib_status_t sib_worker_flush(sib_worker_t *w, sib_request_t **req);

/* Bootstrap through PMIx (under mpirun): a context and worker, and one
 * endpoint per rank of the job (eps[rank]; eps[my rank] reaches myself).
 * The worker id is the rank. */
struct sib_job {
	sib_context_t *ctx;
	sib_worker_t *worker;
	uint32_t rank, size;
	sib_ep_t **eps;
};
SIB_API sib_status_t sib_init_pmix(const struct sib_context_params *p,
				   struct sib_job *job);
SIB_API sib_status_t sib_fini_pmix(struct sib_job *job);
/* A barrier through PMIx (no data). */
SIB_API sib_status_t sib_job_fence(struct sib_job *job);

#ifdef __cplusplus
}
#endif
#endif
