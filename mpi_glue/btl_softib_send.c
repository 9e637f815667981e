/*
 * Sending: a descriptor (send) or a header and data straight from ob1
 * (sendi) leave as one libsib active message.
 *
 * Completion.  libsib copies what it sends before sib_am_send_nb returns
 * (SIB_OK: "posted"; the request itself completes later, from progress).
 * So once the call returns the descriptor's bytes are no longer needed:
 * every send completes inline, and send returns 1, which tells ob1 so.
 * The BTL interface then asks for exactly this (btl.h): the descriptor's
 * callback runs only if MCA_BTL_DES_SEND_ALWAYS_CALLBACK is set (ob1 sets
 * it on pipeline fragments, whose completion it counts there), else ob1
 * completes the operation itself on seeing 1 (the rendezvous header, the
 * match and control messages); the descriptor goes back to our list if
 * MCA_BTL_DES_FLAGS_BTL_OWNERSHIP is set, else ob1 frees it. Never both
 * the callback and the 1 for one descriptor, and never the callback a
 * second time from libsib's completion: either completes ob1's rendezvous
 * request twice, which ends it before the receiver's ACK (the crash and
 * the hangs of the first version, docs/mpi.md).
 *
 * libsib's own completion of the request therefore only carries errors
 * (SIB_OP_LAZY_CB: on success it may come late, with a later send's): a
 * peer found dead is reported through Open MPI's error callback; the
 * component never ends the job itself. No Open MPI callback runs from
 * inside libsib's send call (it posts, it does not progress), so ob1 is
 * not re-entered with an arrival while it is sending.
 */
#include "btl_softib.h"

#include <string.h>

#include "opal/datatype/opal_convertor.h"
#include "opal/util/output.h"

static void peer_failed(struct mca_btl_base_endpoint_t *ep)
{
	mca_btl_softib_module_t *m = &mca_btl_softib_module;

	if (m->error_cb)
		m->error_cb(&m->super, MCA_BTL_ERROR_FLAGS_NONFATAL,
			    ep ? ep->proc : NULL, "softib: the peer is gone");
}

/* libsib's completion of a posted message: only a failure matters (the
 * BTL completed the descriptor when libsib took the bytes). A cancelled
 * request belongs to an endpoint del_procs destroyed: nothing to say, and
 * the endpoint may be gone. */
static void sent_cb(sib_request_t *req, sib_status_t st, void *arg)
{
	(void)req;
	if (st == SIB_ERR_PEER_FAILED)
		peer_failed(arg);
}

/* Posts one active message: header (the BTL tag, and for sendi ob1's
 * header behind it) and data. 1: posted, the bytes copied; else an Open
 * MPI error (nothing sent). */
static int post(struct mca_btl_base_endpoint_t *ep, const void *hdr,
		size_t hlen, const void *data, size_t dlen)
{
	/* lazy: sent_cb only matters for a failure, so a short message may
	 * go unsignalled (no ACK datagram of its own across hosts) */
	struct sib_op_params op = { .send_cb = sent_cb, .cb_arg = ep,
				    .flags = SIB_OP_LAZY_CB };
	sib_request_t *req = NULL;
	sib_status_t st;

	if (OPAL_UNLIKELY(!ep || !ep->ep))
		return OPAL_ERR_UNREACH;
	st = sib_am_send_nb(ep->ep, MCA_BTL_SOFTIB_AM_ID, hdr, hlen, data,
			    dlen, &op, &req);
	if (OPAL_LIKELY(st == SIB_OK)) {
		/* released by libsib once complete, after sent_cb */
		sib_request_free(req);
		return 1;
	}
	if (st == SIB_ERR_PEER_FAILED)
		peer_failed(ep);
	if (mca_btl_softib_component.verbose > 1)
		opal_output(0, "btl softib: send of %zu bytes: %s",
			    hlen + dlen, sib_status_string(st));
	return mca_btl_softib_status(st);
}

int mca_btl_softib_send(struct mca_btl_base_module_t *btl,
			struct mca_btl_base_endpoint_t *ep,
			struct mca_btl_base_descriptor_t *des,
			mca_btl_base_tag_t tag)
{
	mca_btl_softib_frag_t *f = (mca_btl_softib_frag_t *)des;
	/* the callback may free or reuse the descriptor: flags first */
	uint32_t flags = des->des_flags;
	int rc;

	f->tag = tag;
	f->endpoint = ep;
	rc = post(ep, &f->tag, 1, f->seg.seg_addr.pval, f->seg.seg_len);
	if (rc != 1)
		return rc; /* ob1 keeps the descriptor and frees it */
	if ((flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) && des->des_cbfunc)
		des->des_cbfunc(btl, ep, des, OPAL_SUCCESS);
	if (flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP)
		mca_btl_softib_frag_put(f);
	return 1;
}

/* The largest ob1 header sendi carries in the message header (ob1's are
 * 14-48 bytes; more goes the descriptor way). */
#define SENDI_HDR_MAX 128

int mca_btl_softib_sendi(struct mca_btl_base_module_t *btl,
			 struct mca_btl_base_endpoint_t *ep,
			 struct opal_convertor_t *conv, void *header,
			 size_t header_size, size_t payload_size,
			 uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
			 mca_btl_base_descriptor_t **des)
{
	size_t total = header_size + payload_size;
	uint8_t hdr[1 + SENDI_HDR_MAX];
	void *data = NULL;
	int rc;

	(void)order;
	if (des)
		*des = NULL;
	if (total > btl->btl_eager_limit || header_size > SENDI_HDR_MAX)
		goto busy;
	if (payload_size) {
		/* a contiguous payload goes from the user's buffer (libsib
		 * copies it once); another needs packing: a descriptor */
		if (opal_convertor_need_buffers(conv))
			goto busy;
		opal_convertor_get_current_pointer(conv, &data);
	}
	/* the message header: the BTL tag, then ob1's header; the receiver
	 * hands ob1 both pieces as segments */
	hdr[0] = tag;
	memcpy(hdr + 1, header, header_size);
	rc = post(ep, hdr, 1 + header_size, data, payload_size);
	if (rc == 1)
		return OPAL_SUCCESS;
	if (rc != OPAL_ERR_OUT_OF_RESOURCE)
		return rc;
busy:
	/* ob1 then packs into a descriptor of ours and sends that */
	if (des && total <= btl->btl_max_send_size) {
		mca_btl_softib_frag_t *d = mca_btl_softib_frag_get(ep, total, flags);
		if (d)
			*des = &d->base;
	}
	return OPAL_ERR_RESOURCE_BUSY;
}
