/*
 * White-box tests of the HCA data path through hca.h, in one process:
 * two RC (or UC, UD) QPs of this process connected to each other, so the
 * requester, the responder, the rings and the completion rules run
 * without the verbs layer. Cross-process runs are the integration tests'.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "cu_run.h"
#include "hca.h"
#include "hca_int.h"
#include "udp_link.h" /* hca_resp_execute: a duplicate READ by hand */
#include "udp_req.h" /* HCA_UDP_WINDOW_BYTES, _MAX */

static struct hca_ah test_ah;
static uint8_t P_timeout = 1; /* RC ACK timeout of the next pair (to_rts) */

/* UD sends here use one AH, to our host: its contents go down with
 * every post (the verbs layer hands each WR's down the same way). */
static const struct hca_ah *const test_ah_list[] = { &test_ah, &test_ah, &test_ah, &test_ah };

struct pair {
	struct hca_dev *dev;
	struct hca_ctx *ctx;
	struct hca_pd *pd;
	struct hca_cq *cq;
	struct hca_qp *a, *b;
	struct hca_mr *mr;
	uint8_t *buf;
	uint32_t key;
};

#define BUF_LEN (4 << 20)

static struct hca_qp *make_qp(struct pair *p, enum ibv_qp_type t, struct hca_srq *srq)
{
	struct hca_qp_init in = { .type = t, .send_cq = p->cq, .recv_cq = p->cq,
				  .srq = srq,
				  .cap = { .max_send_wr = 64, .max_recv_wr = 64,
					   .max_send_sge = 4, .max_recv_sge = 4,
					   .max_inline_data = 64 } };

	return hca_qp_create(p->pd, &in, NULL);
}

static int to_rts(struct pair *p, struct hca_qp *qp, uint32_t dest, enum ibv_qp_type t,
		  uint8_t rnr_retry)
{
	struct ibv_port_attr pa;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC,
				 .qkey = 0x1234 };
	int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	hca_dev_query_port(p->dev, 1, &pa, sizeof(pa));
	init_mask |= t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	if (hca_qp_modify(qp, &a, init_mask))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.ah_attr.dlid = pa.lid;
	a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	int rtr = IBV_QP_STATE;
	if (t != IBV_QPT_UD)
		rtr |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (t == IBV_QPT_RC)
		rtr |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (hca_qp_modify(qp, &a, rtr))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.timeout = P_timeout;
	a.retry_cnt = 2;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 4;
	int rts = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (t == IBV_QPT_RC)
		rts |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		       IBV_QP_MAX_QP_RD_ATOMIC;
	return hca_qp_modify(qp, &a, rts) ? -1 : 0;
}

static struct pair P;
static struct hca_chan *P_chan; /* the CQ's completion channel, if any */

static int pair_open(enum ibv_qp_type t, uint8_t rnr_retry)
{
	memset(&P, 0, sizeof(P));
	P.dev = hca_dev_get();
	if (!P.dev)
		return -1;
	P.ctx = hca_ctx_open(P.dev, NULL);
	P.pd = hca_pd_alloc(P.ctx);
	if (P_chan == (struct hca_chan *)1)
		P_chan = P.ctx ? hca_chan_create(P.ctx) : NULL;
	P.cq = hca_cq_create(P.ctx, 256, P_chan, 0, &P);
	P.buf = aligned_alloc(4096, BUF_LEN);
	memset(P.buf, 0, BUF_LEN);
	P.mr = hca_mr_reg(P.pd, P.buf, BUF_LEN, (uintptr_t)P.buf,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!P.ctx || !P.pd || !P.cq || !P.mr)
		return -1;
	P.key = hca_mr_key(P.mr);
	P.a = make_qp(&P, t, NULL);
	P.b = make_qp(&P, t, NULL);
	if (!P.a || !P.b)
		return -1;
	if (to_rts(&P, P.a, hca_qp_num(P.b), t, rnr_retry) ||
	    to_rts(&P, P.b, hca_qp_num(P.a), t, rnr_retry))
		return -1;
	return 0;
}

static void pair_close(void)
{
	CU_ASSERT_EQUAL(hca_qp_destroy(P.a), 0);
	CU_ASSERT_EQUAL(hca_qp_destroy(P.b), 0);
	CU_ASSERT_EQUAL(hca_mr_dereg(P.mr), 0);
	CU_ASSERT_EQUAL(hca_cq_destroy(P.cq), 0);
	if (P_chan)
		CU_ASSERT_EQUAL(hca_chan_destroy(P_chan), 0);
	P_chan = NULL;
	CU_ASSERT_EQUAL(hca_pd_dealloc(P.pd), 0);
	hca_ctx_close(P.ctx);
	hca_dev_put(P.dev);
	free(P.buf);
}

static int poll_n(struct ibv_wc *wc, int n)
{
	int got = 0;

	for (int spin = 0; got < n && spin < 2000000; spin++) {
		int r = hca_cq_poll(P.cq, n - got, wc + got, NULL);
		if (r < 0)
			return r;
		got += r;
	}
	return got;
}

static int post_recv(struct hca_qp *qp, uint64_t off, uint32_t len, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)P.buf + off, len, P.key };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	return hca_qp_post_recv(qp, &wr, &bad);
}

static int post(struct hca_qp *qp, enum ibv_wr_opcode op, uint64_t off, uint32_t len,
		uint64_t raddr_off, uint32_t rkey, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)P.buf + off, len, P.key };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1,
				  .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)P.buf + raddr_off;
	wr.wr.rdma.rkey = rkey;
	wr.imm_data = htobe32(0xabcd);
	return hca_qp_post_send_ah(qp, &wr, test_ah_list, &bad);
}

static void test_rc_send(void)
{
	struct ibv_wc wc[2];

	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	memset(P.buf, 0x5a, 1000);
	CU_ASSERT_EQUAL(post_recv(P.b, 4096, 2048, 2), 0);
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_SEND_WITH_IMM, 0, 1000, 0, 0, 1), 0);
	CU_ASSERT_EQUAL(poll_n(wc, 2), 2);
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(wc[i].status, IBV_WC_SUCCESS);
		if (wc[i].wr_id == 2) {
			CU_ASSERT_EQUAL(wc[i].opcode, IBV_WC_RECV);
			CU_ASSERT_EQUAL(wc[i].byte_len, 1000);
			CU_ASSERT(wc[i].wc_flags & IBV_WC_WITH_IMM);
			CU_ASSERT_EQUAL(be32toh(wc[i].imm_data), 0xabcd);
			CU_ASSERT_EQUAL(wc[i].src_qp, hca_qp_num(P.a));
		} else {
			CU_ASSERT_EQUAL(wc[i].opcode, IBV_WC_SEND);
		}
	}
	CU_ASSERT_EQUAL(memcmp(P.buf, P.buf + 4096, 1000), 0);
	pair_close();
}

/*
 * Sleeping for completions: a non-blocking channel with nothing on it
 * answers EAGAIN; then a hundred SENDs, each waited for as a sleeping
 * application does (poll, arm, poll, get the event). Over the UDP link
 * (SOFTIB_LINK=udp) the waiting thread itself takes the datagrams from
 * the link's sockets (hca_chan_get_event): nothing else would here.
 */
static void test_rc_send_event(void)
{
	struct ibv_wc wc[2];
	void *user;
	int fd, fl;

	P_chan = (struct hca_chan *)1; /* pair_open: make one */
	/* 268 ms, not the 8 us of the other tests: a sleeping application
	 * on a busy machine must not look like a dead peer */
	P_timeout = 16;
	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	P_timeout = 1;
	CU_ASSERT_FATAL(P_chan != NULL);
	fd = hca_chan_fd(P_chan);
	fl = fcntl(fd, F_GETFL);
	CU_ASSERT_EQUAL(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
	CU_ASSERT_EQUAL(hca_cq_arm(P.cq, 0), 0);
	CU_ASSERT_EQUAL(hca_chan_get_event(P_chan, &user), EAGAIN);
	CU_ASSERT_EQUAL(fcntl(fd, F_SETFL, fl), 0);
	alarm(60); /* a lost wake-up hangs: fail instead */
	for (int i = 0; i < 100; i++) {
		int got = 0, events = 0;

		memset(P.buf, i, 64);
		CU_ASSERT_EQUAL(post_recv(P.b, 4096, 64, 2), 0);
		CU_ASSERT_EQUAL(post(P.a, IBV_WR_SEND, 0, 8 + i % 50, 0, 0, 1), 0);
		while (got < 2 && events < 10) {
			int n = hca_cq_poll(P.cq, 2 - got, wc + got, NULL);

			if (n > 0 && wc[got].status != IBV_WC_SUCCESS) {
				got += n;
				break; /* the QP erred: no more will come */
			}
			if (n == 0) {
				CU_ASSERT_EQUAL(hca_cq_arm(P.cq, 0), 0);
				n = hca_cq_poll(P.cq, 2 - got, wc + got, NULL);
			}
			if (n == 0) {
				user = NULL;
				CU_ASSERT_EQUAL(hca_chan_get_event(P_chan, &user), 0);
				CU_ASSERT_EQUAL(user, &P);
				events++;
			}
			got += n > 0 ? n : 0;
		}
		CU_ASSERT_EQUAL(got, 2);
		CU_ASSERT(wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS);
		if (got < 2 || wc[0].status || wc[1].status)
			break;
		CU_ASSERT_EQUAL(memcmp(P.buf, P.buf + 4096, 8 + i % 50), 0);
	}
	alarm(0);
	pair_close();
}

static void test_rc_write_read_atomic(void)
{
	struct ibv_wc wc;
	uint64_t *ctr = (uint64_t *)(P.buf + 8192);

	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	ctr = (uint64_t *)(P.buf + 8192);
	memset(P.buf, 0x11, 512);
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_RDMA_WRITE, 0, 512, 65536, P.key, 1), 0);
	CU_ASSERT_EQUAL(poll_n(&wc, 1), 1);
	CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(wc.opcode, IBV_WC_RDMA_WRITE);
	CU_ASSERT_EQUAL(memcmp(P.buf, P.buf + 65536, 512), 0);

	memset(P.buf + 131072, 0x77, 300);
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_RDMA_READ, 200000, 300, 131072, P.key, 2), 0);
	CU_ASSERT_EQUAL(poll_n(&wc, 1), 1);
	CU_ASSERT_EQUAL(wc.opcode, IBV_WC_RDMA_READ);
	CU_ASSERT_EQUAL(wc.byte_len, 300);
	CU_ASSERT_EQUAL(memcmp(P.buf + 131072, P.buf + 200000, 300), 0);

	*ctr = 40;
	struct ibv_sge s = { (uintptr_t)P.buf + 300000, 8, P.key };
	struct ibv_send_wr wr = { .wr_id = 3, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.atomic.remote_addr = (uintptr_t)ctr;
	wr.wr.atomic.rkey = P.key;
	wr.wr.atomic.compare_add = 2;
	CU_ASSERT_EQUAL(hca_qp_post_send_ah(P.a, &wr, test_ah_list, &bad), 0);
	CU_ASSERT_EQUAL(poll_n(&wc, 1), 1);
	CU_ASSERT_EQUAL(wc.opcode, IBV_WC_FETCH_ADD);
	CU_ASSERT_EQUAL(*(uint64_t *)(P.buf + 300000), 40);
	CU_ASSERT_EQUAL(*ctr, 42);
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 42;
	wr.wr.atomic.swap = 7;
	CU_ASSERT_EQUAL(hca_qp_post_send_ah(P.a, &wr, test_ah_list, &bad), 0);
	CU_ASSERT_EQUAL(poll_n(&wc, 1), 1);
	CU_ASSERT_EQUAL(*ctr, 7);
	pair_close();
}

static void test_rc_rnr_exhausted(void)
{
	struct ibv_wc wc[2];

	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 1) == 0);
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_SEND, 0, 10, 0, 0, 1), 0);
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_SEND, 0, 10, 0, 0, 2), 0);
	CU_ASSERT_EQUAL(poll_n(wc, 2), 2);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
	CU_ASSERT_EQUAL(wc[0].wr_id, 1);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	CU_ASSERT_EQUAL(hca_qp_state(P.a), IBV_QPS_ERR);
	pair_close();
}

static void test_rc_bad_rkey(void)
{
	struct ibv_wc wc[2];

	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_RDMA_WRITE, 0, 10, 0, P.key + 1, 1), 0);
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_RDMA_WRITE, 0, 10, 0, P.key, 2), 0);
	CU_ASSERT_EQUAL(poll_n(wc, 2), 2);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_REM_ACCESS_ERR);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	pair_close();
}

/*
 * A duplicate READ request (a requester's retransmission reaching the
 * responder after the READ completed and its memory was deregistered)
 * that fails the key check is dropped and leaves the responder's QP as
 * it is: erring it left every later request unanswered (RETRY_EXC_ERR
 * over the UDP link). The same READ, not a duplicate, errs it.
 */
static void test_rc_duplicate_read_refused(void)
{
	struct hca_msg m = { .op = IBV_WR_RDMA_READ, .type = IBV_QPT_RC, .len = 10,
			     .range_only = true, .duplicate = true, .src_slot = HCA_NONE };
	struct ibv_wc wc;

	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	m.src_qpn = P.a->qpn;
	m.dst_qpn = P.b->qpn;
	m.raddr = (uintptr_t)P.buf;
	m.rkey = P.key + 1; /* as after a deregistration */
	CU_ASSERT_EQUAL(hca_resp_execute(P.dev, &m), HCA_RESP_DROP);
	CU_ASSERT_EQUAL(atomic_load(&P.b->ent->state), IBV_QPS_RTS);
	/* the connection still serves a READ */
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_RDMA_READ, 4096, 100, 0, P.key, 3), 0);
	CU_ASSERT_EQUAL(poll_n(&wc, 1), 1);
	CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
	m.duplicate = false;
	CU_ASSERT_EQUAL(hca_resp_execute(P.dev, &m), HCA_RESP_NAK_ACCESS);
	CU_ASSERT_EQUAL(atomic_load(&P.b->ent->state), IBV_QPS_ERR);
	pair_close();
}

static void test_rc_bad_lkey(void)
{
	struct ibv_wc wc;
	struct ibv_sge s = { (uintptr_t)P.buf, 10, 0xdead };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND }, *bad;

	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	s.addr = (uintptr_t)P.buf;
	CU_ASSERT_EQUAL(hca_qp_post_send_ah(P.a, &wr, test_ah_list, &bad), 0);
	CU_ASSERT_EQUAL(poll_n(&wc, 1), 1);
	CU_ASSERT_EQUAL(wc.status, IBV_WC_LOC_PROT_ERR);
	CU_ASSERT_EQUAL(wc.wr_id, 9);
	pair_close();
}

static void test_bad_wr(void)
{
	struct ibv_sge s = { (uintptr_t)P.buf, 10, 0 };
	struct ibv_send_wr w2 = { .wr_id = 2, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ };
	struct ibv_send_wr w1 = { .wr_id = 1, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .next = &w2 }, *bad = NULL;

	CU_ASSERT_FATAL(pair_open(IBV_QPT_UC, 7) == 0);
	s.addr = (uintptr_t)P.buf;
	s.lkey = P.key;
	CU_ASSERT_EQUAL(post_recv(P.b, 0, 64, 5), 0);
	/* READ is not a UC opcode (seed 004): the second WR is refused */
	CU_ASSERT_EQUAL(hca_qp_post_send_ah(P.a, &w1, test_ah_list, &bad), EINVAL);
	CU_ASSERT_PTR_EQUAL(bad, &w2);
	pair_close();
}

static void test_ud_qkey(void)
{
	struct ibv_wc wc[2];
	struct ibv_port_attr pa;
	struct ibv_sge s;
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	CU_ASSERT_FATAL(pair_open(IBV_QPT_UD, 7) == 0);
	hca_dev_query_port(P.dev, 1, &pa, sizeof(pa));
	memset(&test_ah, 0, sizeof(test_ah));
	test_ah.dlid = pa.lid;
	test_ah.port_num = 1;
	test_ah.pd_id = hca_pd_id(P.pd);
	s.addr = (uintptr_t)P.buf;
	s.length = 100;
	s.lkey = P.key;
	wr.wr.ud.ah = (struct ibv_ah *)&test_ah;
	wr.wr.ud.remote_qpn = hca_qp_num(P.b);
	wr.wr.ud.remote_qkey = 0x9999; /* wrong: dropped */
	CU_ASSERT_EQUAL(post_recv(P.b, 4096, 4096, 7), 0);
	CU_ASSERT_EQUAL(hca_qp_post_send_ah(P.a, &wr, test_ah_list, &bad), 0);
	CU_ASSERT_EQUAL(poll_n(wc, 1), 1);
	CU_ASSERT_EQUAL(wc[0].wr_id, 1);
	CU_ASSERT_EQUAL(hca_cq_poll(P.cq, 1, wc, NULL), 0);
	wr.wr.ud.remote_qkey = 0x1234;
	CU_ASSERT_EQUAL(hca_qp_post_send_ah(P.a, &wr, test_ah_list, &bad), 0);
	CU_ASSERT_EQUAL(poll_n(wc, 2), 2);
	for (int i = 0; i < 2; i++)
		if (wc[i].wr_id == 7)
			CU_ASSERT_EQUAL(wc[i].byte_len, 140); /* GRH area + payload */
	pair_close();
}

/*
 * The UDP responder (issue 15 item 9), fed packets directly: a WRITE's
 * key and range are checked at its first packet, before anything is
 * buffered, and the assembly buffer of a large message is given back
 * once the message is done.
 */
static void udp_write_pkt(struct hca_qp *qp, uint8_t wop, uint32_t psn, uint64_t va,
			  uint32_t rkey, uint32_t dmalen, const uint8_t *pl, size_t plen)
{
	struct hca_wire_hdr h = { .opcode = (uint8_t)(hca_wire_transport(IBV_QPT_RC) | wop),
				  .dqpn = qp->qpn, .psn = psn, .va = va, .rkey = rkey,
				  .dmalen = dmalen };

	hca_udp_resp_rx(qp, &h, pl, plen, 0x7f000001);
}

static void test_udp_write_refused_before_buffering(void)
{
	static uint8_t pkt[1024];

	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	/* 64 MiB announced, under a key that is not the region's */
	udp_write_pkt(P.b, HCA_WOP_WRITE_FIRST, 0, (uintptr_t)P.buf, P.key + 1,
		      64u << 20, pkt, sizeof(pkt));
	CU_ASSERT_EQUAL(P.b->rlen, 0);
	CU_ASSERT_EQUAL(P.b->rcap, 0);
	CU_ASSERT_EQUAL(atomic_load(&P.b->ent->state), IBV_QPS_ERR); /* NAK'd */
	pair_close();
	/* a range past the region's end: the same, with the right key */
	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	udp_write_pkt(P.b, HCA_WOP_WRITE_FIRST, 0, (uintptr_t)P.buf, P.key,
		      BUF_LEN + 4096, pkt, sizeof(pkt));
	CU_ASSERT_EQUAL(P.b->rlen, 0);
	CU_ASSERT_EQUAL(P.b->rcap, 0);
	CU_ASSERT_EQUAL(atomic_load(&P.b->ent->state), IBV_QPS_ERR);
	pair_close();
}

static void test_udp_write_buffer_shrinks(void)
{
	const uint32_t len = 4u << 20, mtu = 1024, n = len / mtu;
	uint8_t *big = aligned_alloc(4096, len), pkt[1024];
	struct hca_mr *mr;

	CU_ASSERT_FATAL(big != NULL);
	memset(big, 0, len);
	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	mr = hca_mr_reg(P.pd, big, len, (uintptr_t)big,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CU_ASSERT_FATAL(mr != NULL);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t wop = i == 0 ? HCA_WOP_WRITE_FIRST :
			      i + 1 < n ? HCA_WOP_WRITE_MIDDLE : HCA_WOP_WRITE_LAST;

		memset(pkt, (int)(i % 251) + 1, sizeof(pkt));
		udp_write_pkt(P.b, wop, i, (uintptr_t)big, hca_mr_key(mr), len, pkt, mtu);
		if (i == 0) /* admitted: its whole length reserved at once */
			CU_ASSERT(P.b->rcap >= len);
	}
	CU_ASSERT_EQUAL(atomic_load(&P.b->ent->state), IBV_QPS_RTS);
	CU_ASSERT_EQUAL(big[0], 1);
	CU_ASSERT_EQUAL(big[len - 1], (uint8_t)((n - 1) % 251 + 1));
	/* done: the 4 MiB buffer is not kept */
	CU_ASSERT(P.b->rcap <= HCA_RBUF_KEEP);
	CU_ASSERT_EQUAL(hca_mr_dereg(mr), 0);
	pair_close();
	free(big);
}

/*
 * A READ over the UDP link larger than the send window (2 MiB at a 1 KiB
 * MTU: 2,048 responses; the window is 512 KiB's worth, 512 packets) is
 * asked for a window at a time: the responder never has more of its
 * responses in flight than the window, and the data arrive whole.
 */
static void test_udp_read_windowed(void)
{
	const uint32_t len = BUF_LEN, n = len / 1024;
	const uint32_t win = HCA_UDP_WINDOW_BYTES / 1024 > HCA_UDP_WINDOW_MAX ?
			     HCA_UDP_WINDOW_MAX : HCA_UDP_WINDOW_BYTES / 1024;
	struct ibv_wc wc;
	uint64_t reqs, resps;

	setenv("SOFTIB_LINK", "udp", 1);
	P_timeout = 14; /* 67 ms: the spec's timer, not a test of it */
	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	P_timeout = 1;
	unsetenv("SOFTIB_LINK");
	for (uint32_t i = 0; i < len / 2; i++)
		P.buf[i] = (uint8_t)(i * 7 + 3);
	/* read the first half into the second */
	CU_ASSERT_EQUAL(post(P.a, IBV_WR_RDMA_READ, len / 2, len / 2, 0, P.key, 11), 0);
	CU_ASSERT_EQUAL(poll_n(&wc, 1), 1);
	CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
	CU_ASSERT(memcmp(P.buf, P.buf + len / 2, len / 2) == 0);
	reqs = atomic_load(&P.a->ent->cnt.tx_pkts);
	resps = atomic_load(&P.b->ent->cnt.tx_pkts);
	CU_ASSERT(resps >= n / 2);
	/* at least one request per window of responses */
	CU_ASSERT(reqs >= (n / 2 + win - 1) / win);
	printf("(%llu requests, %llu responses) ", (unsigned long long)reqs,
	       (unsigned long long)resps);
	pair_close();
}

/*
 * UC over the UDP link past one send window (256 packets then, 512 at
 * MTU 1024 now): nothing is ACKed on UC, and the requester once counted
 * every packet sent as in flight for good, so the QP stopped sending
 * after a window's worth (256 one-packet messages, 64 of 4 packets, a
 * quarter of a 1 MiB message). Here: 40 rounds of 8 messages of 4 KiB
 * (4 packets each at MTU 1024: 1,280 packets), then one message of 2 MiB
 * (2,048 packets, four windows in one WQE); every byte checked.
 */
static void test_udp_uc_past_window(void)
{
	const uint32_t len = 4096, per = 8, rounds = 40, big = BUF_LEN / 2;
	struct ibv_wc wc[2 * 8];
	uint32_t got_send = 0, got_recv = 0;

	setenv("SOFTIB_LINK", "udp", 1);
	CU_ASSERT_FATAL(pair_open(IBV_QPT_UC, 7) == 0);
	unsetenv("SOFTIB_LINK");
	for (uint32_t r = 0; r < rounds; r++) {
		for (uint32_t i = 0; i < per; i++) {
			uint32_t k = r * per + i;

			memset(P.buf + i * len, (int)(k % 251 + 1), len);
			CU_ASSERT_EQUAL_FATAL(post_recv(P.b, 64 * 1024 + i * len, len, k), 0);
			CU_ASSERT_EQUAL_FATAL(post(P.a, IBV_WR_SEND, i * len, len, 0, 0, k), 0);
		}
		int n = poll_n(wc, 2 * per);

		CU_ASSERT_EQUAL_FATAL(n, 2 * (int)per);
		for (int j = 0; j < n; j++) {
			CU_ASSERT_EQUAL(wc[j].status, IBV_WC_SUCCESS);
			if (wc[j].opcode == IBV_WC_RECV) {
				got_recv++;
				CU_ASSERT_EQUAL(wc[j].byte_len, len);
			} else {
				got_send++;
			}
		}
		for (uint32_t i = 0; i < per; i++) {
			uint8_t want = (uint8_t)((r * per + i) % 251 + 1);
			const uint8_t *d = P.buf + 64 * 1024 + i * len;

			CU_ASSERT(d[0] == want && d[len - 1] == want);
		}
	}
	CU_ASSERT_EQUAL(got_send, rounds * per);
	CU_ASSERT_EQUAL(got_recv, rounds * per);
	/* one WQE of two windows: sent whole at once, nothing to ACK it */
	for (uint32_t i = 0; i < big; i++)
		P.buf[i] = (uint8_t)(i * 13 + 5);
	CU_ASSERT_EQUAL_FATAL(post_recv(P.b, big, big, 99), 0);
	CU_ASSERT_EQUAL_FATAL(post(P.a, IBV_WR_SEND, 0, big, 0, 0, 98), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(wc, 2), 2);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_SUCCESS);
	CU_ASSERT(memcmp(P.buf, P.buf + big, big) == 0);
	pair_close();
}

/* XRC in one process: a domain on a file, an XRC SRQ, a target QP, and an
 * XRC send QP reaching the SRQ by its number. */
static void test_xrc_send(void)
{
	char path[] = "/tmp/softib-xrc-XXXXXX";
	int fd = mkstemp(path);
	struct ibv_wc wc[2];

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(pair_open(IBV_QPT_RC, 7) == 0);
	struct hca_xrcd *x = hca_xrcd_open(P.ctx, fd, O_CREAT);
	struct hca_xrcd *x2 = hca_xrcd_open(P.ctx, fd, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(x);
	CU_ASSERT_PTR_NOT_NULL_FATAL(x2);
	CU_ASSERT_PTR_NULL(hca_xrcd_open(P.ctx, fd, O_CREAT | O_EXCL));
	struct ibv_srq_attr sa = { .max_wr = 16, .max_sge = 1 };
	struct hca_srq *srq = hca_srq_create_xrc(P.pd, x, P.cq, &sa, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(srq);
	struct hca_qp_init ti = { .type = IBV_QPT_XRC_RECV, .xrcd = x };
	struct hca_qp *tgt = hca_qp_create(NULL, &ti, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(tgt);
	struct hca_qp_init si = { .type = IBV_QPT_XRC_SEND, .send_cq = P.cq,
				  .cap = { .max_send_wr = 8, .max_send_sge = 1 } };
	struct hca_qp *ini = hca_qp_create(P.pd, &si, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(ini);
	/* target: INIT -> RTR only needs what XRC_RECV's row says */
	struct ibv_port_attr pa;
	hca_dev_query_port(P.dev, 1, &pa, sizeof(pa));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	CU_ASSERT_EQUAL(hca_qp_modify(tgt, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_INIT; a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CU_ASSERT_EQUAL(hca_qp_modify(tgt, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = hca_qp_num(ini); a.ah_attr.dlid = pa.lid; a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
	CU_ASSERT_EQUAL(hca_qp_modify(tgt, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT; a.port_num = 1;
	CU_ASSERT_EQUAL(hca_qp_modify(ini, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = hca_qp_num(tgt); a.ah_attr.dlid = pa.lid; a.ah_attr.port_num = 1;
	CU_ASSERT_EQUAL(hca_qp_modify(ini, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN), 0);
	a.qp_state = IBV_QPS_RTS; a.timeout = 1; a.retry_cnt = 1; a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CU_ASSERT_EQUAL(hca_qp_modify(ini, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_MAX_QP_RD_ATOMIC), 0);

	struct ibv_sge rs = { (uintptr_t)P.buf + 4096, 256, P.key };
	struct ibv_recv_wr rw = { .wr_id = 77, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CU_ASSERT_EQUAL(hca_srq_post_recv(srq, &rw, &rbad), 0);
	memset(P.buf, 0x3c, 100);
	struct ibv_sge s = { (uintptr_t)P.buf, 100, P.key };
	struct ibv_send_wr wr = { .wr_id = 5, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.qp_type.xrc.remote_srqn = hca_srq_num(srq);
	CU_ASSERT_EQUAL(hca_qp_post_send_ah(ini, &wr, test_ah_list, &bad), 0);
	CU_ASSERT_EQUAL(poll_n(wc, 2), 2);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(memcmp(P.buf, P.buf + 4096, 100), 0);

	/* a target QP is reachable by number through the domain */
	struct hca_qp *opened = hca_qp_open(x2, hca_qp_num(tgt), NULL);
	CU_ASSERT_PTR_NOT_NULL(opened);
	CU_ASSERT_EQUAL(hca_xrcd_close(x), EBUSY);
	CU_ASSERT_EQUAL(hca_qp_destroy(ini), 0);
	CU_ASSERT_EQUAL(hca_qp_destroy(tgt), 0);
	CU_ASSERT_EQUAL(hca_qp_destroy(opened), 0);
	CU_ASSERT_EQUAL(hca_srq_destroy(srq), 0);
	CU_ASSERT_EQUAL(hca_xrcd_close(x), 0);
	CU_ASSERT_EQUAL(hca_xrcd_close(x2), 0);
	close(fd);
	unlink(path);
	pair_close();
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("hca_datapath", NULL, NULL);

	if (!s)
		return -1;
	if (!CU_add_test(s, "RC send with immediate", test_rc_send) ||
	    !CU_add_test(s, "RC send, waited for on a channel", test_rc_send_event) ||
	    !CU_add_test(s, "RC write, read, atomics", test_rc_write_read_atomic) ||
	    !CU_add_test(s, "RC RNR retries exhausted then flush", test_rc_rnr_exhausted) ||
	    !CU_add_test(s, "RC bad rkey: remote access error", test_rc_bad_rkey) ||
	    !CU_add_test(s, "RC duplicate READ refused: dropped, QP kept",
			 test_rc_duplicate_read_refused) ||
	    !CU_add_test(s, "RC bad lkey: local protection error", test_rc_bad_lkey) ||
	    !CU_add_test(s, "bad WR: bad_wr points at it", test_bad_wr) ||
	    !CU_add_test(s, "UD Q_Key mismatch drops", test_ud_qkey) ||
	    !CU_add_test(s, "XRC send to an SRQ by number", test_xrc_send) ||
	    !CU_add_test(s, "UDP WRITE: key and range checked before buffering",
			 test_udp_write_refused_before_buffering) ||
	    !CU_add_test(s, "UDP WRITE: a large message's buffer given back",
			 test_udp_write_buffer_shrinks) ||
	    !CU_add_test(s, "UDP READ asked a window at a time",
			 test_udp_read_windowed) ||
	    !CU_add_test(s, "UDP UC past one send window",
			 test_udp_uc_past_window))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
