/*
 * sib_users_victim: the process another user attacks in
 * test_other_users.sh (issue 15 item 8).
 *
 *   sib_users_victim READY GO
 *
 * Holds what a datagram could disturb: an RC QP connected to itself, its
 * CQ on a completion channel, with two completions left unpolled and the
 * CQ not armed (so no event is due), a second CQ armed and empty (so
 * none is due there either), and a libsib worker (its files under
 * /dev/shm). Writes "qpn pid" to READY, reads its channel until the file
 * GO exists (the attacker has sent everything it could), then checks that nothing
 * happened: no async event, no completion event, the QP still RTS, the
 * two completions successful, and one more SEND through the QP works.
 * Prints "victim: ok ..." and exits 0, or "victim: FAIL ..." and 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "transport/sib.h"

static int fails;

#define CHECK(cond, ...)                                         \
	do {                                                     \
		if (!(cond)) {                                   \
			printf("victim: FAIL " __VA_ARGS__);     \
			printf("\n");                            \
			fails++;                                 \
		}                                                \
	} while (0)

static void die(const char *what)
{
	printf("victim: FAIL %s: %s\n", what, strerror(errno));
	exit(1);
}

static void connect_self(struct ibv_context *ctx, struct ibv_qp *qp)
{
	struct ibv_port_attr pa;
	struct ibv_qp_attr i = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = qp->qp_num, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = 12, .ah_attr = { .port_num = 1 } };
	struct ibv_qp_attr t = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				 .rnr_retry = 7, .max_rd_atomic = 1 };

	if (ibv_query_port(ctx, 1, &pa))
		die("query port");
	r.ah_attr.dlid = pa.lid;
	if (ibv_modify_qp(qp, &i, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS) ||
	    ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER) ||
	    ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("connect");
}

/* One SEND to ourselves; its two completions wait until `poll` says. */
static void send_self(struct ibv_qp *qp, struct ibv_mr *mr, char *buf)
{
	struct ibv_sge rg = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_sge sg = { (uintptr_t)buf + 64, 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rg, .num_sge = 1 }, *rb;
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &sg, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sb;

	if (ibv_post_recv(qp, &rw, &rb) || ibv_post_send(qp, &sw, &sb))
		die("post");
}

static int poll_two(struct ibv_cq *cq, const char *when)
{
	struct ibv_wc wc[2];
	int got = 0;

	for (int ms = 0; got < 2 && ms < 10000; ms++) {
		int n = ibv_poll_cq(cq, 2 - got, wc + got);

		if (n < 0)
			break;
		got += n;
		if (got < 2)
			usleep(1000);
	}
	CHECK(got == 2, "%s: %d of 2 completions", when, got);
	for (int k = 0; k < got; k++)
		CHECK(wc[k].status == IBV_WC_SUCCESS, "%s: completion %s", when,
		      ibv_wc_status_str(wc[k].status));
	return got;
}

/*
 * Until GO exists, read the channel as an application sleeping on it
 * would: every datagram the attacker managed to queue is taken, and one
 * that woke a CQ would be an event here.
 */
static void wait_file(const char *path, struct ibv_comp_channel *ch)
{
	struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
	struct stat st;

	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	for (int ms = 0; stat(path, &st); ms += 10) {
		struct ibv_cq *cq;
		void *cq_ctx;

		if (ms > 600000)
			die("waiting for GO");
		if (poll(&pf, 1, 10) <= 0)
			continue;
		while (!ibv_get_cq_event(ch, &cq, &cq_ctx)) {
			CHECK(0, "completion event delivered while attacked");
			ibv_ack_cq_events(cq, 1);
		}
	}
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *cq2;
	struct ibv_qp *qp;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct pollfd pf;
	sib_context_t *sctx;
	sib_worker_t *w;
	static char buf[4096];
	void *cq_ctx;
	FILE *f;

	if (argc != 3) {
		fprintf(stderr, "usage: sib_users_victim READY GO\n");
		return 2;
	}
	if (sib_context_create(NULL, &sctx) || sib_worker_create(sctx, NULL, &w))
		die("libsib worker");
	list = ibv_get_device_list(NULL);
	if (!list || !(ctx = ibv_open_device(list[0])))
		die("open device");
	ch = ibv_create_comp_channel(ctx);
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE |
			     IBV_ACCESS_REMOTE_WRITE) : NULL;
	cq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	cq2 = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	if (!mr || !cq || !cq2)
		die("objects");
	memset(&qi, 0, sizeof(qi));
	qi.send_cq = qi.recv_cq = cq;
	qi.qp_type = IBV_QPT_RC;
	qi.cap.max_send_wr = qi.cap.max_recv_wr = 8;
	qi.cap.max_send_sge = qi.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &qi);
	if (!qp)
		die("create qp");
	connect_self(ctx, qp);
	if (ibv_req_notify_cq(cq2, 0))
		die("arm");
	send_self(qp, mr, buf); /* cq not armed: no event due */

	f = fopen(argv[1], "w");
	if (!f || fprintf(f, "%u %d\n", qp->qp_num, (int)getpid()) < 0 || fclose(f))
		die("READY");
	wait_file(argv[2], ch);

	/* async events: none may have come */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	pf = (struct pollfd){ .fd = ctx->async_fd, .events = POLLIN };
	if (poll(&pf, 1, 200) > 0) {
		struct ibv_async_event ev;

		if (!ibv_get_async_event(ctx, &ev)) {
			CHECK(0, "async event %s delivered", ibv_event_type_str(ev.event_type));
			ibv_ack_async_event(&ev);
		}
	}
	/* completion events: none is due on either CQ */
	errno = 0;
	if (!ibv_get_cq_event(ch, &cq, &cq_ctx)) {
		CHECK(0, "completion event delivered");
		ibv_ack_cq_events(cq, 1);
	} else {
		CHECK(errno == EAGAIN, "ibv_get_cq_event: %s (EAGAIN expected)",
		      strerror(errno));
	}
	CHECK(!ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) && qa.qp_state == IBV_QPS_RTS,
	      "QP state %d (RTS expected)", qa.qp_state);
	poll_two(cq, "before");
	send_self(qp, mr, buf);
	poll_two(cq, "after");
	if (fails)
		return 1;
	printf("victim: ok qpn %u: no event, QP RTS, traffic flows\n", qp->qp_num);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_destroy_cq(cq2);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_destroy_comp_channel(ch);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	sib_worker_destroy(w);
	sib_context_destroy(sctx);
	return 0;
}
