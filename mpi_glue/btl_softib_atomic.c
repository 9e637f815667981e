/*
 * Atomic operations of the softib BTL (btl_atomic_op, btl_atomic_fop,
 * btl_atomic_cswap): what Open MPI's osc rdma needs for MPI_Accumulate,
 * MPI_Fetch_and_op, MPI_Compare_and_swap and for its own window locks.
 *
 * Over libsib's 64-bit RMA atomics: add and compare-and-swap are one HCA
 * atomic each (sib_atomic_fadd64_nb, sib_atomic_cswap64_nb). The other
 * operations the BTL interface names (swap, and, or, xor, and the logical
 * three) are a compare-and-swap loop here in the BTL: guess the word (0 at
 * first), swap in op(guess); the HCA returns what the word held, and when
 * that was not the guess it is the next guess. Every round is one HCA
 * atomic, so the loop is atomic with respect to every other softib atomic
 * on the word; it is lock-free (a round fails only because another
 * changed the word). The loop runs from libsib's completion callbacks, so
 * Open MPI sees one operation and one completion. min and max compare as
 * signed 64-bit integers: the interface does not say whether the word is
 * signed, and osc rdma 4.1 asks for them on every integer type (it calls
 * the BTL whatever btl_atomic_flags says, and a refusal makes it ask
 * again for ever: tried), so an unsigned word above 2^63 gets a signed
 * min or max (Open MPI's limit, docs/mpi.md). 32-bit and floating-point
 * atomics are not offered: for them osc rdma does check the flags, and
 * works on the 64-bit word around them by compare-and-swap.
 *
 * Consistency. softib's HCA atomics are atomic with respect to each other
 * (IBV_ATOMIC_HCA: the responder serialises them per target word), not
 * with the CPU's, so the BTL does not claim MCA_BTL_ATOMIC_SUPPORTS_GLOB.
 * Open MPI 4.1's osc rdma nevertheless hands the BTL atomics without a key
 * (remote handle NULL) on memory it reaches by load/store: a rank's own
 * window (MPI_Win_create on one host) and, when every rank is on one host,
 * each rank's part of the MPI_Win_allocate segment they all map. It
 * retries for ever an operation refused as "out of resource" (the hang of
 * the first attempt, docs/mpi.md). Such a word must change the way every
 * other process changes it:
 *   - it lies in a region this process registered in private memory: the
 *     others reach it through the HCA with that region's key, so we do
 *     too, through our endpoint to ourselves;
 *   - otherwise it is shared memory that osc rdma gave no rank a key to
 *     (the one-host MPI_Win_allocate segment: no HCA atomic ever touches
 *     it), and every rank takes this same keyless path: a CPU atomic on
 *     the word, done inline (return 1, as the interface allows).
 */
#include "btl_softib.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "opal/util/output.h"

/* Our own code for compare-and-swap, beside MCA_BTL_ATOMIC_* */
#define AMO_CSWAP 0x1000

/* One atomic in flight. */
struct softib_amo {
	struct mca_btl_base_endpoint_t *endpoint;
	void *local_address;            /* the old value goes here (or NULL) */
	struct mca_btl_base_registration_handle_t *local_handle;
	mca_btl_base_rdma_completion_fn_t cbfunc;
	void *cbcontext, *cbdata;
	sib_rkey_t *rkey;
	uint64_t raddr;
	int op;                         /* MCA_BTL_ATOMIC_*, or AMO_CSWAP */
	uint64_t operand;
	uint64_t compare, swap;         /* this round's compare-and-swap */
	uint64_t old;                   /* what the word held (libsib's) */
	struct softib_amo *next;        /* on the retry list */
};

/* Rounds of a loop that libsib could not take at once (no send credit):
 * started again from progress. Changed under the component's lock; read
 * without it only to see whether it is empty (relaxed: a push missed
 * waits for the next progress call). */
static struct softib_amo *_Atomic retry_head;

/* The new value of a word that held old, or false if op is not ours. */
static bool amo_apply(int op, uint64_t old, uint64_t operand, uint64_t *nv)
{
	switch (op) {
	case MCA_BTL_ATOMIC_ADD:
		*nv = old + operand;
		return true;
	case MCA_BTL_ATOMIC_AND:
		*nv = old & operand;
		return true;
	case MCA_BTL_ATOMIC_OR:
		*nv = old | operand;
		return true;
	case MCA_BTL_ATOMIC_XOR:
		*nv = old ^ operand;
		return true;
	case MCA_BTL_ATOMIC_LAND:
		*nv = old && operand;
		return true;
	case MCA_BTL_ATOMIC_LOR:
		*nv = old || operand;
		return true;
	case MCA_BTL_ATOMIC_LXOR:
		*nv = !old != !operand;
		return true;
	case MCA_BTL_ATOMIC_SWAP:
		*nv = operand;
		return true;
	case MCA_BTL_ATOMIC_MIN:
		*nv = (int64_t)operand < (int64_t)old ? operand : old;
		return true;
	case MCA_BTL_ATOMIC_MAX:
		*nv = (int64_t)operand > (int64_t)old ? operand : old;
		return true;
	default:
		return false;
	}
}

/* The operation on a word of this process by the CPU; returns the old
 * value. Sequentially consistent, as the HCA's are. */
static uint64_t amo_cpu(int op, uint64_t addr, uint64_t operand,
			uint64_t compare)
{
	_Atomic uint64_t *w = (_Atomic uint64_t *)(uintptr_t)addr;
	uint64_t old, nv;

	switch (op) {
	case MCA_BTL_ATOMIC_ADD:
		return atomic_fetch_add(w, operand);
	case MCA_BTL_ATOMIC_AND:
		return atomic_fetch_and(w, operand);
	case MCA_BTL_ATOMIC_OR:
		return atomic_fetch_or(w, operand);
	case MCA_BTL_ATOMIC_XOR:
		return atomic_fetch_xor(w, operand);
	case MCA_BTL_ATOMIC_SWAP:
		return atomic_exchange(w, operand);
	case AMO_CSWAP:
		old = compare;
		atomic_compare_exchange_strong(w, &old, operand);
		return old;
	default:
		old = atomic_load(w);
		do
			amo_apply(op, old, operand, &nv);
		while (!atomic_compare_exchange_weak(w, &old, nv));
		return old;
	}
}

static void amo_done(sib_request_t *req, sib_status_t st, void *arg);

/* Posts this round of a; an Open MPI status. */
static int amo_post(struct softib_amo *a)
{
	struct sib_op_params p = { .send_cb = amo_done, .cb_arg = a };
	sib_request_t *req = NULL;
	sib_status_t st;

	if (a->op == MCA_BTL_ATOMIC_ADD)
		st = sib_atomic_fadd64_nb(a->endpoint->ep, a->raddr, a->rkey,
					  a->operand, &a->old, &p, &req);
	else
		st = sib_atomic_cswap64_nb(a->endpoint->ep, a->raddr, a->rkey,
					   a->compare, a->swap, &a->old, &p,
					   &req);
	if (st == SIB_OK || st == SIB_INPROGRESS) {
		sib_request_free(req); /* amo_done still runs, once */
		return OPAL_SUCCESS;
	}
	return st == SIB_ERR_NO_RESOURCE || st == SIB_ERR_BUSY ?
		OPAL_ERR_OUT_OF_RESOURCE : mca_btl_softib_status(st);
}

static void amo_finish(struct softib_amo *a, int rc)
{
	if (mca_btl_softib_component.verbose > 3)
		opal_output(0, "btl softib: atomic %#x at %#" PRIx64 " done: "
			    "%d, old %#" PRIx64, a->op, a->raddr, rc, a->old);
	if (rc == OPAL_SUCCESS && a->local_address)
		memcpy(a->local_address, &a->old, 8);
	sib_rkey_destroy(a->rkey);
	if (a->cbfunc) /* osc rdma may wait by flush instead */
		a->cbfunc(&mca_btl_softib_module.super, a->endpoint,
			  a->local_address, a->local_handle, a->cbcontext,
			  a->cbdata, rc);
	free(a);
}

/* The next round of a loop, now or from progress. */
static void amo_again(struct softib_amo *a)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;
	int rc = amo_post(a);

	if (rc == OPAL_SUCCESS)
		return;
	if (rc != OPAL_ERR_OUT_OF_RESOURCE) {
		amo_finish(a, rc);
		return;
	}
	OPAL_THREAD_LOCK(&c->lock);
	a->next = atomic_load_explicit(&retry_head, memory_order_relaxed);
	atomic_store_explicit(&retry_head, a, memory_order_relaxed);
	OPAL_THREAD_UNLOCK(&c->lock);
}

/* libsib's completion of one round (from progress). */
static void amo_done(sib_request_t *req, sib_status_t st, void *arg)
{
	struct softib_amo *a = arg;

	(void)req;
	if (st != SIB_OK) {
		amo_finish(a, mca_btl_softib_status(st));
		return;
	}
	if (a->op == MCA_BTL_ATOMIC_ADD || a->old == a->compare) {
		amo_finish(a, OPAL_SUCCESS);
		return;
	}
	if (a->op == AMO_CSWAP) {
		amo_finish(a, OPAL_SUCCESS); /* it lost: old tells */
		return;
	}
	/* the word held another value than the guess: guess it */
	a->compare = a->old;
	amo_apply(a->op, a->old, a->operand, &a->swap);
	amo_again(a);
}

int mca_btl_softib_atomic_progress(void)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;
	struct softib_amo *list;
	int n = 0;

	if (!atomic_load_explicit(&retry_head, memory_order_relaxed))
		return 0;
	OPAL_THREAD_LOCK(&c->lock);
	list = atomic_load_explicit(&retry_head, memory_order_relaxed);
	atomic_store_explicit(&retry_head, NULL, memory_order_relaxed);
	OPAL_THREAD_UNLOCK(&c->lock);
	while (list) {
		struct softib_amo *a = list;

		list = a->next;
		amo_again(a);
		n++;
	}
	return n;
}

static bool is_self(const struct mca_btl_base_endpoint_t *endpoint)
{
	return sib_ep_peer_id(endpoint->ep) ==
	       sib_worker_id(mca_btl_softib_component.worker);
}

/* Every atomic: op (MCA_BTL_ATOMIC_* or AMO_CSWAP) with operand (the swap
 * value for AMO_CSWAP) on the word at raddr. */
static int amo(struct mca_btl_base_endpoint_t *endpoint, void *local_address,
	       struct mca_btl_base_registration_handle_t *local_handle,
	       uint64_t raddr, struct mca_btl_base_registration_handle_t *rh,
	       int op, uint64_t operand, uint64_t compare, int flags,
	       mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
	       void *cbdata)
{
	struct softib_amo *a;
	uint64_t first;
	int rc;

	if (flags & (MCA_BTL_ATOMIC_FLAG_32BIT | MCA_BTL_ATOMIC_FLAG_FLOAT))
		return OPAL_ERR_NOT_AVAILABLE;
	if (raddr & 7)
		return OPAL_ERR_NOT_AVAILABLE;
	if (op == AMO_CSWAP)
		first = operand;
	else if (!amo_apply(op, compare, operand, &first))
		return OPAL_ERR_NOT_AVAILABLE;
	if (!endpoint || !endpoint->ep)
		return OPAL_ERR_UNREACH;
	if (mca_btl_softib_component.verbose > 3)
		opal_output(0, "btl softib: atomic %#x at %#" PRIx64 " to %u%s: "
			    "operand %#" PRIx64 " compare %#" PRIx64, op, raddr,
			    sib_ep_peer_id(endpoint->ep), rh ? "" : " (no key)",
			    operand, compare);
	if (!rh) {
		/* a word osc rdma reaches by load/store (see the top) */
		if (is_self(endpoint))
			rh = mca_btl_softib_reg_private(raddr, 8);
		if (!rh) {
			uint64_t old = amo_cpu(op, raddr, operand, compare);

			if (local_address)
				memcpy(local_address, &old, 8);
			return 1;
		}
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return OPAL_ERR_OUT_OF_RESOURCE;
	*a = (struct softib_amo){
		.endpoint = endpoint, .local_address = local_address,
		.local_handle = local_handle, .cbfunc = cbfunc,
		.cbcontext = cbcontext, .cbdata = cbdata, .raddr = raddr,
		.op = op, .operand = operand, .compare = compare, .swap = first,
	};
	rc = mca_btl_softib_rkey(endpoint, rh, &a->rkey);
	if (rc == OPAL_SUCCESS)
		rc = amo_post(a);
	if (rc != OPAL_SUCCESS) {
		sib_rkey_destroy(a->rkey);
		free(a);
	}
	return rc;
}

int mca_btl_softib_atomic_op(struct mca_btl_base_module_t *btl,
			     struct mca_btl_base_endpoint_t *endpoint,
			     uint64_t remote_address,
			     struct mca_btl_base_registration_handle_t *remote_handle,
			     mca_btl_base_atomic_op_t op, uint64_t operand,
			     int flags, int order,
			     mca_btl_base_rdma_completion_fn_t cbfunc,
			     void *cbcontext, void *cbdata)
{
	return amo(endpoint, NULL, NULL, remote_address, remote_handle, op,
		   operand, 0, flags, cbfunc, cbcontext, cbdata);
}

int mca_btl_softib_atomic_fop(struct mca_btl_base_module_t *btl,
			      struct mca_btl_base_endpoint_t *endpoint,
			      void *local_address, uint64_t remote_address,
			      struct mca_btl_base_registration_handle_t *local_handle,
			      struct mca_btl_base_registration_handle_t *remote_handle,
			      mca_btl_base_atomic_op_t op, uint64_t operand,
			      int flags, int order,
			      mca_btl_base_rdma_completion_fn_t cbfunc,
			      void *cbcontext, void *cbdata)
{
	if (!local_address)
		return OPAL_ERR_BAD_PARAM;
	return amo(endpoint, local_address, local_handle, remote_address,
		   remote_handle, op, operand, 0, flags, cbfunc, cbcontext,
		   cbdata);
}

int mca_btl_softib_atomic_cswap(struct mca_btl_base_module_t *btl,
				struct mca_btl_base_endpoint_t *endpoint,
				void *local_address, uint64_t remote_address,
				struct mca_btl_base_registration_handle_t *local_handle,
				struct mca_btl_base_registration_handle_t *remote_handle,
				uint64_t compare, uint64_t value, int flags,
				int order, mca_btl_base_rdma_completion_fn_t cbfunc,
				void *cbcontext, void *cbdata)
{
	if (!local_address)
		return OPAL_ERR_BAD_PARAM;
	return amo(endpoint, local_address, local_handle, remote_address,
		   remote_handle, AMO_CSWAP, value, compare, flags, cbfunc,
		   cbcontext, cbdata);
}
