/*
 * The ibv_cq_ex polling interface (ibv_create_cq_ex(3)): start_poll /
 * next_poll / end_poll walk the CQ one completion at a time, and the
 * ibv_wc_read_*() calls read the current one.
 *
 * A batch holds the CQ's poll lock from a successful start_poll to
 * end_poll, so that two threads polling one CQ each see whole batches (a
 * CQ created IBV_CREATE_CQ_ATTR_SINGLE_THREADED skips the lock).  On
 * ENOENT or an error, start_poll releases it itself: the man page says
 * end_poll must not follow a failed start_poll.
 */
#include <errno.h>
#include <string.h>

#include "verbs_int.h"

/* Read the next completion into cq->cur and the public wr_id / status. */
static int cq_read_next(struct vb_cq *cq)
{
	int got = hca_cq_poll(cq->h, 1, &cq->cur.wc, &cq->cur.ts);

	if (got < 0)
		return errno ? errno : EIO;
	if (got == 0)
		return ENOENT;
	cq->cq.wr_id = cq->cur.wc.wr_id;
	cq->cq.status = cq->cur.wc.status;
	return 0;
}

static int start_poll(struct ibv_cq_ex *ibcq, struct ibv_poll_cq_attr *attr)
{
	struct vb_cq *cq = vb_cq_ex(ibcq);
	int rc;

	if (attr && attr->comp_mask)
		return EINVAL;
	if (!cq->single_threaded)
		pthread_mutex_lock(&cq->poll_lock);
	rc = cq_read_next(cq);
	if (rc && !cq->single_threaded)
		pthread_mutex_unlock(&cq->poll_lock);
	return rc;
}

static int next_poll(struct ibv_cq_ex *ibcq)
{
	return cq_read_next(vb_cq_ex(ibcq));
}

static void end_poll(struct ibv_cq_ex *ibcq)
{
	struct vb_cq *cq = vb_cq_ex(ibcq);

	if (!cq->single_threaded)
		pthread_mutex_unlock(&cq->poll_lock);
}

static const struct ibv_wc *cur(struct ibv_cq_ex *ibcq)
{
	return &vb_cq_ex(ibcq)->cur.wc;
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *c)
{
	return cur(c)->opcode;
}

static uint32_t read_vendor_err(struct ibv_cq_ex *c)
{
	return cur(c)->vendor_err;
}

static uint32_t read_byte_len(struct ibv_cq_ex *c)
{
	return cur(c)->byte_len;
}

static __be32 read_imm_data(struct ibv_cq_ex *c)
{
	return cur(c)->imm_data;
}

static uint32_t read_qp_num(struct ibv_cq_ex *c)
{
	return cur(c)->qp_num;
}

static uint32_t read_src_qp(struct ibv_cq_ex *c)
{
	return cur(c)->src_qp;
}

static unsigned int read_wc_flags(struct ibv_cq_ex *c)
{
	return cur(c)->wc_flags;
}

static uint32_t read_slid(struct ibv_cq_ex *c)
{
	return cur(c)->slid;
}

static uint8_t read_sl(struct ibv_cq_ex *c)
{
	return cur(c)->sl;
}

static uint8_t read_dlid_path_bits(struct ibv_cq_ex *c)
{
	return cur(c)->dlid_path_bits;
}

/* In HCA clock units: hca_core_clock is 1 GHz, so nanoseconds. */
static uint64_t read_completion_ts(struct ibv_cq_ex *c)
{
	return vb_cq_ex(c)->cur.ts;
}

/*
 * The readers of fields softib never produces (they cannot be asked for
 * at creation): defined anyway, so that a stray call reads zero instead
 * of jumping through NULL.
 */
static uint64_t read_zero_u64(struct ibv_cq_ex *c)
{
	return 0;
}

static uint16_t read_cvlan(struct ibv_cq_ex *c)
{
	return 0;
}

static uint32_t read_flow_tag(struct ibv_cq_ex *c)
{
	return 0;
}

static void read_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *tm_info)
{
	memset(tm_info, 0, sizeof(*tm_info));
}

void vb_cq_ex_init_ops(struct vb_cq *cq)
{
	struct ibv_cq_ex *c = &cq->cq;

	c->start_poll = start_poll;
	c->next_poll = next_poll;
	c->end_poll = end_poll;
	c->read_opcode = read_opcode;
	c->read_vendor_err = read_vendor_err;
	c->read_byte_len = read_byte_len;
	c->read_imm_data = read_imm_data;
	c->read_qp_num = read_qp_num;
	c->read_src_qp = read_src_qp;
	c->read_wc_flags = read_wc_flags;
	c->read_slid = read_slid;
	c->read_sl = read_sl;
	c->read_dlid_path_bits = read_dlid_path_bits;
	c->read_completion_ts = read_completion_ts;
	c->read_cvlan = read_cvlan;
	c->read_flow_tag = read_flow_tag;
	c->read_tm_info = read_tm_info;
	c->read_completion_wallclock_ns = read_zero_u64;
}
