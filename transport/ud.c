/*
 * ud.c: a worker's UD QP, which carries the connection handshake and the
 * liveness pings across hosts (host.c), and the address handles it sends
 * through, one per (gid, lid), kept until the worker goes.  Its buffers:
 * UD_NRECV receive slots, then UD_NSEND send slots used in turn.
 */
#include <stdlib.h>
#include <string.h>

#include "sib_int.h"

#define UD_QKEY 0x51b0b0u
#define UD_BUF 512
#define UD_NRECV 64
#define UD_NSEND 64

struct sib_ah {
	sib_link_t link;
	uint8_t gid[16];
	uint16_t lid;
	struct ibv_ah *ah;
};

void sib_ud_post_recv(sib_worker_t *w, uint32_t i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)w->ubuf + (size_t)i * UD_BUF,
			       .length = UD_BUF, .lkey = w->umr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(w->ud, &wr, &bad))
		sib_log("UD receive post failed");
}

int sib_ud_setup(sib_worker_t *w)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = w->ucq, .recv_cq = w->ucq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = UD_NSEND, .max_recv_wr = UD_NRECV,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qkey = UD_QKEY };
	size_t len = (size_t)(UD_NRECV + UD_NSEND) * UD_BUF;

	w->ubuf = calloc(1, len);
	if (!w->ubuf)
		return -1;
	w->umr = ibv_reg_mr(w->pd, w->ubuf, len, IBV_ACCESS_LOCAL_WRITE);
	w->ud = w->umr ? ibv_create_qp(w->pd, &ia) : NULL;
	if (!w->ud || ibv_modify_qp(w->ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				    IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(w->ud, &a, IBV_QP_STATE))
		return -1;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 1 };
	if (ibv_modify_qp(w->ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return -1;
	for (uint32_t i = 0; i < UD_NRECV; i++)
		sib_ud_post_recv(w, i);
	return 0;
}

/* The path to a port: a GID that is not ours goes global (the UDP link). */
void sib_av_fill(sib_worker_t *w, struct ibv_ah_attr *av,
		 const uint8_t gid[16], uint16_t lid)
{
	memset(av, 0, sizeof(*av));
	av->dlid = lid;
	av->port_num = 1;
	if (memcmp(gid, w->gid.raw, 16)) {
		av->is_global = 1;
		memcpy(av->grh.dgid.raw, gid, 16);
		av->grh.sgid_index = 0;
		av->grh.hop_limit = 64;
	}
}

static struct ibv_ah *ud_ah(sib_worker_t *w, const uint8_t gid[16], uint16_t lid)
{
	struct ibv_ah_attr av;
	struct sib_ah *a;

	for (sib_link_t *e = w->ahs.next; e != &w->ahs; e = e->next) {
		a = SIB_CONTAINER(e, struct sib_ah, link);
		if (a->lid == lid && !memcmp(a->gid, gid, 16))
			return a->ah;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	sib_av_fill(w, &av, gid, lid);
	a->ah = ibv_create_ah(w->pd, &av);
	if (!a->ah) {
		free(a);
		return NULL;
	}
	memcpy(a->gid, gid, 16);
	a->lid = lid;
	sib_list_add_tail(&w->ahs, &a->link);
	return a->ah;
}

int sib_ud_send(sib_worker_t *w, const uint8_t gid[16], uint16_t lid,
		uint32_t qpn, struct sib_hs *m)
{
	uint32_t i = UD_NRECV + (w->ud_send_next++ % UD_NSEND);
	uint8_t *p = w->ubuf + (size_t)i * UD_BUF;
	struct ibv_ah *ah = ud_ah(w, gid, lid);
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = sizeof(*m),
			       .lkey = w->umr->lkey };
	struct ibv_send_wr wr = { .wr_id = UINT64_MAX, .sg_list = &sge,
				  .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (!ah)
		return -1;
	m->magic = SIB_HS_MAGIC;
	m->from_id = w->id;
	m->from_host = w->ctx->host_key;
	m->ud_qpn = w->ud->qp_num;
	m->lid = w->port.lid;
	memcpy(m->gid, w->gid.raw, 16);
	memcpy(p, m, sizeof(*m));
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = UD_QKEY;
	return ibv_post_send(w->ud, &wr, &bad);
}

uint8_t *sib_ud_buf(sib_worker_t *w, uint64_t i)
{
	return w->ubuf + i * UD_BUF;
}

void sib_ud_ahs_destroy(sib_worker_t *w)
{
	while (!sib_list_empty(&w->ahs)) {
		struct sib_ah *a = SIB_CONTAINER(w->ahs.next, struct sib_ah, link);

		ibv_destroy_ah(a->ah);
		sib_list_del(&a->link);
		free(a);
	}
}
