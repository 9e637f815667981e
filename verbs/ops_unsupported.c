/*
 * The verbs softib does not implement, as explicit stubs rather than NULL
 * ops: memory windows, device memory, flows and flow actions, counters,
 * WQs and RSS tables, thread and parent domains, CQ moderation, rate
 * limits, tag-matching SRQ ops and the raw clock.
 *
 * Each fails the way its inline wrapper in <infiniband/verbs.h> fails when
 * the op is missing (EOPNOTSUPP, as errno for the pointer verbs), so a
 * program sees the same answer either way; and an inline that calls its op
 * without checking it (ibv_dealloc_mw, ibv_bind_mw) cannot
 * jump through NULL.
 */
#include <errno.h>

#include "verbs_int.h"

#define FAIL_NULL(type, name, ...)          \
	static type *name(__VA_ARGS__)      \
	{                                   \
		errno = EOPNOTSUPP;         \
		return NULL;                \
	}

#define FAIL_INT(name, ...)                 \
	static int name(__VA_ARGS__)        \
	{                                   \
		return EOPNOTSUPP;          \
	}

/* Every stub ignores its arguments by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* memory windows (struct ibv_context_ops) */
FAIL_NULL(struct ibv_mw, alloc_mw, struct ibv_pd *pd, enum ibv_mw_type type)
FAIL_INT(bind_mw, struct ibv_qp *qp, struct ibv_mw *mw,
	 struct ibv_mw_bind *mw_bind)
FAIL_INT(dealloc_mw, struct ibv_mw *mw)

/* memory */
FAIL_INT(advise_mr, struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
	 uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sges)
FAIL_NULL(struct ibv_mr, alloc_null_mr, struct ibv_pd *pd)
FAIL_NULL(struct ibv_mr, reg_dm_mr, struct ibv_pd *pd, struct ibv_dm *dm,
	  uint64_t dm_offset, size_t length, unsigned int access)
FAIL_NULL(struct ibv_dm, alloc_dm, struct ibv_context *context,
	  struct ibv_alloc_dm_attr *attr)
FAIL_INT(free_dm, struct ibv_dm *dm)

/* counters */
FAIL_INT(read_counters, struct ibv_counters *counters,
	 uint64_t *counters_value, uint32_t ncounters, uint32_t flags)
FAIL_INT(attach_counters_point_flow, struct ibv_counters *counters,
	 struct ibv_counter_attach_attr *attr, struct ibv_flow *flow)
FAIL_NULL(struct ibv_counters, create_counters, struct ibv_context *context,
	  struct ibv_counters_init_attr *init_attr)
FAIL_INT(destroy_counters, struct ibv_counters *counters)

/* flows and flow actions */
FAIL_INT(modify_flow_action_esp, struct ibv_flow_action *action,
	 struct ibv_flow_action_esp_attr *attr)
FAIL_INT(destroy_flow_action, struct ibv_flow_action *action)
FAIL_NULL(struct ibv_flow_action, create_flow_action_esp,
	  struct ibv_context *context, struct ibv_flow_action_esp_attr *attr)
FAIL_INT(destroy_flow, struct ibv_flow *flow)
FAIL_NULL(struct ibv_flow, create_flow, struct ibv_qp *qp,
	  struct ibv_flow_attr *flow_attr)

/* QPs, CQs, SRQs: extras */
FAIL_INT(modify_qp_rate_limit, struct ibv_qp *qp,
	 struct ibv_qp_rate_limit_attr *attr)
FAIL_INT(modify_cq, struct ibv_cq *cq, struct ibv_modify_cq_attr *attr)
FAIL_INT(post_srq_ops, struct ibv_srq *srq, struct ibv_ops_wr *op,
	 struct ibv_ops_wr **bad_op)
FAIL_INT(query_rt_values, struct ibv_context *context,
	 struct ibv_values_ex *values)

/* thread and parent domains */
FAIL_NULL(struct ibv_pd, alloc_parent_domain, struct ibv_context *context,
	  struct ibv_parent_domain_init_attr *attr)
FAIL_INT(dealloc_td, struct ibv_td *td)
FAIL_NULL(struct ibv_td, alloc_td, struct ibv_context *context,
	  struct ibv_td_init_attr *init_attr)

/* WQs and RSS indirection tables */
FAIL_INT(destroy_rwq_ind_table, struct ibv_rwq_ind_table *rwq_ind_table)
FAIL_NULL(struct ibv_rwq_ind_table, create_rwq_ind_table,
	  struct ibv_context *context,
	  struct ibv_rwq_ind_table_init_attr *init_attr)
FAIL_INT(destroy_wq, struct ibv_wq *wq)
FAIL_INT(modify_wq, struct ibv_wq *wq, struct ibv_wq_attr *wq_attr)
FAIL_NULL(struct ibv_wq, create_wq, struct ibv_context *context,
	  struct ibv_wq_init_attr *wq_init_attr)

void vb_set_unsupported_ops(struct verbs_context *v)
{
	v->context.ops.alloc_mw = alloc_mw;
	v->context.ops.bind_mw = bind_mw;
	v->context.ops.dealloc_mw = dealloc_mw;

	v->advise_mr = advise_mr;
	v->alloc_null_mr = alloc_null_mr;
	v->reg_dm_mr = reg_dm_mr;
	v->alloc_dm = alloc_dm;
	v->free_dm = free_dm;
	v->read_counters = read_counters;
	v->attach_counters_point_flow = attach_counters_point_flow;
	v->create_counters = create_counters;
	v->destroy_counters = destroy_counters;
	v->modify_flow_action_esp = modify_flow_action_esp;
	v->destroy_flow_action = destroy_flow_action;
	v->create_flow_action_esp = create_flow_action_esp;
	v->ibv_destroy_flow = destroy_flow;
	v->ibv_create_flow = create_flow;
	v->modify_qp_rate_limit = modify_qp_rate_limit;
	v->modify_cq = modify_cq;
	v->post_srq_ops = post_srq_ops;
	v->query_rt_values = query_rt_values;
	v->alloc_parent_domain = alloc_parent_domain;
	v->dealloc_td = dealloc_td;
	v->alloc_td = alloc_td;
	v->destroy_rwq_ind_table = destroy_rwq_ind_table;
	v->create_rwq_ind_table = create_rwq_ind_table;
	v->destroy_wq = destroy_wq;
	v->modify_wq = modify_wq;
	v->create_wq = create_wq;
}
