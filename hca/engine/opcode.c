/*
 * The opcode table (see opcode.h). Which transport accepts which opcode
 * is seed 004's table: UD sends only; UC sends and RDMA writes; RC and
 * XRC everything, reads and atomics included.
 */
#include "opcode.h"

#define UD  HCA_QPT_BIT(IBV_QPT_UD)
#define UC  HCA_QPT_BIT(IBV_QPT_UC)
#define RC  HCA_QPT_BIT(IBV_QPT_RC)
#define XRC HCA_QPT_BIT(IBV_QPT_XRC_SEND)

static const struct hca_opcode table[] = {
	[IBV_WR_SEND] = { "SEND", UD | UC | RC | XRC, HCA_OPF_SEND,
			  IBV_WC_SEND, 0 },
	[IBV_WR_SEND_WITH_IMM] = { "SEND_WITH_IMM", UD | UC | RC | XRC,
				   HCA_OPF_SEND | HCA_OPF_IMM, IBV_WC_SEND, 0 },
	[IBV_WR_RDMA_WRITE] = { "RDMA_WRITE", UC | RC | XRC, HCA_OPF_WRITE,
				IBV_WC_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE },
	[IBV_WR_RDMA_WRITE_WITH_IMM] = { "RDMA_WRITE_WITH_IMM", UC | RC | XRC,
					 HCA_OPF_WRITE | HCA_OPF_IMM,
					 IBV_WC_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE },
	[IBV_WR_RDMA_READ] = { "RDMA_READ", RC | XRC, HCA_OPF_READ,
			       IBV_WC_RDMA_READ, IBV_ACCESS_REMOTE_READ },
	[IBV_WR_ATOMIC_CMP_AND_SWP] = { "ATOMIC_CMP_AND_SWP", RC | XRC,
					HCA_OPF_ATOMIC, IBV_WC_COMP_SWAP,
					IBV_ACCESS_REMOTE_ATOMIC },
	[IBV_WR_ATOMIC_FETCH_AND_ADD] = { "ATOMIC_FETCH_AND_ADD", RC | XRC,
					  HCA_OPF_ATOMIC, IBV_WC_FETCH_ADD,
					  IBV_ACCESS_REMOTE_ATOMIC },
};

const struct hca_opcode *hca_opcode_get(enum ibv_wr_opcode op)
{
	if ((unsigned)op >= sizeof(table) / sizeof(table[0]) || !table[op].name)
		return 0;
	return &table[op];
}

bool hca_opcode_allowed(enum ibv_wr_opcode op, enum ibv_qp_type type)
{
	const struct hca_opcode *o = hca_opcode_get(op);

	return o && (unsigned)type < 32 && (o->qp_types & HCA_QPT_BIT(type));
}

enum ibv_wc_opcode hca_wc_opcode_of(enum ibv_wr_opcode op)
{
	const struct hca_opcode *o = hca_opcode_get(op);

	return o ? o->wc_opcode : IBV_WC_SEND;
}
