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

/*
 * A key's entry, as one consistent snapshot. The owner may re-register
 * the key while we read (hca_mr_rereg): it takes the key away, changes
 * the fields, and publishes a new key. So the fields are copied out
 * between two loads of the key (a seqlock read side): the same key both
 * times means the copy is one registration's, never a mix of the old and
 * new bounds; a key that changed fails the lookup, as a deregistered one
 * does. The copy is thread-local, in a small ring so that a caller may
 * hold a few at once (an rkey and the lkeys of a receive WQE); callers
 * only read it.
 *
 * A caller that moves bytes with what it found does so inside a copy
 * section (fence.c), entered before this lookup: the first load of the
 * key is seq_cst, the copier's half of the fence's Dekker pattern, so
 * that a key invalidated by dereg or rereg is either seen gone here or
 * waited for there.
 */
#define MR_SNAPS 8

struct hca_mr_ent *hca_mr_lookup(struct hca_seg *seg, uint32_t key)
{
	static __thread struct hca_mr_ent snap[MR_SNAPS];
	static __thread unsigned next;
	struct hca_mr_ent *e = &seg->mrs[key & (HCA_MAX_MR - 1)], *c;

	if (!key || atomic_load_explicit(&e->key, memory_order_seq_cst) != key)
		return NULL;
	c = &snap[next++ % MR_SNAPS];
	c->owner = e->owner;
	c->owner_gen = e->owner_gen;
	c->pd = e->pd;
	c->access = e->access;
	c->addr = e->addr;
	c->length = e->length;
	c->iova = e->iova;
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&e->key, memory_order_relaxed) != key)
		return NULL;
	atomic_store_explicit(&c->key, key, memory_order_relaxed);
	return c;
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

/* The next key of entry idx: a new generation, never 0 (seg->lock held). */
static uint32_t mr_key_next(struct hca_seg *seg, uint32_t idx)
{
	if (++seg->mr_gen[idx] == 0)
		seg->mr_gen[idx] = 1;
	return ((uint32_t)seg->mr_gen[idx] << HCA_MR_IDX_BITS) | idx;
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
		e->owner = dev->slot;
		e->owner_gen = dev->gen;
		mr_fill(e, pd, addr, len, iova, access);
		mr->key = mr_key_next(seg, idx);
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
 * Re-registration gives the MR a new key (ibv_rereg_mr(3) lets the
 * device change lkey and rkey; the verbs layer writes them back). The
 * old key stops working at once and does not come back — a peer that
 * still holds it, or a transfer that looked it up before, can never
 * reach the new range or pass the new access rights. The fields change
 * while the entry has no key (the writer side of hca_mr_lookup's
 * seqlock: key 0, a release fence, the fields, the new key released).
 */
int hca_mr_rereg(struct hca_mr *mr, int flags, struct hca_pd *pd, void *addr,
		 size_t len, unsigned access)
{
	struct hca_seg *seg = mr->pd->ctx->dev->seg;
	struct hca_mr_ent *e = &seg->mrs[mr->idx];
	uint64_t naddr, nlen, niova;
	unsigned nacc;
	uint32_t npd;

	if (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		      IBV_REREG_MR_CHANGE_ACCESS) || !flags)
		return EINVAL;
	if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && !mr_access_ok(access))
		return EINVAL;
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) &&
	    (!addr || !len || len > HCA_MAX_MR_SIZE))
		return EINVAL;
	if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)
		return EINVAL;
	hca_seg_lock(seg);
	naddr = e->addr;
	nlen = e->length;
	niova = e->iova;
	nacc = e->access;
	npd = e->pd;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		naddr = (uint64_t)(uintptr_t)addr;
		nlen = len;
		niova = (uint64_t)(uintptr_t)addr;
	}
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		nacc = access;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		npd = pd->id;
	atomic_store_explicit(&e->key, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	e->addr = naddr;
	e->length = nlen;
	e->iova = niova;
	e->access = nacc;
	e->pd = npd;
	mr->key = mr_key_next(seg, mr->idx);
	atomic_store_explicit(&e->key, mr->key, memory_order_release);
	hca_seg_unlock(seg);
	/* the old key is gone (the store of 0 above, and the fence's seq_cst
	 * fence): copies through it that are still in flight end first */
	hca_fence_wait(mr->pd->ctx->dev);
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		atomic_fetch_sub(&mr->pd->refs, 1);
		atomic_fetch_add(&pd->refs, 1);
		mr->pd = pd;
	}
	return 0;
}

/*
 * After the key is gone, wait for the copies that may have passed its
 * check before (fence.c): when dereg returns, no byte moves through it.
 */
int hca_mr_dereg(struct hca_mr *mr)
{
	struct hca_dev *dev = mr->pd->ctx->dev;
	struct hca_seg *seg = dev->seg;

	hca_seg_lock(seg);
	atomic_store_explicit(&seg->mrs[mr->idx].key, 0, memory_order_seq_cst);
	hca_seg_unlock(seg);
	hca_fence_wait(dev);
	atomic_fetch_sub(&mr->pd->refs, 1);
	free(mr);
	return 0;
}
