/*
 * fuzz_packet.h: the input format of the fuzz_packet target, shared by
 * the harness (fuzz_packet.c) and the seed-corpus builder (fuzz_seeds.c):
 * the QP indexes a selector byte picks, the flags of a packet record, and
 * the requester and opcode indexes of a post-send action.
 */
#ifndef FUZZ_PACKET_H
#define FUZZ_PACKET_H

#define QKEY        0x1234u     /* every UD QP's Q_Key */

/* The QPs, by the index a selector byte picks (modulo NQP). */
enum { Q_RC_A, Q_RC_B, Q_UC_A, Q_UC_B, Q_UD_A, Q_UD_B, Q_SRQ_A, Q_SRQ_B,
       Q_XRC_INI, Q_XRC_TGT, Q_LONELY, NQP };

enum {
	P_QPN  = 1 << 0,        /* BTH DestQP := the QP the selector picks */
	P_PSN  = 1 << 1,        /* BTH PSN := the PSN the target expects + delta */
	P_KEYS = 1 << 2,        /* R_Key, XRC SRQ number := one of ours */
	P_RAW_ICRC = 1 << 3,    /* keep the ICRC the input has */
	P_TRANSPORT = 1 << 4,   /* opcode's transport := the target QP's */
	P_ALIGN = 1 << 5,       /* length := a multiple of 4, as the wire's */
};

/* Requester indexes in requesters[] (the a[0] of a post-send action). */
enum { SEND_RC_A, SEND_UC_A, SEND_UD_A, SEND_SRQ_A, SEND_XRC, SEND_LONELY };
/* Opcode indexes in send_ops[] (the a[1] of a post-send action). */
enum { OP_SEND, OP_SEND_IMM, OP_WRITE, OP_WRITE_IMM, OP_READ, OP_CAS, OP_FADD };

/* Write the seed corpus into dir (fuzz_seeds.c): 0, or 1 on a write error. */
int fuzz_write_seeds(const char *dir);

#endif
