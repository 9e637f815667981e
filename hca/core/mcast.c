/*
 * Multicast groups: a UD QP attached to a group (GID, LID) receives what
 * is sent to the group's LID. The groups are in the segment (seg->mcgs),
 * under its lock; the requester walks them to deliver (req.c send_mcast).
 */
#include <errno.h>
#include <string.h>

#include "hca_int.h"

static struct hca_mcg *mcg_find(struct hca_seg *seg, const union ibv_gid *gid,
				uint16_t lid, bool create)
{
	struct hca_mcg *free_g = NULL;

	for (int i = 0; i < HCA_MAX_MCAST_GRP; i++) {
		struct hca_mcg *g = &seg->mcgs[i];

		if (g->nqp && g->lid == lid && !memcmp(g->gid, gid->raw, 16))
			return g;
		if (!g->nqp && !free_g)
			free_g = g;
	}
	if (!create || !free_g)
		return NULL;
	memcpy(free_g->gid, gid->raw, 16);
	free_g->lid = lid;
	return free_g;
}

int hca_qp_attach_mcast(struct hca_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	struct hca_seg *seg = qp->dev->seg;
	struct hca_mcg *g;
	int rc = 0;

	if (qp->type != IBV_QPT_UD || gid->raw[0] != 0xff)
		return EINVAL;
	hca_seg_lock(seg);
	g = mcg_find(seg, gid, lid, true);
	if (!g || g->nqp == HCA_MAX_QP_PER_MCG) {
		rc = ENOMEM;
	} else {
		for (int i = 0; i < g->nqp; i++)
			if (g->qpn[i] == qp->qpn)
				goto out; /* attaching twice is not an error */
		g->qpn[g->nqp++] = qp->qpn;
		qp->mcast_count++;
	}
out:
	hca_seg_unlock(seg);
	return rc;
}

int hca_qp_detach_mcast(struct hca_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	struct hca_seg *seg = qp->dev->seg;
	struct hca_mcg *g;
	int rc = EINVAL;

	hca_seg_lock(seg);
	g = mcg_find(seg, gid, lid, false);
	for (int i = 0; g && i < g->nqp; i++) {
		if (g->qpn[i] == qp->qpn) {
			g->qpn[i] = g->qpn[--g->nqp];
			qp->mcast_count--;
			rc = 0;
			break;
		}
	}
	hca_seg_unlock(seg);
	return rc;
}
