/*
 * One-sided operations of the softib BTL: memory registration, put, get
 * and flush, over libsib's RMA (sib_mem_map, rkeys, sib_put_nb /
 * sib_get_nb). With them ob1 moves a large contiguous message with one
 * RDMA read (its RGET protocol) instead of a pipeline of sends.
 *
 * No atomics: Open MPI 4.1's osc rdma, given a BTL whose atomics are not
 * atomic with the CPU's (MCA_BTL_ATOMIC_SUPPORTS_GLOB, which softib's HCA
 * atomics are not), passes a NULL key for MPI_Compare_and_swap on a window
 * of MPI_Win_allocate (tried: it retried for ever). Windows stay with osc
 * sm / pt2pt until that is solved (docs/mpi.md).
 *
 * Registration: a handle is what Open MPI copies to the peer, so it holds
 * the packed key (a fixed-size blob); the region itself (sib_mem_t) sits
 * beside it in a local struct the handle is the tail of. The peer unpacks
 * the key for each operation and destroys it when the operation
 * completes (a key is a few words: cheaper than keeping a cache honest
 * across deregistrations). Local buffers need no registration: libsib
 * moves them inline, through its bounce slots, or through its own
 * registration cache, so the local registration thresholds are SIZE_MAX.
 *
 * Completion: libsib calls back from progress (the component's
 * btl_progress) exactly once per operation, with the operation's status: a
 * refused access (SIB_ERR_REMOTE_ACCESS) reaches Open MPI as OPAL_ERROR, a
 * dead peer as OPAL_ERR_UNREACH (mca_btl_softib_status).
 */
#include "btl_softib.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "opal/util/output.h"

#define SOFTIB_RKEY_MAX 56

struct mca_btl_base_registration_handle_t {
	uint32_t len;                   /* bytes of blob */
	uint8_t blob[SOFTIB_RKEY_MAX];  /* sib_rkey_pack's */
};

/* What register_mem returns the tail of. */
struct softib_reg {
	sib_mem_t *mem;
	struct mca_btl_base_registration_handle_t handle;
};

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
	struct softib_reg *r = calloc(1, sizeof(*r));
	void *blob = NULL;
	size_t len = 0;

	/* flags: libsib's regions allow every access */
	if (!r)
		return NULL;
	if (sib_mem_map(mca_btl_softib_component.worker, base, size, &r->mem) != SIB_OK)
		goto fail;
	if (sib_rkey_pack(r->mem, &blob, &len) != SIB_OK || len > SOFTIB_RKEY_MAX) {
		sib_rkey_buffer_free(blob);
		sib_mem_unmap(r->mem);
		goto fail;
	}
	r->handle.len = (uint32_t)len;
	memcpy(r->handle.blob, blob, len);
	sib_rkey_buffer_free(blob);
	return &r->handle;
fail:
	free(r);
	return NULL;
}

int mca_btl_softib_deregister_mem(struct mca_btl_base_module_t *btl,
				  struct mca_btl_base_registration_handle_t *h)
{
	struct softib_reg *r;
	sib_status_t st;

	if (!h)
		return OPAL_ERR_BAD_PARAM;
	r = (struct softib_reg *)((char *)h - offsetof(struct softib_reg, handle));
	st = sib_mem_unmap(r->mem);
	free(r);
	return mca_btl_softib_status(st);
}

static void rdma_done(sib_request_t *req, sib_status_t st, void *arg)
{
	struct softib_rdma_op *op = arg;

	sib_rkey_destroy(op->rkey);
	op->cbfunc(&mca_btl_softib_module.super, op->endpoint, op->local_address,
		   op->local_handle, op->cbcontext, op->cbdata,
		   mca_btl_softib_status(st));
	free(op);
}

/* The operation's record and the peer's key, or NULL (out of resource). */
static struct softib_rdma_op *op_new(struct mca_btl_base_endpoint_t *endpoint,
				     void *local_address,
				     struct mca_btl_base_registration_handle_t *local_handle,
				     struct mca_btl_base_registration_handle_t *remote_handle,
				     mca_btl_base_rdma_completion_fn_t cbfunc,
				     void *cbcontext, void *cbdata)
{
	struct softib_rdma_op *op;

	/* osc rdma asks for a peer the BML gave to another BTL (itself, to
	 * btl self) with no endpoint of ours: refused, not dereferenced */
	if (!endpoint || !endpoint->ep || !remote_handle)
		return NULL;
	op = malloc(sizeof(*op));
	if (!op)
		return NULL;
	*op = (struct softib_rdma_op){ endpoint, local_address, local_handle,
				       cbfunc, cbcontext, cbdata, NULL };
	if (sib_rkey_unpack(endpoint->ep, remote_handle->blob, remote_handle->len,
			    &op->rkey) != SIB_OK) {
		free(op);
		return NULL;
	}
	return op;
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

	op = op_new(endpoint, local_address, local_handle, remote_handle, cbfunc,
		    cbcontext, cbdata);
	if (!op)
		return OPAL_ERR_OUT_OF_RESOURCE;
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
