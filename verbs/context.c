/*
 * Device contexts: opening and closing softib0, the ops tables that
 * rdma-core 44's inline verbs dispatch through, and the async events of a
 * context with the bookkeeping that keeps a destroyed object out of them.
 *
 * The context is a full struct verbs_context (DESIGN.md, decision 1):
 * abi_compat marks it extended and `sz` covers every op, so the inline
 * wrappers (ibv_query_port, ibv_create_qp_ex, ibv_open_xrcd, ...) reach
 * the ops set here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs_int.h"

/* ---- live objects and their events ---- */

void vb_obj_add(struct vb_context *c, struct vb_obj *o, void *user)
{
	o->user = user;
	memset(o->reported, 0, sizeof(o->reported));
	pthread_mutex_lock(&c->objs_lock);
	o->next = c->objs.next;
	o->prev = &c->objs;
	c->objs.next->prev = o;
	c->objs.next = o;
	pthread_mutex_unlock(&c->objs_lock);
}

/* After this, no event names the object: `reported` is final. */
void vb_obj_del(struct vb_context *c, struct vb_obj *o)
{
	pthread_mutex_lock(&c->objs_lock);
	o->prev->next = o->next;
	o->next->prev = o->prev;
	o->next = o->prev = o;
	pthread_mutex_unlock(&c->objs_lock);
}

/*
 * Count an event as handed out for `user`, if that object is still alive.
 * An event queued before its object was destroyed finds it gone and is
 * dropped.  (Were a new object allocated at the same address meanwhile, it
 * would receive the stale event: the HCA names objects by pointer only.)
 */
bool vb_obj_report(struct vb_context *c, void *user, enum vb_ev_kind kind)
{
	bool found = false;

	pthread_mutex_lock(&c->objs_lock);
	for (struct vb_obj *o = c->objs.next; o != &c->objs; o = o->next) {
		if (o->user == user) {
			o->reported[kind]++;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&c->objs_lock);
	return found;
}

bool vb_obj_report_qp(struct vb_context *c, void *user, uint32_t *legacy_qpn)
{
	bool found = false;

	*legacy_qpn = 0;
	pthread_mutex_lock(&c->objs_lock);
	for (struct vb_obj *o = c->objs.next; o != &c->objs; o = o->next) {
		if (o->user == user) {
			*legacy_qpn = o->xrc_legacy_qpn;
			if (!o->xrc_legacy_qpn)
				o->reported[VB_EV_ASYNC]++;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&c->objs_lock);
	return found;
}

void vb_obj_wait_acked(pthread_mutex_t *mutex, pthread_cond_t *cond,
		       const uint32_t *done, uint32_t reported)
{
	pthread_mutex_lock(mutex);
	while (*done != reported)
		pthread_cond_wait(cond, mutex);
	pthread_mutex_unlock(mutex);
}

/* ---- async events ---- */

/* Which member of ibv_async_event.element an event type fills. */
enum vb_elem { EL_NONE, EL_CQ, EL_QP, EL_SRQ, EL_PORT, EL_WQ };

static const enum vb_elem event_elem[] = {
	[IBV_EVENT_CQ_ERR] = EL_CQ,
	[IBV_EVENT_QP_FATAL] = EL_QP,
	[IBV_EVENT_QP_REQ_ERR] = EL_QP,
	[IBV_EVENT_QP_ACCESS_ERR] = EL_QP,
	[IBV_EVENT_COMM_EST] = EL_QP,
	[IBV_EVENT_SQ_DRAINED] = EL_QP,
	[IBV_EVENT_PATH_MIG] = EL_QP,
	[IBV_EVENT_PATH_MIG_ERR] = EL_QP,
	[IBV_EVENT_DEVICE_FATAL] = EL_NONE,
	[IBV_EVENT_PORT_ACTIVE] = EL_PORT,
	[IBV_EVENT_PORT_ERR] = EL_PORT,
	[IBV_EVENT_LID_CHANGE] = EL_PORT,
	[IBV_EVENT_PKEY_CHANGE] = EL_PORT,
	[IBV_EVENT_SM_CHANGE] = EL_PORT,
	[IBV_EVENT_SRQ_ERR] = EL_SRQ,
	[IBV_EVENT_SRQ_LIMIT_REACHED] = EL_SRQ,
	[IBV_EVENT_QP_LAST_WQE_REACHED] = EL_QP,
	[IBV_EVENT_CLIENT_REREGISTER] = EL_PORT,
	[IBV_EVENT_GID_CHANGE] = EL_PORT,
	[IBV_EVENT_WQ_FATAL] = EL_WQ,
};

static enum vb_elem elem_of(enum ibv_event_type type)
{
	if ((unsigned)type >= sizeof(event_elem) / sizeof(event_elem[0]))
		return EL_NONE;
	return event_elem[type];
}

/* Fill `event` from `ev`; false when the event must be dropped. */
static bool async_event_fill(struct vb_context *c, const struct hca_async_ev *ev,
			     struct ibv_async_event *event)
{
	uint32_t legacy_qpn;

	memset(event, 0, sizeof(*event));
	event->event_type = ev->type;
	switch (elem_of(ev->type)) {
	case EL_CQ:
		event->element.cq = ev->user;
		break;
	case EL_QP:
		/* an XRC receive QP of the legacy API is named by number */
		if (!ev->user || !vb_obj_report_qp(c, ev->user, &legacy_qpn))
			return false;
		if (legacy_qpn)
			vb_xrc_legacy_event(event, legacy_qpn);
		else
			event->element.qp = ev->user;
		return true;
	case EL_SRQ:
		event->element.srq = ev->user;
		break;
	case EL_PORT:
		event->element.port_num = ev->port;
		return true;
	case EL_WQ:
		return false; /* softib has no WQs */
	case EL_NONE:
		return true;
	}
	return ev->user && vb_obj_report(c, ev->user, VB_EV_ASYNC);
}

int ibv_get_async_event(struct ibv_context *context,
			struct ibv_async_event *event)
{
	struct vb_context *c;
	struct hca_async_ev ev;

	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	c = vb_ctx(context);
	for (;;) {
		int rc = hca_ctx_get_async_event(c->hctx, &ev);

		if (rc) {
			errno = rc;
			return -1;
		}
		if (async_event_fill(c, &ev, event))
			return 0;
	}
}

static void ack_one(pthread_mutex_t *mutex, pthread_cond_t *cond,
		    uint32_t *done)
{
	pthread_mutex_lock(mutex);
	++*done;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mutex);
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (!event)
		return;
	switch (elem_of(event->event_type)) {
	case EL_CQ: {
		struct ibv_cq *cq = event->element.cq;

		ack_one(&cq->mutex, &cq->cond, &cq->async_events_completed);
		break;
	}
	case EL_QP: {
		struct ibv_qp *qp = event->element.qp;

		ack_one(&qp->mutex, &qp->cond, &qp->events_completed);
		break;
	}
	case EL_SRQ: {
		struct ibv_srq *srq = event->element.srq;

		ack_one(&srq->mutex, &srq->cond, &srq->events_completed);
		break;
	}
	default:
		break;
	}
}

/* ---- open / close ---- */

static const struct ibv_context_ops softib_ctx_ops = {
	.poll_cq = vb_poll_cq,
	.req_notify_cq = vb_req_notify_cq,
	.post_srq_recv = vb_post_srq_recv,
	.post_send = vb_post_send,
	.post_recv = vb_post_recv,
};

/* The "not supported" stubs fill the other fields (ops_unsupported.c). */
static void set_ops(struct verbs_context *vctx)
{
	vctx->context.ops = softib_ctx_ops;
	vb_set_unsupported_ops(vctx);
	vctx->query_port = vb_query_port;
	vctx->query_device_ex = vb_query_device_ex;
	vctx->create_cq_ex = vb_create_cq_ex;
	vctx->create_qp_ex = vb_create_qp_ex;
	vctx->create_srq_ex = vb_create_srq_ex;
	vctx->get_srq_num = vb_get_srq_num;
	vctx->open_xrcd = vb_open_xrcd;
	vctx->close_xrcd = vb_close_xrcd;
	vctx->open_qp = vb_open_qp;
}

/*
 * cmd_fd has no commands to carry (there is no kernel side), but it must
 * be a real descriptor: some programs inspect or close it.  /dev/null is
 * harmless to anything done with it.
 */
static int open_cmd_fd(int async_fd)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		fd = fcntl(async_fd, F_DUPFD_CLOEXEC, 0);
	return fd;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct vb_context *c;
	struct ibv_context *ctx;
	int err;

	if (!vb_device_is_ours(device)) {
		errno = ENODEV;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	ctx = &c->vctx.context;
	c->dev = hca_dev_get();
	if (!c->dev)
		goto err_free;
	c->hctx = hca_ctx_open(c->dev, ctx);
	if (!c->hctx)
		goto err_dev;
	ctx->async_fd = hca_ctx_async_fd(c->hctx);
	ctx->cmd_fd = open_cmd_fd(ctx->async_fd);
	if (ctx->cmd_fd < 0)
		goto err_ctx;

	ctx->device = device;
	ctx->num_comp_vectors = 1;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->vctx.sz = sizeof(struct verbs_context);
	set_ops(&c->vctx);
	pthread_mutex_init(&ctx->mutex, NULL);
	pthread_mutex_init(&c->objs_lock, NULL);
	c->objs.next = c->objs.prev = &c->objs;
	return ctx;

err_ctx:
	err = errno;
	hca_ctx_close(c->hctx);
	errno = err;
err_dev:
	err = errno;
	hca_dev_put(c->dev);
	errno = err;
err_free:
	err = errno ? errno : ENOMEM;
	free(c);
	errno = err;
	return NULL;
}

int ibv_close_device(struct ibv_context *context)
{
	struct vb_context *c;

	if (!context)
		return EINVAL;
	c = vb_ctx(context);
	hca_ctx_close(c->hctx);
	hca_dev_put(c->dev);
	close(context->cmd_fd);
	pthread_mutex_destroy(&context->mutex);
	pthread_mutex_destroy(&c->objs_lock);
	free(c);
	return 0;
}

/* Sharing a context across processes needs a kernel: not possible here. */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}
