/*
 * ring_claims: a requester killed between claiming a slot of another
 * process's ring and publishing it must not wedge that ring, nor lose or
 * duplicate the receive WQE it was taking (issue 15 item 2).
 *
 *   ring_claims -k site [-s size] [-v]
 *
 * The parent (the survivor) has one CQ and one SRQ, shared by three RC
 * QPs: A, connected to the child, and B1 -> B2, connected to each other
 * inside the parent (B2 on the SRQ). The child (the requester) runs with
 * SOFTIB_TEST_DIE_AT=<site> and SENDs `size` bytes to A: on the shared-
 * memory link its post takes a WQE from the parent's SRQ, moves the
 * payload (inline through the CQ's pool up to 16 KiB, else by CMA) and
 * pushes the receive completion into the parent's CQ — and the test point
 * kills it with SIGKILL at <site> (hca/die_at.h) in the middle.
 *
 * Then the parent checks, once the child is reclaimed:
 *  1. its CQ and SRQ still flow: B1 sends 3 rings' worth of messages to
 *     B2, one at a time, each checked (sequence and payload) and its WQE
 *     posted again — a slot left claimed stalls the CQ at once and the
 *     SRQ when it wraps to it;
 *  2. its SRQ holds exactly the WQEs it is owed (posted - completed): B1,
 *     with rnr_retry 0, sends that many more without reposting — each
 *     must land — and then one more, which must fail with an RNR (the
 *     SRQ empty): a WQE the child took and never completed must have been
 *     posted again, once.
 * Exit 0 and "PASS" if both hold.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tp_common.h"

/* the longest the other side may stay silent on the control socket */
#define PEER_SECS 30

#define SRQ_WR   16
#define CQ_CQE   15
#define MAXMSG   (256 * 1024)
#define NBUF     (SRQ_WR * 2)

const char *tp_who = "ring_claims";
static const char *site;
static size_t msg_size = 64;
static bool verbose;

struct info {
	uint32_t qpn;
	uint16_t lid;
	uint8_t gid[16];
};

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	uint8_t *buf;              /* NBUF receive buffers, then a send buffer */
	struct ibv_mr *mr;
};

static void dev_open(struct dev *d, bool with_srq)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	int err;

	if (!list || !list[0])
		tp_die("no device (is build/lib the libibverbs in use?)");
	d->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!d->ctx)
		tp_die("ibv_open_device: %s", strerror(errno));
	if ((err = ibv_query_port(d->ctx, 1, &d->port)) ||
	    (err = ibv_query_gid(d->ctx, 1, 0, &d->gid)))
		tp_die("query port: %s", strerror(err));
	d->pd = ibv_alloc_pd(d->ctx);
	d->buf = aligned_alloc(4096, (size_t)(NBUF + 1) * MAXMSG);
	if (!d->pd || !d->buf)
		tp_die("ibv_alloc_pd: %s", strerror(errno));
	memset(d->buf, 0, (size_t)(NBUF + 1) * MAXMSG);
	d->mr = ibv_reg_mr(d->pd, d->buf, (size_t)(NBUF + 1) * MAXMSG,
			   IBV_ACCESS_LOCAL_WRITE);
	d->cq = ibv_create_cq(d->ctx, CQ_CQE, NULL, NULL, 0);
	if (!d->mr || !d->cq)
		tp_die("ibv_reg_mr / ibv_create_cq: %s", strerror(errno));
	if (with_srq) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = SRQ_WR, .max_sge = 1 } };

		d->srq = ibv_create_srq(d->pd, &sa);
		if (!d->srq)
			tp_die("ibv_create_srq: %s", strerror(errno));
	}
}

static struct ibv_qp *qp_new(struct dev *d, bool on_srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = d->cq, .recv_cq = d->cq, .srq = on_srq ? d->srq : NULL,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = on_srq ? 0 : 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);

	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				 IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		tp_die("ibv_create_qp / INIT: %s", strerror(errno));
	return qp;
}

static struct info info_of(struct dev *d, struct ibv_qp *qp)
{
	struct info i = { .qpn = qp->qp_num, .lid = d->port.lid };

	memcpy(i.gid, d->gid.raw, 16);
	return i;
}

static void connect_qp(struct dev *d, struct ibv_qp *qp, const struct info *peer,
		       uint8_t rnr_retry)
{
	struct ibv_qp_attr a = { 0 };

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = d->port.active_mtu;
	a.dest_qp_num = peer->qpn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	if (d->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.hop_limit = 1;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		tp_die("ibv_modify_qp to RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		tp_die("ibv_modify_qp to RTS: %s", strerror(errno));
}

static uint8_t pattern(uint64_t seq, size_t i)
{
	return (uint8_t)(seq * 131 + i * 7 + (i >> 8));
}

static void post_send(struct ibv_qp *qp, struct dev *d, uint64_t seq, size_t len,
		      bool signaled)
{
	uint8_t *p = d->buf + (size_t)NBUF * MAXMSG;
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = (uint32_t)len,
			       .lkey = d->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = seq, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = signaled ? IBV_SEND_SIGNALED : 0 }, *bad;
	int err;

	memcpy(p, &seq, sizeof(seq));
	for (size_t i = sizeof(seq); i < len; i++)
		p[i] = pattern(seq, i);
	if ((err = ibv_post_send(qp, &wr, &bad)))
		tp_die("ibv_post_send: %s", strerror(err));
}

/* ---- the requester, killed at its test point ---- */

static void child(int fd)
{
	struct info mine, peer;
	struct dev d = { 0 };
	struct ibv_qp *qp;
	char go;

	tp_who = "ring_claims[child]";
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	setenv("SOFTIB_TEST_DIE_AT", site, 1);
	dev_open(&d, false);
	qp = qp_new(&d, false);
	mine = info_of(&d, qp);
	tp_xfer(fd, &mine, sizeof(mine), true, PEER_SECS);
	tp_xfer(fd, &peer, sizeof(peer), false, PEER_SECS);
	connect_qp(&d, qp, &peer, 7);
	tp_xfer(fd, &go, 1, false, PEER_SECS); /* the parent's QPs are ready */
	/* unsignaled: our own CQ sees no push, so the first completion
	 * pushed (and the first WQE taken) is in the parent's queues */
	for (uint64_t seq = 0; seq < 4; seq++)
		post_send(qp, &d, 1000 + seq, msg_size, false);
	sleep(5); /* a retry by the progress thread may reach it yet */
	_exit(3); /* the test point was never reached */
}

/* ---- the survivor ---- */

struct survivor {
	struct dev d;
	struct ibv_qp *a, *b1, *b2;
	uint64_t posted, recvs;   /* SRQ WQEs posted, receive completions */
	uint64_t sends_ok, sends_err;
	enum ibv_wc_status last_err;
};

static void srq_post(struct survivor *s, uint32_t buf)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->d.buf + (size_t)buf * MAXMSG),
			       .length = MAXMSG, .lkey = s->d.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = buf, .sg_list = &sge, .num_sge = 1 }, *bad;
	int err = ibv_post_srq_recv(s->d.srq, &wr, &bad);

	if (err)
		tp_die("ibv_post_srq_recv (%" PRIu64 " posted, %" PRIu64 " received): %s",
		    s->posted, s->recvs, strerror(err));
	s->posted++;
}

/* Poll until a receive on B2 (returned: its buffer) or a send
 * completion; -1 after a send completion; -2 on timeout. */
static int poll_one(struct survivor *s, double secs, uint64_t *seq, uint32_t *len)
{
	double t0 = tp_now_s();
	struct ibv_wc wc;

	while (tp_now_s() - t0 < secs) {
		int n = ibv_poll_cq(s->d.cq, 1, &wc);

		if (n < 0)
			tp_die("ibv_poll_cq failed");
		if (!n)
			continue;
		if (wc.opcode & IBV_WC_RECV) {
			uint8_t *p = s->d.buf + (size_t)wc.wr_id * MAXMSG;

			s->recvs++;
			if (wc.qp_num != s->b2->qp_num) {
				if (verbose)
					printf("receive on A (from the child): %s\n",
					       ibv_wc_status_str(wc.status));
				continue;
			}
			if (wc.status != IBV_WC_SUCCESS)
				tp_die("receive on B2: %s", ibv_wc_status_str(wc.status));
			memcpy(seq, p, sizeof(*seq));
			*len = wc.byte_len;
			for (uint32_t i = sizeof(*seq); i < wc.byte_len; i++)
				if (p[i] != pattern(*seq, i))
					tp_die("message %" PRIu64 ": byte %u wrong", *seq, i);
			return (int)wc.wr_id;
		}
		if (wc.status == IBV_WC_SUCCESS) {
			s->sends_ok++;
		} else {
			s->sends_err++;
			s->last_err = wc.status;
		}
		return -1;
	}
	return -2;
}

/* One message B1 -> B2, its WQE posted again (repost) or not. */
static bool one_message(struct survivor *s, uint64_t seq, size_t len, bool repost,
			bool *send_failed)
{
	bool got_recv = false, got_send = false;
	uint64_t rseq = 0;
	uint32_t rlen = 0;

	post_send(s->b1, &s->d, seq, len, true);
	while (!got_recv || !got_send) {
		uint64_t errs = s->sends_err;
		int r = poll_one(s, 10.0, &rseq, &rlen);

		if (r == -2)
			return false;
		if (r == -1) {
			got_send = true;
			if (s->sends_err != errs) {
				*send_failed = true;
				return true;
			}
			continue;
		}
		if (rseq != seq || rlen != len)
			tp_die("B2 received message %" PRIu64 " (%u B), expected %" PRIu64,
			    rseq, rlen, seq);
		got_recv = true;
		if (repost)
			srq_post(s, (uint32_t)r);
	}
	return true;
}

static int survivor(int fd, pid_t kid)
{
	struct survivor s = { 0 };
	struct info peer, ia, ib1, ib2;
	uint64_t seq = 1, owed;
	bool failed = false;
	int st;

	dev_open(&s.d, true);
	s.a = qp_new(&s.d, true);
	s.b1 = qp_new(&s.d, false);
	s.b2 = qp_new(&s.d, true);
	for (uint32_t i = 0; i < SRQ_WR; i++)
		srq_post(&s, i);
	ia = info_of(&s.d, s.a);
	ib1 = info_of(&s.d, s.b1);
	ib2 = info_of(&s.d, s.b2);
	tp_xfer(fd, &peer, sizeof(peer), false, PEER_SECS);
	tp_xfer(fd, &ia, sizeof(ia), true, PEER_SECS);
	connect_qp(&s.d, s.a, &peer, 7);
	connect_qp(&s.d, s.b1, &ib2, 0);
	connect_qp(&s.d, s.b2, &ib1, 0);
	tp_xfer(fd, &(char){ 103 }, 1, true, PEER_SECS);

	if (waitpid(kid, &st, 0) != kid)
		tp_die("waitpid: %s", strerror(errno));
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
		printf("%s: the child did not die at its test point (status %#x)\n", site, st);
		return 1;
	}
	/* the child's reclaim is our progress thread's, on its pidfd: wait
	 * until `softib heap-check` (run from the top of the tree) sees no
	 * dead process left, so that what the reclaim repairs is in place */
	for (double t0 = tp_now_s(); tp_now_s() - t0 < 10; usleep(20000)) {
		char line[256];
		bool done = false;
		FILE *f = popen("build/bin/softib heap-check 2>&1", "r");

		while (f && fgets(line, sizeof(line), f))
			done |= strstr(line, "processes being reclaimed: 0") != NULL;
		if (f)
			pclose(f);
		if (done)
			break;
	}

	/* 1. the CQ and the SRQ flow, past a wrap of each */
	for (int i = 0; i < 3 * (SRQ_WR + CQ_CQE + 1); i++, seq++) {
		if (!one_message(&s, seq, 64 + (seq * 97) % 4096, true, &failed) || failed) {
			printf("%s: FAIL: message %" PRIu64 " B1 -> B2 %s (CQ or SRQ wedged; "
			       "%" PRIu64 " WQEs posted, %" PRIu64 " received)\n", site, seq,
			       failed ? "failed" : "never completed", s.posted, s.recvs);
			return 1;
		}
	}
	/* 2. the SRQ holds what it is owed: that many land, one more is RNR */
	owed = s.posted - s.recvs;
	if (verbose)
		printf("%s: flow ok; the SRQ owes %" PRIu64 " WQEs\n", site, owed);
	for (uint64_t i = 0; i < owed; i++, seq++) {
		if (!one_message(&s, seq, 64, false, &failed) || failed) {
			printf("%s: FAIL: the SRQ holds %" PRIu64 " WQEs, %" PRIu64 " owed: "
			       "a WQE was lost (%s)\n", site, i, owed,
			       failed ? ibv_wc_status_str(s.last_err) : "hung");
			return 1;
		}
	}
	if (!one_message(&s, seq, 64, false, &failed) || !failed ||
	    s.last_err != IBV_WC_RNR_RETRY_EXC_ERR) {
		printf("%s: FAIL: the SRQ holds more than the %" PRIu64 " WQEs owed: "
		       "a WQE was posted twice\n", site, owed);
		return 1;
	}
	printf("%s: %d messages after the death, SRQ exact (%" PRIu64 " owed): PASS\n",
	       site, 3 * (SRQ_WR + CQ_CQE + 1), owed);
	return 0;
}

int main(int argc, char **argv)
{
	int sv[2], opt;
	pid_t kid;

	while ((opt = getopt(argc, argv, "k:s:v")) != -1) {
		if (opt == 'k')
			site = optarg;
		else if (opt == 's')
			msg_size = strtoul(optarg, NULL, 0);
		else if (opt == 'v')
			verbose = true;
		else
			tp_die("usage: ring_claims -k site [-s size] [-v]");
	}
	if (!site || msg_size < 8 || msg_size > MAXMSG)
		tp_die("usage: ring_claims -k site [-s size 8..%d] [-v]", MAXMSG);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		tp_die("socketpair: %s", strerror(errno));
	fflush(NULL);
	kid = fork();
	if (kid < 0)
		tp_die("fork: %s", strerror(errno));
	if (kid == 0) {
		close(sv[0]);
		child(sv[1]);
	}
	close(sv[1]);
	return survivor(sv[0], kid);
}
