/*
 * inline_nopoll: a receiver that never polls still gets its data.
 *
 * Two processes, an RC QP each, connected over softib0. The receiver
 * posts one receive and then only watches its buffer; the sender SENDs a
 * small message (which travels through the receive CQ's inline pool,
 * hca/cq_inline.c). The receiver's progress thread must copy it into the
 * buffer without any ibv_poll_cq (within STALL_MS); the poll that follows
 * must then return the completion, successful, with the right length.
 * Exit 0 when both hold. Run it with and without SOFTIB_NO_CMA=1.
 *
 *   inline_nopoll [LEN [resize]]
 *       LEN: message of LEN bytes (default 31, which rides in the
 *       completion's CQ slot, hca/core/cq_embed.c; a few hundred bytes go
 *       through the inline pool). With "resize", the receiver instead
 *       waits until the send completed, resizes its CQ (the entry and
 *       its payload move to a new ring), then polls: the completion must
 *       be whole and the bytes in place.
 */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STALL_MS 5000
#define MSG "softib: landed without a poll"

static char msg[4096];
static size_t msg_len = sizeof(MSG);
static int resize_mode;

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[4096];
};

static void __attribute__((noreturn)) die(const char *what)
{
	fprintf(stderr, "inline_nopoll: %s\n", what);
	exit(2);
}

static void open_side(struct side *s)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4,
					       .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

	if (!l || !l[0] || !(s->ctx = ibv_open_device(l[0])))
		die("no device");
	ibv_free_device_list(l);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = s->pd ? ibv_create_cq(s->ctx, 16, NULL, NULL, 0) : NULL;
	a.send_cq = a.recv_cq = s->cq;
	s->qp = s->cq ? ibv_create_qp(s->pd, &a) : NULL;
	s->mr = s->qp ? ibv_reg_mr(s->pd, s->buf, sizeof(s->buf),
				   IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!s->mr || ibv_modify_qp(s->qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("verbs objects");
}

static void connect_side(struct side *s, uint32_t peer)
{
	struct ibv_port_attr pa;
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = peer, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = 12, .ah_attr = { .port_num = 1 } };
	struct ibv_qp_attr t = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				 .rnr_retry = 7, .max_rd_atomic = 1 };

	if (ibv_query_port(s->ctx, 1, &pa))
		die("query port");
	r.ah_attr.dlid = pa.lid;
	if (ibv_modify_qp(s->qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER) ||
	    ibv_modify_qp(s->qp, &t, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("connect");
}

/* Resize mode (receiver): the CQ grows under the queued completion. */
static int resized_poll(struct side *s, int sent_fd)
{
	struct ibv_wc wc;
	int ms = 0, n;
	char x;

	/* two messages: the first polled before the resize, so that the
	 * second moves from position 1 of the old ring to 0 of the new */
	if (read(sent_fd, &x, 1) != 1 ||
	    ibv_poll_cq(s->cq, 1, &wc) != 1 || wc.status != IBV_WC_SUCCESS ||
	    ibv_resize_cq(s->cq, 64)) {
		printf("FAIL: no word from the sender, first poll or resize failed\n");
		return 1;
	}
	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0 && ms++ < STALL_MS)
		usleep(1000);
	if (n != 1 || wc.status != IBV_WC_SUCCESS || wc.byte_len != msg_len ||
	    wc.wr_id != 8 || memcmp(s->buf + 2048, msg, msg_len)) {
		printf("FAIL: after a resize, poll gave %d (status %d, length %u)\n", n,
		       n == 1 ? (int)wc.status : -1, n == 1 ? wc.byte_len : 0);
		return 1;
	}
	printf("%zu B moved with its completion by a CQ resize, landed at the poll\n",
	       msg_len);
	return 0;
}

static int receiver(struct side *s, int tell, int sent_fd)
{
	struct ibv_sge g = { (uintptr_t)s->buf, sizeof(s->buf), s->mr->lkey };
	struct ibv_recv_wr w = { .wr_id = 7, .sg_list = &g, .num_sge = 1 }, *bad;
	volatile char *v = s->buf;
	struct ibv_wc wc;
	int ms = 0, n;
	char x = 1;

	struct ibv_sge g2 = { (uintptr_t)s->buf + 2048, 2048, s->mr->lkey };
	struct ibv_recv_wr w2 = { .wr_id = 8, .sg_list = &g2, .num_sge = 1 };

	g.length = resize_mode ? 2048 : sizeof(s->buf);
	if (ibv_post_recv(s->qp, &w, &bad) ||
	    (resize_mode && ibv_post_recv(s->qp, &w2, &bad)) || write(tell, &x, 1) != 1)
		die("post recv");
	if (resize_mode)
		return resized_poll(s, sent_fd);
	while (memcmp((const char *)v, msg, msg_len) && ms < STALL_MS) {
		usleep(1000);
		ms++;
	}
	if (ms >= STALL_MS) {
		printf("FAIL: the payload did not land within %d ms without a poll\n",
		       STALL_MS);
		return 1;
	}
	n = ibv_poll_cq(s->cq, 1, &wc);
	if (n != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != 7 ||
	    wc.byte_len != msg_len) {
		printf("FAIL: after it landed, poll gave %d (status %d, length %u)\n", n,
		       n == 1 ? (int)wc.status : -1, n == 1 ? wc.byte_len : 0);
		return 1;
	}
	printf("%zu B landed without a poll after %d ms; the completion followed\n",
	       msg_len, ms);
	return 0;
}

static int sender(struct side *s, int wait_fd, int sent_fd)
{
	struct ibv_sge g = { (uintptr_t)s->buf, (uint32_t)msg_len, s->mr->lkey };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &g, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	char x;
	int n;

	if (read(wait_fd, &x, 1) != 1)
		die("receiver gone");
	memcpy(s->buf, msg, msg_len);
	for (int i = 0; i <= resize_mode; i++) {
		if (ibv_post_send(s->qp, &w, &bad))
			die("post send");
		while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
			;
		if (n != 1 || wc.status != IBV_WC_SUCCESS)
			die("send completion");
	}
	x = 1;
	if (resize_mode && write(sent_fd, &x, 1) != 1)
		die("tell the receiver");
	return 0;
}

int main(int argc, char **argv)
{
	static struct side s;
	int to_child[2], to_parent[2], st = 0, rc;
	uint32_t mine, peer;
	pid_t pid;

	if (argc > 1)
		msg_len = strtoul(argv[1], NULL, 0);
	resize_mode = argc > 2 && !strcmp(argv[2], "resize");
	if (msg_len < sizeof(MSG) || msg_len > (resize_mode ? 2048 : sizeof(msg))) {
		fprintf(stderr, "usage: inline_nopoll [LEN, %zu..%zu [resize]]\n", sizeof(MSG),
			sizeof(msg));
		return 2;
	}
	memcpy(msg, MSG, sizeof(MSG));
	for (size_t i = sizeof(MSG); i < msg_len; i++)
		msg[i] = (char)(i * 7 + 3);

	if (pipe(to_child) || pipe(to_parent))
		die("pipe");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork");
	open_side(&s);
	mine = s.qp->qp_num;
	if (write(pid ? to_child[1] : to_parent[1], &mine, 4) != 4 ||
	    read(pid ? to_parent[0] : to_child[0], &peer, 4) != 4)
		die("exchange");
	connect_side(&s, peer);
	if (!pid) {
		rc = receiver(&s, to_parent[1], to_child[0]);
		fflush(stdout);
		_exit(rc);
	}
	rc = sender(&s, to_parent[0], to_child[1]);
	waitpid(pid, &st, 0);
	return rc ? rc : WIFEXITED(st) ? WEXITSTATUS(st) : 3;
}
