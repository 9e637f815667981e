/*
 * The transport engine's interface (hca/engine/): what the IB transport
 * does whichever link carries a message. The requester (req.c) posts and
 * executes send WQEs, the responder (resp.c) executes a request (struct
 * hca_msg) against the target QP, the opcode table (opcode.h) says which
 * transport accepts what. Links include this header; core does not.
 */
#ifndef HCA_ENGINE_H
#define HCA_ENGINE_H

#include "hca_int.h"
#include "link_ops.h"
#include "opcode.h"

/* The work a requester hands the responder (either link). */
enum hca_resp_status {
	HCA_RESP_ACK = 0,
	HCA_RESP_DROP,           /* as if the packet was lost: retry */
	HCA_RESP_RNR,
	HCA_RESP_NAK_INV,        /* invalid request */
	HCA_RESP_NAK_ACCESS,     /* remote access error */
	HCA_RESP_NAK_OP,         /* remote operational error */
};

struct hca_msg {
	enum ibv_wr_opcode op;
	enum ibv_qp_type type;
	uint32_t src_qpn, dst_qpn;
	uint16_t slid;
	uint32_t qkey;
	uint32_t imm;            /* network order, as in the WR */
	bool solicited;
	uint64_t raddr;
	uint32_t rkey;
	uint64_t compare_add, swap;
	uint32_t len;
	const struct iovec *iov; /* requester-side buffers, local memory */
	int iovcnt;
	uint64_t atomic_orig;    /* out */
	const struct hca_ah *ah; /* UD: for the GRH */
	uint32_t xrc_srqn;       /* XRC: the SRQ the XRCETH names */
	union ibv_gid sgid;      /* UD: the sender's GID, for the GRH */
	bool range_only;         /* READ, WRITE: check the key and range, move nothing */
	bool refused;            /* out: the key or range check failed */
	bool uncounted;          /* one packet of a READ counted already */
	bool fenced;             /* the caller holds a copy section (fence.c) */
	bool duplicate;          /* READ: a repeat of one answered already; a
				  * failed check drops it, the QP stays as is */
	uint32_t src_slot;       /* requester's process slot on this host, or
				  * HCA_NONE (UDP): whom to wake after RNR */
	/* shared-memory link: the receive completion waits until the
	 * requester's own completion is out, as the ACK precedes the reply
	 * on a wire (resp.c fills it, req.c pushes it) */
	bool defer_recv_cqe;
	bool deferred;
	struct hca_claim *claim; /* the cell holding the receive WQE until
				  * the deferred completion is pushed */
	uint32_t deferred_cq;
	uint32_t deferred_len;   /* bytes of deferred_cqe to push */
	/* not cleared by build_msg (HCA_MSG_CLEAR): written before read */
	struct hca_cqe_buf deferred_cqe; /* the completion, and the payload
					  * embedded after it (cq_embed.c) */
};
#define HCA_MSG_CLEAR offsetof(struct hca_msg, deferred_cqe)


#define HCA_COUNT(e, field) \
	atomic_fetch_add_explicit(&(e)->cnt.field, 1, memory_order_relaxed)
/* A counter with one writer at a time (the link's receive path, under
 * its rx_lock): a load and a store, no locked read-modify-write; readers
 * (softib status, other processes) still see whole values. */
#define HCA_COUNT_1W(ctr) \
	atomic_store_explicit(&(ctr), atomic_load_explicit(&(ctr), memory_order_relaxed) + 1, \
			      memory_order_relaxed)


/* RC and XRC are the reliable transports: ACKs, RNR, retries. */
static inline bool hca_reliable(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC || t == IBV_QPT_XRC_SEND || t == IBV_QPT_XRC_RECV;
}

/* req.c helpers shared with udp_req.c */
enum ibv_wc_status hca_req_local_iov(struct hca_qp *qp, const struct hca_swqe *w,
				     struct iovec *iov, int *n);
void hca_req_complete(struct hca_qp *qp, struct hca_swqe *w, enum ibv_wc_status st);
void hca_req_fail_head(struct hca_qp *qp, struct hca_swqe *w, enum ibv_wc_status st);
uint32_t hca_path_mtu_bytes(struct hca_qp *qp);
extern const uint32_t hca_rnr_timer_us[32];

/* req.c */
void hca_sq_progress(struct hca_qp *qp);
bool hca_sq_reap(struct hca_qp *qp, bool timed);

/* mbox_send.c (hca/core/mbox.c states the protocol) */
enum { HCA_MB_SEND_NO, HCA_MB_SEND_SENT, HCA_MB_SEND_WAIT };
int hca_mb_send(struct hca_qp *qp, struct hca_swqe *w, uint32_t idx);
bool hca_mb_send_inline(struct hca_qp *qp, const struct ibv_send_wr *wr, uint32_t len,
			uint32_t idx, uint64_t *pos, uint32_t *slots);
/* how a reap looks: a poll's (lazy while only unsignalled sends wait), a
 * post's (only when the mailbox is filling: the polls retire the rest,
 * not the path to the next message's store), at once (the send queue is
 * full), or the progress thread's (the clock) */
enum hca_mb_reap_how { HCA_MB_REAP_POLL, HCA_MB_REAP_POST, HCA_MB_REAP_NOW, HCA_MB_REAP_TIMED };
uint32_t hca_mb_reap(struct hca_qp *qp, enum hca_mb_reap_how how);

/* resp.c */
enum hca_resp_status hca_resp_execute(struct hca_dev *dev, struct hca_msg *m);

#endif
