/*
 * softib_osu_verbs.c: softib_osu's verbs objects: the device opened, one
 * PD, CQ, RC QP and registered buffer (send and receive halves), and the
 * QP connected to the peer's with what the two sides swap over TCP
 * (struct wire), after checking that their options agree.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "softib_osu.h"

static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int n, i;

	list = ibv_get_device_list(&n);
	if (!list)
		bench_die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (i == n)
		bench_die("no device %s among %d (is build/lib the libibverbs "
		    "in use?)", name, n);
	ctx = ibv_open_device(list[i]);
	if (!ctx)
		bench_die("ibv_open_device %s: %s", name, strerror(errno));
	ibv_free_device_list(list);
	return ctx;
}

void osu_post_recv(struct bench *b)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(b->buf + b->region),
			       .length = (uint32_t)b->region,
			       .lkey = b->mr->lkey };
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
	int err = ibv_post_recv(b->qp, &wr, &bad);

	if (err)
		bench_die("ibv_post_recv: %s", strerror(err));
}

void osu_setup(struct bench *b)
{
	struct ibv_device_attr dattr;
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = RQ_DEPTH,
			 .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 256 },
	};
	struct ibv_qp_attr attr;
	int err;

	b->ctx = open_device(b->o.dev);
	if (ibv_query_device(b->ctx, &dattr))
		bench_die("ibv_query_device failed");
	if ((err = ibv_query_port(b->ctx, 1, &b->port)))
		bench_die("ibv_query_port: %s", strerror(err));
	if (b->port.state != IBV_PORT_ACTIVE)
		bench_die("port 1 of %s is not active", b->o.dev);
	if ((err = ibv_query_gid(b->ctx, 1, b->o.gidx < 0 ? 0 : b->o.gidx,
				 &b->gid)))
		bench_die("ibv_query_gid: %s", strerror(err));
	b->rd_atom = dattr.max_qp_init_rd_atom < 16 ?
		     (uint8_t)dattr.max_qp_init_rd_atom : 16;
	if (b->rd_atom == 0)
		b->rd_atom = 1;

	b->pd = ibv_alloc_pd(b->ctx);
	if (!b->pd)
		bench_die("ibv_alloc_pd: %s", strerror(errno));
	b->region = b->o.max < 64 ? 64 : b->o.max;
	b->buf = aligned_alloc(4096, (2 * b->region + 4095) & ~(size_t)4095);
	if (!b->buf)
		bench_die("cannot allocate 2 x %zu bytes", b->region);
	memset(b->buf, b->server ? 's' : 'c', 2 * b->region);
	b->mr = ibv_reg_mr(b->pd, b->buf, 2 * b->region,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ);
	if (!b->mr)
		bench_die("ibv_reg_mr of %zu bytes: %s", 2 * b->region,
		    strerror(errno));
	b->cq = ibv_create_cq(b->ctx, SQ_DEPTH + RQ_DEPTH, NULL, NULL, 0);
	if (!b->cq)
		bench_die("ibv_create_cq: %s", strerror(errno));
	init.send_cq = init.recv_cq = b->cq;
	b->qp = ibv_create_qp(b->pd, &init);
	if (!b->qp) {
		/* Perhaps no inline data: ask again without. */
		init.cap.max_inline_data = 0;
		b->qp = ibv_create_qp(b->pd, &init);
	}
	if (!b->qp)
		bench_die("ibv_create_qp (RC): %s", strerror(errno));
	b->max_inline = init.cap.max_inline_data;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = 1;
	attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
			       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	err = ibv_modify_qp(b->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (err)
		bench_die("ibv_modify_qp to INIT: %s", strerror(err));
	for (int i = 0; i < RQ_DEPTH; i++)
		osu_post_recv(b);
}

void osu_connect_qp(struct bench *b)
{
	struct wire me = { 0 }, peer;
	struct ibv_qp_attr attr;
	uint32_t psn = (uint32_t)lrand48() & 0xffffff;
	int err;

	me.magic = htobe32(WIRE_MAGIC);
	me.qpn = htobe32(b->qp->qp_num);
	me.psn = htobe32(psn);
	me.rkey = htobe32(b->mr->rkey);
	me.addr = htobe64((uintptr_t)b->buf);
	me.lid = htobe16(b->port.lid);
	me.tests = htobe32(b->o.tests);
	me.op = htobe32(b->o.op);
	me.max = htobe32(b->o.max);
	me.iters = htobe32(b->o.iters);
	memcpy(me.gid, b->gid.raw, 16);
	bench_tcp_write(b->sock, &me, sizeof(me));
	bench_tcp_read(b->sock, &peer, sizeof(peer), 60);
	if (be32toh(peer.magic) != WIRE_MAGIC)
		bench_die("the peer is not softib_osu (bad magic)");
	if (be32toh(peer.tests) != b->o.tests || be32toh(peer.op) != b->o.op ||
	    be32toh(peer.max) != b->o.max || be32toh(peer.iters) != b->o.iters)
		bench_die("the two sides were given different options "
		    "(-t -o -m -n must agree): peer has tests %#x op %s max %u iters %u",
		    be32toh(peer.tests),
		    be32toh(peer.op) < 3 ? osu_op_names[be32toh(peer.op)] : "?",
		    be32toh(peer.max), be32toh(peer.iters));
	b->raddr = be64toh(peer.addr);
	b->rkey = be32toh(peer.rkey);

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = b->port.active_mtu;
	attr.dest_qp_num = be32toh(peer.qpn);
	attr.rq_psn = be32toh(peer.psn);
	attr.max_dest_rd_atomic = b->rd_atom;
	attr.min_rnr_timer = 1;
	attr.ah_attr.dlid = be16toh(peer.lid);
	attr.ah_attr.port_num = 1;
	if (b->o.gidx >= 0 || b->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		attr.ah_attr.is_global = 1;
		memcpy(attr.ah_attr.grh.dgid.raw, peer.gid, 16);
		attr.ah_attr.grh.hop_limit = 1;
		attr.ah_attr.grh.sgid_index = b->o.gidx < 0 ? 0 : (uint8_t)b->o.gidx;
	}
	err = ibv_modify_qp(b->qp, &attr, IBV_QP_STATE | IBV_QP_AV |
			    IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (err)
		bench_die("ibv_modify_qp to RTR: %s", strerror(err));
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = psn;
	attr.max_rd_atomic = b->rd_atom;
	err = ibv_modify_qp(b->qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (err)
		bench_die("ibv_modify_qp to RTS: %s", strerror(err));
	bench_barrier(b->sock); /* both QPs are ready to receive */
}

