/*
 * fuzz_world.c: the fixed world of fuzz_packet (fuzz_world.h): one device
 * with SOFTIB_LINK=udp and its progress thread stopped, two PDs, a CQ, an
 * SRQ, an XRC domain and SRQ, the QPs of qp_def[] and the regions of
 * reg_def[] (each its own allocation, filled with a pattern whose image
 * check_untouched() compares); and what puts a QP back to its start.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_world.h"

const struct fuzz_reg_def reg_def[NREG] = {
	[R_FULL] = { .len = 16384, .iova = 0x10000,
		     .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC },
	[R_RDONLY] = { .len = 4096, .iova = 0x20000,
		       .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ },
	[R_LOCAL] = { .len = 32768, .access = IBV_ACCESS_LOCAL_WRITE },
	[R_OTHERPD] = { .len = 4096, .iova = 0x10000, .other_pd = true,
			.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC },
};

const struct fuzz_qp_def qp_def[NQP] = {
	/* timeout 0 (no timer) where replay must not depend on the clock;
	 * no infinite RNR retry (7) between two of our QPs: an RNR loop
	 * would be legitimate, and drain() takes endless traffic for a bug */
	[Q_RC_A] = { IBV_QPT_RC, Q_RC_B, false, 0, 7, 1 },
	[Q_RC_B] = { IBV_QPT_RC, Q_RC_A, false, 0, 7, 1 },
	[Q_UC_A] = { IBV_QPT_UC, Q_UC_B, false, 0, 0, 0 },
	[Q_UC_B] = { IBV_QPT_UC, Q_UC_A, false, 0, 0, 0 },
	[Q_UD_A] = { IBV_QPT_UD, -1, false, 0, 0, 0 },
	[Q_UD_B] = { IBV_QPT_UD, -1, false, 0, 0, 0 },
	[Q_SRQ_A] = { IBV_QPT_RC, Q_SRQ_B, false, 1, 7, 6 },
	[Q_SRQ_B] = { IBV_QPT_RC, Q_SRQ_A, true, 1, 7, 6 },
	[Q_XRC_INI] = { IBV_QPT_XRC_SEND, Q_XRC_TGT, false, 1, 1, 1 },
	[Q_XRC_TGT] = { IBV_QPT_XRC_RECV, Q_XRC_INI, false, 0, 0, 0 },
	[Q_LONELY] = { IBV_QPT_RC, -2, false, 0, 7, 7 },
};

struct fuzz_world F;

struct hca_ah fuzz_ah = { .port_num = 1 };
const struct hca_ah *const fuzz_ah_list[4] = { &fuzz_ah, &fuzz_ah, &fuzz_ah, &fuzz_ah };

static void die(const char *what)
{
	fprintf(stderr, "fuzz_packet: setup failed: %s (%s)\n", what, strerror(errno));
	abort();
}

static uint8_t pattern(int region, size_t i)
{
	return (uint8_t)(0xa5 ^ (region << 4) ^ (i * 7));
}

/*
 * The progress thread would read the socket and run timers behind the
 * harness's back; stopping it makes a run single-threaded. The device is
 * never put (released), so dev_free never joins it again.
 */
static void stop_progress(struct hca_dev *dev)
{
	uint64_t one = 1;

	if (!dev->progress_started)
		return;
	if (write(dev->stop_fd, &one, sizeof(one)) != sizeof(one))
		die("stop progress thread");
	pthread_join(dev->progress, NULL);
	dev->progress_started = false;
}

static struct hca_qp *make_qp(int i)
{
	struct hca_qp_init in = { .type = qp_def[i].type, .send_cq = F.cq, .recv_cq = F.cq,
				  .cap = { .max_send_wr = 64, .max_recv_wr = 64,
					   .max_send_sge = 4, .max_recv_sge = 4,
					   .max_inline_data = 64 } };

	switch (qp_def[i].type) {
	case IBV_QPT_XRC_RECV:
		memset(&in, 0, sizeof(in));
		in.type = IBV_QPT_XRC_RECV;
		in.xrcd = F.xrcd;
		return hca_qp_create(NULL, &in, NULL);
	case IBV_QPT_XRC_SEND:
		in.recv_cq = NULL;
		in.cap.max_recv_wr = in.cap.max_recv_sge = 0;
		break;
	default:
		if (qp_def[i].on_srq)
			in.srq = F.srq;
		break;
	}
	return hca_qp_create(F.pd, &in, NULL);
}

static uint32_t peer_qpn(int i)
{
	if (qp_def[i].peer >= 0)
		return F.qpn[qp_def[i].peer];
	/* another generation of our own index: reaches our socket, no QP */
	return F.qpn[i] ^ 0x800000u;
}

/* RESET -> INIT -> RTR (-> RTS), the masks the modify table asks for. */
int connect_qp(int i)
{
	enum ibv_qp_type t = qp_def[i].type;
	struct hca_qp *qp = F.qp[i];
	struct ibv_port_attr pa;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	int mask;

	if (hca_qp_modify(qp, &a, IBV_QP_STATE))
		return -1;
	hca_dev_query_port(F.dev, 1, &pa, sizeof(pa));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = QKEY;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			    IBV_ACCESS_REMOTE_ATOMIC;
	mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	mask |= t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	if (hca_qp_modify(qp, &a, mask))
		return -2;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer_qpn(i);
	a.rq_psn = RQ_PSN;
	a.ah_attr.dlid = pa.lid;
	a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	mask = IBV_QP_STATE;
	if (t != IBV_QPT_UD)
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (t == IBV_QPT_RC || t == IBV_QPT_XRC_RECV)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (hca_qp_modify(qp, &a, mask))
		return -3;
	if (t == IBV_QPT_XRC_RECV)
		return 0; /* a target receives in RTR; it never sends */

	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = i == Q_LONELY ? LONELY_PSN : SQ_PSN;
	a.timeout = qp_def[i].timeout;
	a.retry_cnt = qp_def[i].retry_cnt;
	a.rnr_retry = qp_def[i].rnr_retry;
	a.max_rd_atomic = 4;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (t == IBV_QPT_RC || t == IBV_QPT_XRC_SEND)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	return hca_qp_modify(qp, &a, mask) ? -4 : 0;
}

/*
 * What RESET leaves behind in the private responder/requester state
 * (qp_reset() clears the queues, not these): cleared here so that every
 * input starts alike. Reported as an HCA issue; harmless once fixed.
 */
void forget_private_state(struct hca_qp *qp)
{
	qp->in_msg = false;
	qp->nak_sent = false;
	qp->rlen = 0;
	qp->msn = 0;
	qp->msg_psn = 0;
	memset(&qp->msg_hdr, 0, sizeof(qp->msg_hdr));
	memset(qp->replay, 0, sizeof(qp->replay));
	qp->replay_next = 0;
	qp->rnr_until_ns = 0;
	qp->last_progress_ns = 0;
	qp->sqd_event_due = false;
}

int qp_has_rq(int i)
{
	return qp_def[i].type != IBV_QPT_XRC_SEND && qp_def[i].type != IBV_QPT_XRC_RECV &&
	       !qp_def[i].on_srq;
}

/* The receive WQE shapes every RQ and SRQ gets, in this order. */
void recv_wr(int k, uint64_t id, struct ibv_recv_wr *wr, struct ibv_sge *sge)
{
	uintptr_t base = (uintptr_t)F.reg[R_LOCAL];
	uint32_t lkey = F.keys[R_LOCAL];

	memset(wr, 0, sizeof(*wr));
	wr->wr_id = id;
	wr->sg_list = sge;
	wr->num_sge = 1;
	switch (k & 3) {
	case 0:         /* one SGE, room for two MTUs */
		sge[0] = (struct ibv_sge){ base, 2048, lkey };
		break;
	case 1:         /* scattered over two SGEs */
		sge[0] = (struct ibv_sge){ base + 2048, 64, lkey };
		sge[1] = (struct ibv_sge){ base + 4096, 1024, lkey };
		wr->num_sge = 2;
		break;
	case 2:         /* room for the largest message the fuzzer posts */
		sge[0] = (struct ibv_sge){ base, 8192, lkey };
		break;
	default:        /* too small for most: a local length error; it ends
			 * where the region does, so ASan sees any overrun */
		sge[0] = (struct ibv_sge){ base + reg_def[R_LOCAL].len - 16, 16, lkey };
		break;
	}
}

void post_baseline_recvs(void)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge[2];

	for (int i = 0; i < NQP; i++) {
		if (!qp_has_rq(i))
			continue;
		for (int k = 0; k < NRECV; k++) {
			recv_wr(k, (uint64_t)i << 8 | (uint64_t)k, &wr, sge);
			hca_qp_post_recv(F.qp[i], &wr, &bad);
		}
	}
	for (int k = 0; k < NRECV; k++) {
		recv_wr(k, 0x1000 | (uint64_t)k, &wr, sge);
		hca_srq_post_recv(F.srq, &wr, &bad);
		recv_wr(k, 0x2000 | (uint64_t)k, &wr, sge);
		hca_srq_post_recv(F.xsrq, &wr, &bad);
	}
}

void empty_srq(struct hca_srq *srq)
{
	uint8_t buf[sizeof(struct hca_rwqe) + HCA_MAX_SGE * sizeof(struct hca_rsge)];

	while (srq->ring->stride - 8 <= sizeof(buf) &&
	       hca_ring_pop(srq->ring, buf, srq->ring->stride - 8) == 0)
		;
}

void fuzz_setup(void)
{
	struct ibv_srq_attr sa = { .max_wr = 64, .max_sge = 4 };
	struct ibv_port_attr pa;

	setenv("SOFTIB_LINK", "udp", 1);
	unsetenv("SOFTIB_FAULT");
	unsetenv("SOFTIB_PCAP");
	F.trace = getenv("FUZZ_PACKET_TRACE") != NULL;
	F.dev = hca_dev_get();
	if (!F.dev)
		die("hca_dev_get");
	if (F.dev->link.fd < 0)
		die("no UDP socket");
	stop_progress(F.dev);
	F.ip = F.dev->link.ip;
	F.ctx = hca_ctx_open(F.dev, NULL);
	F.pd = F.ctx ? hca_pd_alloc(F.ctx) : NULL;
	F.pd2 = F.ctx ? hca_pd_alloc(F.ctx) : NULL;
	F.cq = F.ctx ? hca_cq_create(F.ctx, 4096, NULL, 0, NULL) : NULL;
	if (!F.pd || !F.pd2 || !F.cq)
		die("context, PDs, CQ");
	for (int r = 0; r < NREG; r++) {
		struct hca_pd *pd = reg_def[r].other_pd ? F.pd2 : F.pd;

		F.reg[r] = malloc(reg_def[r].len);
		F.image[r] = malloc(reg_def[r].len);
		if (!F.reg[r] || !F.image[r])
			die("region");
		for (size_t k = 0; k < reg_def[r].len; k++)
			F.image[r][k] = pattern(r, k);
		F.mr[r] = hca_mr_reg(pd, F.reg[r], reg_def[r].len,
				     reg_def[r].iova ? reg_def[r].iova : (uintptr_t)F.reg[r],
				     reg_def[r].access);
		if (!F.mr[r])
			die("hca_mr_reg");
		F.keys[r] = hca_mr_key(F.mr[r]);
	}
	F.keys[NREG] = F.keys[R_FULL] + 0x10000; /* same index, another generation */
	F.keys[NREG + 1] = 0;
	F.srq = hca_srq_create(F.pd, &sa, NULL);
	F.xrcd = hca_xrcd_open(F.ctx, -1, 0);
	F.xsrq = F.xrcd ? hca_srq_create_xrc(F.pd, F.xrcd, F.cq, &sa, NULL) : NULL;
	if (!F.srq || !F.xsrq)
		die("SRQs");
	F.srqn[0] = hca_srq_num(F.xsrq);
	F.srqn[1] = hca_srq_num(F.srq);
	F.srqn[2] = HCA_MAX_SRQ - 1;
	for (int i = 0; i < NQP; i++) {
		F.qp[i] = make_qp(i);
		if (!F.qp[i])
			die("hca_qp_create");
		F.qpn[i] = hca_qp_num(F.qp[i]);
	}
	hca_dev_query_port(F.dev, 1, &pa, sizeof(pa));
	fuzz_ah.dlid = pa.lid;
}
