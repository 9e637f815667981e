/*
 * XRC lifetime across processes (fork): a receive QP registered by two
 * processes survives its creator's exit and goes with the last
 * registration; its events reach every registered process.
 */
#include "xrc_common.h"

/* A pipe pair between the test and one child, with bounded reads. */
struct link {
	int down[2], up[2];     /* parent -> child, child -> parent */
	pid_t pid;
};

static bool put(int fd, uint32_t v)
{
	return write(fd, &v, sizeof(v)) == sizeof(v);
}

static bool get(int fd, uint32_t *v)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, TIMEOUT_MS) == 1 && read(fd, v, sizeof(*v)) == sizeof(*v);
}

enum child_role {
	CHILD_CREATE_LEGACY,    /* make a receive QP, report it, exit on cue */
	CHILD_CREATE_MODERN,
	CHILD_REGISTER,         /* register qpn, report, exit on cue */
	CHILD_EVENT,            /* register qpn, report, await its event */
};

/*
 * The child side: its own context and domain on `path`.  Exits without
 * unregistering or destroying anything: exit is what ends its hold.
 */
static void child_main(struct link *l, enum child_role role, const char *path)
{
	struct ibv_context *c = open_ctx();
	int fd = open(path, O_RDWR);
	struct ibv_xrc_domain *d = c && fd >= 0 ? ibv_open_xrc_domain(c, fd, 0) : NULL;
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
	};
	struct ibv_xrcd *x = c ? ibv_open_xrcd(c, &xa) : NULL;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_init_attr_ex iax = { .qp_type = IBV_QPT_XRC_RECV,
					   .comp_mask = IBV_QP_INIT_ATTR_XRCD,
					   .xrcd = x };
	struct ibv_async_event ev;
	struct ibv_qp *qp;
	uint32_t qpn = 0, v;

	if (!d || !x)
		_exit(10);
	switch (role) {
	case CHILD_CREATE_LEGACY:
		memset(&ia, 0, sizeof(ia));
		ia.xrc_domain = d;
		if (ibv_create_xrc_rcv_qp(&ia, &qpn))
			_exit(11);
		put(l->up[1], qpn);
		break;
	case CHILD_CREATE_MODERN:
		qp = ibv_create_qp_ex(c, &iax);
		if (!qp)
			_exit(12);
		put(l->up[1], qp->qp_num);
		break;
	case CHILD_REGISTER:
	case CHILD_EVENT:
		if (!get(l->down[0], &qpn) || ibv_reg_xrc_rcv_qp(d, qpn))
			_exit(13);
		put(l->up[1], 1);
		if (role == CHILD_REGISTER)
			break;
		v = async_nonblock(c) &&
		    wait_event(c, IBV_EVENT_COMM_EST | IBV_XRC_QP_EVENT_FLAG, &ev) &&
		    ev.element.xrc_qp_num == qpn;
		if (v)
			ibv_ack_async_event(&ev);
		put(l->up[1], v);
		break;
	}
	get(l->down[0], &v);    /* the cue to exit */
	_exit(0);
}

static bool child_start(struct link *l, enum child_role role, const char *path)
{
	if (pipe(l->down) || pipe(l->up))
		return false;
	fflush(stdout);
	l->pid = fork();
	if (l->pid < 0)
		return false;
	if (l->pid == 0) {
		close(l->down[1]);
		close(l->up[0]);
		child_main(l, role, path);
	}
	close(l->down[0]);
	close(l->up[1]);
	return true;
}

/* Cue the child to exit; its status. */
static int child_end(struct link *l)
{
	int st = -1;

	put(l->down[1], 0);
	close(l->down[1]);
	close(l->up[0]);
	if (waitpid(l->pid, &st, 0) != l->pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Poll (up to TIMEOUT_MS) until qpn is no longer a receive QP of d. */
static bool gone_soon(struct ibv_xrc_domain *d, uint32_t qpn)
{
	uint64_t end = now_ms() + TIMEOUT_MS;
	struct ibv_qp_attr q;

	do {
		if (ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL) == EINVAL)
			return true;
		usleep(10000);
	} while (now_ms() < end);
	return false;
}

/*
 * A receive QP made by a child (with either API) and registered by this
 * process survives the child's exit, stays usable, and goes when this
 * process, the last holder, unregisters.
 */
static void survives_creator(enum child_role role)
{
	char path[128];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, fd, O_CREAT);
	struct ibv_qp_attr q;
	struct ibv_srq *srq;
	struct ibv_qp *sqp;
	struct link l;
	struct side s;
	uint32_t qpn;

	CU_ASSERT_FATAL(d && side_make(&s));
	CU_ASSERT_FATAL(child_start(&l, role, path));
	CU_ASSERT_FATAL(get(l.up[0], &qpn));
	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_EQUAL(child_end(&l), 0);

	/*
	 * The creator is gone.  Its hold goes when a survivor notices the
	 * death: through the pidfd at once, or, for a peer that came and went
	 * between two of the HCA's 200 ms membership scans, at the next scan.
	 * Past that, the QP still stands on this process's registration.
	 */
	usleep(600000);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(q.qp_state, IBV_QPS_RESET);
	srq = legacy_srq(&s, d);
	sqp = legacy_send_qp(&s, d);
	CU_ASSERT_FATAL(srq && sqp);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_legacy(d, qpn, sqp->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(send_connect(sqp, qpn), 0);
	run_all_opcodes(&s, sqp, POST_LEGACY_WR, srq, srq->xrc_srq_num, qpn);

	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT(gone_soon(d, qpn));
	CU_ASSERT_EQUAL(ibv_reg_xrc_rcv_qp(d, qpn), EINVAL);
	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
	side_free(&s);
	drain_events(ctx);
	close(fd);
}

static void test_fork_survives_legacy_creator(void)
{
	survives_creator(CHILD_CREATE_LEGACY);
}

static void test_fork_survives_modern_creator(void)
{
	survives_creator(CHILD_CREATE_MODERN);
}

/*
 * This process creates a receive QP, a child registers it, this process
 * unregisters: the child's registration keeps it.  The child exits
 * without unregistering: the QP goes with it, the last holder.
 */
static void test_fork_last_registration_exits(void)
{
	char path[128];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, fd, O_CREAT);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr q;
	struct link l;
	uint32_t qpn, v;

	CU_ASSERT_FATAL(d != NULL);
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	CU_ASSERT_FATAL(child_start(&l, CHILD_REGISTER, path));
	CU_ASSERT(put(l.down[1], qpn));
	CU_ASSERT(get(l.up[0], &v));
	CU_ASSERT_EQUAL(ibv_unreg_xrc_rcv_qp(d, qpn), 0);
	CU_ASSERT_EQUAL(ibv_query_xrc_rcv_qp(d, qpn, &q, IBV_QP_STATE, NULL), 0);
	CU_ASSERT_EQUAL(child_end(&l), 0);
	CU_ASSERT(gone_soon(d, qpn));
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
	close(fd);
}

/*
 * "its events reach every registered process": the first message into
 * the receive QP raises communication-established in this process (its
 * creator) and in a child that registered it, each as OFED reports it.
 */
static void test_fork_events_reach_every_registrant(void)
{
	char path[128];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrc_domain *d = ibv_open_xrc_domain(ctx, fd, O_CREAT);
	struct ibv_qp_init_attr ia;
	struct ibv_async_event ev;
	struct ibv_srq *srq;
	struct ibv_qp *sqp;
	struct ibv_wc wc;
	struct link l;
	struct side s;
	uint32_t qpn, v = 0;
	struct op o = { IBV_WR_SEND, 64, 0, 0, 0, 0, 0 };

	drain_events(ctx);
	CU_ASSERT_FATAL(d && side_make(&s));
	memset(&ia, 0, sizeof(ia));
	ia.xrc_domain = d;
	CU_ASSERT_EQUAL_FATAL(ibv_create_xrc_rcv_qp(&ia, &qpn), 0);
	CU_ASSERT_FATAL(child_start(&l, CHILD_EVENT, path));
	CU_ASSERT(put(l.down[1], qpn));
	CU_ASSERT(get(l.up[0], &v));    /* registered */

	srq = legacy_srq(&s, d);
	sqp = legacy_send_qp(&s, d);
	CU_ASSERT_FATAL(srq && sqp);
	CU_ASSERT_EQUAL_FATAL(rcv_to_rtr_legacy(d, qpn, sqp->qp_num), 0);
	CU_ASSERT_EQUAL_FATAL(send_connect(sqp, qpn), 0);
	CU_ASSERT_EQUAL_FATAL(post_recvs(&s, srq, 1), 0);
	CU_ASSERT_EQUAL_FATAL(post(sqp, POST_LEGACY_WR, &s, srq->xrc_srq_num, &o), 0);
	CU_ASSERT_EQUAL(poll_one(s.scq, &wc), 1);
	CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(poll_one(s.rcq, &wc), 1);

	CU_ASSERT(wait_event(ctx, IBV_EVENT_COMM_EST | IBV_XRC_QP_EVENT_FLAG, &ev) &&
		  ev.element.xrc_qp_num == qpn);
	ibv_ack_async_event(&ev);
	v = 0;
	CU_ASSERT(get(l.up[0], &v) && v == 1);  /* the child's event */
	CU_ASSERT_EQUAL(child_end(&l), 0);

	CU_ASSERT_EQUAL(ibv_destroy_qp(sqp), 0);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_close_xrc_domain(d), 0);
	side_free(&s);
	close(fd);
}

static int add_suites(void)
{
	CU_pSuite s;

	s = CU_add_suite("lifetime across processes", xrc_suite_init, xrc_suite_clean);
	if (!s ||
	    !CU_add_test(s, "survives its (legacy) creator's exit",
			 test_fork_survives_legacy_creator) ||
	    !CU_add_test(s, "survives its (modern) creator's exit",
			 test_fork_survives_modern_creator) ||
	    !CU_add_test(s, "goes when the last registrant exits",
			 test_fork_last_registration_exits) ||
	    !CU_add_test(s, "events reach every registered process",
			 test_fork_events_reach_every_registrant))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
