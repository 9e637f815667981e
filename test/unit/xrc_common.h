/*
 * What the XRC unit programs share (test_verbs_xrc.c: seed 000 and the legacy
 * API; test_verbs_xrc_modern.c: the modern API and the equivalence of the
 * two; test_verbs_xrc_fork.c: lifetime across processes): the context, a
 * temporary directory for domain files, QP attribute helpers, one
 * process's XRC objects for a loopback, posting every opcode through either
 * interface, and async-event helpers.
 */
#ifndef XRC_COMMON_H
#define XRC_COMMON_H

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* softib's header: rdma-core's, plus the legacy OFED XRC API */
#include "include/infiniband/verbs.h"

#include "cu_run.h"

#define CANARY 0xa5
#define BUF 8192
#define RECV_LEN 512
#define TIMEOUT_MS 5000

extern struct ibv_context *ctx;
extern struct ibv_port_attr port_attr;

/* ---- QP attributes ---- */

#define SEND_INIT_MASK (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | \
			IBV_QP_ACCESS_FLAGS)
#define SEND_RTR_MASK (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | \
		       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
#define SEND_RTS_MASK (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | \
		       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | \
		       IBV_QP_MAX_QP_RD_ATOMIC)
#define RCV_INIT_MASK SEND_INIT_MASK
#define RCV_RTR_MASK (SEND_RTR_MASK | IBV_QP_MAX_DEST_RD_ATOMIC | \
		      IBV_QP_MIN_RNR_TIMER)


/* ---- one process's XRC objects for a loopback ---- */

struct side {
	struct ibv_pd *pd_s, *pd_r;     /* send QP's, SRQ's */
	struct ibv_cq *scq, *rcq;       /* send CQ, SRQ's CQ */
	uint8_t *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr;
};


/* ---- posting one operation through either interface ---- */

enum post_how { POST_WR, POST_LEGACY_WR, POST_QP_EX };

struct op {
	enum ibv_wr_opcode opcode;
	uint32_t len, soff, roff;   /* bytes, offsets in sbuf and rbuf */
	uint64_t compare_add, swap;
	uint32_t imm;
};


struct ibv_context *open_ctx(void);
int xrc_suite_init(void);
int xrc_suite_clean(void);
int domain_file(char *path, size_t len);
uint64_t now_ms(void);
int poll_one(struct ibv_cq *cq, struct ibv_wc *wc);
struct ibv_ah_attr av(void);
struct ibv_qp_attr rcv_attr(enum ibv_qp_state st, uint32_t src_qpn);
int rcv_to_rtr_legacy(struct ibv_xrc_domain *d, uint32_t qpn,
			     uint32_t src_qpn);
int rcv_to_rtr_modern(struct ibv_qp *qp, uint32_t src_qpn);
int send_connect(struct ibv_qp *qp, uint32_t dest_qpn);
bool side_make(struct side *s);
void side_free(struct side *s);
int post_recvs(struct side *s, struct ibv_srq *srq, int n);
struct ibv_qp *legacy_send_qp(struct side *s, struct ibv_xrc_domain *d);
struct ibv_qp *modern_send_qp(struct side *s, bool ex);
struct ibv_qp *modern_rcv_qp(struct ibv_xrcd *x);
struct ibv_srq *modern_srq(struct side *s, struct ibv_xrcd *x);
struct ibv_srq *legacy_srq(struct side *s, struct ibv_xrc_domain *d);
struct ibv_xrcd *modern_xrcd(int fd, int oflags);
int post(struct ibv_qp *qp, enum post_how how, struct side *s,
		uint32_t srqn, const struct op *o);
void run_all_opcodes(struct side *s, struct ibv_qp *qp, enum post_how how,
			    struct ibv_srq *srq, uint32_t srqn, uint32_t rcv_qpn);
bool async_nonblock(struct ibv_context *c);
void drain_events(struct ibv_context *c);
bool wait_event(struct ibv_context *c, unsigned type,
		       struct ibv_async_event *out);
void check_rtr_attrs(const struct ibv_qp_attr *q, uint32_t src_qpn);

#endif
