/*
 * Black-box tests of the verbs QP control path (test_verbs_control.c has
 * the device, queries, PD/MR, CQ and SRQ), through the public API of
 * build/.../libibverbs.so.1 as an rdma-core 44 program reaches it: QP
 * creation and the state machine, destroy ordering, AHs, the features
 * that are refused, and a one-QP loopback that exercises the ibv_qp_ex /
 * ibv_cq_ex interfaces and the event bookkeeping.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "cu_run.h"
#include "verbs_suite.h"

/* ---- QP ---- */

struct objs {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
};

static struct objs objs_make(void)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct objs o;

	o.pd = ibv_alloc_pd(ctx);
	o.cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	o.srq = o.pd ? ibv_create_srq(o.pd, &sa) : NULL;
	CU_ASSERT_FATAL(o.pd && o.cq && o.srq);
	return o;
}

static void objs_free(struct objs *o)
{
	CU_ASSERT_EQUAL(ibv_destroy_srq(o->srq), 0);
	CU_ASSERT_EQUAL(ibv_destroy_cq(o->cq), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(o->pd), 0);
}

static struct ibv_qp_init_attr qp_attr(struct objs *o, enum ibv_qp_type t)
{
	return (struct ibv_qp_init_attr){
		.qp_context = o,
		.send_cq = o->cq,
		.recv_cq = o->cq,
		.qp_type = t,
		.cap = { .max_send_wr = 5, .max_recv_wr = 7, .max_send_sge = 2,
			 .max_recv_sge = 3, .max_inline_data = 64 },
	};
}

static void test_qp_create(void)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct objs o = objs_make();

	for (size_t i = 0; i < 3; i++) {
		struct ibv_qp_init_attr a = qp_attr(&o, types[i]);
		struct ibv_qp *qp = ibv_create_qp(o.pd, &a);

		CU_ASSERT_FATAL(qp != NULL);
		CU_ASSERT(a.cap.max_send_wr >= 5 && a.cap.max_recv_wr >= 7);
		CU_ASSERT(a.cap.max_send_sge >= 2 && a.cap.max_recv_sge >= 3);
		CU_ASSERT(a.cap.max_inline_data >= 64);
		CU_ASSERT_NOT_EQUAL(qp->qp_num, 0);
		CU_ASSERT_EQUAL(qp->state, IBV_QPS_RESET);
		CU_ASSERT_EQUAL(qp->qp_type, types[i]);
		CU_ASSERT_PTR_EQUAL(qp->qp_context, &o);
		CU_ASSERT_PTR_EQUAL(qp->pd, o.pd);
		CU_ASSERT_PTR_EQUAL(qp->send_cq, o.cq);
		/* only QPs made with send ops have the ibv_qp_ex interface */
		CU_ASSERT_PTR_NULL(ibv_qp_to_qp_ex(qp));
		CU_ASSERT_EQUAL(ibv_destroy_qp(qp), 0);
	}
	/* an SRQ is allowed with RC and UD, not UC (ibv_create_qp(3)) */
	{
		struct ibv_qp_init_attr a = qp_attr(&o, IBV_QPT_RC);
		struct ibv_qp *qp;

		a.srq = o.srq;
		qp = ibv_create_qp(o.pd, &a);
		CU_ASSERT_FATAL(qp != NULL);
		CU_ASSERT_PTR_EQUAL(qp->srq, o.srq);
		CU_ASSERT_EQUAL(ibv_destroy_qp(qp), 0);
		a = qp_attr(&o, IBV_QPT_UC);
		a.srq = o.srq;
		CU_ASSERT_PTR_NULL(ibv_create_qp(o.pd, &a));
	}
	objs_free(&o);
}

static void test_qp_create_bad(void)
{
	struct objs o = objs_make();
	struct ibv_qp_init_attr a;

#define EXPECT_FAIL(err, stmt)                                  \
	do {                                                    \
		a = qp_attr(&o, IBV_QPT_RC);                    \
		stmt;                                           \
		errno = 0;                                      \
		CU_ASSERT_PTR_NULL(ibv_create_qp(o.pd, &a));    \
		CU_ASSERT_EQUAL(errno, err);                    \
	} while (0)

	EXPECT_FAIL(EINVAL, a.cap.max_send_wr = dev_attr.max_qp_wr + 1);
	EXPECT_FAIL(EINVAL, a.cap.max_recv_wr = dev_attr.max_qp_wr + 1);
	EXPECT_FAIL(EINVAL, a.cap.max_send_sge = dev_attr.max_sge + 1);
	EXPECT_FAIL(EINVAL, a.cap.max_recv_sge = dev_attr.max_sge + 1);
	EXPECT_FAIL(EINVAL, a.cap.max_inline_data = 1u << 30);
	EXPECT_FAIL(EINVAL, a.send_cq = NULL);
	EXPECT_FAIL(EINVAL, a.recv_cq = NULL);
	EXPECT_FAIL(EINVAL, a.qp_type = 0x77);
	EXPECT_FAIL(EOPNOTSUPP, a.qp_type = IBV_QPT_RAW_PACKET);
#undef EXPECT_FAIL
	errno = 0;
	a = qp_attr(&o, IBV_QPT_RC);
	CU_ASSERT_PTR_NULL(ibv_create_qp(NULL, &a));
	CU_ASSERT_EQUAL(errno, EINVAL);
	objs_free(&o);
}

static void test_qp_create_ex(void)
{
	struct objs o = objs_make();
	struct ibv_qp_init_attr_ex a = {
		.send_cq = o.cq, .recv_cq = o.cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = o.pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_READ,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);

	CU_ASSERT_FATAL(qp != NULL);
	CU_ASSERT_PTR_EQUAL((void *)ibv_qp_to_qp_ex(qp), (void *)qp);
	CU_ASSERT_EQUAL(ibv_destroy_qp(qp), 0);

	/* a UD QP carries no RDMA READ */
	a.qp_type = IBV_QPT_UD;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_qp_ex(ctx, &a));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	a.qp_type = IBV_QPT_RC;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	a.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_qp_ex(ctx, &a));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	a.create_flags = 0;
	qp = ibv_create_qp_ex(ctx, &a);
	CU_ASSERT_FATAL(qp != NULL);
	CU_ASSERT_PTR_NULL(ibv_qp_to_qp_ex(qp));
	CU_ASSERT_EQUAL(ibv_destroy_qp(qp), 0);
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_qp_ex(ctx, &a));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	objs_free(&o);
}

#define RC_INIT_MASK (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | \
		      IBV_QP_ACCESS_FLAGS)
#define RC_RTR_MASK (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | \
		     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | \
		     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RC_RTS_MASK (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | \
		     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)

/* Bring an RC QP to RTS, connected to dest_qpn on our own port. */
static int rc_connect(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};
	int rc = ibv_modify_qp(qp, &a, RC_INIT_MASK);

	if (rc)
		return rc;
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR, .path_mtu = port_attr.active_mtu,
		.dest_qp_num = dest_qpn, .rq_psn = 0x123,
		.max_dest_rd_atomic = 4, .min_rnr_timer = 12,
		.ah_attr = { .dlid = port_attr.lid, .port_num = 1 },
	};
	rc = ibv_modify_qp(qp, &a, RC_RTR_MASK);
	if (rc)
		return rc;
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
		.rnr_retry = 7, .sq_psn = 0x456, .max_rd_atomic = 4,
	};
	return ibv_modify_qp(qp, &a, RC_RTS_MASK);
}

static void test_qp_modify_rc(void)
{
	struct objs o = objs_make();
	struct ibv_qp_init_attr ia = qp_attr(&o, IBV_QPT_RC), qi;
	struct ibv_qp *qp = ibv_create_qp(o.pd, &ia);
	struct ibv_qp_attr a, q;

	CU_ASSERT_FATAL(qp != NULL);
	/* RESET -> INIT without the port: refused, state unchanged */
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .pkey_index = 0,
				  .qp_access_flags = 0 };
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, RC_INIT_MASK & ~IBV_QP_PORT), EINVAL);
	CU_ASSERT_EQUAL(qp->state, IBV_QPS_RESET);
	/* RESET -> RTR skips a state */
	a.qp_state = IBV_QPS_RTR;
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);

	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1,
				  .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, RC_INIT_MASK), 0);
	CU_ASSERT_EQUAL(qp->state, IBV_QPS_INIT);
	/* INIT -> RTR without the destination QPN */
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
		.dest_qp_num = qp->qp_num, .rq_psn = 0x111,
		.max_dest_rd_atomic = 2, .min_rnr_timer = 5,
		.ah_attr = { .dlid = port_attr.lid, .port_num = 1 },
	};
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, RC_RTR_MASK & ~IBV_QP_DEST_QPN), EINVAL);
	CU_ASSERT_EQUAL(qp->state, IBV_QPS_INIT);
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, RC_RTR_MASK), 0);
	CU_ASSERT_EQUAL(qp->state, IBV_QPS_RTR);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14,
				  .retry_cnt = 6, .rnr_retry = 5, .sq_psn = 0x222,
				  .max_rd_atomic = 3 };
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, RC_RTS_MASK & ~IBV_QP_SQ_PSN), EINVAL);
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, RC_RTS_MASK), 0);
	CU_ASSERT_EQUAL(qp->state, IBV_QPS_RTS);

	/* query returns what modify set, and the init attributes */
	memset(&q, 0, sizeof(q));
	memset(&qi, 0, sizeof(qi));
	CU_ASSERT_EQUAL(ibv_query_qp(qp, &q, IBV_QP_STATE | RC_INIT_MASK |
				     RC_RTR_MASK | RC_RTS_MASK | IBV_QP_CAP, &qi), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_RTS);
	CU_ASSERT_EQUAL(q.port_num, 1);
	CU_ASSERT_EQUAL(q.qp_access_flags, IBV_ACCESS_REMOTE_WRITE);
	CU_ASSERT_EQUAL(q.path_mtu, IBV_MTU_1024);
	CU_ASSERT_EQUAL(q.dest_qp_num, qp->qp_num);
	CU_ASSERT_EQUAL(q.rq_psn, 0x111);
	CU_ASSERT_EQUAL(q.max_dest_rd_atomic, 2);
	CU_ASSERT_EQUAL(q.min_rnr_timer, 5);
	CU_ASSERT_EQUAL(q.ah_attr.dlid, port_attr.lid);
	CU_ASSERT_EQUAL(q.timeout, 14);
	CU_ASSERT_EQUAL(q.retry_cnt, 6);
	CU_ASSERT_EQUAL(q.rnr_retry, 5);
	CU_ASSERT_EQUAL(q.sq_psn, 0x222);
	CU_ASSERT_EQUAL(q.max_rd_atomic, 3);
	CU_ASSERT(q.cap.max_send_wr >= 5 && q.cap.max_recv_wr >= 7);
	CU_ASSERT_PTR_EQUAL(qi.qp_context, &o);
	CU_ASSERT_PTR_EQUAL(qi.send_cq, o.cq);
	CU_ASSERT_PTR_EQUAL(qi.recv_cq, o.cq);
	CU_ASSERT_PTR_NULL(qi.srq);
	CU_ASSERT_EQUAL(qi.qp_type, IBV_QPT_RC);
	CU_ASSERT(qi.cap.max_send_wr >= 5);

	/* to ERR and back to RESET */
	a.qp_state = IBV_QPS_ERR;
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	CU_ASSERT_EQUAL(qp->state, IBV_QPS_ERR);
	a.qp_state = IBV_QPS_RESET;
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	CU_ASSERT_EQUAL(qp->state, IBV_QPS_RESET);
	CU_ASSERT_EQUAL(ibv_destroy_qp(qp), 0);
	objs_free(&o);
}

static void test_qp_modify_ud(void)
{
	struct objs o = objs_make();
	struct ibv_qp_init_attr ia = qp_attr(&o, IBV_QPT_UD);
	struct ibv_qp *qp = ibv_create_qp(o.pd, &ia);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qkey = 0x11111111 }, q;
	struct ibv_qp_init_attr qi;
	const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;

	CU_ASSERT_FATAL(qp != NULL);
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, init & ~IBV_QP_QKEY), EINVAL);
	/* an RC-only attribute is refused on UD */
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, init | IBV_QP_ACCESS_FLAGS), EINVAL);
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, init), 0);
	a.qp_state = IBV_QPS_RTR;
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 7;
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
	CU_ASSERT_EQUAL(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
	CU_ASSERT_EQUAL(qp->state, IBV_QPS_RTS);
	CU_ASSERT_EQUAL(ibv_query_qp(qp, &q, IBV_QP_QKEY | IBV_QP_STATE, &qi), 0);
	CU_ASSERT_EQUAL(q.qkey, 0x11111111);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_RTS);
	CU_ASSERT_EQUAL(qi.qp_type, IBV_QPT_UD);
	CU_ASSERT_EQUAL(ibv_destroy_qp(qp), 0);
	objs_free(&o);
}

/* ---- destroy order ---- */

static void test_destroy_order(void)
{
	struct objs o = objs_make();
	struct ibv_qp_init_attr a = qp_attr(&o, IBV_QPT_RC);
	struct ibv_qp *qp;

	a.srq = o.srq;
	qp = ibv_create_qp(o.pd, &a);
	CU_ASSERT_FATAL(qp != NULL);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(o.pd), EBUSY);
	CU_ASSERT_EQUAL(ibv_destroy_cq(o.cq), EBUSY);
	CU_ASSERT_EQUAL(ibv_destroy_srq(o.srq), EBUSY);
	CU_ASSERT_EQUAL(ibv_destroy_qp(qp), 0);
	objs_free(&o);
}

/* ---- AH ---- */

static void test_ah(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_ah_attr aa = { .dlid = port_attr.lid, .port_num = 1, .sl = 3 };
	struct ibv_wc wc = { .slid = 0x42, .sl = 2, .dlid_path_bits = 1 };
	struct ibv_grh grh;
	struct ibv_ah *ah;

	CU_ASSERT_FATAL(pd != NULL);
	ah = ibv_create_ah(pd, &aa);
	CU_ASSERT_FATAL(ah != NULL);
	CU_ASSERT_PTR_EQUAL(ah->pd, pd);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(pd), EBUSY);
	CU_ASSERT_EQUAL(ibv_destroy_ah(ah), 0);

	aa.dlid = 0;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_ah(pd, &aa));
	CU_ASSERT_EQUAL(errno, EINVAL);
	aa.dlid = port_attr.lid;
	aa.port_num = 2;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_ah(pd, &aa));
	CU_ASSERT_EQUAL(errno, EINVAL);

	/* without a GRH the reply goes to the sender's LID */
	CU_ASSERT_EQUAL(ibv_init_ah_from_wc(ctx, 1, &wc, NULL, &aa), 0);
	CU_ASSERT_EQUAL(aa.dlid, 0x42);
	CU_ASSERT_EQUAL(aa.sl, 2);
	CU_ASSERT_EQUAL(aa.src_path_bits, 1);
	CU_ASSERT_EQUAL(aa.port_num, 1);
	CU_ASSERT_EQUAL(aa.is_global, 0);
	/* with one, GIDs swap: the sender's becomes the destination */
	memset(&grh, 0, sizeof(grh));
	grh.version_tclass_flow = htobe32((6u << 28) | (0x12u << 20) | 0xabcde);
	grh.sgid.raw[0] = 0xfe;
	grh.sgid.raw[15] = 0x99;
	CU_ASSERT_FATAL(ibv_query_gid(ctx, 1, 0, &grh.dgid) == 0);
	wc.wc_flags = IBV_WC_GRH;
	CU_ASSERT_EQUAL(ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &aa), 0);
	CU_ASSERT_EQUAL(aa.is_global, 1);
	CU_ASSERT(memcmp(&aa.grh.dgid, &grh.sgid, sizeof(grh.sgid)) == 0);
	CU_ASSERT_EQUAL(aa.grh.sgid_index, 0);
	CU_ASSERT_EQUAL(aa.grh.flow_label, 0xabcde);
	CU_ASSERT_EQUAL(aa.grh.traffic_class, 0x12);
	ah = ibv_create_ah_from_wc(pd, &wc, &grh, 1);
	CU_ASSERT_FATAL(ah != NULL);
	CU_ASSERT_EQUAL(ibv_destroy_ah(ah), 0);
	CU_ASSERT_EQUAL(ibv_init_ah_from_wc(ctx, 1, &wc, NULL, &aa), -1);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(pd), 0);
}

/* ---- what is refused ---- */

static void test_unsupported(void)
{
	struct ibv_alloc_dm_attr da = { .length = 64 };
	struct ibv_pd *pd = ibv_alloc_pd(ctx);

	CU_ASSERT_FATAL(pd != NULL);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_alloc_mw(pd, IBV_MW_TYPE_1));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_alloc_dm(ctx, &da));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_alloc_null_mr(pd));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, 0));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_import_device(ctx->cmd_fd));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(pd), 0);
}

/* ---- loopback: qp_ex, cq_ex, completion and async events ---- */

struct loop {
	struct ibv_comp_channel *ch;
	struct ibv_cq_ex *cq;
	struct ibv_pd *pd;
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[4096];
};

/* An RC QP connected to itself, on an SRQ, completing to a cq_ex. */
static int loop_make(struct loop *l)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
	};
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_send_sge = 2, .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
	};

	memset(l, 0, sizeof(*l));
	l->ch = ibv_create_comp_channel(ctx);
	ca.channel = l->ch;
	l->cq = l->ch ? ibv_create_cq_ex(ctx, &ca) : NULL;
	l->pd = ibv_alloc_pd(ctx);
	l->srq = l->pd ? ibv_create_srq(l->pd, &sa) : NULL;
	l->mr = l->pd ? ibv_reg_mr(l->pd, l->buf, sizeof(l->buf),
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!l->cq || !l->srq || !l->mr)
		return -1;
	qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(l->cq);
	qa.srq = l->srq;
	qa.pd = l->pd;
	l->qp = ibv_create_qp_ex(ctx, &qa);
	if (!l->qp)
		return -1;
	return rc_connect(l->qp, l->qp->qp_num);
}

static void loop_free(struct loop *l)
{
	CU_ASSERT_EQUAL(ibv_destroy_qp(l->qp), 0);
	CU_ASSERT_EQUAL(ibv_dereg_mr(l->mr), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(l->srq), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(l->pd), 0);
	CU_ASSERT_EQUAL(ibv_destroy_cq(ibv_cq_ex_to_cq(l->cq)), 0);
	CU_ASSERT_EQUAL(ibv_destroy_comp_channel(l->ch), 0);
}

static int post_srq_recv(struct loop *l, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)l->buf + off, .length = len,
			     .lkey = l->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &s, .num_sge = 1 }, *bad;

	return ibv_post_srq_recv(l->srq, &wr, &bad);
}

/* Poll the cq_ex until `n` completions are read (or a second passes). */
static int poll_ex(struct ibv_cq_ex *cq, int n, uint64_t *wr_ids,
		   enum ibv_wc_opcode *ops, uint32_t *lens, uint64_t *ts)
{
	struct ibv_poll_cq_attr pa = { 0 };
	int got = 0;

	for (int tries = 0; got < n && tries < 1000; tries++) {
		int rc = ibv_start_poll(cq, &pa);

		if (rc == ENOENT) {
			usleep(1000);
			continue;
		}
		if (rc)
			return -rc;
		do {
			if (cq->status != IBV_WC_SUCCESS)
				return -EIO;
			wr_ids[got] = cq->wr_id;
			ops[got] = ibv_wc_read_opcode(cq);
			lens[got] = ibv_wc_read_byte_len(cq);
			ts[got] = ibv_wc_read_completion_ts(cq);
			got++;
		} while (got < n && ibv_next_poll(cq) == 0);
		ibv_end_poll(cq);
	}
	return got;
}

static void test_loopback_qp_ex(void)
{
	struct loop l;
	struct ibv_qp_ex *qpx;
	char msg[32] = "inline through ibv_qp_ex";
	uint64_t ids[4], ts[4];
	enum ibv_wc_opcode ops[4];
	uint32_t lens[4];
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	CU_ASSERT_FATAL(loop_make(&l) == 0);
	qpx = ibv_qp_to_qp_ex(l.qp);
	CU_ASSERT_FATAL(qpx != NULL);
	CU_ASSERT_EQUAL(post_srq_recv(&l, 100, 1024, 512), 0);
	CU_ASSERT_EQUAL(ibv_req_notify_cq(ibv_cq_ex_to_cq(l.cq), 0), 0);

	/* inline send; the buffer is reused before the batch completes */
	ibv_wr_start(qpx);
	qpx->wr_id = 7;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, msg, sizeof(msg));
	memset(msg, 'x', sizeof(msg));
	/* and an RDMA WRITE from the same buffer */
	qpx->wr_id = 8;
	ibv_wr_rdma_write(qpx, l.mr->rkey, (uintptr_t)l.buf + 2048);
	ibv_wr_set_sge(qpx, l.mr->lkey, (uintptr_t)l.buf, 16);
	memcpy(l.buf, "0123456789abcdef", 16);
	CU_ASSERT_EQUAL(ibv_wr_complete(qpx), 0);

	CU_ASSERT_EQUAL(poll_ex(l.cq, 3, ids, ops, lens, ts), 3);
	for (int i = 0; i < 3; i++) {
		if (ids[i] == 100) {
			CU_ASSERT_EQUAL(ops[i], IBV_WC_RECV);
			CU_ASSERT_EQUAL(lens[i], 32);
		} else {
			CU_ASSERT(ids[i] == 7 || ids[i] == 8);
		}
		CU_ASSERT_NOT_EQUAL(ts[i], 0);
	}
	CU_ASSERT_STRING_EQUAL(l.buf + 1024, "inline through ibv_qp_ex");
	CU_ASSERT(memcmp(l.buf + 2048, "0123456789abcdef", 16) == 0);

	/*
	 * The CQ was armed, but its completions are polled already: the
	 * event they raised is not delivered (softib re-arms instead), so an
	 * event always finds a completion to poll. A new completion, not
	 * yet polled, is announced.
	 */
	int fl = fcntl(l.ch->fd, F_GETFL);
	CU_ASSERT_EQUAL(fcntl(l.ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
	CU_ASSERT_EQUAL(ibv_get_cq_event(l.ch, &ev_cq, &ev_ctx), -1);
	CU_ASSERT_EQUAL(errno, EAGAIN);
	CU_ASSERT_EQUAL(post_srq_recv(&l, 101, 1024, 512), 0);
	ibv_wr_start(qpx);
	qpx->wr_id = 9;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, msg, 8);
	CU_ASSERT_EQUAL(ibv_wr_complete(qpx), 0);
	CU_ASSERT_EQUAL(fcntl(l.ch->fd, F_SETFL, fl), 0);
	CU_ASSERT_EQUAL(ibv_get_cq_event(l.ch, &ev_cq, &ev_ctx), 0);
	CU_ASSERT_PTR_EQUAL(ev_cq, ibv_cq_ex_to_cq(l.cq));
	ibv_ack_cq_events(ev_cq, 1);
	CU_ASSERT_EQUAL(poll_ex(l.cq, 2, ids, ops, lens, ts), 2);

	/* an error in a builder aborts the whole batch */
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, l.buf, 4096); /* beyond max_inline_data */
	CU_ASSERT_EQUAL(ibv_wr_complete(qpx), EINVAL);
	ibv_wr_start(qpx);
	ibv_wr_local_inv(qpx, 1);
	CU_ASSERT_EQUAL(ibv_wr_complete(qpx), EOPNOTSUPP);
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_abort(qpx);
	CU_ASSERT_EQUAL(poll_ex(l.cq, 1, ids, ops, lens, ts), 0);
	loop_free(&l);
}

struct late_send {
	struct ibv_qp_ex *qpx;
	int rc;
};

/* A SEND 20 ms from now: something for a blocking get_cq_event to wake to. */
static void *late_send_thread(void *p)
{
	struct late_send *a = p;
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	nanosleep(&ts, NULL);
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 11;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a->qpx);
	ibv_wr_set_inline_data(a->qpx, "late", 4);
	a->rc = ibv_wr_complete(a->qpx);
	return NULL;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * ibv_get_cq_event trusts the channel's flags it read for a millisecond
 * (chan.c chan_blocking): a channel made non-blocking right after a
 * blocking call slept must still answer EAGAIN on the next call, within
 * the few milliseconds such a sleep is bounded by — not sleep until an
 * event comes.
 */
static void test_chan_nonblock_after_sleep(void)
{
	struct loop l;
	struct ibv_qp_ex *qpx;
	struct late_send a;
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	pthread_t t;
	uint64_t ids[2], ts[2], t0;
	uint32_t lens[2];
	enum ibv_wc_opcode ops[2];

	CU_ASSERT_FATAL(loop_make(&l) == 0);
	qpx = ibv_qp_to_qp_ex(l.qp);
	CU_ASSERT_FATAL(qpx != NULL);
	CU_ASSERT_EQUAL(post_srq_recv(&l, 200, 1024, 512), 0);
	CU_ASSERT_EQUAL(ibv_req_notify_cq(ibv_cq_ex_to_cq(l.cq), 0), 0);
	a = (struct late_send){ .qpx = qpx };
	CU_ASSERT_FATAL(pthread_create(&t, NULL, late_send_thread, &a) == 0);
	/* blocking: sleeps until the late SEND completes */
	CU_ASSERT_EQUAL(ibv_get_cq_event(l.ch, &ev_cq, &ev_ctx), 0);
	pthread_join(t, NULL);
	CU_ASSERT_EQUAL(a.rc, 0);
	ibv_ack_cq_events(ev_cq, 1);
	CU_ASSERT_EQUAL(poll_ex(l.cq, 2, ids, ops, lens, ts), 2);
	/* at once non-blocking, armed, nothing to come: EAGAIN, promptly */
	int fl = fcntl(l.ch->fd, F_GETFL);
	CU_ASSERT_EQUAL(fcntl(l.ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
	CU_ASSERT_EQUAL(ibv_req_notify_cq(ibv_cq_ex_to_cq(l.cq), 0), 0);
	t0 = mono_ms();
	errno = 0;
	CU_ASSERT_EQUAL(ibv_get_cq_event(l.ch, &ev_cq, &ev_ctx), -1);
	CU_ASSERT_EQUAL(errno, EAGAIN);
	CU_ASSERT(mono_ms() - t0 < 1000);
	CU_ASSERT_EQUAL(fcntl(l.ch->fd, F_SETFL, fl), 0);
	loop_free(&l);
}

struct destroy_arg {
	struct ibv_srq *srq;
	volatile int done;
	int rc;
};

static void *destroy_srq_thread(void *p)
{
	struct destroy_arg *d = p;

	d->rc = ibv_destroy_srq(d->srq);
	d->done = 1;
	return NULL;
}

/*
 * SRQ limit event: handed out with the SRQ, and destroying the SRQ waits
 * until the application acknowledged it (ibv_get_async_event(3)).
 */
static void test_srq_limit_event(void)
{
	struct loop l;
	struct ibv_srq_attr sa = { .srq_limit = 2 };
	struct ibv_async_event ev;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge s;
	struct destroy_arg d = { 0 };
	struct pollfd pfd = { .events = POLLIN };
	pthread_t t;
	uint64_t ids[4], ts[4];
	enum ibv_wc_opcode ops[4];
	uint32_t lens[4];

	CU_ASSERT_FATAL(loop_make(&l) == 0);
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(post_srq_recv(&l, 200 + i, 512 * i, 512), 0);
	CU_ASSERT_EQUAL(ibv_modify_srq(l.srq, &sa, IBV_SRQ_LIMIT), 0);
	s = (struct ibv_sge){ .addr = (uintptr_t)l.buf + 3072, .length = 8,
			      .lkey = l.mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &s, .num_sge = 1,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	/* 3 -> 2 -> 1 queued: below the limit */
	CU_ASSERT_EQUAL(ibv_post_send(l.qp, &wr, &bad), 0);
	CU_ASSERT_EQUAL(poll_ex(l.cq, 2, ids, ops, lens, ts), 2);
	CU_ASSERT_EQUAL(ibv_post_send(l.qp, &wr, &bad), 0);
	CU_ASSERT_EQUAL(poll_ex(l.cq, 2, ids, ops, lens, ts), 2);

	pfd.fd = ctx->async_fd;
	CU_ASSERT_FATAL(poll(&pfd, 1, 2000) == 1);
	CU_ASSERT_EQUAL_FATAL(ibv_get_async_event(ctx, &ev), 0);
	CU_ASSERT_EQUAL(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
	CU_ASSERT_PTR_EQUAL(ev.element.srq, l.srq);

	/* the QP must go first; then the SRQ's destroy waits for the ack */
	CU_ASSERT_EQUAL(ibv_destroy_qp(l.qp), 0);
	d.srq = l.srq;
	CU_ASSERT_FATAL(pthread_create(&t, NULL, destroy_srq_thread, &d) == 0);
	usleep(100 * 1000);
	CU_ASSERT_EQUAL(d.done, 0);
	ibv_ack_async_event(&ev);
	pthread_join(t, NULL);
	CU_ASSERT_EQUAL(d.rc, 0);

	CU_ASSERT_EQUAL(ibv_dereg_mr(l.mr), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(l.pd), 0);
	CU_ASSERT_EQUAL(ibv_destroy_cq(ibv_cq_ex_to_cq(l.cq)), 0);
	CU_ASSERT_EQUAL(ibv_destroy_comp_channel(l.ch), 0);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("verbs_qp", verbs_suite_init, verbs_suite_clean);

	if (!s)
		return -1;
	if (!CU_add_test(s, "QP create RC/UC/UD, SRQ rule", test_qp_create) ||
	    !CU_add_test(s, "QP create: bad arguments", test_qp_create_bad) ||
	    !CU_add_test(s, "QP create_ex and qp_to_qp_ex", test_qp_create_ex) ||
	    !CU_add_test(s, "RC modify and query", test_qp_modify_rc) ||
	    !CU_add_test(s, "UD modify and query", test_qp_modify_ud) ||
	    !CU_add_test(s, "destroy order: EBUSY while in use", test_destroy_order) ||
	    !CU_add_test(s, "AH and AH from a completion", test_ah) ||
	    !CU_add_test(s, "unsupported features refused", test_unsupported) ||
	    !CU_add_test(s, "loopback through qp_ex and cq_ex", test_loopback_qp_ex) ||
	    !CU_add_test(s, "channel made non-blocking after a sleep: EAGAIN",
			 test_chan_nonblock_after_sleep) ||
	    !CU_add_test(s, "SRQ limit event and destroy waiting for ack",
			 test_srq_limit_event))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
