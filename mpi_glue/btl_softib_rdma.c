/*
 * One-sided operations of the softib BTL: memory registration, put, get
 * and flush, over libsib's RMA (sib_mem_map, rkeys, sib_put_nb /
 * sib_get_nb). With them ob1 moves a large contiguous message with one
 * RDMA read (its RGET protocol) instead of a pipeline of sends, and osc
 * rdma moves MPI_Put / MPI_Get. The atomics are btl_softib_atomic.c.
 *
 * Registration: a handle is what Open MPI copies to the peer, so it holds
 * the packed key (a fixed-size blob); the region itself (sib_mem_t) sits
 * beside it in a local struct the handle is the tail of. The peer unpacks
 * the key for each operation and destroys it when the operation
 * completes (a key is a few words: cheaper than keeping a cache honest
 * across deregistrations). Local buffers need no registration: libsib
 * moves them inline, through its bounce slots, or through its own
 * registration cache, so the local registration thresholds are SIZE_MAX.
 * The component keeps a list of its registrations: an atomic that osc
 * rdma aims at this process's own memory without a key finds its key
 * there (btl_softib_atomic.c says why).
 *
 * Completion: libsib calls back from progress (the component's
 * btl_progress) exactly once per operation, with the operation's status: a
 * refused access (SIB_ERR_REMOTE_ACCESS) reaches Open MPI as OPAL_ERROR, a
 * dead peer as OPAL_ERR_UNREACH (mca_btl_softib_status). An operation
 * without a key or a peer of ours is refused at once (OPAL_ERR_BAD_PARAM,
 * OPAL_ERR_UNREACH), never with OPAL_ERR_OUT_OF_RESOURCE: osc rdma retries
 * that one for ever.
 */
#include "btl_softib.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/util/output.h"

#define SOFTIB_RKEY_MAX 56

struct mca_btl_base_registration_handle_t {
	uint32_t len;                   /* bytes of blob */
	uint32_t pad;
	uint8_t blob[SOFTIB_RKEY_MAX];  /* sib_rkey_pack's */
};
/* osc rdma lays its window state out behind handles it copies, and puts
 * lock words there: a size that is not a multiple of 8 misaligns them
 * (the HCA refuses an atomic on an unaligned word) */
_Static_assert(sizeof(struct mca_btl_base_registration_handle_t) % 8 == 0,
	       "registration handle size must be a multiple of 8");

/* What register_mem returns the tail of; on the component's list. */
struct softib_reg {
	struct softib_reg *prev, *next;
	sib_mem_t *mem;
	uintptr_t base;
	size_t size;
	int shared;             /* -1 not looked at yet, 0 private, 1 shared */
	struct mca_btl_base_registration_handle_t handle;
};

/* The registrations, newest first (under the component's lock). */
static struct softib_reg *regs;

/* One operation in flight: Open MPI's completion and the peer's key. */
struct softib_rdma_op {
	struct mca_btl_base_endpoint_t *endpoint;
	void *local_address;
	struct mca_btl_base_registration_handle_t *local_handle;
	mca_btl_base_rdma_completion_fn_t cbfunc;
	void *cbcontext, *cbdata;
	sib_rkey_t *rkey;
};

size_t mca_btl_softib_handle_size(void)
{
	return sizeof(struct mca_btl_base_registration_handle_t);
}

struct mca_btl_base_registration_handle_t *mca_btl_softib_register_mem(
	struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
	void *base, size_t size, uint32_t flags)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;
	struct softib_reg *r = calloc(1, sizeof(*r));
	void *blob = NULL;
	size_t len = 0;

	sib_status_t st;

	/* flags: libsib's regions allow every access. Cached: ob1 registers
	 * and deregisters a rendezvous buffer around every transfer, and a
	 * registration of its own each time, its dereg waiting for every
	 * copy in flight on the host, took nearly as long as the copy
	 * (512 KiB: 10-12 GB/s against vader's 17; docs/mpi.md) */
	if (!r)
		return NULL;
	st = sib_mem_map_flags(c->worker, base, size, SIB_MEM_CACHED, &r->mem);
	if (c->verbose > 3)
		opal_output(0, "btl softib: register %p + %zu: %s", base, size,
			    sib_status_string(st));
	if (st != SIB_OK)
		goto fail;
	if (sib_rkey_pack(r->mem, &blob, &len) != SIB_OK || len > SOFTIB_RKEY_MAX) {
		sib_rkey_buffer_free(blob);
		sib_mem_unmap(r->mem);
		goto fail;
	}
	r->handle.len = (uint32_t)len;
	memcpy(r->handle.blob, blob, len);
	sib_rkey_buffer_free(blob);
	r->base = (uintptr_t)base;
	r->size = size;
	r->shared = -1;
	OPAL_THREAD_LOCK(&c->lock);
	r->next = regs;
	if (regs)
		regs->prev = r;
	regs = r;
	OPAL_THREAD_UNLOCK(&c->lock);
	return &r->handle;
fail:
	free(r);
	return NULL;
}

int mca_btl_softib_deregister_mem(struct mca_btl_base_module_t *btl,
				  struct mca_btl_base_registration_handle_t *h)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;
	struct softib_reg *r;
	sib_status_t st;

	if (!h)
		return OPAL_ERR_BAD_PARAM;
	r = (struct softib_reg *)((char *)h - offsetof(struct softib_reg, handle));
	OPAL_THREAD_LOCK(&c->lock);
	if (r->prev)
		r->prev->next = r->next;
	else
		regs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	OPAL_THREAD_UNLOCK(&c->lock);
	st = sib_mem_unmap(r->mem);
	free(r);
	return mca_btl_softib_status(st);
}

/* 1 if the mapping that holds addr is shared (other processes may map the
 * same pages), 0 if private, -1 if /proc/self/maps does not say. */
static int mapping_shared(uintptr_t addr)
{
	char line[512], perms[8];
	unsigned long lo, hi;
	int shared = -1;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3)
			continue;
		if (addr >= lo && addr < hi) {
			shared = perms[3] == 's';
			break;
		}
	}
	fclose(f);
	return shared;
}

struct mca_btl_base_registration_handle_t *mca_btl_softib_reg_private(
	uint64_t addr, size_t len)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;
	struct mca_btl_base_registration_handle_t *h = NULL;

	OPAL_THREAD_LOCK(&c->lock);
	for (struct softib_reg *r = regs; r; r = r->next) {
		if (addr < r->base || addr - r->base > r->size ||
		    len > r->size - (addr - r->base))
			continue;
		if (r->shared < 0)
			r->shared = mapping_shared(r->base);
		if (r->shared == 0)
			h = &r->handle;
		break;
	}
	OPAL_THREAD_UNLOCK(&c->lock);
	return h;
}

int mca_btl_softib_rkey(struct mca_btl_base_endpoint_t *endpoint,
			const struct mca_btl_base_registration_handle_t *h,
			sib_rkey_t **rkey)
{
	*rkey = NULL;
	/* osc rdma asks for a peer the BML gave to another BTL (itself, to
	 * btl self) with no endpoint of ours: refused, not dereferenced */
	if (!endpoint || !endpoint->ep)
		return OPAL_ERR_UNREACH;
	if (!h || !h->len || h->len > SOFTIB_RKEY_MAX)
		return OPAL_ERR_BAD_PARAM;
	return mca_btl_softib_status(sib_rkey_unpack(endpoint->ep, h->blob,
						     h->len, rkey));
}

/* cbfunc may be NULL: osc rdma, given a BTL with flush
 * (MCA_BTL_FLAGS_RDMA_FLUSH), waits for its puts with btl_flush. */
static void rdma_done(sib_request_t *req, sib_status_t st, void *arg)
{
	struct softib_rdma_op *op = arg;

	sib_rkey_destroy(op->rkey);
	if (op->cbfunc)
		op->cbfunc(&mca_btl_softib_module.super, op->endpoint,
			   op->local_address, op->local_handle, op->cbcontext,
			   op->cbdata, mca_btl_softib_status(st));
	free(op);
}

/* The operation's record and the peer's key (*out), or an Open MPI
 * error. */
static int op_new(struct mca_btl_base_endpoint_t *endpoint, void *local_address,
		  struct mca_btl_base_registration_handle_t *local_handle,
		  struct mca_btl_base_registration_handle_t *remote_handle,
		  mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
		  void *cbdata, struct softib_rdma_op **out)
{
	struct softib_rdma_op *op;
	int rc;

	*out = NULL;
	op = malloc(sizeof(*op));
	if (!op)
		return OPAL_ERR_OUT_OF_RESOURCE;
	*op = (struct softib_rdma_op){ endpoint, local_address, local_handle,
				       cbfunc, cbcontext, cbdata, NULL };
	rc = mca_btl_softib_rkey(endpoint, remote_handle, &op->rkey);
	if (rc != OPAL_SUCCESS) {
		free(op);
		return rc;
	}
	*out = op;
	return OPAL_SUCCESS;
}

/* After a start: the request goes by itself; a refusal undoes the op. */
static int op_started(struct softib_rdma_op *op, sib_status_t st, sib_request_t *req)
{
	if (st == SIB_OK || st == SIB_INPROGRESS) {
		sib_request_free(req); /* the callback still runs, once */
		return OPAL_SUCCESS;
	}
	sib_rkey_destroy(op->rkey);
	free(op);
	return st == SIB_ERR_NO_RESOURCE || st == SIB_ERR_BUSY ?
		OPAL_ERR_OUT_OF_RESOURCE : mca_btl_softib_status(st);
}

/* A put (write true) or a get: libsib's calls share a signature. */
static int rdma(bool write, struct mca_btl_base_endpoint_t *endpoint,
		void *local_address, uint64_t remote_address,
		struct mca_btl_base_registration_handle_t *local_handle,
		struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
		mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
	struct sib_op_params p = { .send_cb = rdma_done };
	struct softib_rdma_op *op;
	sib_request_t *req = NULL;
	sib_status_t st;
	int rc;

	rc = op_new(endpoint, local_address, local_handle, remote_handle, cbfunc,
		    cbcontext, cbdata, &op);
	if (mca_btl_softib_component.verbose > 3)
		opal_output(0, "btl softib: %s %zu B at %#" PRIx64 ": %d",
			    write ? "put" : "get", size, remote_address, rc);
	if (rc != OPAL_SUCCESS)
		return rc;
	p.cb_arg = op;
	st = write ? sib_put_nb(endpoint->ep, local_address, size, remote_address,
				op->rkey, &p, &req)
		   : sib_get_nb(endpoint->ep, local_address, size, remote_address,
				op->rkey, &p, &req);
	return op_started(op, st, req);
}

int mca_btl_softib_put(struct mca_btl_base_module_t *btl,
		       struct mca_btl_base_endpoint_t *endpoint, void *local_address,
		       uint64_t remote_address,
		       struct mca_btl_base_registration_handle_t *local_handle,
		       struct mca_btl_base_registration_handle_t *remote_handle,
		       size_t size, int flags, int order,
		       mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
		       void *cbdata)
{
	return rdma(true, endpoint, local_address, remote_address, local_handle,
		    remote_handle, size, cbfunc, cbcontext, cbdata);
}

int mca_btl_softib_get(struct mca_btl_base_module_t *btl,
		       struct mca_btl_base_endpoint_t *endpoint, void *local_address,
		       uint64_t remote_address,
		       struct mca_btl_base_registration_handle_t *local_handle,
		       struct mca_btl_base_registration_handle_t *remote_handle,
		       size_t size, int flags, int order,
		       mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
		       void *cbdata)
{
	return rdma(false, endpoint, local_address, remote_address, local_handle,
		    remote_handle, size, cbfunc, cbcontext, cbdata);
}

/* Every operation issued to endpoint (NULL: to anyone) has completed. */
int mca_btl_softib_flush(struct mca_btl_base_module_t *btl,
			 struct mca_btl_base_endpoint_t *endpoint)
{
	sib_request_t *req = NULL;
	sib_status_t st;

	st = endpoint ? sib_ep_flush(endpoint->ep, &req)
		      : sib_worker_flush(mca_btl_softib_component.worker, &req);
	if (st == SIB_INPROGRESS || (st == SIB_OK && req)) {
		st = sib_request_wait(req, NULL);
		sib_request_free(req);
	}
	return mca_btl_softib_status(st);
}
