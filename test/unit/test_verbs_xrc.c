/*
 * XRC through the public API of build/.../libibverbs.so.1, both as an
 * rdma-core 44 program reaches it (ibv_open_xrcd, ibv_create_srq_ex,
 * ibv_create_qp_ex, ibv_open_qp, the ibv_qp_ex builder) and as an OFED 1.x
 * program does, compiled against softib's own <infiniband/verbs.h> (the
 * legacy calls, init_attr.xrc_domain, IBV_QPT_XRC, srq->xrc_srq_num,
 * wr.xrc_remote_srq_num, OFED-style events):
 *
 *   - every sentence of seed 000 (ibv_query_xrc_rcv_qp(3));
 *   - the legacy calls, their errors, and their lifetime rules;
 *   - the modern calls and their refusals;
 *   - every opcode of seed 004's XRC column, through each API;
 *   - equivalence: a receive QP made with one API is used through the
 *     other, in one process and across processes;
 *   - lifetime across processes (fork): a receive QP registered by two
 *     processes survives its creator's exit and goes with the last
 *     registration; its events reach every registered process.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* softib's header: rdma-core's, plus the legacy OFED XRC API */
#include "include/infiniband/verbs.h"

#include "cu_run.h"

#define CANARY 0xa5
#define BUF 8192
#define RECV_LEN 512
#define TIMEOUT_MS 5000

static struct ibv_device **dev_list;
static struct ibv_context *ctx;
static struct ibv_port_attr port_attr;
static char dir[] = "/tmp/softib-xrc-test-XXXXXX";
static int file_seq;

static struct ibv_context *open_ctx(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c = l && l[0] ? ibv_open_device(l[0]) : NULL;

	ibv_free_device_list(l);
	return c;
}

static bool async_nonblock(struct ibv_context *c);

static int suite_init(void)
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

static int suite_clean(void)
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
static int domain_file(char *path, size_t len)
{
	snprintf(path, len, "%s/domain.%d", dir, file_seq++);
	return open(path, O_RDWR | O_CREAT, 0600);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One completion within TIMEOUT_MS: 1, or 0 on timeout, -1 on error. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	uint64_t end = now_ms() + TIMEOUT_MS;

	do {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
	} while (now_ms() < end);
	return 0;
}

/* ---- QP attributes ---- */

#define SEND_INIT_MASK (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | \
			IBV_QP_ACCESS_FLAGS)
#define SEND_RTR_MASK (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | \
		       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
#define SEND_RTS_MASK (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | \
		       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | \
		       IBV_QP_MAX_QP_RD_ATOMIC)
#define RCV_INIT_MASK SEND_INIT_MASK
#define RCV_RTR_MASK (SEND_RTR_MASK | IBV_QP_MAX_DEST_RD_ATOMIC | \
		      IBV_QP_MIN_RNR_TIMER)

static struct ibv_ah_attr av(void)
{
	return (struct ibv_ah_attr){ .dlid = port_attr.lid, .sl = 3,
				     .port_num = 1 };
}

/* What the receive QP of the tests is given, step by step. */
static struct ibv_qp_attr rcv_attr(enum ibv_qp_state st, uint32_t src_qpn)
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

static int rcv_to_rtr_legacy(struct ibv_xrc_domain *d, uint32_t qpn,
			     uint32_t src_qpn)
{
	struct ibv_qp_attr a = rcv_attr(IBV_QPS_INIT, src_qpn);
	int rc = ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_INIT_MASK);

	a = rcv_attr(IBV_QPS_RTR, src_qpn);
	return rc ? rc : ibv_modify_xrc_rcv_qp(d, qpn, &a, RCV_RTR_MASK);
}

static int rcv_to_rtr_modern(struct ibv_qp *qp, uint32_t src_qpn)
{
	struct ibv_qp_attr a = rcv_attr(IBV_QPS_INIT, src_qpn);
	int rc = ibv_modify_qp(qp, &a, RCV_INIT_MASK);

	a = rcv_attr(IBV_QPS_RTR, src_qpn);
	return rc ? rc : ibv_modify_qp(qp, &a, RCV_RTR_MASK);
}

/* An XRC send QP to RTS toward the receive QP dest_qpn. */
static int send_connect(struct ibv_qp *qp, uint32_t dest_qpn)
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

struct side {
	struct ibv_pd *pd_s, *pd_r;     /* send QP's, SRQ's */
	struct ibv_cq *scq, *rcq;       /* send CQ, SRQ's CQ */
	uint8_t *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr;
};

static bool side_make(struct side *s)
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

static void side_free(struct side *s)
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
static int post_recvs(struct side *s, struct ibv_srq *srq, int n)
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
static struct ibv_qp *legacy_send_qp(struct side *s, struct ibv_xrc_domain *d)
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
static struct ibv_qp *modern_send_qp(struct side *s, bool ex)
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

static struct ibv_qp *modern_rcv_qp(struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = x,
	};

	return ibv_create_qp_ex(ctx, &ia);
}

static struct ibv_srq *modern_srq(struct side *s, struct ibv_xrcd *x)
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

static struct ibv_srq *legacy_srq(struct side *s, struct ibv_xrc_domain *d)
{
	struct ibv_srq_init_attr a = { .attr = { .max_wr = 16, .max_sge = 1 } };

	return ibv_create_xrc_srq(s->pd_r, d, s->rcq, &a);
}

static struct ibv_xrcd *modern_xrcd(int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd, .oflags = oflags,
	};

	return ibv_open_xrcd(ctx, &a);
}

/* ---- posting one operation through either interface ---- */

enum post_how { POST_WR, POST_LEGACY_WR, POST_QP_EX };

struct op {
	enum ibv_wr_opcode opcode;
	uint32_t len, soff, roff;   /* bytes, offsets in sbuf and rbuf */
	uint64_t compare_add, swap;
	uint32_t imm;
};

static int post(struct ibv_qp *qp, enum post_how how, struct side *s,
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
static void run_all_opcodes(struct side *s, struct ibv_qp *qp, enum post_how how,
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
static bool async_nonblock(struct ibv_context *c)
{
	int fl = fcntl(c->async_fd, F_GETFL);

	return fl >= 0 && fcntl(c->async_fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

/* Read and acknowledge every async event already queued. */
static void drain_events(struct ibv_context *c)
{
	struct ibv_async_event ev;

	while (ibv_get_async_event(c, &ev) == 0)
		ibv_ack_async_event(&ev);
}

/* The next async event of type `type` (others are acknowledged). */
static bool wait_event(struct ibv_context *c, unsigned type,
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

/* ================= seed 000: ibv_query_xrc_rcv_qp(3) ================= */

static void check_rtr_attrs(const struct ibv_qp_attr *q, uint32_t src_qpn)
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

/* ======================== the modern API ======================== */

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

/* ============== across processes (fork) ============== */

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

	s = CU_add_suite("seed 000: ibv_query_xrc_rcv_qp", suite_init, NULL);
	if (!s ||
	    !CU_add_test(s, "returns what modify set, and init_attr",
			 test_seed_query_returns_modified) ||
	    !CU_add_test(s, "attr_mask selects what is returned",
			 test_seed_attr_mask) ||
	    !CU_add_test(s, "qp_state as of each call", test_seed_state_changes) ||
	    !CU_add_test(s, "unknown QP numbers: EINVAL", test_seed_errors))
		return -1;
	s = CU_add_suite("legacy OFED XRC API", NULL, NULL);
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
	s = CU_add_suite("modern XRC API", NULL, NULL);
	if (!s ||
	    !CU_add_test(s, "ibv_open_xrcd / ibv_close_xrcd", test_modern_xrcd) ||
	    !CU_add_test(s, "ibv_create_srq_ex XRC, ibv_get_srq_num", test_modern_srq) ||
	    !CU_add_test(s, "XRC send and receive QPs, refusals", test_modern_qps) ||
	    !CU_add_test(s, "ibv_open_qp", test_modern_open_qp) ||
	    !CU_add_test(s, "every opcode: post_send and wr_set_xrc_srqn",
			 test_modern_datapath) ||
	    !CU_add_test(s, "an SRQ of another domain: NAK", test_modern_bad_srqn))
		return -1;
	s = CU_add_suite("legacy/modern equivalence", NULL, NULL);
	if (!s ||
	    !CU_add_test(s, "legacy-made receive QP through the modern API",
			 test_equiv_legacy_made) ||
	    !CU_add_test(s, "modern-made receive QP through the legacy API",
			 test_equiv_modern_made))
		return -1;
	s = CU_add_suite("lifetime across processes", NULL, suite_clean);
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
