/*
 * Helpers shared by the storm programs (event_storm.c, async_storm.c):
 * open the device, make and connect RC QPs, swap fixed-size records with
 * a parent over a socketpair. Header-only (with tp_common.c: the error
 * exit and the clock).
 */
#ifndef STORM_UTIL_H
#define STORM_UTIL_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tp_common.h"

/* Where a peer's QP is: what connecting to it takes. */
struct storm_addr {
	uint32_t qpn;
	uint16_t lid;
	uint8_t gid[16];
};

struct storm_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_port_attr port;
	union ibv_gid gid;
};

static inline void storm_open(struct storm_dev *d)
{
	struct ibv_device **list;
	int n, err;

	list = ibv_get_device_list(&n);
	if (!list || n < 1)
		tp_die("no device (is build/lib the libibverbs in use?)");
	d->ctx = ibv_open_device(list[0]);
	if (!d->ctx)
		tp_die("ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	if ((err = ibv_query_port(d->ctx, 1, &d->port)))
		tp_die("ibv_query_port: %s", strerror(err));
	if ((err = ibv_query_gid(d->ctx, 1, 0, &d->gid)))
		tp_die("ibv_query_gid: %s", strerror(err));
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd)
		tp_die("ibv_alloc_pd: %s", strerror(errno));
}

static inline struct ibv_qp *storm_qp(struct storm_dev *d, struct ibv_cq *scq,
				      struct ibv_cq *rcq, uint32_t sq, uint32_t rq)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC, .send_cq = scq, .recv_cq = rcq,
		.cap = { .max_send_wr = sq, .max_recv_wr = rq, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = 16 },
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
	int err;

	if (!qp)
		tp_die("ibv_create_qp: %s", strerror(errno));
	if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				 IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		tp_die("ibv_modify_qp to INIT: %s", strerror(err));
	return qp;
}

static inline void storm_addr_of(struct storm_dev *d, struct ibv_qp *qp,
				 struct storm_addr *out)
{
	out->qpn = qp->qp_num;
	out->lid = d->port.lid;
	memcpy(out->gid, d->gid.raw, 16);
}

static inline void storm_connect(struct storm_dev *d, struct ibv_qp *qp,
				 const struct storm_addr *peer)
{
	struct ibv_qp_attr a = { 0 };
	int err;

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = d->port.active_mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	if (d->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.hop_limit = 1;
	}
	if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		tp_die("ibv_modify_qp to RTR: %s", strerror(err));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		tp_die("ibv_modify_qp to RTS: %s", strerror(err));
}

static inline void storm_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			tp_die("write to the parent: %s", strerror(errno));
		c += w;
		n -= (size_t)w;
	}
}

static inline void storm_read_all(int fd, void *p, size_t n)
{
	char *c = p;

	while (n) {
		ssize_t r = read(fd, c, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			tp_die("read from the parent: %s", r ? strerror(errno) : "closed");
		c += r;
		n -= (size_t)r;
	}
}

#endif
