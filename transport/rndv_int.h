/*
 * rndv_int.h: what the rendezvous protocol's two halves share: the wire
 * forms of RTS, RTR and FIN, and the sender's and receiver's state.
 * rndv.c is the sender (and the WRITE variant's writer) and the entry
 * points; rndv_rx.c the receiver, which reads the sender's buffer in
 * pieces (or asks the sender to write, the WRITE variant).
 */
#ifndef SIB_RNDV_INT_H
#define SIB_RNDV_INT_H

#include "sib_rma.h"

struct sib_rts {
	uint64_t cookie;
	uint64_t len;            /* the whole message */
	uint32_t nseg;
	uint32_t hlen;           /* AM header bytes after this struct */
	struct sib_addr from;    /* the sender's address */
};

struct sib_rseg {
	uint64_t addr, len;
	uint32_t rkey, pad;
};

/* the AM header is padded so that the segments stay aligned */
#define HPAD(n) (((n) + 7) & ~(size_t)7)

struct sib_fin {
	uint64_t cookie;
	int32_t status;          /* SIB_OK, SIB_ERR_CANCELED, or an error */
	uint32_t pad;
};

/* WRITE variant: the receiver's buffer, for the sender to write. */
struct sib_rtr {
	uint64_t cookie;         /* the sender's */
	uint64_t rid;            /* the receiver's, echoed in FIN_W */
	uint64_t want;
	uint32_t nseg, pad;
};

/* A rendezvous send waiting for its FIN (read) or writing (write). */
struct sib_rndv_tx {
	sib_link_t link;
	uint64_t cookie;
	struct sib_ep *ep;
	struct sib_request *user;
	uint64_t len;
	uint32_t out;            /* WRITE pieces (and the early FIN_W) in flight */
	uint64_t rid;
	sib_status_t st;
	bool gone;               /* finished while pieces were in flight */
	bool fin_early;          /* FIN_W (OK) sent behind the pieces */
	struct sib_iov *segs;    /* my segments (WRITE variant) */
	uint32_t nreg;
	struct sib_reg *regs[];
};

/* A rendezvous being read. */
struct sib_rndv_rx {
	sib_link_t link;
	sib_worker_t *w;
	struct sib_ep *ep;       /* the sender */
	struct sib_request *r;   /* tagged: the receive; AM: NULL */
	uint64_t cookie, total, want;
	uint32_t out, hold;      /* pieces in flight; holds of the caller */
	bool canceled;
	bool wfin;               /* WRITE variant: waiting for FIN_W */
	uint64_t rid;
	sib_status_t st;         /* first failure of a piece */
	/* AM */
	uint16_t am_id;
	uint8_t *am_hdr;
	size_t am_hlen;
	void *am_buf;            /* sib_rndv_am_release finds it: link first */
	uint32_t nreg;
	struct sib_reg *regs[SIB_IOV_MAX];
};

/* A payload kept by an AM handler: the link, then the data. */
struct am_kept {
	sib_link_t link;
	uint8_t data[];
};

/* rndv_rx.c */
SIB_LOCAL void sib_rndv_rx_start(sib_worker_t *w, struct sib_request *r,
				 struct sib_ep *ep, const struct sib_hdr *h,
				 const uint8_t *p, size_t len);
SIB_LOCAL void sib_rndv_rx_finish(sib_worker_t *w, struct sib_rndv_rx *x);

#endif
