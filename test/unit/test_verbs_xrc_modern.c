/*
 * XRC through the modern rdma-core 44 API (ibv_open_xrcd, ibv_create_srq_ex,
 * ibv_create_qp_ex, ibv_open_qp, the ibv_qp_ex builder): its calls, their
 * refusals, every opcode of seed 004's XRC column, and the equivalence of
 * the two APIs (a receive QP made with one is used through the other).
 * The legacy API is in test_verbs_xrc.c, lifetime across processes in
 * test_verbs_xrc_fork.c.
 */
#include "xrc_common.h"

static void test_modern_xrcd(void)
{
	char path[128];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD,
					.fd = fd, .oflags = O_CREAT };
	struct ibv_xrcd *x, *x2, *priv;
	struct ibv_srq *srq;
	struct side s;

	CU_ASSERT_FATAL(fd >= 0 && side_make(&s));
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_xrcd(ctx, &a));     /* OFLAGS missing */
	CU_ASSERT_EQUAL(errno, EINVAL);
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS |
		      IBV_XRCD_INIT_ATTR_RESERVED;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_xrcd(ctx, &a));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	x = modern_xrcd(fd, O_CREAT | O_EXCL);
	CU_ASSERT_FATAL(x != NULL);
	CU_ASSERT_PTR_EQUAL(x->context, ctx);
	errno = 0;
	CU_ASSERT_PTR_NULL(modern_xrcd(fd, O_CREAT | O_EXCL));
	CU_ASSERT_EQUAL(errno, EEXIST);
	x2 = modern_xrcd(fd, 0);
	priv = modern_xrcd(-1, O_CREAT);
	CU_ASSERT_FATAL(x2 && priv);

	srq = modern_srq(&s, x);
	CU_ASSERT_FATAL(srq != NULL);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), EBUSY);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x2), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(priv), 0);
	errno = 0;
	CU_ASSERT_PTR_NULL(modern_xrcd(fd, 0));   /* gone with the last close */
	CU_ASSERT_EQUAL(errno, EINVAL);
	side_free(&s);
	close(fd);
}

static void test_modern_srq(void)
{
	struct ibv_xrcd *x = modern_xrcd(-1, O_CREAT);
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD,
		.srq_type = IBV_SRQT_XRC,
	};
	struct ibv_srq *srq;
	struct side s;
	uint32_t num;

	CU_ASSERT_FATAL(x != NULL && side_make(&s));
	a.pd = s.pd_r;
	a.xrcd = x;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_srq_ex(ctx, &a));    /* no CQ */
	CU_ASSERT_EQUAL(errno, EINVAL);
	a.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
	a.cq = s.rcq;
	a.xrcd = NULL;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_srq_ex(ctx, &a));    /* no domain */
	CU_ASSERT_EQUAL(errno, EINVAL);
	a.xrcd = x;
	srq = ibv_create_srq_ex(ctx, &a);
	CU_ASSERT_FATAL(srq != NULL);
	CU_ASSERT_EQUAL(ibv_get_srq_num(srq, &num), 0);
	CU_ASSERT_EQUAL(num, srq->handle);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), 0);
	side_free(&s);
}

static void test_modern_qps(void)
{
	struct ibv_xrcd *x = modern_xrcd(-1, O_CREAT);
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
	};
	struct ibv_qp_init_attr plain;
	struct ibv_send_wr sw = { 0 }, *sbad = NULL;
	struct ibv_recv_wr rw = { 0 }, *rbad = NULL;
	struct ibv_qp *sqp, *sqpx, *rqp;
	struct side s;

	CU_ASSERT_FATAL(x != NULL && side_make(&s));
	ia.pd = s.pd_s;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_qp_ex(ctx, &ia));  /* a receive QP needs its domain */
	CU_ASSERT_EQUAL(errno, EINVAL);
	memset(&plain, 0, sizeof(plain));
	plain.qp_type = IBV_QPT_XRC_RECV;
	plain.send_cq = plain.recv_cq = s.scq;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_qp(s.pd_s, &plain));
	CU_ASSERT_EQUAL(errno, EINVAL);

	rqp = modern_rcv_qp(x);
	CU_ASSERT_FATAL(rqp != NULL);
	CU_ASSERT_EQUAL(rqp->qp_type, IBV_QPT_XRC_RECV);
	CU_ASSERT_EQUAL(rqp->state, IBV_QPS_RESET);
	CU_ASSERT_PTR_NULL(rqp->pd);
	CU_ASSERT_PTR_NULL(rqp->send_cq);
	CU_ASSERT_PTR_NULL(rqp->recv_cq);
	CU_ASSERT_EQUAL(ibv_post_send(rqp, &sw, &sbad), EINVAL);
	CU_ASSERT_PTR_EQUAL(sbad, &sw);
	CU_ASSERT_EQUAL(ibv_post_recv(rqp, &rw, &rbad), EINVAL);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), EBUSY);

	sqp = modern_send_qp(&s, false);    /* PD only: ibv_create_qp's path */
	sqpx = modern_send_qp(&s, true);    /* through the create_qp_ex op */
	CU_ASSERT_FATAL(sqp && sqpx);
	CU_ASSERT_EQUAL(sqp->qp_type, IBV_QPT_XRC_SEND);
	CU_ASSERT_PTR_NULL(sqp->recv_cq);
	CU_ASSERT_PTR_NULL(sqp->srq);
	CU_ASSERT_PTR_NULL(ibv_qp_to_qp_ex(sqp));
	CU_ASSERT_PTR_NOT_NULL(ibv_qp_to_qp_ex(sqpx));
	CU_ASSERT_EQUAL(ibv_post_recv(sqp, &rw, &rbad), EINVAL);
	/* send ops an XRC send QP does not carry */
	{
		struct ibv_qp_init_attr_ex e = {
			.send_cq = s.scq, .qp_type = IBV_QPT_XRC_SEND,
			.cap = { .max_send_wr = 1, .max_send_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD |
				     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = s.pd_s, .send_ops_flags = IBV_QP_EX_WITH_TSO,
		};

		errno = 0;
		CU_ASSERT_PTR_NULL(ibv_create_qp_ex(ctx, &e));
		CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	}
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqpx), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(rqp), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), 0);
	side_free(&s);
}

/*
 * ibv_open_qp(3): a new handle on a receive QP of the domain, by number;
 * "will fail if ... asked to open a QP that does not exist within the
 * xrcd with the specified qp_num and qp_type"; destroy "closes the opened
 * QP and destroys the underlying QP if it has no other references".
 */
static void test_modern_open_qp(void)
{
	char path[128];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrcd *x = modern_xrcd(fd, O_CREAT), *x2 = modern_xrcd(fd, 0);
	struct ibv_xrcd *priv = modern_xrcd(-1, O_CREAT);
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
			     IBV_QP_OPEN_ATTR_TYPE | IBV_QP_OPEN_ATTR_CONTEXT,
		.qp_type = IBV_QPT_XRC_RECV,
		.qp_context = &oa,
	};
	struct ibv_qp_attr a, q;
	struct ibv_qp_init_attr qi;
	struct ibv_qp *rqp, *op;

	CU_ASSERT_FATAL(x && x2 && priv);
	rqp = modern_rcv_qp(x);
	CU_ASSERT_FATAL(rqp != NULL);
	oa.qp_num = rqp->qp_num;
	oa.xrcd = x2;
	op = ibv_open_qp(ctx, &oa);
	CU_ASSERT_FATAL(op != NULL);
	CU_ASSERT_EQUAL(op->qp_num, rqp->qp_num);
	CU_ASSERT_EQUAL(op->qp_type, IBV_QPT_XRC_RECV);
	CU_ASSERT_PTR_EQUAL(op->qp_context, &oa);

	/* one QP: what one handle sets, the other reads */
	a = rcv_attr(IBV_QPS_INIT, 7);
	CU_ASSERT_EQUAL(ibv_modify_qp(rqp, &a, RCV_INIT_MASK), 0);
	CU_ASSERT_EQUAL(ibv_query_qp(op, &q, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, &qi), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_INIT);
	CU_ASSERT_EQUAL(q.qp_access_flags, a.qp_access_flags);
	CU_ASSERT_EQUAL(qi.qp_type, IBV_QPT_XRC_RECV);

	/* refusals */
	oa.xrcd = priv;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_qp(ctx, &oa));      /* another domain */
	CU_ASSERT_EQUAL(errno, EINVAL);
	oa.xrcd = x2;
	oa.qp_type = IBV_QPT_RC;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_qp(ctx, &oa));      /* wrong type */
	CU_ASSERT_EQUAL(errno, EINVAL);
	oa.qp_type = IBV_QPT_XRC_RECV;
	oa.comp_mask &= ~IBV_QP_OPEN_ATTR_NUM;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_qp(ctx, &oa));      /* no number */
	CU_ASSERT_EQUAL(errno, EINVAL);
	oa.comp_mask |= IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_RESERVED;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_qp(ctx, &oa));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	oa.comp_mask &= ~IBV_QP_OPEN_ATTR_RESERVED;
	oa.qp_num = 0xffffff;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_qp(ctx, &oa));      /* no such QP */
	CU_ASSERT_EQUAL(errno, EINVAL);

	/* the creator's handle goes, the QP stays with the opened one */
	oa.qp_num = rqp->qp_num;
	CU_ASSERT_EQUAL(ibv_destroy_qp(rqp), 0);
	CU_ASSERT_EQUAL(ibv_query_qp(op, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_INIT);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x2), EBUSY);
	CU_ASSERT_EQUAL(ibv_destroy_qp(op), 0);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_qp(ctx, &oa));      /* gone with the last */
	CU_ASSERT_EQUAL(errno, EINVAL);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x2), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(priv), 0);
	close(fd);
}

/* Every opcode, by ibv_post_send() and by the ibv_qp_ex builder. */
static void test_modern_datapath(void)
{
	struct ibv_xrcd *x = modern_xrcd(-1, O_CREAT);
	struct ibv_qp *sqp, *sqpx, *rqp, *rqp2;
	struct ibv_srq *srq;
	struct side s;
	uint32_t srqn;

	CU_ASSERT_FATAL(x != NULL && side_make(&s));
	srq = modern_srq(&s, x);
	sqp = modern_send_qp(&s, false);
	sqpx = modern_send_qp(&s, true);
	rqp = modern_rcv_qp(x);
	rqp2 = modern_rcv_qp(x);
	CU_ASSERT_FATAL(srq && sqp && sqpx && rqp && rqp2);
	CU_ASSERT_EQUAL_FATAL(ibv_get_srq_num(srq, &srqn), 0);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_modern(rqp, sqp->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_modern(rqp2, sqpx->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(send_connect(sqp, rqp->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(send_connect(sqpx, rqp2->qp_num), 0);
	run_all_opcodes(&s, sqp, POST_WR, srq, srqn, rqp->qp_num);
	/* the same SRQ through another receive QP of the domain */
	run_all_opcodes(&s, sqpx, POST_QP_EX, srq, srqn, rqp2->qp_num);

	drain_events(ctx);
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqpx), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(rqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(rqp2), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), 0);
	side_free(&s);
}

/* An SRQ number of no SRQ: the request is refused (NAK), the send QP errs. */
static void test_modern_bad_srqn(void)
{
	struct ibv_xrcd *x = modern_xrcd(-1, O_CREAT);
	struct ibv_xrcd *y = modern_xrcd(-1, O_CREAT);
	struct ibv_qp *sqp, *rqp;
	struct ibv_srq *other;
	struct ibv_wc wc;
	struct side s;
	uint32_t n;
	struct op o = { IBV_WR_SEND, 16, 0, 0, 0, 0, 0 };

	CU_ASSERT_FATAL(x && y && side_make(&s));
	other = modern_srq(&s, y);      /* of another domain */
	sqp = modern_send_qp(&s, false);
	rqp = modern_rcv_qp(x);
	CU_ASSERT_FATAL(other && sqp && rqp);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_modern(rqp, sqp->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(send_connect(sqp, rqp->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(ibv_get_srq_num(other, &n), 0);
	CU_ASSERT_EQUAL_FATAL(post(sqp, POST_WR, &s, n, &o), 0);
	CU_ASSERT_EQUAL_FATAL(poll_one(s.scq, &wc), 1);
	CU_ASSERT_EQUAL(wc.status, IBV_WC_REM_INV_REQ_ERR);
	drain_events(ctx);
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(rqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(other), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(y), 0);
	side_free(&s);
}

/* ============== equivalence of the two APIs (one process) ============== */

/*
 * Legacy-made receive QP, used through the modern API: opened by number
 * with ibv_open_qp() on the same file, modified and queried either way,
 * reached by a modern send QP addressing a modern SRQ.
 */
static void test_equiv_legacy_made(void)
{
	char path[128];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, fd, O_CREAT);
	struct ibv_xrcd *x = modern_xrcd(fd, 0);
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
			     IBV_QP_OPEN_ATTR_TYPE,
		.qp_type = IBV_QPT_XRC_RECV,
	};
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a, q;
	struct ibv_qp *op, *sqp;
	struct ibv_srq *srq;
	struct side s;
	uint32_t qpn, srqn;

	CU_ASSERT_FATAL(d && x && side_make(&s));
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	oa.qp_num = qpn;
	oa.xrcd = x;
	op = ibv_open_qp(ctx, &oa);
	CU_ASSERT_FATAL(op != NULL);
	srq = modern_srq(&s, x);
	sqp = modern_send_qp(&s, true);
	CU_ASSERT_FATAL(srq && sqp);
	CU_ASSERT_EQUAL_FATAL(ibv_get_srq_num(srq, &srqn), 0);

	/* legacy modify, modern query; modern modify, legacy query */
	a = rcv_attr(IBV_QPS_INIT, sqp->qp_num);
	CU_ASSERT_EQUAL(ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_INIT_MASK), 0);
	CU_ASSERT_EQUAL(ibv_query_qp(op, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_INIT);
	a = rcv_attr(IBV_QPS_RTR, sqp->qp_num);
	CU_ASSERT_EQUAL(ibv_modify_qp(op, &a, RCV_RTR_MASK), 0);
	memset(&q, 0, sizeof(q));
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, RCV_INIT_MASK | RCV_RTR_MASK,
					     NULL), 0);
	check_rtr_attrs(&q, sqp->qp_num);

	CU_ASSERT_EQUAL_FATAL(send_connect(sqp, qpn), 0);
	run_all_opcodes(&s, sqp, POST_QP_EX, srq, srqn, qpn);

	/* the opened handle goes; the legacy registration keeps the QP */
	drain_events(ctx);
	CU_ASSERT_EQUAL(ibv_destroy_qp(op), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	run_all_opcodes(&s, sqp, POST_WR, srq, srqn, qpn);
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_PTR_NULL(ibv_open_qp(ctx, &oa));

	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
	side_free(&s);
	close(fd);
}

/*
 * Modern-made receive QP, used through the legacy API: registered,
 * modified and queried by number from a legacy domain on the same file,
 * reached by an IBV_QPT_XRC send QP addressing a legacy SRQ; it outlives
 * the creator's handle while the legacy registration holds it.
 */
static void test_equiv_modern_made(void)
{
	char path[128];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrcd *x = modern_xrcd(fd, O_CREAT);
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, fd, 0);
	struct ibv_qp_attr a, q;
	struct ibv_qp *rqp, *sqp;
	struct ibv_srq *srq;
	struct side s;
	uint32_t qpn;

	CU_ASSERT_FATAL(d && x && side_make(&s));
	rqp = modern_rcv_qp(x);
	srq = legacy_srq(&s, d);
	sqp = legacy_send_qp(&s, d);
	CU_ASSERT_FATAL(rqp && srq && sqp);
	qpn = rqp->qp_num;

	a = rcv_attr(IBV_QPS_INIT, sqp->qp_num);
	CU_ASSERT_EQUAL(ibv_modify_qp(rqp, &a, RCV_INIT_MASK), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_INIT);
	a = rcv_attr(IBV_QPS_RTR, sqp->qp_num);
	CU_ASSERT_EQUAL(ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_RTR_MASK), 0);
	CU_ASSERT_EQUAL(ibv_query_qp(rqp, &q, IBV_QP_STATE | IBV_QP_DEST_QPN, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_RTR);
	CU_ASSERT_EQUAL(q.dest_qp_num, sqp->qp_num);
	CU_ASSERT_EQUAL(rqp->state, IBV_QPS_RTR);

	CU_ASSERT_EQUAL_FATAL(send_connect(sqp, qpn), 0);
	run_all_opcodes(&s, sqp, POST_LEGACY_WR, srq, srq->xrc_srq_num, qpn);

	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d, qpn), 0);
	drain_events(ctx);
	CU_ASSERT_EQUAL(ibv_destroy_qp(rqp), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	run_all_opcodes(&s, sqp, POST_LEGACY_WR, srq, srq->xrc_srq_num, qpn);
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), EINVAL);
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
	CU_ASSERT_EQUAL(ibv_close_xrcd(x), 0);
	side_free(&s);
	close(fd);
}

static int add_suites(void)
{
	CU_pSuite s;

	s = CU_add_suite("modern XRC API", xrc_suite_init, NULL);
	if (!s ||
	    !CU_add_test(s, "ibv_open_xrcd / ibv_close_xrcd", test_modern_xrcd) ||
	    !CU_add_test(s, "ibv_create_srq_ex XRC, ibv_get_srq_num", test_modern_srq) ||
	    !CU_add_test(s, "XRC send and receive QPs, refusals", test_modern_qps) ||
	    !CU_add_test(s, "ibv_open_qp", test_modern_open_qp) ||
	    !CU_add_test(s, "every opcode: post_send and wr_set_xrc_srqn",
			 test_modern_datapath) ||
	    !CU_add_test(s, "an SRQ of another domain: NAK", test_modern_bad_srqn))
		return -1;
	s = CU_add_suite("legacy/modern equivalence", NULL, xrc_suite_clean);
	if (!s ||
	    !CU_add_test(s, "legacy-made receive QP through the modern API",
			 test_equiv_legacy_made) ||
	    !CU_add_test(s, "modern-made receive QP through the legacy API",
			 test_equiv_modern_made))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
