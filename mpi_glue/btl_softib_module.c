/*
 * The softib BTL module: limits, peers (add_procs / del_procs), the
 * receive side, descriptors for ob1 (alloc, free, prepare_src), errors,
 * finalize. Sending is btl_softib_send.c.
 */
#include "btl_softib.h"

#include <inttypes.h>
#include <string.h>

#include "opal/datatype/opal_convertor.h"
#include "opal/util/output.h"

static int softib_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
			    struct opal_proc_t **procs,
			    struct mca_btl_base_endpoint_t **peers,
			    opal_bitmap_t *reachable);
static int softib_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
			    struct opal_proc_t **procs,
			    struct mca_btl_base_endpoint_t **peers);
static int softib_finalize(struct mca_btl_base_module_t *btl);
static mca_btl_base_descriptor_t *softib_alloc(
	struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
	uint8_t order, size_t size, uint32_t flags);
static int softib_free(struct mca_btl_base_module_t *btl,
		       mca_btl_base_descriptor_t *des);
static mca_btl_base_descriptor_t *softib_prepare_src(
	struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
	struct opal_convertor_t *conv, uint8_t order, size_t reserve,
	size_t *size, uint32_t flags);
static int softib_register_error(struct mca_btl_base_module_t *btl,
				 mca_btl_base_module_error_cb_fn_t cb);

mca_btl_softib_module_t mca_btl_softib_module = {
	.super = {
		.btl_component = &mca_btl_softib_component.super,
		.btl_add_procs = softib_add_procs,
		.btl_del_procs = softib_del_procs,
		.btl_finalize = softib_finalize,
		.btl_alloc = softib_alloc,
		.btl_free = softib_free,
		.btl_prepare_src = softib_prepare_src,
		.btl_send = mca_btl_softib_send,
		.btl_sendi = mca_btl_softib_sendi,
		.btl_register_error = softib_register_error,
		.btl_put = mca_btl_softib_put,
		.btl_get = mca_btl_softib_get,
		.btl_register_mem = mca_btl_softib_register_mem,
		.btl_deregister_mem = mca_btl_softib_deregister_mem,
		.btl_flush = mca_btl_softib_flush,
		.btl_atomic_op = mca_btl_softib_atomic_op,
		.btl_atomic_fop = mca_btl_softib_atomic_fop,
		.btl_atomic_cswap = mca_btl_softib_atomic_cswap,
	},
};

static void ep_construct(mca_btl_softib_endpoint_t *ep)
{
	ep->proc = NULL;
	ep->ep = NULL;
}
OBJ_CLASS_INSTANCE(mca_btl_softib_endpoint_t, opal_list_item_t, ep_construct,
		   NULL);

int mca_btl_softib_status(sib_status_t st)
{
	switch (st) {
	case SIB_OK:
		return OPAL_SUCCESS;
	case SIB_ERR_NO_MEMORY:
	case SIB_ERR_NO_RESOURCE:
	case SIB_ERR_BUSY:
		return OPAL_ERR_OUT_OF_RESOURCE;
	case SIB_ERR_PEER_FAILED:
		return OPAL_ERR_UNREACH;
	case SIB_ERR_INVALID_PARAM:
	case SIB_ERR_MSG_TOO_LONG:
		return OPAL_ERR_BAD_PARAM;
	case SIB_ERR_UNSUPPORTED:
		return OPAL_ERR_NOT_SUPPORTED;
	default:
		return OPAL_ERROR;
	}
}

/*
 * Defaults before Open MPI's own parameters (btl_softib_eager_limit, ...)
 * are registered over them. Sizes left 0 here are filled at init from
 * libsib's figures for this worker (mca_btl_softib_module_limits), unless
 * the user set them. With put and get (btl_softib_rdma.c) ob1 moves large
 * contiguous messages by RDMA read; with the atomics osc rdma takes it for
 * one-sided windows.
 */
int mca_btl_softib_module_setup(mca_btl_softib_module_t *m)
{
	mca_btl_base_module_t *b = &m->super;

	b->btl_exclusivity = MCA_BTL_EXCLUSIVITY_DEFAULT;
	b->btl_eager_limit = 0;
	b->btl_rndv_eager_limit = 0;
	b->btl_max_send_size = 0;
	b->btl_rdma_pipeline_send_length = 0;
	b->btl_rdma_pipeline_frag_size = 0;
	b->btl_min_rdma_pipeline_size = 0;
	b->btl_flags = MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET |
		       MCA_BTL_FLAGS_RDMA_FLUSH | MCA_BTL_FLAGS_ATOMIC_OPS |
		       MCA_BTL_FLAGS_ATOMIC_FOPS;
	/* 64-bit integer atomics (btl_softib_atomic.c; min and max signed):
	 * no 32-bit, no float, and not GLOB (softib's HCA atomics are not
	 * atomic with the CPU's) */
	b->btl_atomic_flags = MCA_BTL_ATOMIC_SUPPORTS_ADD |
		MCA_BTL_ATOMIC_SUPPORTS_AND | MCA_BTL_ATOMIC_SUPPORTS_OR |
		MCA_BTL_ATOMIC_SUPPORTS_XOR | MCA_BTL_ATOMIC_SUPPORTS_LAND |
		MCA_BTL_ATOMIC_SUPPORTS_LOR | MCA_BTL_ATOMIC_SUPPORTS_LXOR |
		MCA_BTL_ATOMIC_SUPPORTS_SWAP | MCA_BTL_ATOMIC_SUPPORTS_MIN |
		MCA_BTL_ATOMIC_SUPPORTS_MAX | MCA_BTL_ATOMIC_SUPPORTS_CSWAP;
	b->btl_registration_handle_size = mca_btl_softib_handle_size();
	/* libsib's put and get take up to 1 GiB, any alignment, and move
	 * local memory without a registration of ours */
	b->btl_put_limit = b->btl_get_limit = (size_t)1 << 30;
	b->btl_put_alignment = b->btl_get_alignment = 0;
	b->btl_put_local_registration_threshold = SIZE_MAX;
	b->btl_get_local_registration_threshold = SIZE_MAX;
	/* ranking among BTLs that reach the same peer with the same
	 * exclusivity; libsib does not report its link model yet (DESIGN.md
	 * decision 9 puts it in the softib tool): the figures of
	 * docs/udp-link-performance.md, across hosts */
	b->btl_latency = 10;     /* us */
	b->btl_bandwidth = 1000; /* MB/s */
	return mca_btl_base_param_register(
		&mca_btl_softib_component.super.btl_version, b);
}

/* The sizes libsib's protocol table allows this worker. */
int mca_btl_softib_module_limits(mca_btl_softib_module_t *m)
{
	mca_btl_base_module_t *b = &m->super;
	struct sib_worker_attr a;
	sib_status_t st;

	st = sib_worker_query(mca_btl_softib_component.worker, &a);
	if (st != SIB_OK)
		return mca_btl_softib_status(st);
	/* the largest active message libsib carries, less the header of
	 * ours it carries beside the payload */
	size_t max = a.eager_max > 64 ? a.eager_max - 64 : a.eager_max;
	if (!b->btl_max_send_size || b->btl_max_send_size > max)
		b->btl_max_send_size = max;
	if (!b->btl_eager_limit || b->btl_eager_limit > max)
		b->btl_eager_limit = max;
	/* The first fragment of a rendezvous as large as an eager one (the
	 * 1 KiB of the first version only hid the double completion of the
	 * rendezvous request, btl_softib_send.c) */
	if (!b->btl_rndv_eager_limit)
		b->btl_rndv_eager_limit = b->btl_eager_limit;
	if (b->btl_rndv_eager_limit > b->btl_eager_limit)
		b->btl_rndv_eager_limit = b->btl_eager_limit;
	if (mca_btl_softib_component.verbose)
		opal_output(0, "btl softib: worker %u: short %zu, eager %zu: "
			    "eager limit %zu, max send %zu", a.id, a.short_max,
			    a.eager_max, b->btl_eager_limit,
			    b->btl_max_send_size);
	return OPAL_SUCCESS;
}

/* ---- peers ---- */

static int softib_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
			    struct opal_proc_t **procs,
			    struct mca_btl_base_endpoint_t **peers,
			    opal_bitmap_t *reachable)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;

	for (size_t i = 0; i < nprocs; i++) {
		void *addr = NULL;
		size_t len = 0;
		int rc;

		peers[i] = NULL;
		/* a peer without our modex entry has no softib: not ours
		 * to reach (another BTL may) */
		OPAL_MODEX_RECV(rc, &c->super.btl_version,
				&procs[i]->proc_name, &addr, &len);
		if (rc != OPAL_SUCCESS || !addr)
			continue;
		mca_btl_softib_endpoint_t *ep = OBJ_NEW(mca_btl_softib_endpoint_t);
		if (!ep) {
			free(addr);
			return OPAL_ERR_OUT_OF_RESOURCE;
		}
		OPAL_THREAD_LOCK(&c->lock);
		sib_status_t st = sib_ep_create(c->worker, addr, len, &ep->ep);
		OPAL_THREAD_UNLOCK(&c->lock);
		free(addr);
		if (st != SIB_OK) {
			OBJ_RELEASE(ep);
			if (c->verbose)
				opal_output(0, "btl softib: peer %s: %s",
					    OPAL_NAME_PRINT(procs[i]->proc_name),
					    sib_status_string(st));
			continue;
		}
		ep->proc = procs[i];
		peers[i] = ep;
		if (reachable)
			opal_bitmap_set_bit(reachable, (int)i);
	}
	return OPAL_SUCCESS;
}

static int softib_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
			    struct opal_proc_t **procs,
			    struct mca_btl_base_endpoint_t **peers)
{
	for (size_t i = 0; i < nprocs; i++) {
		mca_btl_softib_endpoint_t *ep = peers[i];
		if (!ep)
			continue;
		OPAL_THREAD_LOCK(&mca_btl_softib_component.lock);
		if (ep->ep)
			sib_ep_destroy(ep->ep);
		OPAL_THREAD_UNLOCK(&mca_btl_softib_component.lock);
		ep->ep = NULL;
		OBJ_RELEASE(ep);
		peers[i] = NULL;
	}
	return OPAL_SUCCESS;
}

static int softib_finalize(struct mca_btl_base_module_t *btl)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;

	/* endpoints still held are Open MPI's to delete (del_procs); the
	 * worker's destroy ends what remains */
	if (c->worker && c->verbose) {
		/* the XRC promise, per process: one send QP per host sent to
		 * (docs/xrc.md), whatever the number of peers there */
		struct sib_worker_attr a;

		if (sib_worker_query(c->worker, &a) == SIB_OK)
			opal_output(0, "btl softib: worker %u: %u peers, sent to "
				    "%u hosts, XRC send QPs %u (at most %u), "
				    "receive QPs %u, RMA operations %" PRIu64,
				    a.id, a.eps, a.hosts_sent_to, a.send_qps,
				    a.send_qps_max, a.recv_qps, a.rma_ops);
	}
	if (c->worker)
		sib_worker_destroy(c->worker);
	if (c->ctx)
		sib_context_destroy(c->ctx);
	c->worker = NULL;
	c->ctx = NULL;
	mca_btl_softib_frag_fini();
	return OPAL_SUCCESS;
}

static int softib_register_error(struct mca_btl_base_module_t *btl,
				 mca_btl_base_module_error_cb_fn_t cb)
{
	((mca_btl_softib_module_t *)btl)->error_cb = cb;
	return OPAL_SUCCESS;
}

/* ---- receive ---- */

/*
 * One fragment arrived. Its message header is the BTL tag, and for a
 * sendi ob1's own header behind it; the data follows. Open MPI's callback
 * for the tag reads it where it lies (libsib's receive buffer, valid until
 * we return SIB_OK) through a descriptor on the stack, as the BTL
 * interface allows for received fragments: one segment when ob1's header
 * and the data lie end to end (libsib delivers them so), else two.
 */
sib_status_t mca_btl_softib_recv(void *arg, uint32_t source,
				 const void *header, size_t hlen, void *data,
				 size_t dlen)
{
	mca_btl_softib_module_t *m = arg;
	mca_btl_base_segment_t seg[2];
	mca_btl_base_descriptor_t des;
	const uint8_t *h = header;
	mca_btl_base_tag_t tag;

	(void)source;
	if (OPAL_UNLIKELY(hlen < 1))
		return SIB_ERR_INVALID_PARAM; /* not one of ours */
	tag = h[0];
	const mca_btl_active_message_callback_t *reg =
		mca_btl_base_active_message_trigger + tag;
	if (OPAL_UNLIKELY(!reg->cbfunc))
		return SIB_OK; /* no one listens: dropped, as a NIC would */
	memset(&des, 0, sizeof(des));
	des.des_segments = seg;
	des.des_segment_count = 1;
	if (hlen == 1) {
		seg[0].seg_addr.pval = data;
		seg[0].seg_len = dlen;
	} else {
		seg[0].seg_addr.pval = (void *)(h + 1);
		seg[0].seg_len = hlen - 1;
		if ((const uint8_t *)data == h + hlen)
			seg[0].seg_len += dlen;
		else if (dlen) {
			seg[1].seg_addr.pval = data;
			seg[1].seg_len = dlen;
			des.des_segment_count = 2;
		}
	}
	reg->cbfunc(&m->super, tag, &des, reg->cbdata);
	return SIB_OK;
}

/* ---- descriptors ---- */

static mca_btl_base_descriptor_t *softib_alloc(
	struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
	uint8_t order, size_t size, uint32_t flags)
{
	mca_btl_softib_frag_t *f;

	if (mca_btl_softib_component.verbose > 2)
		opal_output(0, "btl softib: alloc %zu flags %#x", size, flags);
	if (size > btl->btl_max_send_size)
		return NULL;
	f = mca_btl_softib_frag_get(ep, size, flags);
	return f ? &f->base : NULL;
}

static int softib_free(struct mca_btl_base_module_t *btl,
		       mca_btl_base_descriptor_t *des)
{
	mca_btl_softib_frag_put((mca_btl_softib_frag_t *)des);
	return OPAL_SUCCESS;
}

/* reserve bytes for ob1's header, then as much of the user's data as fits
 * (packed by the convertor: any datatype, contiguous or not) */
static mca_btl_base_descriptor_t *softib_prepare_src(
	struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
	struct opal_convertor_t *conv, uint8_t order, size_t reserve,
	size_t *size, uint32_t flags)
{
	mca_btl_softib_frag_t *f;
	struct iovec iov;
	uint32_t iov_count = 1;
	size_t max = *size;

	if (mca_btl_softib_component.verbose > 2)
		opal_output(0, "btl softib: prepare_src reserve %zu size %zu "
			    "flags %#x", reserve, *size, flags);
	if (reserve > btl->btl_max_send_size)
		return NULL;
	if (max > btl->btl_max_send_size - reserve)
		max = btl->btl_max_send_size - reserve;
	f = mca_btl_softib_frag_get(ep, reserve + max, flags);
	if (!f)
		return NULL;
	iov.iov_base = f->buf + reserve;
	iov.iov_len = max;
	if (max && opal_convertor_pack(conv, &iov, &iov_count, &max) < 0) {
		mca_btl_softib_frag_put(f);
		return NULL;
	}
	*size = max;
	f->seg.seg_len = reserve + max;
	return &f->base;
}
