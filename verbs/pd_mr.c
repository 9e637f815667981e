/*
 * Protection domains and memory regions.  The HCA holds the keys and the
 * registered ranges; here are the ABI structs, argument checks, and the
 * registration variants of rdma-core 44 (ibv_reg_mr may be a macro that
 * lands in ibv_reg_mr_iova2).  Importing objects from another process's
 * context, dma-buf and device memory need a kernel: not supported.
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs_int.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* ---- PD ---- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct vb_pd *pd;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->h = hca_pd_alloc(vb_ctx(context)->hctx);
	if (!pd->h) {
		int err = errno ? errno : ENOMEM;

		free(pd);
		errno = err;
		return NULL;
	}
	pd->pd.context = context;
	pd->pd.handle = hca_pd_id(pd->h);
	return &pd->pd;
}

/* ibv_dealloc_pd(3): EBUSY while MRs, QPs, SRQs or AHs still use it. */
int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct vb_pd *pd;
	int rc;

	if (!ibpd)
		return EINVAL;
	pd = vb_pd(ibpd);
	if (atomic_load(&pd->ahs))
		return EBUSY;
	rc = hca_pd_dealloc(pd->h);
	if (rc)
		return rc;
	free(pd);
	return 0;
}

/* ---- MR ---- */

/*
 * Access bits in IBV_ACCESS_OPTIONAL_RANGE are hints a device may ignore
 * (verbs.h): those softib does not know are dropped rather than refused.
 * Relaxed ordering is known to the HCA (it orders everything anyway).
 */
static unsigned access_known(unsigned access)
{
	return access & ~((unsigned)IBV_ACCESS_OPTIONAL_RANGE &
			  ~(unsigned)IBV_ACCESS_RELAXED_ORDERING);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *ibpd, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	struct vb_mr *mr;

	if (!ibpd) {
		errno = EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->h = hca_mr_reg(vb_pd(ibpd)->h, addr, length, iova,
			   access_known(access));
	if (!mr->h) {
		int err = errno ? errno : ENOMEM;

		free(mr);
		errno = err;
		return NULL;
	}
	mr->mr.context = ibpd->context;
	mr->mr.pd = ibpd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	mr->mr.lkey = mr->mr.rkey = mr->mr.handle = hca_mr_key(mr->h);
	return &mr->mr;
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			  int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr,
				(unsigned)access);
}

/*
 * ibv_rereg_mr(3) answers with enum ibv_rereg_mr_err_code, not errno: the
 * HCA checks everything before it changes anything, so every failure
 * leaves the old registration valid (IBV_REREG_MR_ERR_INPUT), with the
 * reason in errno.
 */
int ibv_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd, void *addr,
		 size_t length, int access)
{
	struct vb_mr *mr;
	int rc;

	if (!ibmr || ((flags & IBV_REREG_MR_CHANGE_PD) &&
		      (!pd || pd->context != ibmr->context))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	mr = vb_container_of(ibmr, struct vb_mr, mr);
	rc = hca_mr_rereg(mr->h, flags,
			  (flags & IBV_REREG_MR_CHANGE_PD) ? vb_pd(pd)->h : NULL,
			  addr, length, access_known((unsigned)access));
	if (rc) {
		errno = rc;
		return IBV_REREG_MR_ERR_INPUT;
	}
	/* a re-registration gives new keys (hca_mr_rereg) */
	ibmr->lkey = ibmr->rkey = ibmr->handle = hca_mr_key(mr->h);
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		ibmr->addr = addr;
		ibmr->length = length;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		ibmr->pd = pd;
	return 0;
}

int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct vb_mr *mr;
	int rc;

	if (!ibmr)
		return EINVAL;
	mr = vb_container_of(ibmr, struct vb_mr, mr);
	rc = hca_mr_dereg(mr->h);
	if (rc)
		return rc;
	free(mr);
	return 0;
}

/* ---- what needs a kernel ---- */

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				 size_t length, uint64_t iova, int fd,
				 int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* Nothing can have been imported: there is nothing to release. */
void ibv_unimport_pd(struct ibv_pd *pd)
{
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
}
