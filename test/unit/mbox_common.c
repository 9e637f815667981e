/* Helpers shared by the mailbox unit programs (see mbox_common.h). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mbox_common.h"

struct ibv_context *ctx;
struct ibv_port_attr port_attr;
bool xrc;

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#define INIT_MASK (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define RTR_MASK (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
#define RTR_RECV_MASK (RTR_MASK | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };

	return ibv_modify_qp(qp, &a, INIT_MASK);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest, const struct conn_opts *o, int mask)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = dest, .rq_psn = 0x100, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = o->min_rnr_timer,
				 .ah_attr = { .dlid = port_attr.lid, .port_num = 1 } };

	return ibv_modify_qp(qp, &a, mask);
}

static int to_rts(struct ibv_qp *qp, const struct conn_opts *o)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = 0x100,
				 .timeout = o->timeout, .retry_cnt = o->retry_cnt,
				 .rnr_retry = o->rnr_retry, .max_rd_atomic = 1 };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

int connect_qp(struct ibv_qp *qp, uint32_t dest, const struct conn_opts *o)
{
	return to_init(qp) || to_rtr(qp, dest, o, RTR_RECV_MASK) || to_rts(qp, o) ? -1 : 0;
}

/* XRC: the send QP a to RTS toward b, the receive QP b to RTR from a. */
int connect_xrc(struct pair *p, const struct conn_opts *o)
{
	return to_init(p->a) || to_init(p->b) || to_rtr(p->a, p->b->qp_num, o, RTR_MASK) ||
	       to_rtr(p->b, p->a->qp_num, o, RTR_RECV_MASK) || to_rts(p->a, o) ? -1 : 0;
}

/* XRC: a send QP and a receive QP in the pair's domain. */
int xrc_make_qps(struct pair *p)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = p->cq, .qp_type = IBV_QPT_XRC_SEND,
		.cap = { .max_send_wr = 64, .max_send_sge = 2 },
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = p->pd };
	struct ibv_qp_init_attr_ex ra = { .qp_type = IBV_QPT_XRC_RECV,
					  .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = p->xrcd };

	p->a = ibv_create_qp_ex(ctx, &ia);
	p->b = ibv_create_qp_ex(ctx, &ra);
	return p->a && p->b ? 0 : -1;
}

/* XRC: the domain, its SRQ on the pair's CQ, the send and receive QPs. */
static int xrc_make(struct pair *p)
{
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1, .oflags = O_CREAT };
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = NRX, .max_sge = 2 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC, .pd = p->pd, .cq = p->cq };

	p->xrcd = ibv_open_xrcd(ctx, &xa);
	if (!p->xrcd)
		return -1;
	sa.xrcd = p->xrcd;
	p->srq = ibv_create_srq_ex(ctx, &sa);
	if (!p->srq || ibv_get_srq_num(p->srq, &p->srqn))
		return -1;
	return xrc_make_qps(p);
}

const struct conn_opts forever = { .rnr_retry = 7, .retry_cnt = 7, .timeout = 14,
					  .min_rnr_timer = 1 };

static struct ibv_qp *rc_qp(struct pair *p)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = p->cq, .recv_cq = p->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 64, .max_recv_wr = NRX,
			 .max_send_sge = 2, .max_recv_sge = 2 },
	};

	return ibv_create_qp(p->pd, &ia);
}

struct ibv_comp_channel *pair_chan;

int pair_make(struct pair *p, const struct conn_opts *o)
{
	memset(p, 0, sizeof(*p));
	p->pd = ibv_alloc_pd(ctx);
	p->cq = p->pd ? ibv_create_cq(ctx, 512, NULL, pair_chan, 0) : NULL;
	p->s = malloc((size_t)NRX * BUF);
	p->r = malloc((size_t)NRX * BUF);
	if (!p->cq || !p->s || !p->r)
		return -1;
	p->smr = ibv_reg_mr(p->pd, p->s, (size_t)NRX * BUF, IBV_ACCESS_LOCAL_WRITE);
	p->rmr = ibv_reg_mr(p->pd, p->r, (size_t)NRX * BUF,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!p->smr || !p->rmr)
		return -1;
	if (xrc)
		return xrc_make(p) || connect_xrc(p, o);
	p->a = rc_qp(p);
	p->b = rc_qp(p);
	if (!p->a || !p->b)
		return -1;
	return connect_qp(p->a, p->b->qp_num, o) || connect_qp(p->b, p->a->qp_num, o);
}

void pair_free(struct pair *p)
{
	if (p->a)
		ibv_destroy_qp(p->a);
	if (p->b)
		ibv_destroy_qp(p->b);
	if (p->srq)
		ibv_destroy_srq(p->srq);
	if (p->xrcd)
		ibv_close_xrcd(p->xrcd);
	if (p->smr)
		ibv_dereg_mr(p->smr);
	if (p->rmr)
		ibv_dereg_mr(p->rmr);
	if (p->cq)
		ibv_destroy_cq(p->cq);
	if (p->pd)
		ibv_dealloc_pd(p->pd);
	free(p->s);
	free(p->r);
}

/* Receive k into buffer k, of len bytes (filled with 0xee first). */
int post_recv(struct pair *p, int k, uint32_t len)
{
	struct ibv_sge sg = { .addr = (uintptr_t)(p->r + (size_t)k * BUF), .length = len,
			      .lkey = p->rmr->lkey };
	struct ibv_recv_wr w = { .wr_id = 1000 + (uint64_t)k, .sg_list = &sg, .num_sge = 1 }, *bad;

	memset(p->r + (size_t)k * BUF, 0xee, BUF);
	return xrc ? ibv_post_srq_recv(p->srq, &w, &bad) : ibv_post_recv(p->b, &w, &bad);
}

int post_send(struct pair *p, enum ibv_wr_opcode op, uint64_t id, uint32_t off,
	      uint32_t len, bool signaled, uint32_t imm)
{
	struct ibv_sge sg = { .addr = (uintptr_t)(p->s + off), .length = len,
			      .lkey = p->smr->lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = op,
				 .send_flags = signaled ? IBV_SEND_SIGNALED : 0,
				 .imm_data = imm }, *bad;

	if (op == IBV_WR_RDMA_WRITE) {
		w.wr.rdma.remote_addr = (uintptr_t)(p->r + (size_t)(NRX - 1) * BUF);
		w.wr.rdma.rkey = p->rmr->rkey;
	}
	w.qp_type.xrc.remote_srqn = p->srqn;
	return ibv_post_send(p->a, &w, &bad);
}

void fill(uint8_t *b, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		b[i] = (uint8_t)(seed * 131 + i * 7 + 1);
}

bool check(const uint8_t *b, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (b[i] != (uint8_t)(seed * 131 + i * 7 + 1))
			return false;
	for (uint32_t i = len; i < BUF; i++)
		if (b[i] != 0xee)
			return false;
	return true;
}

int mbox_suite_init(void)
{
	struct ibv_device **l;

	/* the mailbox is off by default: these tests are about it (unless
	 * the caller says otherwise: SOFTIB_MBOX=0, SOFTIB_NO_MBOX=1) */
	setenv("SOFTIB_MBOX", "1", 0);
	l = ibv_get_device_list(NULL);

	ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	ibv_free_device_list(l);
	return !ctx || ibv_query_port(ctx, 1, &port_attr) ? -1 : 0;
}

int mbox_suite_clean(void)
{
	int rc = ctx ? ibv_close_device(ctx) : 0;

	ctx = NULL;
	xrc = false;
	return rc;
}

int mbox_suite_init_xrc(void)
{
	xrc = true;
	return mbox_suite_init();
}
