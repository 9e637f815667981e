/*
 * A CQ's inline receive pool, in the segment (cq_inline.c states the
 * protocol): its slots and the target ranges a requester writes into
 * one. Part of the HCA's private structures (hca_int.h).
 */
#ifndef HCA_CQ_INLINE_H
#define HCA_CQ_INLINE_H

#include <stdatomic.h>
#include <stdint.h>

#include "hca_limits.h" /* HCA_MAX_SGE */

/* HCA_INL_DEFAULT is the measured threshold (docs/datapath.md),
 * SOFTIB_INLINE_MAX overrides it up to HCA_INL_LIMIT. */
#define HCA_INL_DEFAULT 16384
#define HCA_INL_LIMIT   65536
#define HCA_INL_SLOTS   30      /* at most, per CQ (fewer for a small CQ):
				 * 30 slots of 16 KiB fill a 512 KiB block */
#define HCA_INL_PROC_POOLS 64   /* pools a process may hold (32 MiB) */
#define HCA_INL_SWEEP_NS (100ULL * 1000000ULL) /* progress-thread sweeps */

struct hca_inl_iov {
	uint64_t addr;           /* in the CQ owner's address space */
	uint32_t len, lkey;
};
struct hca_inl_slot {
	_Atomic uint64_t state;  /* kind | the claimer's tag (claim.c) */
	uint32_t niov, len;
	struct hca_inl_iov iov[HCA_MAX_SGE];
	uint64_t pad1[6];        /* slot size: a cache-line multiple (the
				  * payload follows the ranges in use) */
};
struct hca_inl_pool {
	uint32_t nslots;         /* written at create */
	uint32_t stride, max_len, pad;
	uint64_t pad1[6];
	_Atomic uint32_t hint;   /* where requesters look first */
	uint32_t pad2[15];
};

static inline struct hca_inl_slot *hca_inl_slot(struct hca_inl_pool *p, uint32_t k)
{
	return (struct hca_inl_slot *)((char *)p + 128 + (uint64_t)k * p->stride);
}

#endif
