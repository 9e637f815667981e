/*
 * Queue pairs: create (plain and extended), modify, query, destroy, the
 * posting ops, multicast attachment, and the small QP queries.
 *
 * Every QP is allocated inside a struct ibv_qp_ex (DESIGN.md: the inline
 * ibv_wr_*() calls go through its function pointers); ibv_qp_to_qp_ex()
 * hands it out for QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, as
 * rdma-core does.  The state machine and its attribute rules are the HCA's
 * (hca/qp_modify.c); here ibv_qp.state follows it.
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs_int.h"

/* XRC QPs come with issue 5; raw packet and driver QPs need a NIC. */
static int qp_type_check(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_UD:
		return 0;
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
	case IBV_QPT_RAW_PACKET:
	case IBV_QPT_DRIVER:
		return EOPNOTSUPP;
	default:
		return EINVAL;
	}
}

/* The CQs and SRQ must belong to the PD's context. */
static int qp_objects_check(struct ibv_pd *pd, const struct ibv_qp_init_attr *a)
{
	if (!a->send_cq || !a->recv_cq)
		return EINVAL;
	if (a->send_cq->context != pd->context ||
	    a->recv_cq->context != pd->context)
		return EINVAL;
	if (a->srq && a->srq->context != pd->context)
		return EINVAL;
	return 0;
}

static void qp_fill(struct vb_qp *qp, struct ibv_pd *pd,
		    const struct ibv_qp_init_attr *a)
{
	struct ibv_qp *q = &qp->qpx.qp_base;

	q->context = pd->context;
	q->qp_context = a->qp_context;
	q->pd = pd;
	q->send_cq = a->send_cq;
	q->recv_cq = a->recv_cq;
	q->srq = a->srq;
	q->qp_num = hca_qp_num(qp->h);
	q->handle = q->qp_num;
	q->state = IBV_QPS_RESET;
	q->qp_type = a->qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->events_completed = 0;
}

static struct vb_qp *qp_create(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct hca_qp_init init;
	struct vb_qp *qp;
	int rc;

	if (!pd || !a) {
		errno = EINVAL;
		return NULL;
	}
	rc = qp_type_check(a->qp_type);
	if (!rc)
		rc = qp_objects_check(pd, a);
	if (rc) {
		errno = rc;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	rc = vb_wr_init(qp);
	if (rc) {
		free(qp);
		errno = rc;
		return NULL;
	}
	init = (struct hca_qp_init){
		.type = a->qp_type,
		.send_cq = vb_cq(a->send_cq)->h,
		.recv_cq = vb_cq(a->recv_cq)->h,
		.srq = a->srq ? vb_srq(a->srq)->h : NULL,
		.cap = a->cap,
		.sq_sig_all = a->sq_sig_all,
	};
	qp->h = hca_qp_create(vb_pd(pd)->h, &init, &qp->qpx.qp_base);
	if (!qp->h) {
		rc = errno ? errno : ENOMEM;
		vb_wr_fini(qp);
		free(qp);
		errno = rc;
		return NULL;
	}
	a->cap = init.cap; /* at least what was asked (ibv_create_qp(3)) */
	qp->cap = init.cap;
	qp_fill(qp, pd, a);
	vb_obj_add(vb_ctx(pd->context), &qp->obj, &qp->qpx.qp_base);
	return qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct vb_qp *qp = qp_create(pd, qp_init_attr);

	return qp ? &qp->qpx.qp_base : NULL;
}

#define QP_COMP_MASK_OK (IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | \
			 IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)

/* The ibv_wr_*() opcodes each transport carries (ibv_post_send(3)). */
static uint64_t send_ops_of(enum ibv_qp_type type)
{
	const uint64_t uc = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;

	switch (type) {
	case IBV_QPT_UD:
		return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	case IBV_QPT_UC:
		return uc;
	case IBV_QPT_RC:
		return uc | IBV_QP_EX_WITH_RDMA_READ |
		       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	default:
		return 0;
	}
}

/*
 * The op behind ibv_create_qp_ex() when more than the PD is given.  No
 * creation flag is supported yet; send ops beyond what the QP type
 * carries (or softib implements) are refused.
 */
struct ibv_qp *vb_create_qp_ex(struct ibv_context *context,
			       struct ibv_qp_init_attr_ex *a)
{
	struct vb_qp *qp;

	if (!context || !a) {
		errno = EINVAL;
		return NULL;
	}
	if (a->comp_mask & ~(uint32_t)QP_COMP_MASK_OK) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd ||
	    a->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	     (a->send_ops_flags & ~send_ops_of(a->qp_type)))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	qp = qp_create(a->pd, (struct ibv_qp_init_attr *)a);
	if (!qp)
		return NULL;
	qp->is_qp_ex = a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qp->qpx.comp_mask = 0;
	return &qp->qpx.qp_base;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
	struct vb_qp *qp;

	if (!ibqp)
		return NULL;
	qp = vb_qp(ibqp);
	return qp->is_qp_ex ? &qp->qpx : NULL;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	int rc;

	if (!qp || !attr)
		return EINVAL;
	rc = hca_qp_modify(vb_qp(qp)->h, attr, attr_mask);
	if (rc)
		return rc;
	qp->state = hca_qp_state(vb_qp(qp)->h);
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct ibv_qp_init_attr scratch;
	struct ibv_qp_init_attr *init = init_attr ? init_attr : &scratch;
	int rc;

	if (!qp || !attr)
		return EINVAL;
	rc = hca_qp_query(vb_qp(qp)->h, attr, attr_mask, init);
	if (rc)
		return rc;
	/* the object pointers are ours, not the HCA's */
	init->qp_context = qp->qp_context;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->srq = qp->srq;
	qp->state = attr->qp_state;
	return 0;
}

/*
 * EBUSY while attached to a multicast group (ibv_destroy_qp(3)); then the
 * QP leaves the event list and destroy waits for its async events to be
 * acknowledged (ibv_get_async_event(3)).
 */
int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct vb_qp *qp;
	int rc;

	if (!ibqp)
		return EINVAL;
	qp = vb_qp(ibqp);
	rc = hca_qp_destroy(qp->h);
	if (rc)
		return rc;
	vb_obj_del(vb_ctx(ibqp->context), &qp->obj);
	vb_obj_wait_acked(&ibqp->mutex, &ibqp->cond, &ibqp->events_completed,
			  qp->obj.reported[VB_EV_ASYNC]);
	vb_wr_fini(qp);
	pthread_cond_destroy(&ibqp->cond);
	pthread_mutex_destroy(&ibqp->mutex);
	free(qp);
	return 0;
}

/* ---- the data-path ops ---- */

int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		 struct ibv_send_wr **bad)
{
	struct ibv_send_wr *dummy;

	return hca_qp_post_send(vb_qp(qp)->h, wr, bad ? bad : &dummy);
}

int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		 struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *dummy;

	return hca_qp_post_recv(vb_qp(qp)->h, wr, bad ? bad : &dummy);
}

/* ---- multicast ---- */

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return hca_qp_attach_mcast(vb_qp(qp)->h, gid, lid);
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return hca_qp_detach_mcast(vb_qp(qp)->h, gid, lid);
}

/* ---- small queries ---- */

/* Enhanced Connection Establishment is a vendor negotiation: none here. */
int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

/*
 * Whether the bytes of a message land in order: softib promises only what
 * the IB spec promises (the completion, not the order of the bytes before
 * it), so the answer is "no guarantee".
 */
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
			       uint32_t flags)
{
	return 0;
}
