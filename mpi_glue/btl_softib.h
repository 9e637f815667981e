/*
 * mca_btl_softib: an Open MPI 4.1 BTL (byte transfer layer) over libsib,
 * softib's message runtime. ob1 (the point-to-point engine) hands it
 * fragments tagged with one of Open MPI's active-message tags; the BTL
 * carries each as one libsib active message whose header is that tag, and
 * on arrival calls the callback Open MPI registered for the tag.
 *
 * What this BTL owns:
 *   component  one libsib context and worker per process (made at init),
 *              the worker's address published through Open MPI's modex
 *              (PMIx), progress;
 *   module     the one BTL module: limits from libsib's own figures,
 *              add_procs / del_procs (an endpoint per peer, from the
 *              peer's modex entry; peers of other jobs too: spawn,
 *              connect/accept), send / sendi / alloc / free / prepare_src,
 *              the error callback;
 *   rdma       registration, put / get, flush (libsib's RMA);
 *   atomic     atomic op / fetch-op / compare-and-swap (libsib's atomics,
 *              a compare-and-swap loop for the operations it lacks);
 *   frag       send descriptors and their buffers.
 * It includes only Open MPI's headers and <sib.h>: nothing of softib's
 * device or verbs layers.
 */
#ifndef MCA_BTL_SOFTIB_H
#define MCA_BTL_SOFTIB_H

#include "opal_config.h"

#include "opal/class/opal_free_list.h"
#include "opal/mca/btl/btl.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/threads/mutex.h"
#include "opal/util/proc.h"

#include <sib.h>

BEGIN_C_DECLS

/* The libsib active-message id that carries every BTL fragment; the
 * message header is the BTL tag (one byte). */
#define MCA_BTL_SOFTIB_AM_ID 7

struct mca_btl_softib_component_t {
	mca_btl_base_component_3_0_0_t super;
	struct mca_btl_softib_module_t *module;
	sib_context_t *ctx;
	sib_worker_t *worker;
	opal_mutex_t lock;       /* the endpoint list, under MPI threads */
	int threads;             /* enable_mpi_threads at init */
	/* MCA parameters */
	int free_list_max;
	int verbose;
};
typedef struct mca_btl_softib_component_t mca_btl_softib_component_t;
OPAL_MODULE_DECLSPEC extern mca_btl_softib_component_t
	mca_btl_softib_component;

struct mca_btl_softib_module_t {
	mca_btl_base_module_t super;
	mca_btl_base_module_error_cb_fn_t error_cb;
};
typedef struct mca_btl_softib_module_t mca_btl_softib_module_t;
extern mca_btl_softib_module_t mca_btl_softib_module;

struct mca_btl_base_endpoint_t {
	opal_list_item_t super;
	struct opal_proc_t *proc;
	sib_ep_t *ep;
};
typedef struct mca_btl_base_endpoint_t mca_btl_softib_endpoint_t;
OBJ_CLASS_DECLARATION(mca_btl_softib_endpoint_t);

/* A descriptor and its one segment; the buffer (max_send_size bytes)
 * follows the struct in the same free-list item. */
struct mca_btl_softib_frag_t {
	mca_btl_base_descriptor_t base;
	mca_btl_base_segment_t seg;
	struct mca_btl_base_endpoint_t *endpoint;
	uint8_t *buf;
	mca_btl_base_tag_t tag;
	struct mca_btl_softib_frag_t *next_free, *next_all;
};
typedef struct mca_btl_softib_frag_t mca_btl_softib_frag_t;

/* btl_softib_frag.c */
int mca_btl_softib_frag_init(void);
mca_btl_softib_frag_t *mca_btl_softib_frag_get(
	struct mca_btl_base_endpoint_t *ep, size_t size, uint32_t flags);
void mca_btl_softib_frag_put(mca_btl_softib_frag_t *frag);
void mca_btl_softib_frag_fini(void);

/* btl_softib_module.c */
int mca_btl_softib_module_setup(mca_btl_softib_module_t *m);
int mca_btl_softib_module_limits(mca_btl_softib_module_t *m);
/* The handler of MCA_BTL_SOFTIB_AM_ID (registered at init). */
sib_status_t mca_btl_softib_recv(void *arg, uint32_t source,
				 const void *header, size_t hlen, void *data,
				 size_t dlen);

/* btl_softib_send.c */
int mca_btl_softib_send(struct mca_btl_base_module_t *btl,
			struct mca_btl_base_endpoint_t *ep,
			struct mca_btl_base_descriptor_t *des,
			mca_btl_base_tag_t tag);
int mca_btl_softib_sendi(struct mca_btl_base_module_t *btl,
			 struct mca_btl_base_endpoint_t *ep,
			 struct opal_convertor_t *conv, void *header,
			 size_t header_size, size_t payload_size,
			 uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
			 mca_btl_base_descriptor_t **des);

/* btl_softib_rdma.c: registration, put, get, flush */
size_t mca_btl_softib_handle_size(void);
struct mca_btl_base_registration_handle_t *mca_btl_softib_register_mem(
	struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
	void *base, size_t size, uint32_t flags);
int mca_btl_softib_deregister_mem(struct mca_btl_base_module_t *btl,
				  struct mca_btl_base_registration_handle_t *h);
int mca_btl_softib_put(struct mca_btl_base_module_t *btl,
		       struct mca_btl_base_endpoint_t *endpoint, void *local_address,
		       uint64_t remote_address,
		       struct mca_btl_base_registration_handle_t *local_handle,
		       struct mca_btl_base_registration_handle_t *remote_handle,
		       size_t size, int flags, int order,
		       mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
		       void *cbdata);
int mca_btl_softib_get(struct mca_btl_base_module_t *btl,
		       struct mca_btl_base_endpoint_t *endpoint, void *local_address,
		       uint64_t remote_address,
		       struct mca_btl_base_registration_handle_t *local_handle,
		       struct mca_btl_base_registration_handle_t *remote_handle,
		       size_t size, int flags, int order,
		       mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
		       void *cbdata);
int mca_btl_softib_flush(struct mca_btl_base_module_t *btl,
			 struct mca_btl_base_endpoint_t *endpoint);

/* The handle of a region this process registered in private memory that
 * holds [addr, addr + len), or NULL. */
struct mca_btl_base_registration_handle_t *mca_btl_softib_reg_private(
	uint64_t addr, size_t len);
/* The peer's key from a handle, for operations through endpoint. */
int mca_btl_softib_rkey(struct mca_btl_base_endpoint_t *endpoint,
			const struct mca_btl_base_registration_handle_t *h,
			sib_rkey_t **rkey);

/* btl_softib_atomic.c */
int mca_btl_softib_atomic_op(struct mca_btl_base_module_t *btl,
			     struct mca_btl_base_endpoint_t *endpoint,
			     uint64_t remote_address,
			     struct mca_btl_base_registration_handle_t *remote_handle,
			     mca_btl_base_atomic_op_t op, uint64_t operand,
			     int flags, int order,
			     mca_btl_base_rdma_completion_fn_t cbfunc,
			     void *cbcontext, void *cbdata);
int mca_btl_softib_atomic_fop(struct mca_btl_base_module_t *btl,
			      struct mca_btl_base_endpoint_t *endpoint,
			      void *local_address, uint64_t remote_address,
			      struct mca_btl_base_registration_handle_t *local_handle,
			      struct mca_btl_base_registration_handle_t *remote_handle,
			      mca_btl_base_atomic_op_t op, uint64_t operand,
			      int flags, int order,
			      mca_btl_base_rdma_completion_fn_t cbfunc,
			      void *cbcontext, void *cbdata);
int mca_btl_softib_atomic_cswap(struct mca_btl_base_module_t *btl,
				struct mca_btl_base_endpoint_t *endpoint,
				void *local_address, uint64_t remote_address,
				struct mca_btl_base_registration_handle_t *local_handle,
				struct mca_btl_base_registration_handle_t *remote_handle,
				uint64_t compare, uint64_t value, int flags,
				int order, mca_btl_base_rdma_completion_fn_t cbfunc,
				void *cbcontext, void *cbdata);
/* Loop rounds waiting for send credit, started again; how many. */
int mca_btl_softib_atomic_progress(void);

/* An Open MPI status for a libsib one. */
int mca_btl_softib_status(sib_status_t st);

END_C_DECLS

#endif
