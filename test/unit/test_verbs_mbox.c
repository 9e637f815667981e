/*
 * Black-box tests of the mailbox path (hca/core/mbox.c,
 * hca/engine/mbox_send.c): small RC SENDs between QPs of one host go
 * through a per-connection mailbox the receiver's poll consumes; what it
 * cannot settle goes by the ring path. The tests hold what either path
 * must give, over RC and again over XRC (one send QP into an SRQ's lane):
 * every byte of every size across the threshold, the order of a QP's
 * messages when mailbox and ring-path WQEs interleave (and when retracts
 * are forced: SOFTIB_MBOX_STALL_US=0 in the second run of the integration
 * script), RNR wait then success, RNR exhaustion, the receiver's length
 * error, a receiver in the error state (RC), and two processes (RC).
 * test_verbs_mbox_lanes.c has the XRC tests of several QPs and SRQs.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu_run.h"
#include "mbox_common.h"

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	int got = 0;

	while (got < n && now_ms() < end) {
		int k = ibv_poll_cq(cq, n - got, wc + got);

		if (k < 0)
			return -1;
		got += k;
	}
	return got;
}

static const uint32_t sizes[] = { 0, 1, 7, 8, 31, 32, 33, 39, 40, 41, 63, 64, 65, 103,
				  104, 105, 167, 168, 232, 233, 487, 488, 489, 1024, 1063,
				  1064, 1065, 2023, 2024, 2025, 4071, 4072, 4073, 4096 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Every size across the thresholds, every byte, SEND and SEND_WITH_IMM. */
static void test_sizes(void)
{
	struct ibv_wc wc[2];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	for (unsigned k = 0; k < 2 * NSIZES; k++) {
		uint32_t len = sizes[k % NSIZES];
		bool imm = k >= NSIZES;
		int n, rx = -1;

		fill(p.s, len, k);
		CU_ASSERT_EQUAL_FATAL(post_recv(&p, 0, BUF), 0);
		CU_ASSERT_EQUAL_FATAL(post_send(&p, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
						k, 0, len, true, 0x12345678 + k), 0);
		n = poll_n(p.cq, wc, 2, TIMEOUT_MS);
		CU_ASSERT_EQUAL_FATAL(n, 2);
		for (int i = 0; i < 2; i++) {
			CU_ASSERT_EQUAL(wc[i].status, IBV_WC_SUCCESS);
			if (wc[i].opcode == IBV_WC_RECV)
				rx = i;
		}
		CU_ASSERT_FATAL(rx >= 0);
		CU_ASSERT_EQUAL(wc[rx].byte_len, len);
		CU_ASSERT_EQUAL(wc[rx].wr_id, 1000);
		CU_ASSERT_EQUAL(wc[rx].qp_num, p.b->qp_num);
		CU_ASSERT_EQUAL(wc[rx].src_qp, p.a->qp_num);
		CU_ASSERT_EQUAL(!!(wc[rx].wc_flags & IBV_WC_WITH_IMM), imm);
		if (imm)
			CU_ASSERT_EQUAL(wc[rx].imm_data, 0x12345678 + k);
		CU_ASSERT(check(p.r, len, k));
		CU_ASSERT_EQUAL(wc[1 - rx].wr_id, k);
		CU_ASSERT_EQUAL(wc[1 - rx].opcode, IBV_WC_SEND);
	}
	pair_free(&p);
}

/*
 * A QP's messages land in order whichever path each takes: small SENDs
 * (mailbox), large ones and RDMA WRITEs (ring path, CMA) interleaved,
 * most unsignaled; receive k gets message k, receive completions come in
 * order, send completions too.
 */
static void test_order(void)
{
	static const uint32_t lens[] = { 8, 8, 2000, 8, 0, 64, 500, 8, 8, 104, 1, 3000 };
	struct ibv_wc wc[64];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	for (int round = 0; round < 40; round++) {
		int nrx = 0, ntx = 0, want_tx = 0;
		uint64_t end;

		for (int k = 0; k < 24; k++)
			CU_ASSERT_EQUAL_FATAL(post_recv(&p, k, BUF), 0);
		for (int k = 0; k < 24; k++) {
			uint32_t len = lens[(k + round) % 12];
			bool sig = k % 5 == 4 || k == 23;

			if (k % 7 == 3 + round % 2) { /* a WRITE between: the ring path */
				fill(p.s + (size_t)(NRX - 1) * BUF, 64, 999);
				CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_RDMA_WRITE, 5000,
								(NRX - 1) * BUF, 64, false,
								0), 0);
			}
			fill(p.s + (size_t)k * BUF, len, (uint32_t)(round * 100 + k));
			CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, (uint64_t)k,
							(uint32_t)k * BUF, len, sig, 0), 0);
			want_tx += sig;
			if (round % 3 == 1 && k % 4 == 0) { /* the receiver polls meanwhile */
				int n = ibv_poll_cq(p.cq, 64, wc);

				for (int i = 0; i < n; i++) {
					if (wc[i].opcode != IBV_WC_RECV) {
						ntx++;
						continue;
					}
					CU_ASSERT_EQUAL(wc[i].wr_id, 1000 + (uint64_t)nrx);
					nrx++;
				}
			}
		}
		end = now_ms() + TIMEOUT_MS;
		while ((nrx < 24 || ntx < want_tx) && now_ms() < end) {
			int n = ibv_poll_cq(p.cq, 64, wc);

			CU_ASSERT_FATAL(n >= 0);
			for (int i = 0; i < n; i++) {
				CU_ASSERT_EQUAL(wc[i].status, IBV_WC_SUCCESS);
				if (wc[i].opcode != IBV_WC_RECV) {
					ntx++;
					continue;
				}
				CU_ASSERT_EQUAL(wc[i].wr_id, 1000 + (uint64_t)nrx);
				nrx++;
			}
		}
		CU_ASSERT_EQUAL(nrx, 24);
		CU_ASSERT_EQUAL(ntx, want_tx);
		/* receive k holds message k, byte for byte */
		for (int m = 0; m < 24; m++) {
			uint32_t l = lens[(m + round) % 12];

			CU_ASSERT(check(p.r + (size_t)m * BUF, l, (uint32_t)(round * 100 + m)));
		}
	}
	pair_free(&p);
}

/*
 * Many in flight: the mailbox fills (60 messages of 16 slots, 256 slots),
 * waits, and every message arrives in order; the slots wrap mid-message.
 */
static void test_burst(void)
{
	struct ibv_wc wc[64];
	int nrx = 0, ntx = 0;
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	for (int k = 0; k < NRX; k++)
		CU_ASSERT_EQUAL_FATAL(post_recv(&p, k, BUF), 0);
	fill(p.s, 1000, 77);
	for (int k = 0; k < 60; k++)
		CU_ASSERT_EQUAL_FATAL(post_send(&p, k % 2 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
						(uint64_t)k, 0, 1000, true, (uint32_t)k), 0);
	uint64_t end = now_ms() + TIMEOUT_MS;

	while ((nrx < 60 || ntx < 60) && now_ms() < end) {
		int n = ibv_poll_cq(p.cq, 64, wc);

		for (int i = 0; i < n; i++) {
			CU_ASSERT_EQUAL(wc[i].status, IBV_WC_SUCCESS);
			if (wc[i].opcode == IBV_WC_RECV) {
				CU_ASSERT_EQUAL(wc[i].wr_id, 1000 + (uint64_t)nrx);
				if (nrx % 2)
					CU_ASSERT_EQUAL(wc[i].imm_data, (uint32_t)nrx);
				CU_ASSERT(check(p.r + (size_t)nrx * BUF, 1000, 77));
				nrx++;
			} else {
				CU_ASSERT_EQUAL(wc[i].wr_id, (uint64_t)ntx);
				ntx++;
			}
		}
	}
	CU_ASSERT_EQUAL(nrx, 60);
	CU_ASSERT_EQUAL(ntx, 60);
	pair_free(&p);
}

/* No receive WQE: the send waits (rnr_retry 7), then completes once one comes. */
static void test_rnr_wait(void)
{
	struct ibv_wc wc[2];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	fill(p.s, 24, 5);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 7, 0, 24, true, 0), 0);
	CU_ASSERT_EQUAL(poll_n(p.cq, wc, 1, 50), 0);
	CU_ASSERT_EQUAL_FATAL(post_recv(&p, 0, BUF), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(p.cq, wc, 2, TIMEOUT_MS), 2);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_SUCCESS);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_SUCCESS);
	CU_ASSERT(check(p.r, 24, 5));
	pair_free(&p);
}

/* No receive WQE and rnr_retry 1: IBV_WC_RNR_RETRY_EXC_ERR, the rest flushed. */
static void test_rnr_exhausted(void)
{
	struct conn_opts o = { .rnr_retry = 1, .retry_cnt = 7, .timeout = 14,
			       .min_rnr_timer = 1 };
	struct ibv_wc wc[4];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &o), 0);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 1, 0, 8, true, 0), 0);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 2, 0, 8, true, 0), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(p.cq, wc, 2, TIMEOUT_MS), 2);
	CU_ASSERT_EQUAL(wc[0].wr_id, 1);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
	CU_ASSERT_EQUAL(wc[1].wr_id, 2);
	CU_ASSERT_EQUAL(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	pair_free(&p);
}

/* A receive buffer too small: LOC_LEN_ERR there, REM_INV_REQ_ERR here. */
static void test_len_error(void)
{
	struct ibv_wc wc[4];
	int n, tx = -1, rx = -1;
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	CU_ASSERT_EQUAL_FATAL(post_recv(&p, 0, 16), 0);
	CU_ASSERT_EQUAL_FATAL(post_recv(&p, 1, 16), 0);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 9, 0, 50, true, 0), 0);
	/* RC: b errs and flushes its second receive; an SRQ's stay */
	n = poll_n(p.cq, wc, xrc ? 2 : 3, TIMEOUT_MS);
	CU_ASSERT_EQUAL_FATAL(n, xrc ? 2 : 3);
	for (int i = 0; i < n; i++) {
		if (wc[i].qp_num == p.a->qp_num)
			tx = i;
		else if (wc[i].wr_id == 1000)
			rx = i;
	}
	CU_ASSERT_FATAL(tx >= 0 && rx >= 0);
	CU_ASSERT_EQUAL(wc[tx].status, IBV_WC_REM_INV_REQ_ERR);
	CU_ASSERT_EQUAL(wc[rx].status, IBV_WC_LOC_LEN_ERR);
	for (int i = 0; i < n; i++)
		if (i != tx && i != rx)
			CU_ASSERT_EQUAL(wc[i].status, IBV_WC_WR_FLUSH_ERR);
	pair_free(&p);
}

/* The receiver in the error state: no ACK ever, the send ends RETRY_EXC_ERR. */
static void test_receiver_error(void)
{
	struct conn_opts o = { .rnr_retry = 7, .retry_cnt = 1, .timeout = 8,
			       .min_rnr_timer = 1 };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	struct ibv_wc wc[4];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &o), 0);
	CU_ASSERT_EQUAL_FATAL(post_recv(&p, 0, BUF), 0);
	CU_ASSERT_EQUAL_FATAL(ibv_modify_qp(p.b, &a, IBV_QP_STATE), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(p.cq, wc, 1, TIMEOUT_MS), 1); /* the flush */
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_WR_FLUSH_ERR);
	CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 3, 0, 8, true, 0), 0);
	CU_ASSERT_EQUAL_FATAL(poll_n(p.cq, wc, 1, TIMEOUT_MS), 1);
	CU_ASSERT_EQUAL(wc[0].wr_id, 3);
	CU_ASSERT_EQUAL(wc[0].status, IBV_WC_RETRY_EXC_ERR);
	pair_free(&p);
}

/* ---- two processes ---- */

#define PP_ITERS 3000

static int child_side(int rfd, int wfd)
{
	struct pair p;
	uint32_t peer;
	struct ibv_wc wc[8];
	int bad = 0;
	struct ibv_device **l = ibv_get_device_list(NULL);

	/* a context of its own: the parent's is the parent's */
	ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!ctx || ibv_query_port(ctx, 1, &port_attr))
		return 6;
	memset(&p, 0, sizeof(p));
	if (pair_make(&p, &forever))
		return 2;
	/* only p.b is used here: it connects to the parent's sender */
	if (write(wfd, &p.b->qp_num, 4) != 4 || read(rfd, &peer, 4) != 4)
		return 3;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	ibv_modify_qp(p.b, &a, IBV_QP_STATE);
	if (connect_qp(p.b, peer, &forever))
		return 4;
	for (int k = 0; k < NRX; k++)
		post_recv(&p, k, BUF);
	if (write(wfd, "r", 1) != 1)
		return 5;
	for (int it = 0; it < PP_ITERS && !bad; it++) {
		uint32_t len = sizes[it % NSIZES], k = (uint32_t)it % NRX;
		int n;

		/* the previous echo's completion may come before or after */
		do
			n = poll_n(p.cq, wc, 1, TIMEOUT_MS);
		while (n == 1 && wc[0].opcode == IBV_WC_SEND && wc[0].status == IBV_WC_SUCCESS);
		if (n != 1 || wc[0].status != IBV_WC_SUCCESS || wc[0].byte_len != len ||
		    wc[0].wr_id != 1000 + k || !check(p.r + (size_t)k * BUF, len, (uint32_t)it)) {
			fprintf(stderr, "child: it %d: n %d status %d len %u/%u\n", it, n,
				n ? (int)wc[0].status : -1, n ? wc[0].byte_len : 0, len);
			bad++;
		}
		post_recv(&p, (int)k, BUF);
		/* the echo: an empty SEND back, the ping-pong's other half */
		struct ibv_sge sg = { .addr = (uintptr_t)p.s, .length = 0, .lkey = p.smr->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sg, .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *b;

		if (ibv_post_send(p.b, &w, &b))
			bad++;
	}
	/* the last echo's completion */
	if (!bad && (poll_n(p.cq, wc, 1, TIMEOUT_MS) != 1 || wc[0].status != IBV_WC_SUCCESS))
		bad++;
	pair_free(&p);
	return bad ? 1 : 0;
}

static void test_two_processes(void)
{
	int up[2], down[2], st = 0;
	struct pair p;
	uint32_t peer;
	char c;
	pid_t pid;

	CU_ASSERT_EQUAL_FATAL(pipe(up), 0);
	CU_ASSERT_EQUAL_FATAL(pipe(down), 0);
	fflush(stdout);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		_exit(child_side(down[0], up[1]));
	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	CU_ASSERT_EQUAL_FATAL(read(up[0], &peer, 4), 4);
	CU_ASSERT_EQUAL_FATAL(write(down[1], &p.a->qp_num, 4), 4);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	ibv_modify_qp(p.a, &a, IBV_QP_STATE);
	CU_ASSERT_EQUAL_FATAL(connect_qp(p.a, peer, &forever), 0);
	CU_ASSERT_EQUAL_FATAL(read(up[0], &c, 1), 1);
	/* the parent's receive side is p.a: the child's echoes land here */
	for (int k = 0; k < 8; k++) {
		struct ibv_sge sg = { .addr = (uintptr_t)p.r, .length = BUF, .lkey = p.rmr->lkey };
		struct ibv_recv_wr w = { .wr_id = 1, .sg_list = &sg, .num_sge = 1 }, *bad;

		CU_ASSERT_EQUAL_FATAL(ibv_post_recv(p.a, &w, &bad), 0);
	}
	for (int it = 0; it < PP_ITERS; it++) {
		uint32_t len = sizes[it % NSIZES];
		struct ibv_wc wc[2];
		int n, got_rx = 0, got_tx = 0;

		fill(p.s, len, (uint32_t)it);
		CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, 7, 0, len, true, 0), 0);
		while (got_rx + got_tx < 2) {
			n = poll_n(p.cq, wc, 1, TIMEOUT_MS);
			CU_ASSERT_EQUAL_FATAL(n, 1);
			CU_ASSERT_EQUAL_FATAL(wc[0].status, IBV_WC_SUCCESS);
			if (wc[0].opcode == IBV_WC_RECV) {
				struct ibv_sge sg = { .addr = (uintptr_t)p.r, .length = BUF,
						      .lkey = p.rmr->lkey };
				struct ibv_recv_wr w = { .wr_id = 1, .sg_list = &sg,
							 .num_sge = 1 }, *bad;

				got_rx++;
				CU_ASSERT_EQUAL_FATAL(ibv_post_recv(p.a, &w, &bad), 0);
			} else {
				got_tx++;
			}
		}
	}
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	pair_free(&p);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("mbox", mbox_suite_init, mbox_suite_clean);

	if (!s || !CU_add_test(s, "sizes across the threshold", test_sizes) ||
	    !CU_add_test(s, "order with ring-path WQEs between", test_order) ||
	    !CU_add_test(s, "a burst fills the mailbox", test_burst) ||
	    !CU_add_test(s, "RNR wait then success", test_rnr_wait) ||
	    !CU_add_test(s, "RNR retries exhausted", test_rnr_exhausted) ||
	    !CU_add_test(s, "receive buffer too small", test_len_error) ||
	    !CU_add_test(s, "receiver in the error state", test_receiver_error) ||
	    !CU_add_test(s, "two processes", test_two_processes))
		return -1;
	s = CU_add_suite("mbox over XRC (an SRQ's lanes)", mbox_suite_init_xrc, mbox_suite_clean);
	if (!s || !CU_add_test(s, "sizes across the threshold", test_sizes) ||
	    !CU_add_test(s, "order with ring-path WQEs between", test_order) ||
	    !CU_add_test(s, "a burst fills the lane", test_burst) ||
	    !CU_add_test(s, "RNR wait then success", test_rnr_wait) ||
	    !CU_add_test(s, "RNR retries exhausted", test_rnr_exhausted) ||
	    !CU_add_test(s, "receive buffer too small", test_len_error))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
