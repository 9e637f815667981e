/*
 * XRC: domains shared through a file, XRC SRQs, and the lifetime of XRC
 * target (receive) QPs.
 *
 * A domain is a segment entry found by the (device, inode) of the file
 * its openers name; processes of one host that open the same file share
 * it, processes of another host (network namespace) have another segment
 * and so another domain. An XRC target QP belongs to its domain, not to a
 * process: every process that created, opened or registered it holds a
 * bit in its entry; it lives while any bit is set (OFED's rule for the
 * legacy API, and the kernel's reference count for ibv_open_qp), and its
 * events go to every holder.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hca_int.h"

/* ---- registrations on target QPs (seg->lock held) ---- */

void hca_xrc_reg(struct hca_seg *seg, struct hca_qp_ent *e, uint16_t slot, bool on)
{
	uint64_t bit = 1ULL << (slot % 64);

	(void)seg;
	if (on)
		atomic_fetch_or(&e->regs[slot / 64], bit);
	else
		atomic_fetch_and(&e->regs[slot / 64], ~bit);
}

static bool xrc_regs_empty(struct hca_qp_ent *e)
{
	for (int i = 0; i < HCA_MAX_PROCS / 64; i++)
		if (atomic_load(&e->regs[i]))
			return false;
	return true;
}

/* Drop slot's registration; true if it was the last (entry freed). */
bool hca_xrc_unreg_last(struct hca_seg *seg, struct hca_qp_ent *e, uint16_t slot)
{
	hca_xrc_reg(seg, e, slot, false);
	if (!xrc_regs_empty(e))
		return false;
	hca_qp_ent_free(seg, e, 0);
	return true;
}

static void xrcd_free_qp(struct hca_seg *seg, struct hca_qp_ent *e, void *arg)
{
	if (e->type == IBV_QPT_XRC_RECV && e->xrcd == *(uint32_t *)arg)
		hca_qp_ent_free(seg, e, 0);
}

static void xrc_reclaim_qp(struct hca_seg *seg, struct hca_qp_ent *e, void *arg)
{
	uint16_t slot = *(uint16_t *)arg;

	if (e->type == IBV_QPT_XRC_RECV &&
	    (atomic_load(&e->regs[slot / 64]) & (1ULL << (slot % 64))))
		hca_xrc_unreg_last(seg, e, slot);
}

static void xrcd_free(struct hca_seg *seg, uint32_t idx)
{
	struct hca_xrcd_ent *x = &seg->xrcds[idx];

	/* target QPs still in the domain go with it */
	hca_qp_ent_each(seg, 0, HCA_QP_PAGES, xrcd_free_qp, &idx);
	atomic_store_explicit(&x->handle, 0, memory_order_release);
}

static bool xrcd_unused(struct hca_xrcd_ent *x)
{
	for (int s = 0; s < HCA_MAX_PROCS; s++)
		if (x->opens[s])
			return false;
	return true;
}

/* A dead process's registrations and domain opens (seg->lock held). */
void hca_xrc_reclaim(struct hca_seg *seg, uint16_t slot)
{
	hca_qp_ent_each(seg, 0, HCA_QP_PAGES, xrc_reclaim_qp, &slot);
	for (uint32_t i = 0; i < HCA_MAX_XRCD; i++) {
		struct hca_xrcd_ent *x = &seg->xrcds[i];

		if (!atomic_load(&x->handle) || !x->opens[slot])
			continue;
		x->opens[slot] = 0;
		if (xrcd_unused(x))
			xrcd_free(seg, i);
	}
}

/* ---- domains ---- */

static int xrcd_find_or_make(struct hca_seg *seg, uint64_t dev, uint64_t ino,
			     bool shared, int oflags, uint32_t *idxp)
{
	uint32_t free_idx = HCA_NONE;

	for (uint32_t i = 0; i < HCA_MAX_XRCD; i++) {
		struct hca_xrcd_ent *x = &seg->xrcds[i];

		if (!atomic_load(&x->handle)) {
			if (free_idx == HCA_NONE)
				free_idx = i;
			continue;
		}
		if (shared && x->fdev == dev && x->fino == ino) {
			if ((oflags & O_CREAT) && (oflags & O_EXCL))
				return EEXIST;
			*idxp = i;
			return 0;
		}
	}
	if (shared && !(oflags & O_CREAT))
		return EINVAL; /* no domain on this file, and not asked to make one */
	if (free_idx == HCA_NONE)
		return ENOMEM;
	struct hca_xrcd_ent *x = &seg->xrcds[free_idx];
	x->fdev = shared ? dev : 0;
	x->fino = shared ? ino : 0;
	memset(x->opens, 0, sizeof(x->opens));
	atomic_store_explicit(&x->handle, seg->next_handle++, memory_order_release);
	if (!seg->next_handle)
		seg->next_handle = 1;
	*idxp = free_idx;
	return 0;
}

struct hca_xrcd *hca_xrcd_open(struct hca_ctx *ctx, int fd, int oflags)
{
	struct hca_dev *dev = ctx->dev;
	struct hca_seg *seg = dev->seg;
	struct hca_xrcd *x;
	struct stat st = { 0 };
	uint32_t idx;
	int rc;

	if (oflags & ~(O_CREAT | O_EXCL)) {
		errno = EINVAL;
		return NULL;
	}
	if (fd >= 0 && fstat(fd, &st))
		return NULL; /* errno: EBADF */
	x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	hca_dev_reap(dev); /* a dead opener's domain must not match a new file */
	hca_seg_lock(seg);
	rc = xrcd_find_or_make(seg, st.st_dev, st.st_ino, fd >= 0, oflags, &idx);
	if (!rc) {
		seg->xrcds[idx].opens[dev->slot]++;
		x->handle = atomic_load(&seg->xrcds[idx].handle);
	}
	hca_seg_unlock(seg);
	if (rc) {
		free(x);
		errno = rc;
		return NULL;
	}
	x->ctx = ctx;
	x->idx = idx;
	return x;
}

int hca_xrcd_close(struct hca_xrcd *x)
{
	struct hca_dev *dev = x->ctx->dev;
	struct hca_seg *seg = dev->seg;
	struct hca_xrcd_ent *e = &seg->xrcds[x->idx];

	if (atomic_load(&x->refs))
		return EBUSY;
	hca_seg_lock(seg);
	if (atomic_load(&e->handle) == x->handle && e->opens[dev->slot]) {
		e->opens[dev->slot]--;
		if (xrcd_unused(e))
			xrcd_free(seg, x->idx);
	}
	hca_seg_unlock(seg);
	free(x);
	return 0;
}

struct hca_srq *hca_srq_create_xrc(struct hca_pd *pd, struct hca_xrcd *xrcd,
				   struct hca_cq *cq, struct ibv_srq_attr *attr,
				   void *user)
{
	if (!xrcd || !cq || !pd) {
		errno = EINVAL;
		return NULL;
	}
	return hca_srq_make(pd, xrcd, cq, attr, user);
}

/* ---- target QPs ---- */

struct hca_qp *hca_qp_open(struct hca_xrcd *x, uint32_t qpn, void *user)
{
	struct hca_dev *dev = x->ctx->dev;
	struct hca_seg *seg = dev->seg;
	struct hca_qp_ent *e;
	struct hca_qp *qp = calloc(1, sizeof(*qp));

	int rc;

	if (!qp)
		return NULL;
	rc = hca_mutex_init(&qp->sq_lock);
	if (!rc)
		rc = hca_mutex_init(&qp->resp_lock);
	if (!rc)
		rc = hca_mutex_init(&qp->state_lock);
	if (rc) {
		pthread_mutex_destroy(&qp->sq_lock);
		pthread_mutex_destroy(&qp->resp_lock);
		free(qp);
		errno = rc;
		return NULL;
	}
	hca_seg_lock(seg);
	e = hca_qp_lookup(seg, qpn);
	if (!e || e->type != IBV_QPT_XRC_RECV || e->xrcd != x->idx) {
		hca_seg_unlock(seg);
		free(qp);
		errno = EINVAL;
		return NULL;
	}
	hca_xrc_reg(seg, e, dev->slot, true);
	hca_seg_unlock(seg);
	qp->dev = dev;
	qp->ctx = x->ctx;
	qp->xrcd = x;
	qp->type = IBV_QPT_XRC_RECV;
	qp->idx = qpn & (HCA_MAX_QP - 1);
	qp->qpn = qpn;
	qp->ent = e;
	qp->attr = &e->attr;
	qp->user = user;
	pthread_mutex_lock(&dev->lock);
	dev->xrc_local[qp->idx]++;
	dev->qp_tab[qp->idx] = qp;
	pthread_mutex_unlock(&dev->lock);
	atomic_fetch_add(&x->refs, 1);
	return qp;
}

struct hca_qp *hca_xrc_find(struct hca_xrcd *x, uint32_t qpn)
{
	struct hca_dev *dev = x->ctx->dev;
	struct hca_qp *qp = dev->qp_tab[qpn & (HCA_MAX_QP - 1)];

	if (!qp || qp->qpn != qpn || qp->type != IBV_QPT_XRC_RECV || qp->xrcd != x)
		return NULL;
	return qp;
}
