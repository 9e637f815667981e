/*
 * The legacy OFED 1.x XRC API (DESIGN.md, decision 2), exported at
 * SOFTIB_XRC_1.0, as a thin layer over the same HCA objects as the modern
 * API: a legacy domain is an HCA XRC domain (hca_xrcd_open, so a legacy
 * and a modern open of one file reach one domain), a legacy XRC SRQ is
 * the verbs SRQ of srq.c, a receive QP is an HCA XRC target QP, and
 * "registered" means "holds an HCA handle on it" — the same reference that
 * ibv_create_qp_ex() and ibv_open_qp() take, so a QP made with either API
 * is usable, and kept alive, through the other (docs/xrc.md).
 *
 * The prototypes and the legacy layouts are those of softib's public
 * header (include/infiniband/verbs.h), included here after the private
 * headers so that only this file sees its renaming macros.
 *
 * Per process and domain, the registrations are a list of HCA handles:
 * OFED registers a process once, however many times it asks, and its
 * unregister ends that one registration.  Their async events are OFED's:
 * the QP named by number with IBV_XRC_QP_EVENT_FLAG set (context.c hands
 * them here).  Calls that name a QP this process has not registered
 * (modify, query) take a handle for the duration of the call.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_int.h"
#include "include/infiniband/verbs.h"

struct vb_xrc_reg {
	struct vb_xrc_reg *next;
	struct hca_qp *h;
	struct vb_obj obj;              /* user: this struct; named by number */
};

struct vb_xrc_dom {
	struct ibv_xrc_domain d;
	struct hca_xrcd *h;
	pthread_mutex_t lock;           /* regs, and every use of their handles */
	struct vb_xrc_reg *regs;
	atomic_int srqs;                /* XRC SRQs made through it (srq.c) */
};

static atomic_uint next_handle = 1;

static struct vb_xrc_dom *dom_of(struct ibv_xrc_domain *d)
{
	return vb_container_of(d, struct vb_xrc_dom, d);
}

void vb_xrc_legacy_event(softib_rdma_async_event *event, uint32_t qpn)
{
	struct softib_ofed_async_event *e = (void *)event;

	e->event_type = (enum ibv_event_type)(e->event_type | IBV_XRC_QP_EVENT_FLAG);
	e->element.xrc_qp_num = qpn;
}

/* ---- domains ---- */

/*
 * fd -1: a private domain (OFED: "the only legal value for oflag is
 * O_CREAT", which softib does not insist on).  Otherwise the domain of
 * the file's inode on this host, made if O_CREAT allows.
 */
struct ibv_xrc_domain *ibv_open_xrc_domain(struct ibv_context *context,
					   int fd, int oflag)
{
	struct vb_xrc_dom *dom;
	int err;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	dom = calloc(1, sizeof(*dom));
	if (!dom) {
		errno = ENOMEM;
		return NULL;
	}
	errno = 0;
	dom->h = hca_xrcd_open(vb_ctx(context)->hctx, fd, oflag);
	if (!dom->h) {
		err = errno ? errno : ENOMEM;
		free(dom);
		errno = err;
		return NULL;
	}
	dom->d.context = context;
	dom->d.handle = atomic_fetch_add(&next_handle, 1);
	pthread_mutex_init(&dom->lock, NULL);
	return &dom->d;
}

/* Unregister (lock held): the QP goes if no other holder remains. */
static void reg_drop(struct vb_xrc_dom *dom, struct vb_xrc_reg **link)
{
	struct vb_xrc_reg *r = *link;

	*link = r->next;
	/* off the event list first: later events of it are dropped */
	vb_obj_del(vb_ctx(dom->d.context), &r->obj);
	hca_qp_destroy(r->h);
	free(r);
}

/*
 * EBUSY while an XRC SRQ made through the domain remains.  Otherwise the
 * process's registrations in the domain end, as at exit, and the domain
 * goes with the last close on the host.
 */
int ibv_close_xrc_domain(struct ibv_xrc_domain *d)
{
	struct vb_xrc_dom *dom;
	int rc;

	if (!d)
		return EINVAL;
	dom = dom_of(d);
	if (atomic_load(&dom->srqs))
		return EBUSY;
	pthread_mutex_lock(&dom->lock);
	while (dom->regs)
		reg_drop(dom, &dom->regs);
	pthread_mutex_unlock(&dom->lock);
	rc = hca_xrcd_close(dom->h);
	if (rc)
		return rc;
	pthread_mutex_destroy(&dom->lock);
	free(dom);
	return 0;
}

/* ---- SRQs ---- */

/*
 * An XRC SRQ of the domain: receives what XRC send QPs address to its
 * number (srq->xrc_srq_num, the public handle) through any receive QP of
 * the domain; its completions go to cq.  ibv_destroy_srq() destroys it.
 */
struct ibv_srq *ibv_create_xrc_srq(struct ibv_pd *pd,
				   struct ibv_xrc_domain *domain,
				   struct ibv_cq *cq,
				   struct ibv_srq_init_attr *srq_init_attr)
{
	struct vb_xrc_dom *dom;

	if (!pd || !domain || !cq || !srq_init_attr ||
	    domain->context != pd->context || cq->context != pd->context) {
		errno = EINVAL;
		return NULL;
	}
	dom = dom_of(domain);
	return vb_srq_create(pd, srq_init_attr->srq_context,
			     &srq_init_attr->attr, dom->h, cq, &dom->srqs);
}

/* ---- receive QPs ---- */

static struct vb_xrc_reg **reg_find(struct vb_xrc_dom *dom, uint32_t qpn)
{
	struct vb_xrc_reg **link;

	for (link = &dom->regs; *link; link = &(*link)->next)
		if (hca_qp_num((*link)->h) == qpn)
			return link;
	return NULL;
}

/* Register through a new handle (lock held): h from create or open. */
static int reg_add(struct vb_xrc_dom *dom, struct vb_xrc_reg *r, struct hca_qp *h)
{
	r->h = h;
	r->obj.xrc_legacy_qpn = hca_qp_num(h);
	vb_obj_add(vb_ctx(dom->d.context), &r->obj, r);
	r->next = dom->regs;
	dom->regs = r;
	return 0;
}

/*
 * init_attr->xrc_domain names the domain; every other field is ignored
 * (OFED's header says so).  The creator is registered: the QP lives until
 * it, and every process that registers later, has unregistered.
 */
int ibv_create_xrc_rcv_qp(struct ibv_qp_init_attr *init_attr,
			  uint32_t *rcv_qpn)
{
	struct hca_qp_init init = { .type = IBV_QPT_XRC_RECV };
	struct vb_xrc_dom *dom;
	struct vb_xrc_reg *r;
	struct hca_qp *h;

	if (!init_attr || !rcv_qpn || !init_attr->xrc_domain)
		return EINVAL;
	dom = dom_of(init_attr->xrc_domain);
	r = calloc(1, sizeof(*r));
	if (!r)
		return ENOMEM;
	init.xrcd = dom->h;
	pthread_mutex_lock(&dom->lock);
	errno = 0;
	h = hca_qp_create(NULL, &init, r);
	if (!h) {
		int err = errno ? errno : ENOMEM;

		pthread_mutex_unlock(&dom->lock);
		free(r);
		return err;
	}
	reg_add(dom, r, h);
	*rcv_qpn = hca_qp_num(h);
	pthread_mutex_unlock(&dom->lock);
	return 0;
}

/* OFED registers a process once: a second registration is a no-op. */
int ibv_reg_xrc_rcv_qp(struct ibv_xrc_domain *domain, uint32_t qpn)
{
	struct vb_xrc_dom *dom;
	struct vb_xrc_reg *r;
	struct hca_qp *h;
	int rc = 0;

	if (!domain)
		return EINVAL;
	dom = dom_of(domain);
	r = calloc(1, sizeof(*r));
	if (!r)
		return ENOMEM;
	pthread_mutex_lock(&dom->lock);
	if (reg_find(dom, qpn)) {
		free(r);
		goto out;
	}
	errno = 0;
	h = hca_qp_open(dom->h, qpn, r);
	if (!h) {
		rc = errno ? errno : EINVAL;
		free(r);
		goto out;
	}
	reg_add(dom, r, h);
out:
	pthread_mutex_unlock(&dom->lock);
	return rc;
}

/* EINVAL when this process holds no registration on qpn in the domain. */
int ibv_unreg_xrc_rcv_qp(struct ibv_xrc_domain *domain, uint32_t qpn)
{
	struct vb_xrc_dom *dom;
	struct vb_xrc_reg **link;
	int rc = 0;

	if (!domain)
		return EINVAL;
	dom = dom_of(domain);
	pthread_mutex_lock(&dom->lock);
	link = reg_find(dom, qpn);
	if (link)
		reg_drop(dom, link);
	else
		rc = EINVAL;
	pthread_mutex_unlock(&dom->lock);
	return rc;
}

/*
 * The handle a by-number call works through (lock held): this process's
 * registration, or else a handle taken for the call (*temp), which fails
 * with EINVAL if qpn names no receive QP of the domain.
 */
static struct hca_qp *handle_for(struct vb_xrc_dom *dom, uint32_t qpn,
				 struct hca_qp **temp, int *rc)
{
	struct vb_xrc_reg **link = reg_find(dom, qpn);

	*temp = NULL;
	if (link)
		return (*link)->h;
	errno = 0;
	*temp = hca_qp_open(dom->h, qpn, NULL);
	if (!*temp)
		*rc = errno ? errno : EINVAL;
	return *temp;
}

static void handle_done(struct hca_qp *temp)
{
	if (temp)
		hca_qp_destroy(temp);
}

/*
 * The transitions, and the attributes each requires, are the receive QP's
 * rows of the HCA's modify table, as for ibv_modify_qp() (which also
 * ignores the requester's attributes here): the QP need not go beyond RTR
 * to receive.
 */
int ibv_modify_xrc_rcv_qp(struct ibv_xrc_domain *domain, uint32_t qpn,
			  struct ibv_qp_attr *attr, int attr_mask)
{
	struct vb_xrc_dom *dom;
	struct hca_qp *h, *temp;
	int rc = 0;

	if (!domain || !attr)
		return EINVAL;
	dom = dom_of(domain);
	pthread_mutex_lock(&dom->lock);
	h = handle_for(dom, qpn, &temp, &rc);
	if (h)
		rc = hca_qp_modify(h, attr, vb_qp_mask_used(IBV_QPT_XRC_RECV,
							     attr_mask));
	handle_done(temp);
	pthread_mutex_unlock(&dom->lock);
	return rc;
}

/* Where each attribute of struct ibv_qp_attr lives, by its mask bit. */
struct attr_field {
	int mask;
	size_t off, len;
};

#define FIELD(bit, f) { bit, offsetof(struct ibv_qp_attr, f), \
			sizeof(((struct ibv_qp_attr *)0)->f) }
static const struct attr_field attr_fields[] = {
	FIELD(IBV_QP_STATE, qp_state),
	FIELD(IBV_QP_STATE, sq_draining),       /* meaningful with the state */
	FIELD(IBV_QP_CUR_STATE, cur_qp_state),
	FIELD(IBV_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify),
	FIELD(IBV_QP_ACCESS_FLAGS, qp_access_flags),
	FIELD(IBV_QP_PKEY_INDEX, pkey_index),
	FIELD(IBV_QP_PORT, port_num),
	FIELD(IBV_QP_QKEY, qkey),
	FIELD(IBV_QP_AV, ah_attr),
	FIELD(IBV_QP_PATH_MTU, path_mtu),
	FIELD(IBV_QP_TIMEOUT, timeout),
	FIELD(IBV_QP_RETRY_CNT, retry_cnt),
	FIELD(IBV_QP_RNR_RETRY, rnr_retry),
	FIELD(IBV_QP_RQ_PSN, rq_psn),
	FIELD(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic),
	FIELD(IBV_QP_ALT_PATH, alt_ah_attr),
	FIELD(IBV_QP_ALT_PATH, alt_pkey_index),
	FIELD(IBV_QP_ALT_PATH, alt_port_num),
	FIELD(IBV_QP_ALT_PATH, alt_timeout),
	FIELD(IBV_QP_MIN_RNR_TIMER, min_rnr_timer),
	FIELD(IBV_QP_SQ_PSN, sq_psn),
	FIELD(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic),
	FIELD(IBV_QP_PATH_MIG_STATE, path_mig_state),
	FIELD(IBV_QP_CAP, cap),
	FIELD(IBV_QP_DEST_QPN, dest_qp_num),
	FIELD(IBV_QP_RATE_LIMIT, rate_limit),
};
#undef FIELD

/*
 * Seed 000 (ibv_query_xrc_rcv_qp(3)): the attributes attr_mask selects,
 * with the values ibv_modify_xrc_rcv_qp() set, through attr; the page
 * lets a device return more, softib returns exactly those and leaves the
 * rest of *attr as it was.  init_attr (may be NULL) gets the QP's type,
 * its domain, and no queues: a receive QP has none.  An unknown qpn
 * (none in this domain) is EINVAL.
 */
int ibv_query_xrc_rcv_qp(struct ibv_xrc_domain *domain, uint32_t qpn,
			 struct ibv_qp_attr *attr, int attr_mask,
			 struct ibv_qp_init_attr *init_attr)
{
	struct vb_xrc_dom *dom;
	struct hca_qp *h, *temp;
	struct ibv_qp_attr all;
	softib_rdma_qp_init_attr init;
	int rc = 0;

	if (!domain || !attr)
		return EINVAL;
	dom = dom_of(domain);
	pthread_mutex_lock(&dom->lock);
	h = handle_for(dom, qpn, &temp, &rc);
	if (h)
		rc = hca_qp_query(h, &all, attr_mask, &init);
	handle_done(temp);
	pthread_mutex_unlock(&dom->lock);
	if (rc)
		return rc;
	for (size_t i = 0; i < sizeof(attr_fields) / sizeof(attr_fields[0]); i++) {
		const struct attr_field *f = &attr_fields[i];

		if (attr_mask & f->mask)
			memcpy((char *)attr + f->off, (char *)&all + f->off, f->len);
	}
	if (init_attr) {
		memset(init_attr, 0, sizeof(*init_attr));
		init_attr->qp_type = init.qp_type;
		init_attr->xrc_domain = domain;
	}
	return 0;
}
