/*
 * Queue pairs: create (plain and extended), open (XRC receive QPs shared
 * by number), modify, query, destroy, the posting ops, multicast
 * attachment, and the small QP queries.
 *
 * XRC (docs/xrc.md): an XRC send QP is an RC send queue without a receive
 * side, whose requests name an XRC SRQ (qp_type.xrc.remote_srqn); an XRC
 * receive QP belongs to its XRC domain, has no queues and no PD, and lives
 * while any handle on it (created or opened, in any process) remains.
 *
 * Every QP is allocated inside a struct ibv_qp_ex (DESIGN.md: the inline
 * ibv_wr_*() calls go through its function pointers); ibv_qp_to_qp_ex()
 * hands it out for QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, as
 * rdma-core does.  The state machine and its attribute rules are the HCA's
 * (hca/qp_modify.c); here ibv_qp.state follows it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "verbs_int.h"

/* Raw packet and driver QPs need a NIC. */
static int qp_type_check(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_UD:
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		return 0;
	case IBV_QPT_RAW_PACKET:
	case IBV_QPT_DRIVER:
		return EOPNOTSUPP;
	default:
		return EINVAL;
	}
}

static bool qp_has_recv_side(enum ibv_qp_type type)
{
	return type != IBV_QPT_XRC_SEND && type != IBV_QPT_XRC_RECV;
}

/*
 * The CQs and SRQ must belong to the context.  An XRC send QP has no
 * receive side: its recv_cq and srq are ignored, as the kernel ignores
 * them for XRC_INI.  An XRC receive QP has no queues at all: it belongs
 * to its domain (vb_create_qp_ex checks that).
 */
static int qp_objects_check(struct ibv_context *context,
			    const struct ibv_qp_init_attr *a)
{
	if (a->qp_type == IBV_QPT_XRC_RECV)
		return 0;
	if (!a->send_cq || a->send_cq->context != context)
		return EINVAL;
	if (!qp_has_recv_side(a->qp_type))
		return 0;
	if (!a->recv_cq || a->recv_cq->context != context)
		return EINVAL;
	if (a->srq && a->srq->context != context)
		return EINVAL;
	return 0;
}

static void qp_fill(struct vb_qp *qp, struct ibv_context *context,
		    struct ibv_pd *pd, const struct ibv_qp_init_attr *a)
{
	struct ibv_qp *q = &qp->qpx.qp_base;
	bool recv_side = qp_has_recv_side(a->qp_type);

	q->context = context;
	q->qp_context = a->qp_context;
	q->pd = pd;
	q->send_cq = a->qp_type == IBV_QPT_XRC_RECV ? NULL : a->send_cq;
	q->recv_cq = recv_side ? a->recv_cq : NULL;
	q->srq = recv_side ? a->srq : NULL;
	q->qp_num = hca_qp_num(qp->h);
	q->handle = q->qp_num;
	q->state = hca_qp_state(qp->h); /* RESET, or a shared QP's state */
	q->qp_type = a->qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->events_completed = 0;
}

/* A verbs QP around no HCA QP yet: the work-request builder set up. */
static struct vb_qp *qp_alloc(void)
{
	struct vb_qp *qp = calloc(1, sizeof(*qp));
	int rc;

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
	return qp;
}

static void qp_free(struct vb_qp *qp)
{
	int err = errno ? errno : ENOMEM;

	vb_wr_fini(qp);
	free(qp);
	errno = err;
}

/*
 * Any QP type.  pd is NULL for an XRC receive QP, which names its domain
 * in xrcd instead (NULL for every other type).
 */
static struct vb_qp *qp_create(struct ibv_context *context, struct ibv_pd *pd,
			       struct ibv_qp_init_attr *a, struct hca_xrcd *xrcd)
{
	bool recv_side = qp_has_recv_side(a->qp_type);
	struct hca_qp_init init;
	struct vb_qp *qp;
	int rc;

	rc = qp_type_check(a->qp_type);
	if (!rc)
		rc = qp_objects_check(context, a);
	if (rc) {
		errno = rc;
		return NULL;
	}
	qp = qp_alloc();
	if (!qp)
		return NULL;
	init = (struct hca_qp_init){
		.type = a->qp_type,
		.send_cq = a->qp_type != IBV_QPT_XRC_RECV ? vb_cq(a->send_cq)->h : NULL,
		.recv_cq = recv_side ? vb_cq(a->recv_cq)->h : NULL,
		.srq = recv_side && a->srq ? vb_srq(a->srq)->h : NULL,
		.xrcd = xrcd,
		.cap = a->qp_type != IBV_QPT_XRC_RECV ? a->cap : (struct ibv_qp_cap){ 0 },
		.sq_sig_all = a->sq_sig_all,
	};
	errno = 0;
	qp->h = hca_qp_create(pd ? vb_pd(pd)->h : NULL, &init, &qp->qpx.qp_base);
	if (!qp->h) {
		qp_free(qp);
		return NULL;
	}
	a->cap = init.cap; /* at least what was asked (ibv_create_qp(3)) */
	qp->cap = init.cap;
	qp_fill(qp, context, pd, a);
	vb_obj_add(vb_ctx(context), &qp->obj, &qp->qpx.qp_base);
	return qp;
}

/*
 * An XRC receive QP needs a domain, which only ibv_create_qp_ex() can
 * name: here it is refused.
 */
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct vb_qp *qp;

	if (!pd || !qp_init_attr || qp_init_attr->qp_type == IBV_QPT_XRC_RECV) {
		errno = EINVAL;
		return NULL;
	}
	qp = qp_create(pd->context, pd, qp_init_attr, NULL);
	return qp ? &qp->qpx.qp_base : NULL;
}

#define QP_COMP_MASK_OK (IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | \
			 IBV_QP_INIT_ATTR_CREATE_FLAGS | \
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
	case IBV_QPT_XRC_SEND:
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
 * carries (or softib implements) are refused.  An XRC receive QP names
 * its domain (IBV_QP_INIT_ATTR_XRCD) and nothing else: no PD, no CQs; the
 * domain is ignored for the other types, the PD for it.
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
	if (a->qp_type == IBV_QPT_XRC_RECV) {
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd ||
		    a->xrcd->context != context) {
			errno = EINVAL;
			return NULL;
		}
	} else if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd ||
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
	if (a->qp_type == IBV_QPT_XRC_RECV)
		qp = qp_create(context, NULL, (struct ibv_qp_init_attr *)a,
			       vb_xrcd(a->xrcd)->h);
	else
		qp = qp_create(context, a->pd, (struct ibv_qp_init_attr *)a, NULL);
	if (!qp)
		return NULL;
	qp->is_qp_ex = a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qp->qpx.comp_mask = 0;
	return &qp->qpx.qp_base;
}

#define QP_OPEN_MASK_OK (IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | \
			 IBV_QP_OPEN_ATTR_CONTEXT | IBV_QP_OPEN_ATTR_TYPE)

/*
 * The op behind ibv_open_qp(): a new handle on an XRC receive QP of the
 * domain, the only shareable kind.  The QP lives while any handle, in any
 * process, remains (ibv_open_qp(3): destroy "destroys the underlying QP
 * if it has no other references").  A number that names no receive QP of
 * the domain: EINVAL.
 */
struct ibv_qp *vb_open_qp(struct ibv_context *context,
			  struct ibv_qp_open_attr *a)
{
	const uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
			      IBV_QP_OPEN_ATTR_TYPE;
	struct ibv_qp_init_attr init;
	struct vb_qp *qp;

	if (!context || !a) {
		errno = EINVAL;
		return NULL;
	}
	if (a->comp_mask & ~(uint32_t)QP_OPEN_MASK_OK) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & need) != need || !a->xrcd ||
	    a->xrcd->context != context || a->qp_type != IBV_QPT_XRC_RECV) {
		errno = EINVAL;
		return NULL;
	}
	qp = qp_alloc();
	if (!qp)
		return NULL;
	errno = 0;
	qp->h = hca_qp_open(vb_xrcd(a->xrcd)->h, a->qp_num, &qp->qpx.qp_base);
	if (!qp->h) {
		qp_free(qp);
		return NULL;
	}
	init = (struct ibv_qp_init_attr){
		.qp_context = (a->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ?
			      a->qp_context : NULL,
		.qp_type = IBV_QPT_XRC_RECV,
	};
	qp_fill(qp, context, NULL, &init);
	vb_obj_add(vb_ctx(context), &qp->obj, &qp->qpx.qp_base);
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

/*
 * As the kernel's uverbs layer does before a device sees a modify: an XRC
 * half ignores (rather than refuses) the attributes of the other half —
 * the responder's on the send side, the requester's on the receive side —
 * since programs (perftest) configure both halves with the RC set.
 */
int vb_qp_mask_used(enum ibv_qp_type type, int mask)
{
	switch (type) {
	case IBV_QPT_XRC_SEND:
		return mask & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	case IBV_QPT_XRC_RECV:
		return mask & ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
				IBV_QP_RNR_RETRY);
	default:
		return mask;
	}
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	int rc;

	if (!qp || !attr)
		return EINVAL;
	rc = hca_qp_modify(vb_qp(qp)->h, attr, vb_qp_mask_used(qp->qp_type, attr_mask));
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

/*
 * An XRC receive QP has no send queue, and neither XRC half a receive
 * queue (its receives are posted to XRC SRQs): nothing to post there.
 */
int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		 struct ibv_send_wr **bad)
{
	struct ibv_send_wr *dummy;

	if (qp->qp_type == IBV_QPT_XRC_RECV) {
		*(bad ? bad : &dummy) = wr;
		return EINVAL;
	}
	if (qp->qp_type == IBV_QPT_UD)
		return vb_post_send_ud(vb_qp(qp)->h, wr, bad ? bad : &dummy);
	return hca_qp_post_send(vb_qp(qp)->h, wr, bad ? bad : &dummy);
}

int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		 struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *dummy;

	if (!qp_has_recv_side(qp->qp_type)) {
		*(bad ? bad : &dummy) = wr;
		return EINVAL;
	}
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
