/*
 * Sending: a descriptor (send) or a header and data straight from ob1
 * (sendi) leave as one libsib active message, the BTL tag as its header.
 *
 * Completion: libsib either finishes the message inside the call (SIB_OK:
 * the BTL's "complete inline", return 1 and no callback unless ob1 asked
 * for one) or later (SIB_INPROGRESS: the descriptor completes from our
 * send callback, which libsib runs from progress). A peer known dead is
 * reported through Open MPI's error callback and the send fails with
 * OPAL_ERR_UNREACH; the component never ends the job itself.
 */
#include "btl_softib.h"

#include <string.h>

#include "opal/datatype/opal_convertor.h"
#include "opal/util/output.h"

/* libsib's completion of a message that did not complete inline: the
 * descriptor's callback runs always here (ob1 was told OPAL_SUCCESS, which
 * promises one). */
static void send_cb(sib_request_t *req, sib_status_t st, void *arg)
{
	mca_btl_softib_frag_t *f = arg;
	mca_btl_base_descriptor_t *d = &f->base;
	int status = mca_btl_softib_status(st);

	if (st == SIB_ERR_PEER_FAILED)
		status = OPAL_ERR_UNREACH;
	if (d->des_cbfunc)
		d->des_cbfunc(&mca_btl_softib_module.super, f->endpoint, d,
			      status);
	if (d->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP)
		mca_btl_softib_frag_put(f);
	(void)req; /* freed at posting: libsib releases it after this */
}

static void peer_failed(struct mca_btl_base_endpoint_t *ep)
{
	mca_btl_softib_module_t *m = &mca_btl_softib_module;

	if (m->error_cb)
		m->error_cb(&m->super, MCA_BTL_ERROR_FLAGS_NONFATAL, ep->proc,
			    "softib: the peer is gone");
}

/* Posts the frag's segment; returns 1 (complete, handled), OPAL_SUCCESS
 * (in flight: send_cb completes it) or an error (nothing sent). */
static int post(struct mca_btl_base_endpoint_t *ep, mca_btl_softib_frag_t *f,
		mca_btl_base_tag_t tag)
{
	struct sib_op_params op = { .send_cb = send_cb, .cb_arg = f };
	sib_request_t *req = NULL;
	sib_status_t st;

	f->tag = tag;
	f->endpoint = ep;
	if (!ep || !ep->ep)
		return OPAL_ERR_UNREACH;
	st = sib_am_send_nb(ep->ep, MCA_BTL_SOFTIB_AM_ID, &f->tag, 1,
			    f->seg.seg_addr.pval, f->seg.seg_len, &op, &req);
	if (mca_btl_softib_component.verbose > 2)
		opal_output(0, "btl softib: send %zu bytes tag %u: %s",
			    (size_t)f->seg.seg_len, tag, sib_status_string(st));
	if (st == SIB_INPROGRESS) {
		/* released by libsib once complete, after send_cb */
		sib_request_free(req);
		return OPAL_SUCCESS;
	}
	if (st == SIB_OK)
		return 1;
	if (st == SIB_ERR_PEER_FAILED)
		peer_failed(ep);
	if (mca_btl_softib_component.verbose > 1 || st >= 0)
		opal_output(0, "btl softib: send of %zu bytes (tag %u): %s",
			    (size_t)f->seg.seg_len, tag, sib_status_string(st));
	return mca_btl_softib_status(st);
}

int mca_btl_softib_send(struct mca_btl_base_module_t *btl,
			struct mca_btl_base_endpoint_t *ep,
			struct mca_btl_base_descriptor_t *des,
			mca_btl_base_tag_t tag)
{
	mca_btl_softib_frag_t *f = (mca_btl_softib_frag_t *)des;
	int rc = post(ep, f, tag);

	if (rc == 1) {
		/* complete inline: the BTL's "1" tells ob1 so, and the
		 * callback runs only where ob1 asked for it always (as
		 * Open MPI's own BTLs do) */
		uint32_t flags = des->des_flags;
		if ((flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) && des->des_cbfunc)
			des->des_cbfunc(btl, ep, des, OPAL_SUCCESS);
		if (flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP)
			mca_btl_softib_frag_put(f);
		return 1;
	}
	return rc;
}

int mca_btl_softib_sendi(struct mca_btl_base_module_t *btl,
			 struct mca_btl_base_endpoint_t *ep,
			 struct opal_convertor_t *conv, void *header,
			 size_t header_size, size_t payload_size,
			 uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
			 mca_btl_base_descriptor_t **des)
{
	size_t total = header_size + payload_size;
	mca_btl_softib_frag_t *f;
	int rc;

	if (des)
		*des = NULL;
	if (total > btl->btl_eager_limit)
		goto busy;
	/* the frag owns the bytes until libsib is done with them */
	f = mca_btl_softib_frag_get(ep, total, flags |
				    MCA_BTL_DES_FLAGS_BTL_OWNERSHIP);
	if (!f)
		goto busy;
	memcpy(f->buf, header, header_size);
	if (payload_size) {
		struct iovec iov = { .iov_base = f->buf + header_size,
				     .iov_len = payload_size };
		uint32_t n = 1;
		size_t len = payload_size;
		if (opal_convertor_pack(conv, &iov, &n, &len) < 0 ||
		    len != payload_size) {
			mca_btl_softib_frag_put(f);
			return OPAL_ERROR;
		}
	}
	f->base.des_cbfunc = NULL;
	rc = post(ep, f, tag);
	if (rc == 1) {
		mca_btl_softib_frag_put(f);
		return OPAL_SUCCESS;
	}
	if (rc == OPAL_SUCCESS)
		return OPAL_SUCCESS; /* send_cb puts the frag back */
	mca_btl_softib_frag_put(f);
	if (rc != OPAL_ERR_OUT_OF_RESOURCE)
		return rc;
busy:
	/* ob1 then sends through a descriptor of ours */
	if (des && total <= btl->btl_max_send_size) {
		mca_btl_softib_frag_t *d = mca_btl_softib_frag_get(ep, total, flags);
		if (d)
			*des = &d->base;
	}
	return OPAL_ERR_RESOURCE_BUSY;
}
