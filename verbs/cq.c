/*
 * Completion channels and completion queues: creation (plain and
 * extended), resize, destroy, polling, arming, and completion events.
 *
 * Every CQ is allocated inside a struct ibv_cq_ex (DESIGN.md: the inline
 * ibv_start_poll() calls through its function pointers), whichever verb
 * created it; struct ibv_cq is its prefix.  The ibv_cq_ex reader itself
 * lives in cq_ex.c.
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs_int.h"

/* ---- completion channels ---- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct vb_chan *ch;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->h = hca_chan_create(vb_ctx(context)->hctx);
	if (!ch->h) {
		int err = errno ? errno : ENOMEM;

		free(ch);
		errno = err;
		return NULL;
	}
	ch->ch.context = context;
	ch->ch.fd = hca_chan_fd(ch->h);
	ch->ch.refcnt = 0;
	return &ch->ch;
}

static struct vb_chan *vb_chan(struct ibv_comp_channel *ch)
{
	return vb_container_of(ch, struct vb_chan, ch);
}

/* ibv_create_comp_channel(3): fails while a CQ still uses the channel. */
int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct ibv_context *ctx;
	int rc;

	if (!channel)
		return EINVAL;
	ctx = channel->context;
	pthread_mutex_lock(&ctx->mutex);
	rc = channel->refcnt ? EBUSY : hca_chan_destroy(vb_chan(channel)->h);
	pthread_mutex_unlock(&ctx->mutex);
	if (rc)
		return rc;
	free(vb_chan(channel));
	return 0;
}

static void chan_ref(struct ibv_comp_channel *ch, int delta)
{
	if (!ch)
		return;
	pthread_mutex_lock(&ch->context->mutex);
	ch->refcnt += delta;
	pthread_mutex_unlock(&ch->context->mutex);
}

/* ---- creation ---- */

#define CQ_WC_FLAGS_OK \
	((uint64_t)IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
#define CQ_COMP_MASK_OK  IBV_CQ_INIT_ATTR_MASK_FLAGS
#define CQ_FLAGS_OK      IBV_CREATE_CQ_ATTR_SINGLE_THREADED

/*
 * What every CQ creation checks.  A CQ's channel must come from the same
 * context, and its vector must be one of the context's (ibv_create_cq(3)).
 * Parent domains and ignoring overruns are not supported: softib has no
 * parent domains, and an overrun always puts the CQ in error.
 */
static int cq_attr_check(struct ibv_context *context,
			 const struct ibv_cq_init_attr_ex *a)
{
	if (a->cqe < 1 || a->cqe > INT32_MAX)
		return EINVAL;
	if (a->channel && a->channel->context != context)
		return EINVAL;
	if (a->comp_vector >= (uint32_t)context->num_comp_vectors)
		return EINVAL;
	if (a->comp_mask & ~(uint32_t)CQ_COMP_MASK_OK)
		return EOPNOTSUPP;
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (a->flags & ~(uint32_t)CQ_FLAGS_OK))
		return EOPNOTSUPP;
	if (a->wc_flags & ~CQ_WC_FLAGS_OK)
		return EOPNOTSUPP;
	return 0;
}

static struct vb_cq *cq_create(struct ibv_context *context,
			       const struct ibv_cq_init_attr_ex *a)
{
	struct vb_context *c;
	struct vb_cq *cq;
	int rc, hflags = 0;

	if (!context || !a) {
		errno = EINVAL;
		return NULL;
	}
	rc = cq_attr_check(context, a);
	if (rc) {
		errno = rc;
		return NULL;
	}
	c = vb_ctx(context);
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	if (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
		hflags |= HCA_CQ_TIMESTAMPS;
	cq->h = hca_cq_create(c->hctx, (int)a->cqe,
			      a->channel ? vb_chan(a->channel)->h : NULL,
			      hflags, &cq->cq);
	if (!cq->h) {
		rc = errno ? errno : ENOMEM;
		free(cq);
		errno = rc;
		return NULL;
	}
	cq->cq.context = context;
	cq->cq.channel = a->channel;
	cq->cq.cq_context = a->cq_context;
	cq->cq.cqe = hca_cq_size(cq->h);
	cq->cq.handle = 0;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	cq->wc_flags = a->wc_flags;
	cq->single_threaded = (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
			      (a->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
	pthread_mutex_init(&cq->poll_lock, NULL);
	vb_cq_ex_init_ops(cq);
	chan_ref(a->channel, 1);
	vb_obj_add(c, &cq->obj, &cq->cq);
	return cq;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
			     void *cq_context, struct ibv_comp_channel *channel,
			     int comp_vector)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = cqe < 1 ? 0 : (uint32_t)cqe,
		.cq_context = cq_context,
		.channel = channel,
		.comp_vector = comp_vector < 0 ? UINT32_MAX : (uint32_t)comp_vector,
	};
	struct vb_cq *cq = cq_create(context, &a);

	return cq ? ibv_cq_ex_to_cq(&cq->cq) : NULL;
}

/* The op behind the inline ibv_create_cq_ex(). */
struct ibv_cq_ex *vb_create_cq_ex(struct ibv_context *context,
				  struct ibv_cq_init_attr_ex *attr)
{
	struct vb_cq *cq = cq_create(context, attr);

	return cq ? &cq->cq : NULL;
}

/* ---- resize, destroy ---- */

int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct vb_cq *cq;
	int rc;

	if (!ibcq || cqe < 1)
		return EINVAL;
	cq = vb_cq(ibcq);
	rc = hca_cq_resize(cq->h, cqe);
	if (rc)
		return rc;
	ibcq->cqe = hca_cq_size(cq->h);
	return 0;
}

/*
 * EBUSY while a QP uses the CQ (ibv_create_cq(3)).  Once the HCA let go of
 * it, the CQ leaves the event list and destroy waits for the events it
 * handed out to be acknowledged (ibv_get_cq_event(3),
 * ibv_get_async_event(3)).
 */
int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct vb_cq *cq;
	int rc;

	if (!ibcq)
		return EINVAL;
	cq = vb_cq(ibcq);
	rc = hca_cq_destroy(cq->h);
	if (rc)
		return rc;
	vb_obj_del(vb_ctx(ibcq->context), &cq->obj);
	vb_obj_wait_acked(&ibcq->mutex, &ibcq->cond, &ibcq->comp_events_completed,
			  cq->obj.reported[VB_EV_COMP]);
	vb_obj_wait_acked(&ibcq->mutex, &ibcq->cond, &ibcq->async_events_completed,
			  cq->obj.reported[VB_EV_ASYNC]);
	chan_ref(ibcq->channel, -1);
	pthread_mutex_destroy(&cq->poll_lock);
	pthread_cond_destroy(&ibcq->cond);
	pthread_mutex_destroy(&ibcq->mutex);
	free(cq);
	return 0;
}

/* ---- the data-path ops ---- */

int vb_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = hca_cq_poll(vb_cq(cq)->h, n, wc, NULL);

	return got < 0 ? -errno : got;
}

/*
 * Arming a CQ that has no channel succeeds and does nothing: there is no
 * one to notify, which is what hardware does too.
 */
int vb_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	if (!cq->channel)
		return 0;
	return hca_cq_arm(vb_cq(cq)->h, solicited_only);
}

/* ---- completion events ---- */

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
		     void **cq_context)
{
	struct vb_context *c;

	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	c = vb_ctx(channel->context);
	for (;;) {
		void *user;
		int rc = hca_chan_get_event(vb_chan(channel)->h, &user);

		if (rc) {
			errno = rc;
			return -1;
		}
		/* an event for a CQ destroyed since it was raised is dropped */
		if (vb_obj_report(c, user, VB_EV_COMP)) {
			*cq = user;
			*cq_context = (*cq)->cq_context;
			return 0;
		}
	}
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq || !nevents)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}
