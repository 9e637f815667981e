/*
 * Black-box tests of the mailbox path (hca/core/mbox.c,
 * hca/engine/mbox_send.c): small RC SENDs between QPs of one host go
 * through a per-connection mailbox the receiver's poll consumes; what it
 * cannot settle goes by the ring path. The tests hold what either path
 * must give: every byte of every size across the threshold, the order of
 * a QP's messages when mailbox and ring-path WQEs interleave (and when
 * retracts are forced: SOFTIB_MBOX_STALL_US=0 in the second run of the
 * integration script), RNR wait then success, RNR exhaustion, the
 * receiver's length error, a receiver in the error state, and two
 * processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "include/infiniband/verbs.h"

#include "cu_run.h"

#define TIMEOUT_MS 10000
#define BUF 4096
#define NRX 64

static struct ibv_context *ctx;
static struct ibv_port_attr port_attr;

/*
 * The second suite runs the tests again over XRC (xrc set): a sends on an
 * XRC send QP, b is the XRC receive QP it is connected to, and the
 * receives are posted to an XRC SRQ on the CQ (the SRQ's lanes: one
 * mailbox per requester QP, mbox.c).
 */
static bool xrc;

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

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	int got = 0;

	while (got < n && now_ms() < end) {
		int k = ibv_poll_cq(cq, n - got, wc + got);

		if (k < 0)
			return -1;
		got += k;
	}
	return got;
}

struct conn_opts {
	uint8_t rnr_retry, retry_cnt, timeout, min_rnr_timer;
};

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

static int connect_qp(struct ibv_qp *qp, uint32_t dest, const struct conn_opts *o)
{
	return to_init(qp) || to_rtr(qp, dest, o, RTR_RECV_MASK) || to_rts(qp, o) ? -1 : 0;
}

/* XRC: the send QP a to RTS toward b, the receive QP b to RTR from a. */
static int connect_xrc(struct pair *p, const struct conn_opts *o)
{
	return to_init(p->a) || to_init(p->b) || to_rtr(p->a, p->b->qp_num, o, RTR_MASK) ||
	       to_rtr(p->b, p->a->qp_num, o, RTR_RECV_MASK) || to_rts(p->a, o) ? -1 : 0;
}

/* XRC: a send QP and a receive QP in the pair's domain. */
static int xrc_make_qps(struct pair *p)
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

static const struct conn_opts forever = { .rnr_retry = 7, .retry_cnt = 7, .timeout = 14,
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

static struct ibv_comp_channel *pair_chan; /* the next pair's CQ's, if set */

static int pair_make(struct pair *p, const struct conn_opts *o)
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

static void pair_free(struct pair *p)
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
static int post_recv(struct pair *p, int k, uint32_t len)
{
	struct ibv_sge sg = { .addr = (uintptr_t)(p->r + (size_t)k * BUF), .length = len,
			      .lkey = p->rmr->lkey };
	struct ibv_recv_wr w = { .wr_id = 1000 + (uint64_t)k, .sg_list = &sg, .num_sge = 1 }, *bad;

	memset(p->r + (size_t)k * BUF, 0xee, BUF);
	return xrc ? ibv_post_srq_recv(p->srq, &w, &bad) : ibv_post_recv(p->b, &w, &bad);
}

static int post_send(struct pair *p, enum ibv_wr_opcode op, uint64_t id, uint32_t off,
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

static void fill(uint8_t *b, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		b[i] = (uint8_t)(seed * 131 + i * 7 + 1);
}

static bool check(const uint8_t *b, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (b[i] != (uint8_t)(seed * 131 + i * 7 + 1))
			return false;
	for (uint32_t i = len; i < BUF; i++)
		if (b[i] != 0xee)
			return false;
	return true;
}

static const uint32_t sizes[] = { 0, 1, 7, 8, 31, 32, 33, 39, 40, 41, 63, 64, 65, 103,
				  104, 105, 167, 168, 232, 233, 487, 488, 489, 1024, 1063,
				  1064, 1065, 2023, 2024, 2025, 4071, 4072, 4073, 4096 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Every size across the thresholds, every byte, SEND and SEND_WITH_IMM. */
static void test_sizes(void)
{
	struct ibv_wc wc[2];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	for (unsigned k = 0; k < 2 * NSIZES; k++) {
		uint32_t len = sizes[k % NSIZES];
		bool imm = k >= NSIZES;
		int n, rx = -1;

		fill(p.s, len, k);
		CU_ASSERT_EQUAL_FATAL(post_recv(&p, 0, BUF), 0);
		CU_ASSERT_EQUAL_FATAL(post_send(&p, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
						k, 0, len, true, 0x12345678 + k), 0);
		n = poll_n(p.cq, wc, 2, TIMEOUT_MS);
		CU_ASSERT_EQUAL_FATAL(n, 2);
		for (int i = 0; i < 2; i++) {
			CU_ASSERT_EQUAL(wc[i].status, IBV_WC_SUCCESS);
			if (wc[i].opcode == IBV_WC_RECV)
				rx = i;
		}
		CU_ASSERT_FATAL(rx >= 0);
		CU_ASSERT_EQUAL(wc[rx].byte_len, len);
		CU_ASSERT_EQUAL(wc[rx].wr_id, 1000);
		CU_ASSERT_EQUAL(wc[rx].qp_num, p.b->qp_num);
		CU_ASSERT_EQUAL(wc[rx].src_qp, p.a->qp_num);
		CU_ASSERT_EQUAL(!!(wc[rx].wc_flags & IBV_WC_WITH_IMM), imm);
		if (imm)
			CU_ASSERT_EQUAL(wc[rx].imm_data, 0x12345678 + k);
		CU_ASSERT(check(p.r, len, k));
		CU_ASSERT_EQUAL(wc[1 - rx].wr_id, k);
		CU_ASSERT_EQUAL(wc[1 - rx].opcode, IBV_WC_SEND);
	}
	pair_free(&p);
}

/*
 * A QP's messages land in order whichever path each takes: small SENDs
 * (mailbox), large ones and RDMA WRITEs (ring path, CMA) interleaved,
 * most unsignaled; receive k gets message k, receive completions come in
 * order, send completions too.
 */
static void test_order(void)
{
	static const uint32_t lens[] = { 8, 8, 2000, 8, 0, 64, 500, 8, 8, 104, 1, 3000 };
	struct ibv_wc wc[64];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	for (int round = 0; round < 40; round++) {
		int nrx = 0, ntx = 0, want_tx = 0;
		uint64_t end;

		for (int k = 0; k < 24; k++)
			CU_ASSERT_EQUAL_FATAL(post_recv(&p, k, BUF), 0);
		for (int k = 0; k < 24; k++) {
			uint32_t len = lens[(k + round) % 12];
			bool sig = k % 5 == 4 || k == 23;

			if (k % 7 == 3 + round % 2) { /* a WRITE between: the ring path */
				fill(p.s + (size_t)(NRX - 1) * BUF, 64, 999);
				CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_RDMA_WRITE, 5000,
								(NRX - 1) * BUF, 64, false,
								0), 0);
			}
			fill(p.s + (size_t)k * BUF, len, (uint32_t)(round * 100 + k));
			CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, (uint64_t)k,
							(uint32_t)k * BUF, len, sig, 0), 0);
			want_tx += sig;
			if (round % 3 == 1 && k % 4 == 0) { /* the receiver polls meanwhile */
				int n = ibv_poll_cq(p.cq, 64, wc);

				for (int i = 0; i < n; i++) {
					if (wc[i].opcode != IBV_WC_RECV) {
						ntx++;
						continue;
					}
					CU_ASSERT_EQUAL(wc[i].wr_id, 1000 + (uint64_t)nrx);
					nrx++;
				}
			}
		}
		end = now_ms() + TIMEOUT_MS;
		while ((nrx < 24 || ntx < want_tx) && now_ms() < end) {
			int n = ibv_poll_cq(p.cq, 64, wc);

			CU_ASSERT_FATAL(n >= 0);
			for (int i = 0; i < n; i++) {
				CU_ASSERT_EQUAL(wc[i].status, IBV_WC_SUCCESS);
				if (wc[i].opcode != IBV_WC_RECV) {
					ntx++;
					continue;
				}
				CU_ASSERT_EQUAL(wc[i].wr_id, 1000 + (uint64_t)nrx);
				nrx++;
			}
		}
		CU_ASSERT_EQUAL(nrx, 24);
		CU_ASSERT_EQUAL(ntx, want_tx);
		/* receive k holds message k, byte for byte */
		for (int m = 0; m < 24; m++) {
			uint32_t l = lens[(m + round) % 12];

			CU_ASSERT(check(p.r + (size_t)m * BUF, l, (uint32_t)(round * 100 + m)));
		}
	}
	pair_free(&p);
}

/*
 * Many in flight: the mailbox fills (60 messages of 16 slots, 256 slots),
 * waits, and every message arrives in order; the slots wrap mid-message.
 */
static void test_burst(void)
{
	struct ibv_wc wc[64];
	int nrx = 0, ntx = 0;
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	for (int k = 0; k < NRX; k++)
		CU_ASSERT_EQUAL_FATAL(post_recv(&p, k, BUF), 0);
	fill(p.s, 1000, 77);
	for (int k = 0; k < 60; k++)
		CU_ASSERT_EQUAL_FATAL(post_send(&p, k % 2 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
						(uint64_t)k, 0, 1000, true, (uint32_t)k), 0);
	uint64_t end = now_ms() + TIMEOUT_MS;

	while ((nrx < 60 || ntx < 60) && now_ms() < end) {
		int n = ibv_poll_cq(p.cq, 64, wc);

		for (int i = 0; i < n; i++) {
			CU_ASSERT_EQUAL(wc[i].status, IBV_WC_SUCCESS);
			if (wc[i].opcode == IBV_WC_RECV) {
				CU_ASSERT_EQUAL(wc[i].wr_id, 1000 + (uint64_t)nrx);
				if (nrx % 2)
					CU_ASSERT_EQUAL(wc[i].imm_data, (uint32_t)nrx);
				CU_ASSERT(check(p.r + (size_t)nrx * BUF, 1000, 77));
				nrx++;
			} else {
				CU_ASSERT_EQUAL(wc[i].wr_id, (uint64_t)ntx);
				ntx++;
			}
		}
	}
	CU_ASSERT_EQUAL(nrx, 60);
	CU_ASSERT_EQUAL(ntx, 60);
	pair_free(&p);
}

/* No receive WQE: the send waits (rnr_retry 7), then completes once one comes. */
static void test_rnr_wait(void)
{
	struct ibv_wc wc[2];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	fill(p.s, 24, 5);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 7, 0, 24, true, 0), 0);
	CU_ASSERT_EQUAL(poll_n(p.cq, wc, 1, 50), 0);
	CU_ASSERT_EQUAL_FATAL(post_recv(&p, 0, BUF), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(p.cq, wc, 2, TIMEOUT_MS), 2);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_SUCCESS);
	CU_ASSERT(check(p.r, 24, 5));
	pair_free(&p);
}

/* No receive WQE and rnr_retry 1: IBV_WC_RNR_RETRY_EXC_ERR, the rest flushed. */
static void test_rnr_exhausted(void)
{
	struct conn_opts o = { .rnr_retry = 1, .retry_cnt = 7, .timeout = 14,
			       .min_rnr_timer = 1 };
	struct ibv_wc wc[4];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &o), 0);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 1, 0, 8, true, 0), 0);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 2, 0, 8, true, 0), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(p.cq, wc, 2, TIMEOUT_MS), 2);
	CU_ASSERT_EQUAL(wc[0].wr_id, 1);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
	CU_ASSERT_EQUAL(wc[1].wr_id, 2);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	pair_free(&p);
}

/* A receive buffer too small: LOC_LEN_ERR there, REM_INV_REQ_ERR here. */
static void test_len_error(void)
{
	struct ibv_wc wc[4];
	int n, tx = -1, rx = -1;
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	CU_ASSERT_EQUAL_FATAL(post_recv(&p, 0, 16), 0);
	CU_ASSERT_EQUAL_FATAL(post_recv(&p, 1, 16), 0);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 9, 0, 50, true, 0), 0);
	/* RC: b errs and flushes its second receive; an SRQ's stay */
	n = poll_n(p.cq, wc, xrc ? 2 : 3, TIMEOUT_MS);
	CU_ASSERT_EQUAL_FATAL(n, xrc ? 2 : 3);
	for (int i = 0; i < n; i++) {
		if (wc[i].qp_num == p.a->qp_num)
			tx = i;
		else if (wc[i].wr_id == 1000)
			rx = i;
	}
	CU_ASSERT_FATAL(tx >= 0 && rx >= 0);
	CU_ASSERT_EQUAL(wc[tx].status, IBV_WC_REM_INV_REQ_ERR);
	CU_ASSERT_EQUAL(wc[rx].status, IBV_WC_LOC_LEN_ERR);
	for (int i = 0; i < n; i++)
		if (i != tx && i != rx)
			CU_ASSERT_EQUAL(wc[i].status, IBV_WC_WR_FLUSH_ERR);
	pair_free(&p);
}

/* The receiver in the error state: no ACK ever, the send ends RETRY_EXC_ERR. */
static void test_receiver_error(void)
{
	struct conn_opts o = { .rnr_retry = 7, .retry_cnt = 1, .timeout = 8,
			       .min_rnr_timer = 1 };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	struct ibv_wc wc[4];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &o), 0);
	CU_ASSERT_EQUAL_FATAL(post_recv(&p, 0, BUF), 0);
	CU_ASSERT_EQUAL_FATAL(ibv_modify_qp(p.b, &a, IBV_QP_STATE), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(p.cq, wc, 1, TIMEOUT_MS), 1); /* the flush */
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_WR_FLUSH_ERR);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 3, 0, 8, true, 0), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(p.cq, wc, 1, TIMEOUT_MS), 1);
	CU_ASSERT_EQUAL(wc[0].wr_id, 3);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_RETRY_EXC_ERR);
	pair_free(&p);
}

/* ---- two processes ---- */

#define PP_ITERS 3000

static int child_side(int rfd, int wfd)
{
	struct pair p;
	uint32_t peer;
	struct ibv_wc wc[8];
	int bad = 0;
	struct ibv_device **l = ibv_get_device_list(NULL);

	/* a context of its own: the parent's is the parent's */
	ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!ctx || ibv_query_port(ctx, 1, &port_attr))
		return 6;
	memset(&p, 0, sizeof(p));
	if (pair_make(&p, &forever))
		return 2;
	/* only p.b is used here: it connects to the parent's sender */
	if (write(wfd, &p.b->qp_num, 4) != 4 || read(rfd, &peer, 4) != 4)
		return 3;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	ibv_modify_qp(p.b, &a, IBV_QP_STATE);
	if (connect_qp(p.b, peer, &forever))
		return 4;
	for (int k = 0; k < NRX; k++)
		post_recv(&p, k, BUF);
	if (write(wfd, "r", 1) != 1)
		return 5;
	for (int it = 0; it < PP_ITERS && !bad; it++) {
		uint32_t len = sizes[it % NSIZES], k = (uint32_t)it % NRX;
		int n;

		/* the previous echo's completion may come before or after */
		do
			n = poll_n(p.cq, wc, 1, TIMEOUT_MS);
		while (n == 1 && wc[0].opcode == IBV_WC_SEND && wc[0].status == IBV_WC_SUCCESS);
		if (n != 1 || wc[0].status != IBV_WC_SUCCESS || wc[0].byte_len != len ||
		    wc[0].wr_id != 1000 + k || !check(p.r + (size_t)k * BUF, len, (uint32_t)it)) {
			fprintf(stderr, "child: it %d: n %d status %d len %u/%u\n", it, n,
				n ? (int)wc[0].status : -1, n ? wc[0].byte_len : 0, len);
			bad++;
		}
		post_recv(&p, (int)k, BUF);
		/* the echo: an empty SEND back, the ping-pong's other half */
		struct ibv_sge sg = { .addr = (uintptr_t)p.s, .length = 0, .lkey = p.smr->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sg, .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *b;

		if (ibv_post_send(p.b, &w, &b))
			bad++;
	}
	/* the last echo's completion */
	if (!bad && (poll_n(p.cq, wc, 1, TIMEOUT_MS) != 1 || wc[0].status != IBV_WC_SUCCESS))
		bad++;
	pair_free(&p);
	return bad ? 1 : 0;
}

static void test_two_processes(void)
{
	int up[2], down[2], st = 0;
	struct pair p;
	uint32_t peer;
	char c;
	pid_t pid;

	CU_ASSERT_EQUAL_FATAL(pipe(up), 0);
	CU_ASSERT_EQUAL_FATAL(pipe(down), 0);
	fflush(stdout);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		_exit(child_side(down[0], up[1]));
	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	CU_ASSERT_EQUAL_FATAL(read(up[0], &peer, 4), 4);
	CU_ASSERT_EQUAL_FATAL(write(down[1], &p.a->qp_num, 4), 4);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	ibv_modify_qp(p.a, &a, IBV_QP_STATE);
	CU_ASSERT_EQUAL_FATAL(connect_qp(p.a, peer, &forever), 0);
	CU_ASSERT_EQUAL_FATAL(read(up[0], &c, 1), 1);
	/* the parent's receive side is p.a: the child's echoes land here */
	for (int k = 0; k < 8; k++) {
		struct ibv_sge sg = { .addr = (uintptr_t)p.r, .length = BUF, .lkey = p.rmr->lkey };
		struct ibv_recv_wr w = { .wr_id = 1, .sg_list = &sg, .num_sge = 1 }, *bad;

		CU_ASSERT_EQUAL_FATAL(ibv_post_recv(p.a, &w, &bad), 0);
	}
	for (int it = 0; it < PP_ITERS; it++) {
		uint32_t len = sizes[it % NSIZES];
		struct ibv_wc wc[2];
		int n, got_rx = 0, got_tx = 0;

		fill(p.s, len, (uint32_t)it);
		CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 7, 0, len, true, 0), 0);
		while (got_rx + got_tx < 2) {
			n = poll_n(p.cq, wc, 1, TIMEOUT_MS);
			CU_ASSERT_EQUAL_FATAL(n, 1);
			CU_ASSERT_EQUAL_FATAL(wc[0].status, IBV_WC_SUCCESS);
			if (wc[0].opcode == IBV_WC_RECV) {
				struct ibv_sge sg = { .addr = (uintptr_t)p.r, .length = BUF,
						      .lkey = p.rmr->lkey };
				struct ibv_recv_wr w = { .wr_id = 1, .sg_list = &sg,
							 .num_sge = 1 }, *bad;

				got_rx++;
				CU_ASSERT_EQUAL_FATAL(ibv_post_recv(p.a, &w, &bad), 0);
			} else {
				got_tx++;
			}
		}
	}
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	pair_free(&p);
}

static int suite_init(void)
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

static int suite_clean(void)
{
	int rc = ctx ? ibv_close_device(ctx) : 0;

	ctx = NULL;
	xrc = false;
	return rc;
}

static int suite_init_xrc(void)
{
	xrc = true;
	return suite_init();
}

/*
 * The XRC tests' messages: the bytes of fill(seed), over whose first five
 * go the message's number and a tag (its sender, its SRQ).
 */
static void send_tagged(struct pair *p, uint32_t sent, uint32_t len, uint32_t seed,
			uint32_t m, uint8_t tag)
{
	uint8_t *b = p->s + (size_t)(sent % NRX) * BUF;

	fill(b, len, seed);
	memcpy(b, &m, 4);
	b[4] = tag;
	CU_ASSERT_EQUAL_FATAL(post_send(p, IBV_WR_SEND, sent, (sent % NRX) * BUF, len, true,
					0), 0);
}

static bool tagged_ok(const uint8_t *b, uint32_t len, uint32_t seed)
{
	uint8_t want[BUF];

	fill(want, len, seed);
	return len >= 5 && memcmp(b + 5, want + 5, len - 5) == 0;
}

/* One poll: the receives into wc (returned), each send counted in *done. */
static int poll_recvs(struct ibv_cq *cq, struct ibv_wc *wc, uint32_t *done)
{
	int n = ibv_poll_cq(cq, 64, wc), r = 0;

	for (int j = 0; j < n; j++) {
		CU_ASSERT_EQUAL(wc[j].status, IBV_WC_SUCCESS);
		if (wc[j].opcode == IBV_WC_RECV)
			wc[r++] = wc[j];
		else
			(*done)++;
	}
	return r;
}

/*
 * Six XRC send QPs (more than an SRQ has lanes: the last ones go by the
 * ring path) into one SRQ, sizes on both sides of the threshold, sends
 * interleaved: each sender's messages arrive in its order, every byte
 * right (the message carries its sender and number).
 */
static void test_xrc_senders(void)
{
	enum { NS = 6, PER = 200 };
	struct ibv_qp *ini[NS] = { 0 }, *tgt[NS] = { 0 };
	struct ibv_wc wc[64];
	uint32_t next[NS] = { 0 }, sent = 0, got = 0, done = 0;
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	ini[0] = p.a;
	tgt[0] = p.b;
	for (int i = 1; i < NS; i++) {
		struct pair q = p;

		CU_ASSERT_EQUAL_FATAL(xrc_make_qps(&q), 0);
		CU_ASSERT_EQUAL_FATAL(connect_xrc(&q, &forever), 0);
		ini[i] = q.a;
		tgt[i] = q.b;
	}
	for (int k = 0; k < NRX; k++)
		CU_ASSERT_EQUAL_FATAL(post_recv(&p, k, BUF), 0);
	uint64_t end = now_ms() + 4 * TIMEOUT_MS;

	while ((got < NS * PER || done < NS * PER) && now_ms() < end) {
		/* a few sends from each, while the SRQ has room for them */
		for (int i = 0; i < NS && sent < NS * PER && sent - got < NRX / 2; i++) {
			uint32_t m = sent / NS;

			p.a = ini[i];
			send_tagged(&p, sent, 24 + (m * 331 + (uint32_t)i * 97) % 2000,
				    m * NS + (uint32_t)i, m, (uint8_t)i);
			sent++;
		}
		int n = poll_recvs(p.cq, wc, &done);

		for (int j = 0; j < n; j++) {
			uint8_t *b = p.r + (size_t)(wc[j].wr_id - 1000) * BUF;
			uint32_t m;
			int i = b[4];

			memcpy(&m, b, 4);
			CU_ASSERT_FATAL(i < NS);
			CU_ASSERT_EQUAL(m, next[i]);
			CU_ASSERT_EQUAL(wc[j].qp_num, tgt[i]->qp_num);
			CU_ASSERT_EQUAL(wc[j].src_qp, ini[i]->qp_num);
			CU_ASSERT(tagged_ok(b, wc[j].byte_len, m * NS + (uint32_t)i));
			next[i] = m + 1;
			got++;
			CU_ASSERT_EQUAL(post_recv(&p, (int)(wc[j].wr_id - 1000), BUF), 0);
		}
	}
	CU_ASSERT_EQUAL(got, NS * PER);
	CU_ASSERT_EQUAL(done, NS * PER);
	for (int i = 1; i < NS; i++) {
		ibv_destroy_qp(ini[i]);
		ibv_destroy_qp(tgt[i]);
	}
	p.a = ini[0];
	pair_free(&p);
}

/*
 * One XRC send QP to two SRQs of its domain, in turns and in runs, sizes
 * on both sides of the threshold: each SRQ gets its messages in order
 * (the QP has a lane in each; a switch waits for the other's to be taken
 * or takes them back).
 */
static void test_xrc_two_srqs(void)
{
	enum { N = 400 };
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = NRX, .max_sge = 2 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC };
	struct ibv_srq *srq[2];
	uint32_t srqn[2], next[2] = { 0 }, sent = 0, got = 0, done = 0;
	struct ibv_wc wc[64];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	sa.pd = p.pd;
	sa.cq = p.cq;
	sa.xrcd = p.xrcd;
	srq[0] = p.srq;
	srqn[0] = p.srqn;
	srq[1] = ibv_create_srq_ex(ctx, &sa);
	CU_ASSERT_FATAL(srq[1] && !ibv_get_srq_num(srq[1], &srqn[1]));
	/* receives k < NRX/2 on the first SRQ, the rest on the second */
	for (int k = 0; k < NRX; k++) {
		p.srq = srq[k >= NRX / 2];
		CU_ASSERT_EQUAL_FATAL(post_recv(&p, k, BUF), 0);
	}
	uint64_t end = now_ms() + 4 * TIMEOUT_MS;

	while ((got < N || done < N) && now_ms() < end) {
		while (sent < N && sent - got < NRX / 4) {
			int t = (sent / 3 + sent) % 2;   /* turns, and runs */

			p.srqn = srqn[t];
			send_tagged(&p, sent, 16 + (sent * 397) % 1500, sent, sent, (uint8_t)t);
			sent++;
		}
		int n = poll_recvs(p.cq, wc, &done);

		for (int j = 0; j < n; j++) {
			int k = (int)(wc[j].wr_id - 1000), t = k >= NRX / 2;
			uint8_t *b = p.r + (size_t)k * BUF;
			uint32_t m;

			memcpy(&m, b, 4);
			CU_ASSERT_EQUAL(b[4], t);
			CU_ASSERT(m >= next[t]);   /* in order per SRQ */
			next[t] = m + 1;
			CU_ASSERT(tagged_ok(b, wc[j].byte_len, m));
			got++;
			p.srq = srq[t];
			CU_ASSERT_EQUAL(post_recv(&p, k, BUF), 0);
		}
	}
	CU_ASSERT_EQUAL(got, N);
	CU_ASSERT_EQUAL(done, N);
	p.srq = srq[0];
	ibv_destroy_qp(p.a);
	p.a = NULL;
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq[1]), 0);
	pair_free(&p);
}

/*
 * A sleeper's first message on a lane bound while it slept: the polls
 * peek only at the lanes a requester holds, as the owner words said at
 * their last look (mbox.c mb_bound); the event's reader, which finds the
 * message, marks its lane, so the first poll after the wake-up takes it
 * (not a poll that finds nothing, another arm and wake-up, up to 16).
 */
static void test_xrc_sleeper_new_lane(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_wc wc[4];
	struct pair p;
	int rc;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ch);
	pair_chan = ch;
	rc = pair_make(&p, &forever);
	pair_chan = NULL;
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	/* polls enough for the owner words to be looked at: no lane held */
	for (int i = 0; i < 40; i++)
		CU_ASSERT_EQUAL(ibv_poll_cq(p.cq, 4, wc), 0);
	/* the send QP's first messages (it binds a lane), each to a sleeper
	 * that polls once per wake-up */
	for (uint32_t k = 0; k < 3; k++) {
		struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
		struct ibv_cq *ecq;
		void *ectx;
		int got;

		CU_ASSERT_EQUAL_FATAL(post_recv(&p, (int)k, 64), 0);
		CU_ASSERT_EQUAL_FATAL(ibv_req_notify_cq(p.cq, 0), 0);
		fill(p.s + k * 64, 8, 5 + k);
		CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, k, k * 64, 8, false, 0), 0);
		CU_ASSERT_EQUAL_FATAL(poll(&pf, 1, TIMEOUT_MS), 1);
		CU_ASSERT_EQUAL_FATAL(ibv_get_cq_event(ch, &ecq, &ectx), 0);
		CU_ASSERT_PTR_EQUAL(ecq, p.cq);
		ibv_ack_cq_events(p.cq, 1);
		got = ibv_poll_cq(p.cq, 4, wc);
		CU_ASSERT_EQUAL(got, 1);
		if (got != 1)
			break;
		CU_ASSERT_EQUAL(wc[0].status, IBV_WC_SUCCESS);
		CU_ASSERT_EQUAL(wc[0].wr_id, 1000 + k);
		CU_ASSERT_TRUE(check(p.r + (size_t)k * BUF, 8, 5 + k));
	}
	pair_free(&p);
	ibv_destroy_comp_channel(ch);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("mbox", suite_init, suite_clean);

	if (!s || !CU_add_test(s, "sizes across the threshold", test_sizes) ||
	    !CU_add_test(s, "order with ring-path WQEs between", test_order) ||
	    !CU_add_test(s, "a burst fills the mailbox", test_burst) ||
	    !CU_add_test(s, "RNR wait then success", test_rnr_wait) ||
	    !CU_add_test(s, "RNR retries exhausted", test_rnr_exhausted) ||
	    !CU_add_test(s, "receive buffer too small", test_len_error) ||
	    !CU_add_test(s, "receiver in the error state", test_receiver_error) ||
	    !CU_add_test(s, "two processes", test_two_processes))
		return -1;
	s = CU_add_suite("mbox over XRC (an SRQ's lanes)", suite_init_xrc, suite_clean);
	if (!s || !CU_add_test(s, "sizes across the threshold", test_sizes) ||
	    !CU_add_test(s, "order with ring-path WQEs between", test_order) ||
	    !CU_add_test(s, "a burst fills the lane", test_burst) ||
	    !CU_add_test(s, "RNR wait then success", test_rnr_wait) ||
	    !CU_add_test(s, "RNR retries exhausted", test_rnr_exhausted) ||
	    !CU_add_test(s, "receive buffer too small", test_len_error) ||
	    !CU_add_test(s, "six senders into one SRQ", test_xrc_senders) ||
	    !CU_add_test(s, "one sender, two SRQs", test_xrc_two_srqs) ||
	    !CU_add_test(s, "a sleeper's first message on a new lane",
			 test_xrc_sleeper_new_lane))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
