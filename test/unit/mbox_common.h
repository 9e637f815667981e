/*
 * What the mailbox unit programs share (test_verbs_mbox.c: what either
 * path must give, over RC and over XRC; test_verbs_mbox_lanes.c: an XRC
 * SRQ's lanes among several send QPs and SRQs): the context, a connected
 * pair of QPs with its buffers (RC, or an XRC send QP into an SRQ when
 * xrc is set), posting one receive or send, the byte pattern the tests
 * check, and the suites' init and clean.
 */
#ifndef MBOX_COMMON_H
#define MBOX_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "include/infiniband/verbs.h"

#define TIMEOUT_MS 10000
#define BUF 4096
#define NRX 64

extern struct ibv_context *ctx;
extern struct ibv_port_attr port_attr;

/*
 * Set by the XRC suites' init: a sends on an XRC send QP, b is the XRC
 * receive QP it is connected to, and the receives are posted to an XRC
 * SRQ on the CQ (the SRQ's lanes: one mailbox per requester QP, mbox.c).
 */
extern bool xrc;

struct pair {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;   /* a sends, b receives */
	struct ibv_mr *smr, *rmr;
	uint8_t *s, *r;         /* NRX * BUF each */
	struct ibv_xrcd *xrcd;  /* XRC: the domain, its SRQ and its number */
	struct ibv_srq *srq;
	uint32_t srqn;
};

struct conn_opts {
	uint8_t rnr_retry, retry_cnt, timeout, min_rnr_timer;
};

/* rnr_retry 7: a send waits for its receive as long as it takes */
extern const struct conn_opts forever;

/* the completion channel of the next pair's CQ, if set */
extern struct ibv_comp_channel *pair_chan;

uint64_t now_ms(void);
int connect_qp(struct ibv_qp *qp, uint32_t dest, const struct conn_opts *o);
int connect_xrc(struct pair *p, const struct conn_opts *o);
int xrc_make_qps(struct pair *p);
int pair_make(struct pair *p, const struct conn_opts *o);
void pair_free(struct pair *p);
int post_recv(struct pair *p, int k, uint32_t len);
int post_send(struct pair *p, enum ibv_wr_opcode op, uint64_t id, uint32_t off,
	      uint32_t len, bool signaled, uint32_t imm);
void fill(uint8_t *b, uint32_t len, uint32_t seed);
bool check(const uint8_t *b, uint32_t len, uint32_t seed);
int mbox_suite_init(void);
int mbox_suite_init_xrc(void);
int mbox_suite_clean(void);

#endif
