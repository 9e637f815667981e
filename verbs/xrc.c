/*
 * XRC domains of the modern API: the verbs_context ops behind the inline
 * ibv_open_xrcd() and ibv_close_xrcd().  The domain itself is the HCA's
 * (hca/xrc.c): processes of one host that open the same file share it; no
 * file (fd -1) gives a private one.  XRC SRQs are in srq.c, XRC send and
 * receive QPs and ibv_open_qp() in qp.c, the legacy OFED API over the same
 * objects in xrc_legacy.c; docs/xrc.md maps them onto each other.
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs_int.h"

#define XRCD_MASK_OK (IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS)

/*
 * Both fields are required, as rdma-core requires them; an unknown
 * comp_mask bit is EOPNOTSUPP.  Without O_CREAT, a file that has no domain
 * yet is EINVAL; O_CREAT | O_EXCL on one that has is EEXIST (open(2)'s
 * answer; ibv_open_xrcd(3) names none).
 */
struct ibv_xrcd *vb_open_xrcd(struct ibv_context *context,
			      struct ibv_xrcd_init_attr *a)
{
	struct vb_xrcd *x;
	int err;

	if (!context || !a) {
		errno = EINVAL;
		return NULL;
	}
	if (a->comp_mask & ~(uint32_t)XRCD_MASK_OK) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & XRCD_MASK_OK) != XRCD_MASK_OK) {
		errno = EINVAL;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	errno = 0;
	x->h = hca_xrcd_open(vb_ctx(context)->hctx, a->fd, a->oflags);
	if (!x->h) {
		err = errno ? errno : ENOMEM;
		free(x);
		errno = err;
		return NULL;
	}
	x->xrcd.context = context;
	return &x->xrcd;
}

/*
 * EBUSY while an SRQ or a receive-QP handle made through this xrcd
 * remains (ibv_open_xrcd(3): close "may fail if any other resource is
 * still associated").  The domain goes with the last close on the host;
 * receive QPs still in it go with it.
 */
int vb_close_xrcd(struct ibv_xrcd *xrcd)
{
	struct vb_xrcd *x;
	int rc;

	if (!xrcd)
		return EINVAL;
	x = vb_xrcd(xrcd);
	rc = hca_xrcd_close(x->h);
	if (rc)
		return rc;
	free(x);
	return 0;
}
