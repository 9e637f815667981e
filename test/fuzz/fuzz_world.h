/*
 * fuzz_world.h: the fixed world every fuzz_packet input starts from
 * (fuzz_world.c): the device, its PDs, CQ, SRQs, XRC domain, the QPs of
 * qp_def[] and the memory regions of reg_def[], all in F; what resets it
 * between inputs (fuzz_packet.c's baseline()) calls from here.
 */
#ifndef FUZZ_WORLD_H
#define FUZZ_WORLD_H

#include <stdbool.h>
#include <stdint.h>

#include "hca_int.h"
#include "fuzz_packet.h"

#define RQ_PSN      0x000100u   /* every responder's first expected PSN */
#define SQ_PSN      0x000100u   /* every requester's first PSN */
#define LONELY_PSN  0xfffff0u   /* the lonely requester wraps soon */
#define NRECV       4           /* receives posted per RQ/SRQ */

enum { R_FULL, R_RDONLY, R_LOCAL, R_OTHERPD, NREG };

struct fuzz_reg_def {
	size_t len;
	uint64_t iova;          /* 0: the address itself */
	unsigned access;
	bool other_pd;
};
extern const struct fuzz_reg_def reg_def[NREG];

struct fuzz_qp_def {
	enum ibv_qp_type type;
	int peer;               /* index of the peer QP; -1: none (UD), -2: a dead QPN */
	bool on_srq;
	uint8_t timeout, retry_cnt, rnr_retry;
};
extern const struct fuzz_qp_def qp_def[NQP];

struct fuzz_world {
	struct hca_dev *dev;
	struct hca_ctx *ctx;
	struct hca_pd *pd, *pd2;
	struct hca_cq *cq;
	struct hca_srq *srq, *xsrq;
	struct hca_xrcd *xrcd;
	struct hca_qp *qp[NQP];
	uint32_t qpn[NQP];
	uint8_t *reg[NREG];
	uint8_t *image[NREG];      /* what each region holds at the start */
	struct hca_mr *mr[NREG];
	uint32_t keys[NREG + 2];   /* the regions' keys, a stale one, 0 */
	uint32_t srqn[3];          /* the XRC SRQ, the plain SRQ, none */
	uint32_t ip;
	bool trace;                /* FUZZ_PACKET_TRACE: say what happens */
};
extern struct fuzz_world F;

#define NKEYS (NREG + 2)

/* UD sends here use one AH, to our host: its contents go down with
 * every post (the verbs layer hands each WR's down the same way). */
extern struct hca_ah fuzz_ah;
extern const struct hca_ah *const fuzz_ah_list[4];

/* Builds the world once (the first input); dies (abort) on a failure. */
void fuzz_setup(void);
/* QP i: RESET -> INIT -> RTR (-> RTS) with its fixed PSNs. */
int connect_qp(int i);
void forget_private_state(struct hca_qp *qp);
int qp_has_rq(int i);
void recv_wr(int k, uint64_t id, struct ibv_recv_wr *wr, struct ibv_sge *sge);
void post_baseline_recvs(void);
void empty_srq(struct hca_srq *srq);

#endif
