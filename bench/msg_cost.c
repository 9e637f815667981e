/*
 * msg_cost: the work of one small message on the shared-memory path, for
 * instruction counts (perf stat -e instructions:u), which the noise of a
 * shared machine does not move as it moves a ping-pong's time.
 *
 *   msg_cost [-n MESSAGES] [-s SIZE] [-o send|write] [-d DEV]
 *
 * One process, two RC QPs connected to each other: each message is one
 * ibv_post_send (which executes it: the requester, the responder and the
 * copy) and the polls that take its completions (a SEND's two, a WRITE's
 * one). Nothing waits on another process, so the instructions per message
 * are the difference of two runs with different -n, divided by the
 * difference of their n. It prints the time per message too, for what it
 * is worth on a loaded host.
 */
#include <getopt.h>
#include <stdbool.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

const char bench_prog[] = "msg_cost";

static void connect_qp(struct ibv_qp *qp, uint32_t dest, const struct ibv_port_attr *pa,
		       const union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
						    IBV_ACCESS_REMOTE_WRITE };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		bench_die("modify to INIT failed");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa->active_mtu;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = pa->lid;
	a.ah_attr.port_num = 1;
	if (pa->link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.hop_limit = 1;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		bench_die("modify to RTR failed");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		bench_die("modify to RTS failed");
}

int main(int argc, char **argv)
{
	const char *want = "softib0";
	uint64_t n = 1000000, size = 8, t;
	bool write = false;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	uint8_t *buf;
	int c;

	while ((c = getopt(argc, argv, "n:s:o:d:h")) != -1) {
		if (c == 'n')
			n = bench_parse_size(optarg, "message count");
		else if (c == 's')
			size = bench_parse_size(optarg, "size");
		else if (c == 'o')
			write = !strcmp(optarg, "write");
		else if (c == 'd')
			want = optarg;
		else {
			fprintf(stderr, "usage: msg_cost [-n MESSAGES] [-s SIZE] "
				"[-o send|write] [-d DEV]\n");
			return 2;
		}
	}
	if (!size || size > (1 << 20))
		bench_die("-s must be in 1 .. 1m");
	list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i] && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		bench_die("no device %s", want);
	if (ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, 0, &gid))
		bench_die("query port/gid failed");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	buf = calloc(2, size);
	mr = pd && buf ? ibv_reg_mr(pd, buf, 2 * size, IBV_ACCESS_LOCAL_WRITE |
				    IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!cq || !mr)
		bench_die("setup failed");
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 64, .max_recv_wr = 64,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	a = ibv_create_qp(pd, &ia);
	b = ibv_create_qp(pd, &ia);
	if (!a || !b)
		bench_die("ibv_create_qp failed");
	connect_qp(a, b->qp_num, &pa, &gid);
	connect_qp(b, a->qp_num, &pa, &gid);

	struct ibv_sge ss = { (uintptr_t)buf, (uint32_t)size, mr->lkey };
	struct ibv_sge rs = { (uintptr_t)buf + size, (uint32_t)size, mr->lkey };
	struct ibv_send_wr sw = { .sg_list = &ss, .num_sge = 1,
				  .opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	struct ibv_recv_wr rw = { .sg_list = &rs, .num_sge = 1 }, *rbad;
	struct ibv_wc wc[4];
	int want_wc = write ? 1 : 2;

	sw.wr.rdma.remote_addr = (uintptr_t)buf + size;
	sw.wr.rdma.rkey = mr->rkey;
	t = bench_now_ns();
	for (uint64_t i = 0; i < n; i++) {
		int got = 0;

		if (!write && ibv_post_recv(b, &rw, &rbad))
			bench_die("ibv_post_recv failed");
		if (ibv_post_send(a, &sw, &sbad))
			bench_die("ibv_post_send failed");
		while (got < want_wc) {
			int k = ibv_poll_cq(cq, 4, wc);

			if (k < 0 || (k > 0 && wc[0].status != IBV_WC_SUCCESS))
				bench_die("a completion in error");
			got += k;
		}
	}
	t = bench_now_ns() - t;
	printf("%s of %llu B: %.1f ns per message (%llu messages)\n",
	       write ? "RDMA WRITE" : "SEND", (unsigned long long)size,
	       (double)t / (double)n, (unsigned long long)n);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
