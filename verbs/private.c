/*
 * The IBVERBS_PRIVATE_34 interface: the calls rdma-core's own providers
 * (libmlx5, libefa, ...) make into libibverbs to talk to the kernel.
 *
 * softib is not a provider host, but Debian's perftest binaries link
 * libmlx5.so.1 and libefa.so.1 directly, and the dynamic linker binds
 * every private symbol those import when the program starts; their
 * constructors then call verbs_register_driver_34().  So each symbol in
 * test/integration/data/required-exports.txt at that version must exist,
 * and none may do harm: registration is ignored (softib's device list
 * never consults providers), the kernel commands fail with EOPNOTSUPP, and
 * the context helpers refuse to build a provider context.  Nothing reaches
 * them in practice, since no device is ever handed to those providers.
 *
 * ibv_query_gid_type is also in IBVERBS_PRIVATE_34 but is a real query that
 * ibv_devinfo makes; it lives with the other device queries, not here.
 *
 * The prototypes follow rdma-core 44's driver.h and cmd_ioctl.h, which are
 * not installed.  Their kernel-command and provider structs are only ever
 * passed by pointer, so they are declared incomplete: the calling
 * convention of each function is what must match, not the layouts.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <infiniband/verbs.h>

/* Every stub below ignores its arguments by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* Provider-side objects (rdma-core driver.h). */
struct verbs_device_ops;
struct verbs_context_ops;
struct verbs_xrcd;
struct verbs_srq;
struct verbs_qp;
struct verbs_cq;
struct verbs_mr;
struct verbs_dm;
struct verbs_counters;
struct verbs_flow_action;
struct ibv_command_buffer;

/* Write-path command buffers (rdma-core kern-abi.h). */
struct ibv_get_context;
struct ibv_query_port;
struct ibv_alloc_pd;
struct ibv_open_xrcd;
struct ibv_reg_mr;
struct ibv_rereg_mr;
struct ibv_alloc_mw;
struct ibv_create_cq_ex;
struct ibv_resize_cq;
struct ibv_modify_cq;
struct ibv_create_srq;
struct ibv_create_xsrq;
struct ibv_modify_srq;
struct ibv_query_srq;
struct ibv_create_qp;
struct ibv_create_qp_ex;
struct ibv_open_qp;
struct ibv_query_qp;
struct ibv_modify_qp;
struct ibv_modify_qp_ex;
struct ibv_create_wq;
struct ibv_modify_wq;

/* Kernel responses (<rdma/ib_user_verbs.h>). */
struct ib_uverbs_get_context_resp;
struct ib_uverbs_ex_query_device_resp;
struct ib_uverbs_alloc_pd_resp;
struct ib_uverbs_open_xrcd_resp;
struct ib_uverbs_reg_mr_resp;
struct ib_uverbs_rereg_mr_resp;
struct ib_uverbs_alloc_mw_resp;
struct ib_uverbs_ex_create_cq_resp;
struct ib_uverbs_resize_cq_resp;
struct ib_uverbs_create_srq_resp;
struct ib_uverbs_create_qp_resp;
struct ib_uverbs_ex_create_qp_resp;
struct ib_uverbs_ex_modify_qp_resp;
struct ib_uverbs_create_ah_resp;
struct ib_uverbs_ex_create_wq_resp;
struct ib_uverbs_ex_create_rwq_ind_table_resp;

/*
 * Read by providers when a destroy command fails because the device was
 * hot-unplugged.  It is a data object, not a function, in rdma-core
 * (libmlx5 imports it as one), and stays false: softib devices never
 * disassociate.
 */
bool verbs_allow_disassociate_destroy;

/* ---- provider registration and context set-up ---- */

void verbs_register_driver_34(const struct verbs_device_ops *ops)
{
}

void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
				    size_t alloc_size,
				    struct verbs_context *context_offset,
				    uint32_t driver_id)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_context *verbs_open_device(struct ibv_device *device,
				      void *private_data)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void verbs_set_ops(struct verbs_context *vctx,
		   const struct verbs_context_ops *ops)
{
}

void verbs_uninit_context(struct verbs_context *context)
{
}

void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context)
{
}

int execute_ioctl(struct ibv_context *context, struct ibv_command_buffer *cmd)
{
	return EOPNOTSUPP;
}

/*
 * Provider diagnostics.  rdma-core's levels run from 1 (errors) to 4
 * (debug); a message is printed when VERBS_LOG_LEVEL is set to at least its
 * level.  Output goes to stderr only, and errno is preserved because
 * providers log on error paths before returning errno to their caller.
 */
static int verbs_log_threshold(void)
{
	/*
	 * -1: not read yet.  Threads racing on the first call all compute the
	 * same value from the environment, so relaxed ordering is enough.
	 */
	static atomic_int threshold = -1;
	int t = atomic_load_explicit(&threshold, memory_order_relaxed);

	if (t < 0) {
		const char *env = getenv("VERBS_LOG_LEVEL");

		t = env ? atoi(env) : 0;
		if (t < 0)
			t = 0;
		atomic_store_explicit(&threshold, t, memory_order_relaxed);
	}
	return t;
}

__attribute__((format(printf, 3, 4)))
void __verbs_log(struct verbs_context *ctx, uint32_t level,
		 const char *fmt, ...)
{
	int saved_errno = errno;
	va_list ap;

	if (!fmt || level == 0 || level > (uint32_t)verbs_log_threshold())
		goto out;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
out:
	errno = saved_errno;
}

/* ---- kernel commands: no kernel, so none is supported ---- */

int ibv_cmd_get_context(struct verbs_context *context,
			struct ibv_get_context *cmd, size_t cmd_size,
			struct ib_uverbs_get_context_resp *resp,
			size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_context(struct ibv_context *ctx,
			  struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_device_any(struct ibv_context *context,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size,
			     struct ib_uverbs_ex_query_device_resp *resp,
			     size_t *resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num,
		       struct ibv_port_attr *port_attr,
		       struct ibv_query_port *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd,
		     struct ibv_alloc_pd *cmd, size_t cmd_size,
		     struct ib_uverbs_alloc_pd_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dealloc_pd(struct ibv_pd *pd)
{
	return EOPNOTSUPP;
}

int ibv_cmd_open_xrcd(struct ibv_context *context, struct verbs_xrcd *xrcd,
		      int vxrcd_size, struct ibv_xrcd_init_attr *attr,
		      struct ibv_open_xrcd *cmd, size_t cmd_size,
		      struct ib_uverbs_open_xrcd_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_close_xrcd(struct verbs_xrcd *xrcd)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
		   uint64_t hca_va, int access, struct verbs_mr *vmr,
		   struct ibv_reg_mr *cmd, size_t cmd_size,
		   struct ib_uverbs_reg_mr_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr,
		     size_t length, uint64_t hca_va, int access,
		     struct ibv_pd *pd, struct ibv_rereg_mr *cmd,
		     size_t cmd_sz, struct ib_uverbs_rereg_mr_resp *resp,
		     size_t resp_sz)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dereg_mr(struct verbs_mr *vmr)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_mr(struct ibv_pd *pd, struct verbs_mr *vmr,
		     uint32_t mr_handle)
{
	return EOPNOTSUPP;
}

int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		      uint32_t flags, struct ibv_sge *sg_list,
		      uint32_t num_sge)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
			  uint64_t iova, int fd, int access,
			  struct verbs_mr *vmr)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type,
		     struct ibv_mw *mw, struct ibv_alloc_mw *cmd,
		     size_t cmd_size, struct ib_uverbs_alloc_mw_resp *resp,
		     size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dealloc_mw(struct ibv_mw *mw)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_cq_ex(struct ibv_context *context,
			 const struct ibv_cq_init_attr_ex *cq_attr,
			 struct verbs_cq *cq, struct ibv_create_cq_ex *cmd,
			 size_t cmd_size,
			 struct ib_uverbs_ex_create_cq_resp *resp,
			 size_t resp_size, uint32_t cmd_flags)
{
	return EOPNOTSUPP;
}

int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_cq(struct ibv_cq *cq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr,
		      struct ibv_modify_cq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq,
		       struct ibv_srq_init_attr *attr,
		       struct ibv_create_srq *cmd, size_t cmd_size,
		       struct ib_uverbs_create_srq_resp *resp,
		       size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_srq_ex(struct ibv_context *context, struct verbs_srq *srq,
			  struct ibv_srq_init_attr_ex *attr_ex,
			  struct ibv_create_xsrq *cmd, size_t cmd_size,
			  struct ib_uverbs_create_srq_resp *resp,
			  size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		       int srq_attr_mask, struct ibv_modify_srq *cmd,
		       size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		      struct ibv_query_srq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_srq(struct ibv_srq *srq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp_ex(struct ibv_context *context, struct verbs_qp *qp,
			 struct ibv_qp_init_attr_ex *attr_ex,
			 struct ibv_create_qp *cmd, size_t cmd_size,
			 struct ib_uverbs_create_qp_resp *resp,
			 size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp_ex2(struct ibv_context *context, struct verbs_qp *qp,
			  struct ibv_qp_init_attr_ex *qp_attr,
			  struct ibv_create_qp_ex *cmd, size_t cmd_size,
			  struct ib_uverbs_ex_create_qp_resp *resp,
			  size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_open_qp(struct ibv_context *context, struct verbs_qp *qp,
		    int vqp_sz, struct ibv_qp_open_attr *attr,
		    struct ibv_open_qp *cmd, size_t cmd_size,
		    struct ib_uverbs_create_qp_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr,
		     int attr_mask, struct ibv_qp_init_attr *qp_init_attr,
		     struct ibv_query_qp *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_modify_qp *cmd,
		      size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			 int attr_mask, struct ibv_modify_qp_ex *cmd,
			 size_t cmd_size,
			 struct ib_uverbs_ex_modify_qp_resp *resp,
			 size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_qp(struct ibv_qp *qp)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah,
		      struct ibv_ah_attr *attr,
		      struct ib_uverbs_create_ah_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_ah(struct ibv_ah *ah)
{
	return EOPNOTSUPP;
}

int ibv_cmd_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			 uint16_t lid)
{
	return EOPNOTSUPP;
}

int ibv_cmd_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			 uint16_t lid)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_flow(struct ibv_qp *qp, struct ibv_flow *flow_id,
			struct ibv_flow_attr *flow_attr, void *ucmd,
			size_t ucmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_flow(struct ibv_flow *flow_id)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_flow_action_esp(struct ibv_context *ctx,
				   struct ibv_flow_action_esp_attr *attr,
				   struct verbs_flow_action *flow_action,
				   struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_flow_action_esp(struct verbs_flow_action *flow_action,
				   struct ibv_flow_action_esp_attr *attr,
				   struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_flow_action(struct verbs_flow_action *action)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_wq(struct ibv_context *context,
		      struct ibv_wq_init_attr *wq_init_attr, struct ibv_wq *wq,
		      struct ibv_create_wq *cmd, size_t cmd_size,
		      struct ib_uverbs_ex_create_wq_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr,
		      struct ibv_modify_wq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_wq(struct ibv_wq *wq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_rwq_ind_table(
	struct ibv_context *context,
	struct ibv_rwq_ind_table_init_attr *init_attr,
	struct ibv_rwq_ind_table *rwq_ind_table,
	struct ib_uverbs_ex_create_rwq_ind_table_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *rwq_ind_table)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_counters(struct ibv_context *context,
			    struct ibv_counters_init_attr *init_attr,
			    struct verbs_counters *vcounters,
			    struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_counters(struct verbs_counters *vcounters)
{
	return EOPNOTSUPP;
}

int ibv_cmd_read_counters(struct verbs_counters *vcounters,
			  uint64_t *counters_value, uint32_t ncounters,
			  uint32_t flags, struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_dm(struct ibv_context *ctx,
		     const struct ibv_alloc_dm_attr *dm_attr,
		     struct verbs_dm *dm, struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_free_dm(struct verbs_dm *dm)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_dm_mr(struct ibv_pd *pd, struct verbs_dm *dm,
		      uint64_t offset, size_t length, unsigned int access,
		      struct verbs_mr *vmr, struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}
