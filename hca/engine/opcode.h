/*
 * The opcode table: for every send opcode the device executes, which QP
 * types accept it (seed 004's table), what it moves, and the completion
 * opcode it reports. Posting, the requester and the responder walk it
 * instead of branching on opcodes; the packet formats of the UDP link
 * will hang off the same rows.
 */
#ifndef HCA_OPCODE_H
#define HCA_OPCODE_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#define HCA_QPT_BIT(t) (1u << (t))

enum hca_op_flags {
	HCA_OPF_SEND     = 1 << 0,  /* consumes a receive WQE, carries data */
	HCA_OPF_IMM      = 1 << 1,  /* carries immediate data */
	HCA_OPF_WRITE    = 1 << 2,  /* data to the responder's memory by rkey */
	HCA_OPF_READ     = 1 << 3,  /* data from the responder's memory */
	HCA_OPF_ATOMIC   = 1 << 4,  /* 8-byte read-modify-write at the responder */
};

struct hca_opcode {
	const char *name;
	uint32_t qp_types;          /* HCA_QPT_BIT of each type accepting it */
	uint32_t flags;
	enum ibv_wc_opcode wc_opcode;
	unsigned rkey_access;       /* the MR/QP access the responder needs */
};

/* NULL when the opcode is not one the device executes. */
const struct hca_opcode *hca_opcode_get(enum ibv_wr_opcode op);
bool hca_opcode_allowed(enum ibv_wr_opcode op, enum ibv_qp_type type);
enum ibv_wc_opcode hca_wc_opcode_of(enum ibv_wr_opcode op);

#endif
