/* Helpers shared by the XRC unit programs (see xrc_common.h). */
#include "xrc_common.h"

static struct ibv_device **dev_list;
struct ibv_context *ctx;
struct ibv_port_attr port_attr;
static char dir[] = "/tmp/softib-xrc-test-XXXXXX";
static int file_seq;

struct ibv_context *open_ctx(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c = l && l[0] ? ibv_open_device(l[0]) : NULL;

	ibv_free_device_list(l);
	return c;
}

int xrc_suite_init(void)
{
	if (!mkdtemp(dir))
		return -1;
	dev_list = ibv_get_device_list(NULL);
	if (!dev_list || !dev_list[0])
		return -1;
	ctx = ibv_open_device(dev_list[0]);
	if (!ctx || ibv_query_port(ctx, 1, &port_attr) || !async_nonblock(ctx))
		return -1;
	/*
	 * A process that died unnoticed (a child of an earlier run) keeps its
	 * domains until some process's membership scan reclaims it, one HCA
	 * period (200 ms) after opening the device.  Were one of its domain
	 * files' inodes reused by this run's files, O_EXCL would find the
	 * stale domain: let the scan run first.
	 */
	usleep(400000);
	return 0;
}

int xrc_suite_clean(void)
{
	char cmd[64];
	int rc = ctx ? ibv_close_device(ctx) : 0;

	ibv_free_device_list(dev_list);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		rc = -1;
	return rc;
}

/* A new file for a domain; its path in *path (for other processes). */
int domain_file(char *path, size_t len)
{
	snprintf(path, len, "%s/domain.%d", dir, file_seq++);
	return open(path, O_RDWR | O_CREAT, 0600);
}

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One completion within TIMEOUT_MS: 1, or 0 on timeout, -1 on error. */
int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	uint64_t end = now_ms() + TIMEOUT_MS;

	do {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
	} while (now_ms() < end);
	return 0;
}

struct ibv_ah_attr av(void)
{
	return (struct ibv_ah_attr){ .dlid = port_attr.lid, .sl = 3,
				     .port_num = 1 };
}

/* What the receive QP of the tests is given, step by step. */
struct ibv_qp_attr rcv_attr(enum ibv_qp_state st, uint32_t src_qpn)
{
	struct ibv_qp_attr a = {
		.qp_state = st,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = src_qpn,
		.rq_psn = 0x456,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 12,
		.ah_attr = av(),
	};

	return a;
}

int rcv_to_rtr_legacy(struct ibv_xrc_domain *d, uint32_t qpn,
			     uint32_t src_qpn)
{
	struct ibv_qp_attr a = rcv_attr(IBV_QPS_INIT, src_qpn);
	int rc = ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_INIT_MASK);

	a = rcv_attr(IBV_QPS_RTR, src_qpn);
	return rc ? rc : ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_RTR_MASK);
}

int rcv_to_rtr_modern(struct ibv_qp *qp, uint32_t src_qpn)
{
	struct ibv_qp_attr a = rcv_attr(IBV_QPS_INIT, src_qpn);
	int rc = ibv_modify_qp(qp, &a, RCV_INIT_MASK);

	a = rcv_attr(IBV_QPS_RTR, src_qpn);
	return rc ? rc : ibv_modify_qp(qp, &a, RCV_RTR_MASK);
}

/* An XRC send QP to RTS toward the receive QP dest_qpn. */
int send_connect(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	int rc = ibv_modify_qp(qp, &a, SEND_INIT_MASK);

	if (rc)
		return rc;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .ah_attr = av(),
				  .path_mtu = IBV_MTU_1024,
				  .dest_qp_num = dest_qpn, .rq_psn = 0x789 };
	rc = ibv_modify_qp(qp, &a, SEND_RTR_MASK);
	if (rc)
		return rc;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 0x456,
				  .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				  .max_rd_atomic = 4 };
	return ibv_modify_qp(qp, &a, SEND_RTS_MASK);
}

/* ---- one process's XRC objects for a loopback ---- */

bool side_make(struct side *s)
{
	memset(s, 0, sizeof(*s));
	s->pd_s = ibv_alloc_pd(ctx);
	s->pd_r = ibv_alloc_pd(ctx);
	s->scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	s->rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	s->sbuf = aligned_alloc(64, BUF);
	s->rbuf = aligned_alloc(64, BUF);
	if (!s->pd_s || !s->pd_r || !s->scq || !s->rcq || !s->sbuf || !s->rbuf)
		return false;
	memset(s->sbuf, 0, BUF);
	memset(s->rbuf, 0, BUF);
	s->smr = ibv_reg_mr(s->pd_s, s->sbuf, BUF, IBV_ACCESS_LOCAL_WRITE);
	s->rmr = ibv_reg_mr(s->pd_r, s->rbuf, BUF, IBV_ACCESS_LOCAL_WRITE |
			    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			    IBV_ACCESS_REMOTE_ATOMIC);
	return s->smr && s->rmr;
}

void side_free(struct side *s)
{
	CU_ASSERT_EQUAL(ibv_dereg_mr(s->smr), 0);
	CU_ASSERT_EQUAL(ibv_dereg_mr(s->rmr), 0);
	CU_ASSERT_EQUAL(ibv_destroy_cq(s->scq), 0);
	CU_ASSERT_EQUAL(ibv_destroy_cq(s->rcq), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(s->pd_s), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(s->pd_r), 0);
	free(s->sbuf);
	free(s->rbuf);
}

/* Receive buffers i = 0..n-1 at rbuf + i * RECV_LEN. */
int post_recvs(struct side *s, struct ibv_srq *srq, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)s->rbuf + i * RECV_LEN,
				       .length = RECV_LEN, .lkey = s->rmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;
		int rc = ibv_post_srq_recv(srq, &wr, &bad);

		if (rc)
			return rc;
	}
	return 0;
}

/* The legacy XRC send QP: IBV_QPT_XRC, the domain in init_attr. */
struct ibv_qp *legacy_send_qp(struct side *s, struct ibv_xrc_domain *d)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = s->scq;
	ia.recv_cq = s->scq;
	ia.cap.max_send_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.qp_type = IBV_QPT_XRC;
	ia.xrc_domain = d;
	return ibv_create_qp(s->pd_s, &ia);
}

/* The modern XRC send QP; with the ibv_qp_ex builder when ex. */
struct ibv_qp *modern_send_qp(struct side *s, bool ex)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = s->scq,
		.cap = { .max_send_wr = 16, .max_send_sge = 1 },
		.qp_type = IBV_QPT_XRC_SEND,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = s->pd_s,
	};

	if (ex) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_SEND |
				    IBV_QP_EX_WITH_SEND_WITH_IMM |
				    IBV_QP_EX_WITH_RDMA_WRITE |
				    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				    IBV_QP_EX_WITH_RDMA_READ |
				    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	}
	return ibv_create_qp_ex(ctx, &ia);
}

struct ibv_qp *modern_rcv_qp(struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = x,
	};

	return ibv_create_qp_ex(ctx, &ia);
}

struct ibv_srq *modern_srq(struct side *s, struct ibv_xrcd *x)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC,
		.pd = s->pd_r,
		.xrcd = x,
		.cq = s->rcq,
	};

	return ibv_create_srq_ex(ctx, &a);
}

struct ibv_srq *legacy_srq(struct side *s, struct ibv_xrc_domain *d)
{
	struct ibv_srq_init_attr a = { .attr = { .max_wr = 16, .max_sge = 1 } };

	return ibv_create_xrc_srq(s->pd_r, d, s->rcq, &a);
}

struct ibv_xrcd *modern_xrcd(int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd, .oflags = oflags,
	};

	return ibv_open_xrcd(ctx, &a);
}

/* ---- posting one operation through either interface ---- */

int post(struct ibv_qp *qp, enum post_how how, struct side *s,
		uint32_t srqn, const struct op *o)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->sbuf + o->soff,
			       .length = o->len, .lkey = s->smr->lkey };
	struct ibv_send_wr wr, *bad;
	uint64_t raddr = (uintptr_t)s->rbuf + o->roff;

	if (how == POST_QP_EX) {
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);

		if (!x)
			return EINVAL;
		ibv_wr_start(x);
		x->wr_id = o->opcode;
		x->wr_flags = IBV_SEND_SIGNALED;
		switch (o->opcode) {
		case IBV_WR_SEND:
			ibv_wr_send(x);
			break;
		case IBV_WR_SEND_WITH_IMM:
			ibv_wr_send_imm(x, htobe32(o->imm));
			break;
		case IBV_WR_RDMA_WRITE:
			ibv_wr_rdma_write(x, s->rmr->rkey, raddr);
			break;
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			ibv_wr_rdma_write_imm(x, s->rmr->rkey, raddr, htobe32(o->imm));
			break;
		case IBV_WR_RDMA_READ:
			ibv_wr_rdma_read(x, s->rmr->rkey, raddr);
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
			ibv_wr_atomic_cmp_swp(x, s->rmr->rkey, raddr,
					      o->compare_add, o->swap);
			break;
		default:
			ibv_wr_atomic_fetch_add(x, s->rmr->rkey, raddr,
						o->compare_add);
			break;
		}
		ibv_wr_set_xrc_srqn(x, srqn);
		ibv_wr_set_sge(x, sge.lkey, sge.addr, sge.length);
		return ibv_wr_complete(x);
	}
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = o->opcode;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = o->opcode;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htobe32(o->imm);
	if (how == POST_LEGACY_WR)
		wr.xrc_remote_srq_num = srqn;   /* OFED's name of the field */
	else
		wr.qp_type.xrc.remote_srqn = srqn;
	if (o->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	    o->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = s->rmr->rkey;
		wr.wr.atomic.compare_add = o->compare_add;
		wr.wr.atomic.swap = o->swap;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = s->rmr->rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

/*
 * Every opcode of seed 004's XRC column, through send QP qp toward the
 * receive QP rcv_qpn and the SRQ srqn: sends and writes with immediate
 * complete in the SRQ's CQ (rcq), every request in the send CQ, and the
 * bytes land where the opcode says.  srq holds RECV_LEN-byte receives at
 * rbuf + i * RECV_LEN.
 */
void run_all_opcodes(struct side *s, struct ibv_qp *qp, enum post_how how,
			    struct ibv_srq *srq, uint32_t srqn, uint32_t rcv_qpn)
{
	const uint32_t data = 4 * RECV_LEN, atom = 6 * RECV_LEN;
	struct ibv_wc wc;
	uint64_t v;

	CU_ASSERT_EQUAL_FATAL(post_recvs(s, srq, 3), 0);
	for (int i = 0; i < BUF; i++)
		s->sbuf[i] = (uint8_t)(i * 7 + how);
	memset(s->rbuf, 0, BUF);
	v = 40;
	memcpy(s->rbuf + atom, &v, 8);

	struct op ops[] = {
		{ IBV_WR_SEND, 300, 0, 0, 0, 0, 0 },
		{ IBV_WR_SEND_WITH_IMM, 200, 300, 0, 0, 0, 0x1234 },
		{ IBV_WR_RDMA_WRITE, 1000, 1000, data, 0, 0, 0 },
		{ IBV_WR_RDMA_WRITE_WITH_IMM, 24, 2000, data + 1000, 0, 0, 0x5678 },
		{ IBV_WR_RDMA_READ, 512, 3000, data, 0, 0, 0 },
		{ IBV_WR_ATOMIC_CMP_AND_SWP, 8, 4000, atom, 40, 77, 0 },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 4008, atom, 3, 0, 0 },
	};
	/* the READ brings back what the WRITE put there: fetch into zeros */
	memset(s->sbuf + 3000, 0, 512);

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		const struct op *o = &ops[i];

		CU_ASSERT_EQUAL_FATAL(post(qp, how, s, srqn, o), 0);
		CU_ASSERT_EQUAL_FATAL(poll_one(s->scq, &wc), 1);
		CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
		CU_ASSERT_EQUAL(wc.wr_id, o->opcode);
		if (o->opcode == IBV_WR_SEND || o->opcode == IBV_WR_SEND_WITH_IMM ||
		    o->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
			CU_ASSERT_EQUAL_FATAL(poll_one(s->rcq, &wc), 1);
			CU_ASSERT_EQUAL(wc.status, IBV_WC_SUCCESS);
			CU_ASSERT_EQUAL(wc.qp_num, rcv_qpn);
			CU_ASSERT_EQUAL(wc.opcode,
					o->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ?
					IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV);
			if (o->opcode != IBV_WR_SEND) {
				CU_ASSERT(wc.wc_flags & IBV_WC_WITH_IMM);
				CU_ASSERT_EQUAL(be32toh(wc.imm_data), o->imm);
			}
			if (o->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
				CU_ASSERT_EQUAL(wc.byte_len, o->len);
				CU_ASSERT(memcmp(s->rbuf + (wc.wr_id - 100) * RECV_LEN,
						 s->sbuf + o->soff, o->len) == 0);
			}
		}
	}
	CU_ASSERT(memcmp(s->rbuf + data, s->sbuf + 1000, 1000) == 0);
	CU_ASSERT(memcmp(s->rbuf + data + 1000, s->sbuf + 2000, 24) == 0);
	CU_ASSERT(memcmp(s->sbuf + 3000, s->sbuf + 1000, 512) == 0);
	memcpy(&v, s->sbuf + 4000, 8);
	CU_ASSERT_EQUAL(v, 40);            /* compare-swap's original */
	memcpy(&v, s->sbuf + 4008, 8);
	CU_ASSERT_EQUAL(v, 77);            /* fetch-add's original */
	memcpy(&v, s->rbuf + atom, 8);
	CU_ASSERT_EQUAL(v, 80);
	CU_ASSERT_EQUAL(ibv_poll_cq(s->rcq, 1, &wc), 0);
}

/*
 * The async fd is made non-blocking: an event queued for an object
 * destroyed since is dropped inside ibv_get_async_event(), which would
 * otherwise block for the next one.
 */
bool async_nonblock(struct ibv_context *c)
{
	int fl = fcntl(c->async_fd, F_GETFL);

	return fl >= 0 && fcntl(c->async_fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

/* Read and acknowledge every async event already queued. */
void drain_events(struct ibv_context *c)
{
	struct ibv_async_event ev;

	while (ibv_get_async_event(c, &ev) == 0)
		ibv_ack_async_event(&ev);
}

/* The next async event of type `type` (others are acknowledged). */
bool wait_event(struct ibv_context *c, unsigned type,
		       struct ibv_async_event *out)
{
	uint64_t end = now_ms() + TIMEOUT_MS;
	struct pollfd p = { .fd = c->async_fd, .events = POLLIN };

	while (now_ms() < end) {
		if (poll(&p, 1, 100) != 1 || ibv_get_async_event(c, out))
			continue;
		if ((unsigned)out->event_type == type)
			return true;
		ibv_ack_async_event(out);
	}
	return false;
}

/* What ibv_query_xrc_rcv_qp must return for a receive QP in RTR. */
void check_rtr_attrs(const struct ibv_qp_attr *q, uint32_t src_qpn)
{
	struct ibv_qp_attr w = rcv_attr(IBV_QPS_RTR, src_qpn);

	CU_ASSERT_EQUAL(q->qp_state, IBV_QPS_RTR);
	CU_ASSERT_EQUAL(q->pkey_index, w.pkey_index);
	CU_ASSERT_EQUAL(q->port_num, w.port_num);
	CU_ASSERT_EQUAL(q->qp_access_flags, w.qp_access_flags);
	CU_ASSERT_EQUAL(q->path_mtu, w.path_mtu);
	CU_ASSERT_EQUAL(q->dest_qp_num, w.dest_qp_num);
	CU_ASSERT_EQUAL(q->rq_psn, w.rq_psn);
	CU_ASSERT_EQUAL(q->max_dest_rd_atomic, w.max_dest_rd_atomic);
	CU_ASSERT_EQUAL(q->min_rnr_timer, w.min_rnr_timer);
	CU_ASSERT_EQUAL(q->ah_attr.dlid, w.ah_attr.dlid);
	CU_ASSERT_EQUAL(q->ah_attr.sl, w.ah_attr.sl);
	CU_ASSERT_EQUAL(q->ah_attr.port_num, w.ah_attr.port_num);
}
