/*
 * Shared receive queues: create (plain, extended, XRC), modify, query,
 * destroy, receive posting and the SRQ number.
 *
 * An XRC SRQ receives what XRC send QPs address to it by number through any
 * XRC receive QP of its domain; its completions go to its own CQ.  Every
 * SRQ's public `handle` is its SRQ number, which is what the legacy
 * header's srq->xrc_srq_num reads (include/infiniband/verbs.h).
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs_int.h"

struct ibv_srq *vb_srq_create(struct ibv_pd *pd, void *srq_context,
			      struct ibv_srq_attr *attr, struct hca_xrcd *xrcd,
			      struct ibv_cq *cq, atomic_int *xrc_srqs)
{
	struct vb_context *c;
	struct vb_srq *srq;
	struct ibv_srq_attr a;

	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	c = vb_ctx(pd->context);
	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	/* srq_limit is irrelevant at creation (ibv_create_srq(3)) */
	a = (struct ibv_srq_attr){ .max_wr = attr->max_wr, .max_sge = attr->max_sge };

	if (xrcd)
		srq->h = hca_srq_create_xrc(vb_pd(pd)->h, xrcd,
					    cq ? vb_cq(cq)->h : NULL, &a, &srq->srq);
	else
		srq->h = hca_srq_create(vb_pd(pd)->h, &a, &srq->srq);
	if (!srq->h) {
		int err = errno ? errno : ENOMEM;

		free(srq);
		errno = err;
		return NULL;
	}
	attr->max_wr = a.max_wr;
	attr->max_sge = a.max_sge;
	srq->srq.context = pd->context;
	srq->srq.srq_context = srq_context;
	srq->srq.pd = pd;
	srq->srq.handle = hca_srq_num(srq->h);
	pthread_mutex_init(&srq->srq.mutex, NULL);
	pthread_cond_init(&srq->srq.cond, NULL);
	srq->xrc_srqs = xrc_srqs;
	if (xrc_srqs)
		atomic_fetch_add(xrc_srqs, 1);
	vb_obj_add(c, &srq->obj, &srq->srq);
	return &srq->srq;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
			       struct ibv_srq_init_attr *srq_init_attr)
{
	if (!srq_init_attr) {
		errno = EINVAL;
		return NULL;
	}
	return vb_srq_create(pd, srq_init_attr->srq_context,
			     &srq_init_attr->attr, NULL, NULL, NULL);
}

#define SRQ_COMP_MASK_OK (IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | \
			  IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ)

/* An XRC SRQ names its domain and its CQ, of the same context as its PD. */
static struct ibv_srq *srq_create_xrc(struct ibv_context *context,
				      struct ibv_srq_init_attr_ex *a)
{
	const uint32_t need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;

	if ((a->comp_mask & need) != need || !a->xrcd || !a->cq ||
	    a->xrcd->context != context || a->cq->context != context) {
		errno = EINVAL;
		return NULL;
	}
	return vb_srq_create(a->pd, a->srq_context, &a->attr,
			     vb_xrcd(a->xrcd)->h, a->cq, NULL);
}

/*
 * The op behind ibv_create_srq_ex() when more than the PD (and a basic
 * type) is given.  A CQ and a domain are meaningful only for XRC SRQs; a
 * basic SRQ ignores them.
 */
struct ibv_srq *vb_create_srq_ex(struct ibv_context *context,
				 struct ibv_srq_init_attr_ex *a)
{
	if (!context || !a) {
		errno = EINVAL;
		return NULL;
	}
	if (a->comp_mask & ~(uint32_t)SRQ_COMP_MASK_OK) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
	    a->srq_type != IBV_SRQT_BASIC && a->srq_type != IBV_SRQT_XRC) {
		errno = a->srq_type == IBV_SRQT_TM ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd ||
	    a->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type == IBV_SRQT_XRC)
		return srq_create_xrc(context, a);
	return vb_srq_create(a->pd, a->srq_context, &a->attr, NULL, NULL, NULL);
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		   int srq_attr_mask)
{
	if (!srq || !srq_attr)
		return EINVAL;
	return hca_srq_modify(vb_srq(srq)->h, srq_attr, srq_attr_mask);
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
	if (!srq || !srq_attr)
		return EINVAL;
	return hca_srq_query(vb_srq(srq)->h, srq_attr);
}

/*
 * EBUSY while a QP uses the SRQ (ibv_create_srq(3)); then, as for CQs,
 * wait for its async events to be acknowledged.
 */
int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct vb_srq *srq;
	int rc;

	if (!ibsrq)
		return EINVAL;
	srq = vb_srq(ibsrq);
	rc = hca_srq_destroy(srq->h);
	if (rc)
		return rc;
	vb_obj_del(vb_ctx(ibsrq->context), &srq->obj);
	vb_obj_wait_acked(&ibsrq->mutex, &ibsrq->cond, &ibsrq->events_completed,
			  srq->obj.reported[VB_EV_ASYNC]);
	if (srq->xrc_srqs)
		atomic_fetch_sub(srq->xrc_srqs, 1);
	pthread_cond_destroy(&ibsrq->cond);
	pthread_mutex_destroy(&ibsrq->mutex);
	free(srq);
	return 0;
}

int vb_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *dummy;

	return hca_srq_post_recv(vb_srq(srq)->h, wr, bad ? bad : &dummy);
}

int vb_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	if (!srq || !srq_num)
		return EINVAL;
	*srq_num = hca_srq_num(vb_srq(srq)->h);
	return 0;
}
