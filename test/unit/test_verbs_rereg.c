/*
 * Black-box tests of ibv_rereg_mr (issue 10): after a re-registration
 * that changes the translation, the PD, the access flags, or several of
 * them, traffic through the MR's keys and new address works — SEND into
 * a re-registered receive buffer, RDMA WRITE and READ through the new
 * rkey — and the old range is no longer reachable.
 *
 * Two RC QPs of one process connected to each other, one pair per PD
 * (a CHANGE_PD moves the traffic to the pair of the new PD). With
 * SOFTIB_LINK=udp the same tests run over the UDP link.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/infiniband/verbs.h"

#include "cu_run.h"

#define TIMEOUT_MS 5000
#define BUF 8192

static struct ibv_context *ctx;
static struct ibv_port_attr port_attr;
static struct ibv_cq *cq;

struct pair {
	struct ibv_pd *pd;
	struct ibv_qp *a, *b;   /* a sends, b receives */
};

static struct pair P[2];

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* n completions within TIMEOUT_MS; returns how many came. */
static int poll_n(struct ibv_wc *wc, int n)
{
	uint64_t end = now_ms() + TIMEOUT_MS;
	int got = 0;

	while (got < n && now_ms() < end) {
		int k = ibv_poll_cq(cq, n - got, wc + got);

		if (k < 0)
			return -1;
		got += k;
	}
	return got;
}

/*
 * Each connection of a pair gets PSNs of its own, so that nothing late
 * from the previous connection of the same QPs (over UDP) fits in.
 */
static uint32_t psn_base = 0x1000;

static int connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ };
	union ibv_gid gid;

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = psn_base;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = port_attr.lid;
	a.ah_attr.port_num = 1;
	if (!ibv_query_gid(ctx, 1, 0, &gid)) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = gid;
		a.ah_attr.grh.hop_limit = 1;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn_base;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_MAX_QP_RD_ATOMIC);
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};

	return ibv_create_qp(pd, &ia);
}

static int suite_init(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);

	ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	ibv_free_device_list(l);
	if (!ctx || ibv_query_port(ctx, 1, &port_attr))
		return -1;
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!cq)
		return -1;
	for (int i = 0; i < 2; i++) {
		P[i].pd = ibv_alloc_pd(ctx);
		if (!P[i].pd)
			return -1;
		P[i].a = rc_qp(P[i].pd);
		P[i].b = rc_qp(P[i].pd);
		if (!P[i].a || !P[i].b || connect_qp(P[i].a, P[i].b->qp_num) ||
		    connect_qp(P[i].b, P[i].a->qp_num))
			return -1;
	}
	return 0;
}

static int suite_clean(void)
{
	for (int i = 0; i < 2; i++) {
		if (P[i].a)
			ibv_destroy_qp(P[i].a);
		if (P[i].b)
			ibv_destroy_qp(P[i].b);
		if (P[i].pd)
			ibv_dealloc_pd(P[i].pd);
	}
	if (cq)
		ibv_destroy_cq(cq);
	return ctx ? ibv_close_device(ctx) : 0;
}

static struct pair *pair_of(struct ibv_pd *pd)
{
	return pd == P[0].pd ? &P[0] : &P[1];
}

static int post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr,
		     void *addr, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = { (uintptr_t)addr, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = op, .sg_list = &s, .num_sge = 1,
				  .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* One WR and its completion; the status it completed with. */
static int one(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr,
	       void *addr, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;

	if (post_send(qp, op, mr, addr, len, raddr, rkey))
		return -1;
	if (poll_n(&wc, 1) != 1)
		return -2;
	return wc.status;
}

/*
 * SEND from mr_s (at s) into mr_r (at r), then WRITE and READ through
 * mr_r's rkey, on the pair of mr_r's PD; every byte checked.
 */
static void traffic(struct ibv_mr *mr_s, uint8_t *s, struct ibv_mr *mr_r, uint8_t *r)
{
	struct pair *p = pair_of(mr_r->pd);
	struct ibv_sge rs = { (uintptr_t)r, 1024, mr_r->lkey };
	struct ibv_recv_wr rw = { .wr_id = 99, .sg_list = &rs, .num_sge = 1 }, *rbad;
	struct ibv_wc wc[2];
	int n;

	CU_ASSERT_PTR_EQUAL_FATAL(mr_s->pd, mr_r->pd);
	memset(s, 0x5a, 1024);
	memset(r, 0, 1024);
	CU_ASSERT_EQUAL_FATAL(ibv_post_recv(p->b, &rw, &rbad), 0);
	CU_ASSERT_EQUAL_FATAL(post_send(p->a, IBV_WR_SEND, mr_s, s, 1024, 0, 0), 0);
	n = poll_n(wc, 2);
	if (n == 2 && (wc[0].status || wc[1].status))
		fprintf(stderr, "send: %s (op %d), %s (op %d)\n", ibv_wc_status_str(wc[0].status), wc[0].opcode, ibv_wc_status_str(wc[1].status), wc[1].opcode);
	CU_ASSERT_EQUAL_FATAL(n, 2);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_SUCCESS);
	CU_ASSERT(r[0] == 0x5a && r[1023] == 0x5a && !memcmp(s, r, 1024));

	/* WRITE through the rkey at the new address, at an offset */
	memset(s, 0xa5, 512);
	CU_ASSERT_EQUAL(one(p->a, IBV_WR_RDMA_WRITE, mr_s, s, 512,
			    (uintptr_t)r + 100, mr_r->rkey), IBV_WC_SUCCESS);
	CU_ASSERT(r[99] == 0x5a && r[100] == 0xa5 && r[611] == 0xa5 && r[612] == 0x5a);

	/* READ it back */
	memset(s, 0, 1024);
	CU_ASSERT_EQUAL(one(p->a, IBV_WR_RDMA_READ, mr_s, s, 1024,
			    (uintptr_t)r, mr_r->rkey), IBV_WC_SUCCESS);
	CU_ASSERT(!memcmp(s, r, 1024));
}

/* A QP that saw an error is connected again, so the next test starts clean. */
static void reconnect(struct pair *p)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	struct ibv_wc wc[16];

	while (ibv_poll_cq(cq, 16, wc) > 0)
		;
	CU_ASSERT_EQUAL(ibv_modify_qp(p->a, &a, IBV_QP_STATE), 0);
	CU_ASSERT_EQUAL(ibv_modify_qp(p->b, &a, IBV_QP_STATE), 0);
	psn_base += 0x10000;
	CU_ASSERT_EQUAL(connect_qp(p->a, p->b->qp_num), 0);
	CU_ASSERT_EQUAL(connect_qp(p->b, p->a->qp_num), 0);
}

#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static void rereg_case(int flags)
{
	uint8_t *old_s = calloc(1, BUF), *old_r = calloc(1, BUF);
	uint8_t *new_s = calloc(1, BUF), *new_r = calloc(1, BUF);
	struct ibv_pd *to_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? P[1].pd : P[0].pd;
	uint8_t *s = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? new_s : old_s;
	uint8_t *r = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? new_r : old_r;
	int acc_r = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? RW : IBV_ACCESS_LOCAL_WRITE;
	struct ibv_mr *mr_s, *mr_r;
	uint32_t old_rkey;

	CU_ASSERT_PTR_NOT_NULL_FATAL(old_s && old_r && new_s && new_r ? old_s : NULL);
	mr_s = ibv_reg_mr(P[0].pd, old_s, BUF, IBV_ACCESS_LOCAL_WRITE);
	/* with CHANGE_ACCESS the receive MR starts without remote access */
	mr_r = ibv_reg_mr(P[0].pd, old_r, BUF, (flags & IBV_REREG_MR_CHANGE_ACCESS) ?
			  IBV_ACCESS_LOCAL_WRITE : RW);
	CU_ASSERT_PTR_NOT_NULL_FATAL(mr_s);
	CU_ASSERT_PTR_NOT_NULL_FATAL(mr_r);
	if (!(flags & IBV_REREG_MR_CHANGE_ACCESS))
		acc_r = RW;
	old_rkey = mr_r->rkey;

	CU_ASSERT_EQUAL(ibv_rereg_mr(mr_s, flags, to_pd, new_s, BUF,
				     IBV_ACCESS_LOCAL_WRITE), 0);
	CU_ASSERT_EQUAL(ibv_rereg_mr(mr_r, flags, to_pd, new_r, BUF, acc_r), 0);
	CU_ASSERT_PTR_EQUAL(mr_r->pd, to_pd);
	CU_ASSERT_PTR_EQUAL(mr_r->addr, r);
	CU_ASSERT_EQUAL(mr_r->length, BUF);
	/* a new key: a holder of the old one cannot reach the new range */
	CU_ASSERT_NOT_EQUAL(mr_r->rkey, old_rkey);

	traffic(mr_s, s, mr_r, r);

	/* the old key is gone: a WRITE through it is a remote access error */
	struct pair *p = pair_of(to_pd);
	CU_ASSERT_EQUAL(one(p->a, IBV_WR_RDMA_WRITE, mr_s, s, 16, (uintptr_t)r, old_rkey),
			IBV_WC_REM_ACCESS_ERR);
	reconnect(p);
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		/* nor is the old range through the new key */
		CU_ASSERT_EQUAL(one(p->a, IBV_WR_RDMA_WRITE, mr_s, s, 16,
				    (uintptr_t)old_r, mr_r->rkey), IBV_WC_REM_ACCESS_ERR);
		reconnect(p);
	}
	CU_ASSERT_EQUAL(ibv_dereg_mr(mr_s), 0);
	CU_ASSERT_EQUAL(ibv_dereg_mr(mr_r), 0);
	free(old_s);
	free(old_r);
	free(new_s);
	free(new_r);
}

static void test_translation(void) { rereg_case(IBV_REREG_MR_CHANGE_TRANSLATION); }
static void test_pd(void) { rereg_case(IBV_REREG_MR_CHANGE_PD); }
static void test_access(void) { rereg_case(IBV_REREG_MR_CHANGE_ACCESS); }
static void test_translation_pd(void)
{
	rereg_case(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD);
}
static void test_all(void)
{
	rereg_case(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		   IBV_REREG_MR_CHANGE_ACCESS);
}

/* A failed re-registration leaves the old one working, key and all. */
static void test_failed_keeps_old(void)
{
	uint8_t *s = calloc(1, BUF), *r = calloc(1, BUF);
	struct ibv_mr *mr_s = ibv_reg_mr(P[0].pd, s, BUF, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr_r = ibv_reg_mr(P[0].pd, r, BUF, RW);
	uint32_t key;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mr_s);
	CU_ASSERT_PTR_NOT_NULL_FATAL(mr_r);
	key = mr_r->rkey;
	/* remote write without local write: refused */
	CU_ASSERT_EQUAL(ibv_rereg_mr(mr_r, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				     IBV_ACCESS_REMOTE_WRITE), IBV_REREG_MR_ERR_INPUT);
	CU_ASSERT_EQUAL(mr_r->rkey, key);
	traffic(mr_s, s, mr_r, r);
	ibv_dereg_mr(mr_s);
	ibv_dereg_mr(mr_r);
	free(s);
	free(r);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("verbs_rereg", suite_init, suite_clean);

	if (!s)
		return -1;
	if (!CU_add_test(s, "rereg CHANGE_TRANSLATION: send, write, read", test_translation) ||
	    !CU_add_test(s, "rereg CHANGE_PD: send, write, read", test_pd) ||
	    !CU_add_test(s, "rereg CHANGE_ACCESS: send, write, read", test_access) ||
	    !CU_add_test(s, "rereg TRANSLATION|PD", test_translation_pd) ||
	    !CU_add_test(s, "rereg TRANSLATION|PD|ACCESS", test_all) ||
	    !CU_add_test(s, "failed rereg keeps the old registration", test_failed_keeps_old))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
