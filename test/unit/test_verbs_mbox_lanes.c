/*
 * Black-box tests of an XRC SRQ's mailbox lanes (hca/core/mbox_lanes.c,
 * one mailbox per requester QP of this host that sends to the SRQ): more
 * send QPs into one SRQ than it has lanes (the rest go by the ring path),
 * one send QP alternating between two SRQs (a lane in each), and a lane
 * first bound while the CQ's owner sleeps on its completion channel.
 * Each sender's messages must arrive in its order with every byte right.
 * test_verbs_mbox.c has the tests both RC and XRC run.
 */
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cu_run.h"
#include "mbox_common.h"

/*
 * The XRC tests' messages: the bytes of fill(seed), over whose first five
 * go the message's number and a tag (its sender, its SRQ).
 */
static void send_tagged(struct pair *p, uint32_t sent, uint32_t len, uint32_t seed,
			uint32_t m, uint8_t tag)
{
	uint8_t *b = p->s + (size_t)(sent % NRX) * BUF;

	fill(b, len, seed);
	memcpy(b, &m, 4);
	b[4] = tag;
	CU_ASSERT_EQUAL_FATAL(post_send(p, IBV_WR_SEND, sent, (sent % NRX) * BUF, len, true,
					0), 0);
}

static bool tagged_ok(const uint8_t *b, uint32_t len, uint32_t seed)
{
	uint8_t want[BUF];

	fill(want, len, seed);
	return len >= 5 && memcmp(b + 5, want + 5, len - 5) == 0;
}

/* One poll: the receives into wc (returned), each send counted in *done. */
static int poll_recvs(struct ibv_cq *cq, struct ibv_wc *wc, uint32_t *done)
{
	int n = ibv_poll_cq(cq, 64, wc), r = 0;

	for (int j = 0; j < n; j++) {
		CU_ASSERT_EQUAL(wc[j].status, IBV_WC_SUCCESS);
		if (wc[j].opcode == IBV_WC_RECV)
			wc[r++] = wc[j];
		else
			(*done)++;
	}
	return r;
}

/*
 * Six XRC send QPs (more than an SRQ has lanes: the last ones go by the
 * ring path) into one SRQ, sizes on both sides of the threshold, sends
 * interleaved: each sender's messages arrive in its order, every byte
 * right (the message carries its sender and number).
 */
static void test_xrc_senders(void)
{
	enum { NS = 6, PER = 200 };
	struct ibv_qp *ini[NS] = { 0 }, *tgt[NS] = { 0 };
	struct ibv_wc wc[64];
	uint32_t next[NS] = { 0 }, sent = 0, got = 0, done = 0;
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	ini[0] = p.a;
	tgt[0] = p.b;
	for (int i = 1; i < NS; i++) {
		struct pair q = p;

		CU_ASSERT_EQUAL_FATAL(xrc_make_qps(&q), 0);
		CU_ASSERT_EQUAL_FATAL(connect_xrc(&q, &forever), 0);
		ini[i] = q.a;
		tgt[i] = q.b;
	}
	for (int k = 0; k < NRX; k++)
		CU_ASSERT_EQUAL_FATAL(post_recv(&p, k, BUF), 0);
	uint64_t end = now_ms() + 4 * TIMEOUT_MS;

	while ((got < NS * PER || done < NS * PER) && now_ms() < end) {
		/* a few sends from each, while the SRQ has room for them */
		for (int i = 0; i < NS && sent < NS * PER && sent - got < NRX / 2; i++) {
			uint32_t m = sent / NS;

			p.a = ini[i];
			send_tagged(&p, sent, 24 + (m * 331 + (uint32_t)i * 97) % 2000,
				    m * NS + (uint32_t)i, m, (uint8_t)i);
			sent++;
		}
		int n = poll_recvs(p.cq, wc, &done);

		for (int j = 0; j < n; j++) {
			uint8_t *b = p.r + (size_t)(wc[j].wr_id - 1000) * BUF;
			uint32_t m;
			int i = b[4];

			memcpy(&m, b, 4);
			CU_ASSERT_FATAL(i < NS);
			CU_ASSERT_EQUAL(m, next[i]);
			CU_ASSERT_EQUAL(wc[j].qp_num, tgt[i]->qp_num);
			CU_ASSERT_EQUAL(wc[j].src_qp, ini[i]->qp_num);
			CU_ASSERT(tagged_ok(b, wc[j].byte_len, m * NS + (uint32_t)i));
			next[i] = m + 1;
			got++;
			CU_ASSERT_EQUAL(post_recv(&p, (int)(wc[j].wr_id - 1000), BUF), 0);
		}
	}
	CU_ASSERT_EQUAL(got, NS * PER);
	CU_ASSERT_EQUAL(done, NS * PER);
	for (int i = 1; i < NS; i++) {
		ibv_destroy_qp(ini[i]);
		ibv_destroy_qp(tgt[i]);
	}
	p.a = ini[0];
	pair_free(&p);
}

/*
 * One XRC send QP to two SRQs of its domain, in turns and in runs, sizes
 * on both sides of the threshold: each SRQ gets its messages in order
 * (the QP has a lane in each; a switch waits for the other's to be taken
 * or takes them back).
 */
static void test_xrc_two_srqs(void)
{
	enum { N = 400 };
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = NRX, .max_sge = 2 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC };
	struct ibv_srq *srq[2];
	uint32_t srqn[2], next[2] = { 0 }, sent = 0, got = 0, done = 0;
	struct ibv_wc wc[64];
	struct pair p;

	CU_ASSERT_EQUAL_FATAL(pair_make(&p, &forever), 0);
	sa.pd = p.pd;
	sa.cq = p.cq;
	sa.xrcd = p.xrcd;
	srq[0] = p.srq;
	srqn[0] = p.srqn;
	srq[1] = ibv_create_srq_ex(ctx, &sa);
	CU_ASSERT_FATAL(srq[1] && !ibv_get_srq_num(srq[1], &srqn[1]));
	/* receives k < NRX/2 on the first SRQ, the rest on the second */
	for (int k = 0; k < NRX; k++) {
		p.srq = srq[k >= NRX / 2];
		CU_ASSERT_EQUAL_FATAL(post_recv(&p, k, BUF), 0);
	}
	uint64_t end = now_ms() + 4 * TIMEOUT_MS;

	while ((got < N || done < N) && now_ms() < end) {
		while (sent < N && sent - got < NRX / 4) {
			int t = (sent / 3 + sent) % 2;   /* turns, and runs */

			p.srqn = srqn[t];
			send_tagged(&p, sent, 16 + (sent * 397) % 1500, sent, sent, (uint8_t)t);
			sent++;
		}
		int n = poll_recvs(p.cq, wc, &done);

		for (int j = 0; j < n; j++) {
			int k = (int)(wc[j].wr_id - 1000), t = k >= NRX / 2;
			uint8_t *b = p.r + (size_t)k * BUF;
			uint32_t m;

			memcpy(&m, b, 4);
			CU_ASSERT_EQUAL(b[4], t);
			CU_ASSERT(m >= next[t]);   /* in order per SRQ */
			next[t] = m + 1;
			CU_ASSERT(tagged_ok(b, wc[j].byte_len, m));
			got++;
			p.srq = srq[t];
			CU_ASSERT_EQUAL(post_recv(&p, k, BUF), 0);
		}
	}
	CU_ASSERT_EQUAL(got, N);
	CU_ASSERT_EQUAL(done, N);
	p.srq = srq[0];
	ibv_destroy_qp(p.a);
	p.a = NULL;
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq[1]), 0);
	pair_free(&p);
}

/*
 * A sleeper's first message on a lane bound while it slept: the polls
 * peek only at the lanes a requester holds, as the owner words said at
 * their last look (mbox.c mb_bound); the event's reader, which finds the
 * message, marks its lane, so the first poll after the wake-up takes it
 * (not a poll that finds nothing, another arm and wake-up, up to 16).
 */
static void test_xrc_sleeper_new_lane(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_wc wc[4];
	struct pair p;
	int rc;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ch);
	pair_chan = ch;
	rc = pair_make(&p, &forever);
	pair_chan = NULL;
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	/* polls enough for the owner words to be looked at: no lane held */
	for (int i = 0; i < 40; i++)
		CU_ASSERT_EQUAL(ibv_poll_cq(p.cq, 4, wc), 0);
	/* the send QP's first messages (it binds a lane), each to a sleeper
	 * that polls once per wake-up */
	for (uint32_t k = 0; k < 3; k++) {
		struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
		struct ibv_cq *ecq;
		void *ectx;
		int got;

		CU_ASSERT_EQUAL_FATAL(post_recv(&p, (int)k, 64), 0);
		CU_ASSERT_EQUAL_FATAL(ibv_req_notify_cq(p.cq, 0), 0);
		fill(p.s + k * 64, 8, 5 + k);
		CU_ASSERT_EQUAL_FATAL(post_send(&p, IBV_WR_SEND, k, k * 64, 8, false, 0), 0);
		CU_ASSERT_EQUAL_FATAL(poll(&pf, 1, TIMEOUT_MS), 1);
		CU_ASSERT_EQUAL_FATAL(ibv_get_cq_event(ch, &ecq, &ectx), 0);
		CU_ASSERT_PTR_EQUAL(ecq, p.cq);
		ibv_ack_cq_events(p.cq, 1);
		got = ibv_poll_cq(p.cq, 4, wc);
		CU_ASSERT_EQUAL(got, 1);
		if (got != 1)
			break;
		CU_ASSERT_EQUAL(wc[0].status, IBV_WC_SUCCESS);
		CU_ASSERT_EQUAL(wc[0].wr_id, 1000 + k);
		CU_ASSERT_TRUE(check(p.r + (size_t)k * BUF, 8, 5 + k));
	}
	pair_free(&p);
	ibv_destroy_comp_channel(ch);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("mbox over XRC: several send QPs and SRQs",
				   mbox_suite_init_xrc, mbox_suite_clean);

	if (!s || !CU_add_test(s, "six senders into one SRQ", test_xrc_senders) ||
	    !CU_add_test(s, "one sender, two SRQs", test_xrc_two_srqs) ||
	    !CU_add_test(s, "a sleeper's first message on a new lane",
			 test_xrc_sleeper_new_lane))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
