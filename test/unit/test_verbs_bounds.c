/*
 * Lengths and bounds through the verbs API (issue 15 item 9), over each
 * link: the host link (shared memory) and the UDP link (SOFTIB_LINK=udp),
 * one suite each, so neither is tested less than the other.
 *
 *  - a message longer than the port's max_msg_sz (2 GiB) fails at post
 *    (EINVAL, bad_wr at it), SEND, WRITE and READ alike;
 *  - a UD send through an address handle of another protection domain
 *    completes with IBV_WC_LOC_QP_OP_ERR (ibv_poll_cq(3)) and delivers
 *    nothing.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "cu_run.h"

#define GIB2 (1ULL << 31)

static struct ibv_device **dev_list;
static struct ibv_context *ctx;
static struct ibv_port_attr port_attr;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static int open_link(const char *link)
{
	if (link)
		setenv("SOFTIB_LINK", link, 1);
	else
		unsetenv("SOFTIB_LINK");
	dev_list = ibv_get_device_list(NULL);
	if (!dev_list || !dev_list[0])
		return -1;
	ctx = ibv_open_device(dev_list[0]);
	if (!ctx || ibv_query_port(ctx, 1, &port_attr))
		return -1;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	return pd && cq ? 0 : -1;
}

static int init_shm(void) { return open_link(NULL); }
static int init_udp(void) { return open_link("udp"); }

static int clean(void)
{
	int rc = 0;

	if (cq)
		rc |= ibv_destroy_cq(cq);
	if (pd)
		rc |= ibv_dealloc_pd(pd);
	if (ctx)
		rc |= ibv_close_device(ctx);
	ibv_free_device_list(dev_list);
	cq = NULL;
	pd = NULL;
	ctx = NULL;
	unsetenv("SOFTIB_LINK");
	return rc;
}

static int poll_one(struct ibv_wc *wc)
{
	for (int i = 0; i < 5000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
		usleep(1000);
	}
	return 0;
}

static struct ibv_qp *make_qp(struct ibv_pd *p, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr qi = {
		.send_cq = cq, .recv_cq = cq, .qp_type = t,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 4, .max_recv_sge = 4 },
	};

	return ibv_create_qp(p, &qi);
}

static int rc_connect_self(struct ibv_qp *qp)
{
	struct ibv_qp_attr i = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ };
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = qp->qp_num, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = 1,
				 .ah_attr = { .port_num = 1, .dlid = port_attr.lid } };
	struct ibv_qp_attr t = { .qp_state = IBV_QPS_RTS, .timeout = 10, .retry_cnt = 2,
				 .rnr_retry = 0, .max_rd_atomic = 1 };

	return ibv_modify_qp(qp, &i, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS) ||
	       ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER) ||
	       ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* ---- max_msg_sz ---- */

static void test_msg_too_long(void)
{
	size_t len = GIB2 + 8192;
	/* address space only: nothing is touched, the post is refused */
	char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct ibv_device_attr da;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	static const enum ibv_wr_opcode ops[] = { IBV_WR_SEND, IBV_WR_RDMA_WRITE,
						  IBV_WR_RDMA_READ };

	CU_ASSERT_FATAL(buf != MAP_FAILED);
	CU_ASSERT_EQUAL(port_attr.max_msg_sz, GIB2);
	CU_ASSERT_EQUAL(ibv_query_device(ctx, &da), 0);
	mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ);
	CU_ASSERT_FATAL(mr != NULL);
	qp = make_qp(pd, IBV_QPT_RC);
	CU_ASSERT_FATAL(qp != NULL);
	CU_ASSERT_FATAL(rc_connect_self(qp) == 0);

	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		/* 2 GiB + 1 byte, in two SGEs (one SGE cannot say more) */
		struct ibv_sge s[2] = { { (uintptr_t)buf, (uint32_t)GIB2, mr->lkey },
					{ (uintptr_t)buf + GIB2, 1, mr->lkey } };
		struct ibv_send_wr wr = { .wr_id = k, .sg_list = s, .num_sge = 2,
					  .opcode = ops[k],
					  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;

		wr.wr.rdma.remote_addr = (uintptr_t)buf;
		wr.wr.rdma.rkey = mr->rkey;
		CU_ASSERT_EQUAL(ibv_post_send(qp, &wr, &bad), EINVAL);
		CU_ASSERT_PTR_EQUAL(bad, &wr);
	}
	/* nothing was queued, and the QP still carries a small message */
	{
		struct ibv_sge s = { (uintptr_t)buf, 64, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &s, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		wr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
		wr.wr.rdma.rkey = mr->rkey;
		CU_ASSERT_EQUAL(ibv_post_send(qp, &wr, &bad), 0);
		CU_ASSERT_EQUAL(poll_one(&wc), 1);
		CU_ASSERT_EQUAL(wc.wr_id, 9);
		CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
	}
	CU_ASSERT_EQUAL(ibv_destroy_qp(qp), 0);
	CU_ASSERT_EQUAL(ibv_dereg_mr(mr), 0);
	munmap(buf, len);
}

/* ---- an AH of another PD ---- */

static int ud_ready(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11 };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* A UD SEND from `from` to `to` through `ah`; the sender's completion. */
static enum ibv_wc_status ud_send(struct ibv_qp *from, struct ibv_qp *to,
				  struct ibv_ah *ah, struct ibv_mr *mr, char *buf,
				  int *received)
{
	struct ibv_sge rs = { (uintptr_t)buf, 1024, mr->lkey };
	struct ibv_sge ss = { (uintptr_t)buf + 2048, 32, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 100, .sg_list = &rs, .num_sge = 1 }, *rb;
	struct ibv_send_wr sw = { .wr_id = 200, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sb;
	enum ibv_wc_status st = (enum ibv_wc_status)-1;
	struct ibv_wc wc;

	*received = 0;
	sw.wr.ud.ah = ah;
	sw.wr.ud.remote_qpn = to->qp_num;
	sw.wr.ud.remote_qkey = 0x11;
	if (ibv_post_recv(to, &rw, &rb) || ibv_post_send(from, &sw, &sb))
		return st;
	while (poll_one(&wc) == 1) {
		if (wc.wr_id == 200)
			st = wc.status;
		else if (wc.wr_id == 100 && wc.status == IBV_WC_SUCCESS)
			(*received)++;
		if (st != (enum ibv_wc_status)-1 && (*received || st != IBV_WC_SUCCESS))
			break;
	}
	/* a late delivery would show within this */
	usleep(20000);
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		if (wc.wr_id == 100 && wc.status == IBV_WC_SUCCESS)
			(*received)++;
	return st;
}

static void test_ah_other_pd(void)
{
	struct ibv_pd *other = ibv_alloc_pd(ctx);
	struct ibv_ah_attr aa = { .dlid = port_attr.lid, .port_num = 1 };
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *a = make_qp(pd, IBV_QPT_UD), *b = make_qp(pd, IBV_QPT_UD), *a2;
	struct ibv_ah *theirs, *ours;
	int got;

	CU_ASSERT_FATAL(other && mr && a && b);
	CU_ASSERT_FATAL(ud_ready(a) == 0 && ud_ready(b) == 0);
	theirs = ibv_create_ah(other, &aa);
	ours = ibv_create_ah(pd, &aa);
	CU_ASSERT_FATAL(theirs && ours);

	CU_ASSERT_EQUAL(ud_send(a, b, theirs, mr, buf, &got), IBV_WC_LOC_QP_OP_ERR);
	CU_ASSERT_EQUAL(got, 0);
	/* the same send through an AH of the QP's own PD is delivered */
	a2 = make_qp(pd, IBV_QPT_UD);
	CU_ASSERT_FATAL(a2 && ud_ready(a2) == 0);
	CU_ASSERT_EQUAL(ud_send(a2, b, ours, mr, buf, &got), IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(got, 1);

	CU_ASSERT_EQUAL(ibv_destroy_qp(a), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(a2), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(b), 0);
	CU_ASSERT_EQUAL(ibv_destroy_ah(theirs), 0);
	CU_ASSERT_EQUAL(ibv_destroy_ah(ours), 0);
	CU_ASSERT_EQUAL(ibv_dereg_mr(mr), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(other), 0);
}

static int add_suites(void)
{
	static const struct { const char *name; int (*init)(void); } links[] = {
		{ "bounds (host link)", init_shm },
		{ "bounds (UDP link)", init_udp },
	};

	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		CU_pSuite s = CU_add_suite(links[i].name, links[i].init, clean);

		if (!s ||
		    !CU_add_test(s, "message above max_msg_sz fails at post",
				 test_msg_too_long) ||
		    !CU_add_test(s, "UD through an AH of another PD: LOC_QP_OP_ERR",
				 test_ah_other_pd))
			return -1;
	}
	return 0;
}

CU_RUN_MAIN(add_suites)
