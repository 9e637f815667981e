/*
 * Compatibility entry points of libibverbs that softib keeps for binaries
 * linked against rdma-core:
 *
 *  - the ibv_copy_*_kern helpers, which translate between the verbs structs
 *    and the kernel uverbs / SA layouts.  softib has no kernel side, but the
 *    symbols are part of the IBVERBS_1.0/1.1 ABI and librdmacm imports
 *    them (it converts path records it gets from the rdma_cm kernel module);
 *    the kernel layouts come from the uapi headers <rdma/ib_user_verbs.h>
 *    and <rdma/ib_user_sa.h>.
 *  - the fork-safety calls (ibv_fork_init and friends).
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

/* rdma-core declares these in headers it does not install. */
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
				struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
				struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
				 struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
			       struct ibv_sa_path_rec *src);

/* The GID arrays have the same 16 bytes on both sides. */
_Static_assert(sizeof(union ibv_gid) == 16, "GID is 16 bytes");

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
				struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;

	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

/*
 * dst->qp_state is left as the caller set it, as rdma-core does: librdmacm
 * puts the target state in qp_attr, has the attributes for that transition
 * copied in here, and hands the whole struct to ibv_modify_qp().  The
 * kernel's QP attributes have no rate_limit, so that is left alone too.
 * The enum fields travel as __u32 in the kernel layout.
 */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
				struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;

	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;

	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);

	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

/*
 * Path records: the big-endian fields (LIDs, flow label, P_Key) are
 * big-endian on both sides and are copied as they are; the rest are host
 * integers of different widths.
 */
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
				 struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
			       struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->reversible = src->reversible;
	dst->mtu = src->mtu;
	dst->pkey = src->pkey;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->numb_path = src->numb_path;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

/*
 * Fork safety.
 *
 * With a kernel HCA, registered memory is pinned and the device DMAs into
 * the physical pages; after fork() copy-on-write would move the parent onto
 * fresh pages behind the device's back, which is why rdma-core marks
 * registered ranges MADV_DONTFORK once ibv_fork_init() was called.
 *
 * softib pins nothing.  A transfer reads or writes the registered buffer
 * through the kernel at the moment it happens (process_vm_readv/writev on
 * the owner's virtual addresses, or a copy in the owner's own progress), so
 * it always sees whatever pages back those addresses then: fork() cannot
 * separate the HCA from the application's memory, and no madvise() is
 * needed.  ibv_fork_init() therefore only records that the application
 * asked, so that ibv_is_fork_initialized() answers as it would on rdma-core
 * after the call, and the range calls succeed without doing anything.
 *
 * The flag is process-wide by the API's definition; it is atomic because
 * any thread may call either function.
 */
static atomic_bool fork_init_called;

int ibv_fork_init(void)
{
	atomic_store_explicit(&fork_init_called, true, memory_order_relaxed);
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return atomic_load_explicit(&fork_init_called, memory_order_relaxed) ?
		       IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
