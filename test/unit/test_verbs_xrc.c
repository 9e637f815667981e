/*
 * XRC through the public API of build/.../libibverbs.so.1 as an OFED 1.x
 * program reaches it, compiled against softib's own <infiniband/verbs.h>
 * (the legacy calls, init_attr.xrc_domain, IBV_QPT_XRC, srq->xrc_srq_num,
 * wr.xrc_remote_srq_num, OFED-style events):
 *
 *   - every sentence of seed 000 (ibv_query_xrc_rcv_qp(3));
 *   - the legacy calls, their errors, and their lifetime rules;
 *   - every opcode of seed 004's XRC column through the legacy API.
 *
 * The modern rdma-core 44 API and the equivalence of the two are in
 * test_verbs_xrc_modern.c; lifetime across processes (fork) in
 * test_verbs_xrc_fork.c; what they share in xrc_common.c.
 */

#include "xrc_common.h"

/*
 * "ibv_query_xrc_rcv_qp() gets the attributes specified in attr_mask for
 * the XRC receive QP with the number xrc_qp_num which is associated with
 * the XRC domain xrc_domain and returns them through the pointers attr and
 * init_attr."  And: "Attribute values are valid if they have been set
 * using ibv_modify_xrc_rcv_qp()."  "returns 0 on success".
 */
static void test_seed_query_returns_modified(void)
{
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	struct ibv_qp_init_attr ia, qi;
	struct ibv_qp_attr a, q;
	uint32_t qpn;

	CU_ASSERT_FATAL(d != NULL);
	CU_ASSERT_PTR_EQUAL(d->context, ctx);
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	CU_ASSERT(qpn != 0 && qpn <= 0xffffff);

	a = rcv_attr(IBV_QPS_INIT, 0x123);
	CU_ASSERT_EQUAL(ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_INIT_MASK), 0);
	memset(&q, 0, sizeof(q));
	memset(&qi, CANARY, sizeof(qi));
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, RCV_INIT_MASK, &qi), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_INIT);
	CU_ASSERT_EQUAL(q.pkey_index, 0);
	CU_ASSERT_EQUAL(q.port_num, 1);
	CU_ASSERT_EQUAL(q.qp_access_flags, a.qp_access_flags);
	/* init_attr: the QP's type, its domain, no queues of its own */
	CU_ASSERT_EQUAL(qi.qp_type, IBV_QPT_XRC_RECV);
	CU_ASSERT_PTR_EQUAL(qi.xrc_domain, d);
	CU_ASSERT_PTR_NULL(qi.send_cq);
	CU_ASSERT_PTR_NULL(qi.recv_cq);
	CU_ASSERT_PTR_NULL(qi.srq);
	CU_ASSERT_EQUAL(qi.cap.max_send_wr, 0);
	CU_ASSERT_EQUAL(qi.cap.max_recv_wr, 0);

	a = rcv_attr(IBV_QPS_RTR, 0x123);
	CU_ASSERT_EQUAL(ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_RTR_MASK), 0);
	memset(&q, 0, sizeof(q));
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q,
					     RCV_INIT_MASK | RCV_RTR_MASK, &qi), 0);
	check_rtr_attrs(&q, 0x123);
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
}

/*
 * "The argument attr_mask is a hint that specifies the minimum list of
 * attributes to retrieve.  Some InfiniBand devices may return extra
 * attributes not requested."  softib returns exactly the ones asked for
 * (sq_draining with the state): what the mask selects is right, the rest
 * of *attr is left as it was.
 */
static void test_seed_attr_mask(void)
{
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr q, canary;
	struct {
		int mask;
		size_t off, len;
	} one[] = {
#define ONE(m, f) { m, offsetof(struct ibv_qp_attr, f), sizeof(q.f) }
		ONE(IBV_QP_STATE, qp_state),
		ONE(IBV_QP_PKEY_INDEX, pkey_index),
		ONE(IBV_QP_PORT, port_num),
		ONE(IBV_QP_ACCESS_FLAGS, qp_access_flags),
		ONE(IBV_QP_AV, ah_attr),
		ONE(IBV_QP_PATH_MTU, path_mtu),
		ONE(IBV_QP_DEST_QPN, dest_qp_num),
		ONE(IBV_QP_RQ_PSN, rq_psn),
		ONE(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic),
		ONE(IBV_QP_MIN_RNR_TIMER, min_rnr_timer),
#undef ONE
	};
	struct ibv_qp_attr want = rcv_attr(IBV_QPS_RTR, 0x321);
	uint32_t qpn;

	CU_ASSERT_FATAL(d != NULL);
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_legacy(d, qpn, 0x321), 0);
	memset(&canary, CANARY, sizeof(canary));

	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
		memset(&q, CANARY, sizeof(q));
		CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, one[i].mask, NULL), 0);
		if (one[i].mask == IBV_QP_STATE) {
			/* sq_draining comes with the state (valid in SQD) */
			CU_ASSERT_EQUAL(q.sq_draining, 0);
			q.sq_draining = CANARY;
		}
		/* the selected attribute is the one modify set */
		CU_ASSERT(memcmp((char *)&q + one[i].off, (char *)&want + one[i].off,
				 one[i].len) == 0);
		/* the bytes before and after it are untouched */
		CU_ASSERT(memcmp(&q, &canary, one[i].off) == 0);
		CU_ASSERT(memcmp((char *)&q + one[i].off + one[i].len,
				 (char *)&canary + one[i].off + one[i].len,
				 sizeof(q) - one[i].off - one[i].len) == 0);
	}
	/* an empty mask retrieves nothing, and is no error */
	memset(&q, CANARY, sizeof(q));
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, 0, NULL), 0);
	CU_ASSERT(memcmp(&q, &canary, sizeof(q)) == 0);
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
}

/*
 * "The exact list of valid attributes depends on the QP state."  And
 * "Multiple calls to ibv_query_xrc_rcv_qp() may yield some differences in
 * the values returned for ... qp_state": each call reports the state the
 * QP is in at that moment.
 */
static void test_seed_state_changes(void)
{
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a, q;
	uint32_t qpn;
	const enum ibv_qp_state walk[] = { IBV_QPS_ERR, IBV_QPS_RESET };

	CU_ASSERT_FATAL(d != NULL);
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_RESET);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_legacy(d, qpn, 0x55), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_RTR);
	/* "The QP need not be brought to RTS"; it may be */
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 1, .timeout = 14 };
	CU_ASSERT_EQUAL(ibv_modify_xrc_rcv_qp(d, qpn, &a, IBV_QP_STATE |
					      IBV_QP_SQ_PSN | IBV_QP_TIMEOUT), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_RTS);
	for (size_t i = 0; i < sizeof(walk) / sizeof(walk[0]); i++) {
		a.qp_state = walk[i];
		CU_ASSERT_EQUAL(ibv_modify_xrc_rcv_qp(d, qpn, &a, IBV_QP_STATE), 0);
		CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
		CU_ASSERT_EQUAL(q.qp_state, walk[i]);
	}
	/* a transition the state machine refuses leaves the state alone */
	a = rcv_attr(IBV_QPS_RTR, 0x55);
	CU_ASSERT_EQUAL(ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_RTR_MASK), EINVAL);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_RESET);
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
}

/*
 * "returns ... the value of errno on failure (which indicates the failure
 * reason)": a number that names no XRC receive QP of the domain — none at
 * all, an RC QP, a receive QP of another domain, one destroyed — is
 * EINVAL, for query as for the other by-number calls.
 */
static void test_seed_errors(void)
{
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	struct ibv_xrc_domain *other = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr q;
	struct ibv_qp *rc;
	uint32_t qpn, other_qpn, bad[4];

	CU_ASSERT_FATAL(d && other && pd && cq);
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = other;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &other_qpn), 0);
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	rc = ibv_create_qp(pd, &ia);
	CU_ASSERT_FATAL(rc != NULL);

	bad[0] = 0xffffff;              /* no QP */
	bad[1] = rc->qp_num;            /* not an XRC receive QP */
	bad[2] = other_qpn;             /* another domain's */
	bad[3] = qpn ^ 0x800000;        /* same index, another generation */
	for (int i = 0; i < 4; i++) {
		struct ibv_qp_attr a = rcv_attr(IBV_QPS_INIT, 1);

		CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, bad[i], &q, IBV_QP_STATE, NULL),
				EINVAL);
		CU_ASSERT_EQUAL(ibv_modify_xrc_rcv_qp(d, bad[i], &a, RCV_INIT_MASK),
				EINVAL);
		CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d, bad[i]), EINVAL);
		CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, bad[i]), EINVAL);
	}
	/* and missing arguments */
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, NULL, IBV_QP_STATE, NULL), EINVAL);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(NULL, qpn, &q, IBV_QP_STATE, NULL), EINVAL);

	/* destroyed with its only registration: unknown from then on */
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), EINVAL);
	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d, qpn), EINVAL);

	CU_ASSERT_EQUAL(ibv_destroy_qp(rc), 0);
	CU_ASSERT_EQUAL(ibv_destroy_cq(cq), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(pd), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(other), 0); /* drops other_qpn */
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
}

/* ======================== the legacy API ======================== */

/*
 * One file, one domain: a second open of the file reaches the first's
 * receive QPs; O_CREAT | O_EXCL refuses a file that has one; without
 * O_CREAT a file with none is refused; a private domain is apart.
 */
static void test_legacy_domains(void)
{
	char path[128], path2[128];
	int fd = domain_file(path, sizeof(path));
	int fd2 = domain_file(path2, sizeof(path2));
	struct ibv_xrc_domain *d1, *d2, *priv;
	struct ibv_qp_init_attr ia;
	uint32_t qpn;

	CU_ASSERT_FATAL(fd >= 0 && fd2 >= 0);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_xrc_domain(ctx, fd2, 0));
	CU_ASSERT_EQUAL(errno, EINVAL);
	d1 = ibv_open_xrc_domain(ctx, fd, O_CREAT | O_EXCL);
	CU_ASSERT_FATAL(d1 != NULL);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_xrc_domain(ctx, fd, O_CREAT | O_EXCL));
	CU_ASSERT_EQUAL(errno, EEXIST);
	d2 = ibv_open_xrc_domain(ctx, fd, 0);
	priv = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	CU_ASSERT_FATAL(d2 && priv);
	CU_ASSERT(d1->handle != d2->handle);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_xrc_domain(NULL, fd, O_CREAT));
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_xrc_domain(ctx, 1000, O_CREAT));
	CU_ASSERT_EQUAL(errno, EBADF);

	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d1;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d2, qpn), 0);
	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(priv, qpn), EINVAL);

	/* d1's close ends its registration; d2's keeps the QP */
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d1), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d2, qpn, &(struct ibv_qp_attr){ 0 },
					     IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d2), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(priv), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(NULL), EINVAL);

	/* the last close destroyed the domain: the file has none again */
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_open_xrc_domain(ctx, fd, 0));
	CU_ASSERT_EQUAL(errno, EINVAL);
	close(fd);
	close(fd2);
}

/*
 * ibv_create_xrc_srq(): srq->xrc_srq_num is the SRQ number; the domain
 * cannot close while the SRQ lives; arguments are checked.
 */
static void test_legacy_srq(void)
{
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	struct ibv_srq_init_attr a = { .srq_context = &a,
				       .attr = { .max_wr = 10, .max_sge = 1 } };
	struct ibv_srq_attr sa;
	struct side s;
	struct ibv_srq *srq;
	uint32_t num = 0;

	CU_ASSERT_FATAL(d != NULL && side_make(&s));
	srq = ibv_create_xrc_srq(s.pd_r, d, s.rcq, &a);
	CU_ASSERT_FATAL(srq != NULL);
	CU_ASSERT(a.attr.max_wr >= 10);
	CU_ASSERT_PTR_EQUAL(srq->srq_context, &a);
	CU_ASSERT_PTR_EQUAL(srq->pd, s.pd_r);
	CU_ASSERT_EQUAL(ibv_get_srq_num(srq, &num), 0);
	CU_ASSERT_EQUAL(srq->xrc_srq_num, num);
	CU_ASSERT_EQUAL(ibv_query_srq(srq, &sa), 0);
	CU_ASSERT(sa.max_wr >= 10);

	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), EBUSY);
	CU_ASSERT_EQUAL(ibv_destroy_cq(s.rcq), EBUSY);  /* the SRQ's CQ */
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_xrc_srq(s.pd_r, d, NULL, &a));
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_xrc_srq(s.pd_r, NULL, s.rcq, &a));
	CU_ASSERT_EQUAL(errno, EINVAL);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
	side_free(&s);
}

/*
 * OFED's registration rules: the creator is registered; a process is
 * registered once however often it asks; the QP lives until the last
 * registration goes, and unregistering what is not registered is EINVAL.
 */
static void test_legacy_registration(void)
{
	char path[128];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, fd, O_CREAT);
	struct ibv_xrc_domain *d2 = ibv_open_xrc_domain(ctx, fd, 0);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr q;
	uint32_t qpn = 0;

	CU_ASSERT_FATAL(d && d2);
	memset(&ia, 0, sizeof(ia));
	CU_ASSERT_EQUAL(ibv_create_xrc_rcv_qp(&ia, &qpn), EINVAL); /* no domain */
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL(ibv_create_xrc_rcv_qp(&ia, NULL), EINVAL);
	CU_ASSERT_EQUAL(ibv_create_xrc_rcv_qp(NULL, &qpn), EINVAL);
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);

	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d, qpn), 0);   /* already: no-op */
	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d2, qpn), 0);
	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d2, qpn), 0);
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);  /* the creator's */
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), EINVAL);
	/* d2's registration keeps it; d's calls by number still reach it */
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d2, qpn), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), EINVAL);
	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(NULL, qpn), EINVAL);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d2), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
	close(fd);
}

/*
 * An OFED program end to end: domain, XRC SRQ, receive QP, an
 * IBV_QPT_XRC send QP made with init_attr.xrc_domain, every opcode posted
 * with wr.xrc_remote_srq_num = srq->xrc_srq_num.
 */
static void test_legacy_datapath(void)
{
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	struct ibv_qp_init_attr ia;
	struct ibv_srq *srq;
	struct ibv_qp *sqp;
	struct side s;
	uint32_t qpn;

	CU_ASSERT_FATAL(d != NULL && side_make(&s));
	srq = legacy_srq(&s, d);
	sqp = legacy_send_qp(&s, d);
	CU_ASSERT_FATAL(srq && sqp);
	CU_ASSERT_EQUAL(sqp->qp_type, IBV_QPT_XRC);
	CU_ASSERT_PTR_NULL(sqp->srq);
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_legacy(d, qpn, sqp->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(send_connect(sqp, qpn), 0);
	run_all_opcodes(&s, sqp, POST_LEGACY_WR, srq, srq->xrc_srq_num, qpn);

	/* an XRC send QP has no receive queue */
	{
		struct ibv_recv_wr rw = { 0 }, *bad = NULL;

		CU_ASSERT_EQUAL(ibv_post_recv(sqp, &rw, &bad), EINVAL);
		CU_ASSERT_PTR_EQUAL(bad, &rw);
	}
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);   /* drops qpn */
	side_free(&s);
	drain_events(ctx);
}

/*
 * OFED's events of a receive QP: the type with IBV_XRC_QP_EVENT_FLAG, the
 * QP by number in element.xrc_qp_num.  The first message into a receive
 * QP in RTR raises "communication established".
 */
static void test_legacy_event(void)
{
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, -1, O_CREAT);
	struct ibv_qp_init_attr ia;
	struct ibv_async_event ev;
	struct ibv_srq *srq;
	struct ibv_qp *sqp;
	struct ibv_wc wc;
	struct side s;
	uint32_t qpn;
	struct op o = { IBV_WR_SEND, 16, 0, 0, 0, 0, 0 };

	drain_events(ctx);
	CU_ASSERT_FATAL(d != NULL && side_make(&s));
	srq = legacy_srq(&s, d);
	sqp = legacy_send_qp(&s, d);
	CU_ASSERT_FATAL(srq && sqp);
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_legacy(d, qpn, sqp->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(send_connect(sqp, qpn), 0);
	CU_ASSERT_EQUAL_FATAL(post_recvs(&s, srq, 1), 0);
	CU_ASSERT_EQUAL_FATAL(post(sqp, POST_LEGACY_WR, &s, srq->xrc_srq_num, &o), 0);
	CU_ASSERT_EQUAL(poll_one(s.scq, &wc), 1);
	CU_ASSERT_EQUAL(poll_one(s.rcq, &wc), 1);
	CU_ASSERT_FATAL(wait_event(ctx, IBV_EVENT_COMM_EST | IBV_XRC_QP_EVENT_FLAG,
				   &ev));
	CU_ASSERT(ev.event_type & IBV_XRC_QP_EVENT_FLAG);
	CU_ASSERT_EQUAL(ev.event_type ^ IBV_XRC_QP_EVENT_FLAG, IBV_EVENT_COMM_EST);
	CU_ASSERT_EQUAL(ev.element.xrc_qp_num, qpn);
	ibv_ack_async_event(&ev);
	/* unregistering does not wait for events named by number */
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
	side_free(&s);
}

static int add_suites(void)
{
	CU_pSuite s;

	s = CU_add_suite("seed 000: ibv_query_xrc_rcv_qp", xrc_suite_init, NULL);
	if (!s ||
	    !CU_add_test(s, "returns what modify set, and init_attr",
			 test_seed_query_returns_modified) ||
	    !CU_add_test(s, "attr_mask selects what is returned",
			 test_seed_attr_mask) ||
	    !CU_add_test(s, "qp_state as of each call", test_seed_state_changes) ||
	    !CU_add_test(s, "unknown QP numbers: EINVAL", test_seed_errors))
		return -1;
	s = CU_add_suite("legacy OFED XRC API", NULL, xrc_suite_clean);
	if (!s ||
	    !CU_add_test(s, "domains on files, O_CREAT/O_EXCL, private",
			 test_legacy_domains) ||
	    !CU_add_test(s, "XRC SRQ, xrc_srq_num, EBUSY", test_legacy_srq) ||
	    !CU_add_test(s, "registration rules", test_legacy_registration) ||
	    !CU_add_test(s, "every opcode: IBV_QPT_XRC, xrc_remote_srq_num",
			 test_legacy_datapath) ||
	    !CU_add_test(s, "events by number with IBV_XRC_QP_EVENT_FLAG",
			 test_legacy_event))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
