/*
 * Protection domains and memory regions.
 *
 * A PD is a node-wide id: the responder compares the PD of a memory key
 * with the PD of the QP the request arrived on. A memory region is an
 * entry of the segment's key table, so that any process of the host can
 * check a key it is handed (lkey == rkey; the index is the low 16 bits,
 * the high bits a per-entry generation so a freed key stays invalid for
 * a long while). Registration does not pin: softib reaches the memory
 * through the kernel (cross-memory attach) at transfer time, and a range
 * that was unmapped fails the transfer, which becomes an access error.
 */
#include <errno.h>
#include <stdlib.h>

#include "hca_int.h"

struct hca_pd *hca_pd_alloc(struct hca_ctx *ctx)
{
	struct hca_seg *seg = ctx->dev->seg;
	struct hca_pd *pd = calloc(1, sizeof(*pd));

	if (!pd)
		return NULL;
	pd->ctx = ctx;
	hca_seg_lock(seg);
	pd->id = seg->next_pd++;
	if (!seg->next_pd)
		seg->next_pd = 1;
	hca_seg_unlock(seg);
	return pd;
}

int hca_pd_dealloc(struct hca_pd *pd)
{
	if (atomic_load(&pd->refs))
		return EBUSY;
	free(pd);
	return 0;
}

uint32_t hca_pd_id(struct hca_pd *pd)
{
	return pd->id;
}

struct hca_mr_ent *hca_mr_lookup(struct hca_seg *seg, uint32_t key)
{
	struct hca_mr_ent *e = &seg->mrs[key & (HCA_MAX_MR - 1)];

	if (!key || atomic_load_explicit(&e->key, memory_order_acquire) != key)
		return NULL;
	return e;
}

#define MR_ACCESS_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | \
		       IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | \
		       IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | \
		       IBV_ACCESS_RELAXED_ORDERING)

/* The IB rule: remote write or atomic access needs local write too. */
static int mr_access_ok(unsigned access)
{
	if (access & ~(unsigned)MR_ACCESS_ALL)
		return 0;
	if (access & IBV_ACCESS_ON_DEMAND)
		return 0; /* no ODP: the device reports none */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return 0;
	return 1;
}

static void mr_fill(struct hca_mr_ent *e, struct hca_pd *pd, void *addr,
		    size_t len, uint64_t iova, unsigned access)
{
	e->pd = pd->id;
	e->access = access;
	e->addr = (uint64_t)(uintptr_t)addr;
	e->length = len;
	e->iova = iova;
}

struct hca_mr *hca_mr_reg(struct hca_pd *pd, void *addr, size_t len,
			  uint64_t iova, unsigned access)
{
	struct hca_dev *dev = pd->ctx->dev;
	struct hca_seg *seg = dev->seg;
	struct hca_mr *mr;
	uint32_t idx = HCA_NONE;

	if (!mr_access_ok(access) || len > HCA_MAX_MR_SIZE ||
	    (!addr && len)) {
		errno = EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	hca_seg_lock(seg);
	for (uint32_t n = 0; n < HCA_MAX_MR; n++) {
		uint32_t i = (seg->mr_hint + n) & (HCA_MAX_MR - 1);

		if (i && !atomic_load(&seg->mrs[i].key)) {
			idx = i;
			break;
		}
	}
	if (idx != HCA_NONE) {
		struct hca_mr_ent *e = &seg->mrs[idx];

		seg->mr_hint = idx + 1;
		if (++seg->mr_gen[idx] == 0)
			seg->mr_gen[idx] = 1;
		e->owner = dev->slot;
		e->owner_gen = dev->gen;
		mr_fill(e, pd, addr, len, iova, access);
		mr->key = ((uint32_t)seg->mr_gen[idx] << HCA_MR_IDX_BITS) | idx;
		atomic_store_explicit(&e->key, mr->key, memory_order_release);
	}
	hca_seg_unlock(seg);
	if (idx == HCA_NONE) {
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	mr->pd = pd;
	mr->idx = idx;
	atomic_fetch_add(&pd->refs, 1);
	return mr;
}

uint32_t hca_mr_key(struct hca_mr *mr)
{
	return mr->key;
}

/*
 * Re-registration keeps the key (rdma-core lets a provider keep or change
 * it; keeping it means peers holding the rkey go on working).
 */
int hca_mr_rereg(struct hca_mr *mr, int flags, struct hca_pd *pd, void *addr,
		 size_t len, unsigned access)
{
	struct hca_seg *seg = mr->pd->ctx->dev->seg;
	struct hca_mr_ent *e = &seg->mrs[mr->idx];
	struct hca_mr_ent nv;

	if (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		      IBV_REREG_MR_CHANGE_ACCESS) || !flags)
		return EINVAL;
	if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && !mr_access_ok(access))
		return EINVAL;
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !len))
		return EINVAL;
	if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)
		return EINVAL;
	hca_seg_lock(seg);
	nv = *e;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		nv.addr = (uint64_t)(uintptr_t)addr;
		nv.length = len;
		nv.iova = (uint64_t)(uintptr_t)addr;
	}
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		nv.access = access;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		nv.pd = pd->id;
	/* readers see the key vanish while the fields change */
	atomic_store_explicit(&e->key, 0, memory_order_release);
	e->addr = nv.addr;
	e->length = nv.length;
	e->iova = nv.iova;
	e->access = nv.access;
	e->pd = nv.pd;
	atomic_store_explicit(&e->key, mr->key, memory_order_release);
	hca_seg_unlock(seg);
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		atomic_fetch_sub(&mr->pd->refs, 1);
		atomic_fetch_add(&pd->refs, 1);
		mr->pd = pd;
	}
	return 0;
}

int hca_mr_dereg(struct hca_mr *mr)
{
	struct hca_seg *seg = mr->pd->ctx->dev->seg;

	hca_seg_lock(seg);
	atomic_store_explicit(&seg->mrs[mr->idx].key, 0, memory_order_release);
	hca_seg_unlock(seg);
	atomic_fetch_sub(&mr->pd->refs, 1);
	free(mr);
	return 0;
}
