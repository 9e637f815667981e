/*
 * The modify-QP table: the IB spec's list of legal QP state transitions,
 * with the attributes each one requires and allows per QP type, written
 * down as data.  Code below only walks it.  The caller-visible rules
 * (modify in place, IBV_QP_STATE, IBV_QP_CUR_STATE) are in qp_modify.h.
 *
 * Sources: ibv_modify_qp(3) for the required attributes; the optional ones
 * follow the spec's transition table, cross-checked against the facts the
 * Linux kernel encodes in ib_modify_qp_is_ok().
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "qp_modify.h"

/* Dense index of the QP types softib supports; the verbs enum has holes. */
enum qpt_idx {
	QPT_RC,
	QPT_UC,
	QPT_UD,
	QPT_XRC_SEND,
	QPT_XRC_RECV,
	QPT_RAW,
	QPT_NUM
};

#define NSTATES (IBV_QPS_ERR + 1)

/* One cell of the table: types lists, one bit per qpt_idx, the QP types
 * for which the transition exists at all. */
struct transition {
	uint8_t types;
	int req[QPT_NUM];
	int opt[QPT_NUM];
};

#define T(idx)		(1u << (idx))
#define ALL_TYPES	(T(QPT_NUM) - 1)

/*
 * Attribute groups, named for what they configure, so that a row reads as
 * the spec's reasoning rather than a list of bits.
 */
/* RESET->INIT: where the QP lives (port, partition) and, for connected
 * services, what the remote side may do to local memory. */
#define INIT_CONN	(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define INIT_UD		(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
/* INIT->RTR: the path to the one remote QP and the receive PSN. */
#define RTR_PATH	(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | \
			 IBV_QP_RQ_PSN)
/* Responder knobs, only for QPs that answer RDMA READ/atomics and send
 * RNR NAKs: RC and the XRC receive side. */
#define RESPONDER	(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
/* Requester reliability knobs, only for QPs whose sends are acknowledged:
 * RC and the XRC send side. */
#define REQUESTER	(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | \
			 IBV_QP_MAX_QP_RD_ATOMIC)
/* What a connected QP may change while it runs (into or at RTS). */
#define RUN_CONN	(IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | \
			 IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE)
#define RUN_UD		(IBV_QP_CUR_STATE | IBV_QP_QKEY)
/* INIT->RTR optional for connected QPs: settings of INIT may still move. */
#define RTR_CONN_OPT	(IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | \
			 IBV_QP_PKEY_INDEX)
/* SQD->SQD: with the send queue drained, the path may be reloaded. */
#define SQD_CONN	(IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | \
			 IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE)

/* Spec: a QP may be reset or put in error from every state, by every
 * type, and nothing but the new state is given. */
#define TO_RESET_OR_ERR	{ .types = ALL_TYPES }

/* Rows every state shares. */
#define EXITS \
	[IBV_QPS_RESET] = TO_RESET_OR_ERR, \
	[IBV_QPS_ERR] = TO_RESET_OR_ERR

/* RTR->RTS, RTS->RTS and SQD->RTS allow the same running attributes
 * (initializers of an .opt array); responders may also retune the RNR
 * timer they advertise. */
#define RUN_OPT \
	[QPT_RC] = RUN_CONN | IBV_QP_MIN_RNR_TIMER, \
	[QPT_UC] = RUN_CONN, \
	[QPT_UD] = RUN_UD, \
	[QPT_XRC_SEND] = RUN_CONN, \
	[QPT_XRC_RECV] = RUN_CONN | IBV_QP_MIN_RNR_TIMER

static const struct transition qp_table[NSTATES][NSTATES] = {
	[IBV_QPS_RESET] = {
		EXITS,
		/* Creation attributes; a raw packet QP only needs its port. */
		[IBV_QPS_INIT] = {
			.types = ALL_TYPES,
			.req = {
				[QPT_RC] = INIT_CONN,
				[QPT_UC] = INIT_CONN,
				[QPT_UD] = INIT_UD,
				[QPT_XRC_SEND] = INIT_CONN,
				[QPT_XRC_RECV] = INIT_CONN,
				[QPT_RAW] = IBV_QP_PORT,
			},
		},
	},
	[IBV_QPS_INIT] = {
		EXITS,
		/* INIT->INIT: what RESET->INIT required may be changed again. */
		[IBV_QPS_INIT] = {
			.types = ALL_TYPES,
			.opt = {
				[QPT_RC] = INIT_CONN,
				[QPT_UC] = INIT_CONN,
				[QPT_UD] = INIT_UD,
				[QPT_XRC_SEND] = INIT_CONN,
				[QPT_XRC_RECV] = INIT_CONN,
			},
		},
		/* INIT->RTR: connected QPs learn their peer; datagram QPs
		 * have no peer, so nothing is required of them. */
		[IBV_QPS_RTR] = {
			.types = ALL_TYPES,
			.req = {
				[QPT_RC] = RTR_PATH | RESPONDER,
				[QPT_UC] = RTR_PATH,
				[QPT_XRC_SEND] = RTR_PATH,
				[QPT_XRC_RECV] = RTR_PATH | RESPONDER,
			},
			.opt = {
				[QPT_RC] = RTR_CONN_OPT,
				[QPT_UC] = RTR_CONN_OPT,
				[QPT_UD] = IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
				[QPT_XRC_SEND] = RTR_CONN_OPT,
				[QPT_XRC_RECV] = RTR_CONN_OPT,
			},
		},
	},
	[IBV_QPS_RTR] = {
		EXITS,
		/* RTR->RTS: the send side starts; every IB type needs its
		 * first PSN, acknowledged senders their retry policy.  The
		 * XRC receive side still names a PSN and a timeout. */
		[IBV_QPS_RTS] = {
			.types = ALL_TYPES,
			.req = {
				[QPT_RC] = IBV_QP_SQ_PSN | REQUESTER,
				[QPT_UC] = IBV_QP_SQ_PSN,
				[QPT_UD] = IBV_QP_SQ_PSN,
				[QPT_XRC_SEND] = IBV_QP_SQ_PSN | REQUESTER,
				[QPT_XRC_RECV] = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT,
			},
			.opt = {
				RUN_OPT,
				/* packet pacing: a raw packet QP only */
				[QPT_RAW] = IBV_QP_RATE_LIMIT,
			},
		},
	},
	[IBV_QPS_RTS] = {
		EXITS,
		/* RTS->RTS: tune a running QP; nothing required. */
		[IBV_QPS_RTS] = {
			.types = ALL_TYPES,
			.opt = {
				RUN_OPT,
				[QPT_RAW] = IBV_QP_RATE_LIMIT,
			},
		},
		/* RTS->SQD: drain the send queue; the consumer may ask for
		 * the "drained" async event. */
		[IBV_QPS_SQD] = {
			.types = ALL_TYPES,
			.opt = {
				[QPT_RC] = IBV_QP_EN_SQD_ASYNC_NOTIFY,
				[QPT_UC] = IBV_QP_EN_SQD_ASYNC_NOTIFY,
				[QPT_UD] = IBV_QP_EN_SQD_ASYNC_NOTIFY,
				[QPT_XRC_SEND] = IBV_QP_EN_SQD_ASYNC_NOTIFY,
				[QPT_XRC_RECV] = IBV_QP_EN_SQD_ASYNC_NOTIFY,
			},
		},
	},
	[IBV_QPS_SQD] = {
		EXITS,
		/* SQD->RTS: resume, with the running attributes (no rate
		 * limit here: only RTR->RTS and RTS->RTS carry it). */
		[IBV_QPS_RTS] = {
			.types = ALL_TYPES,
			.opt = { RUN_OPT },
		},
		/* SQD->SQD: the drained window in which the spec lets the
		 * path, port and retry policy be reloaded. */
		[IBV_QPS_SQD] = {
			.types = ALL_TYPES,
			.opt = {
				[QPT_RC] = SQD_CONN | IBV_QP_PORT | REQUESTER |
					   RESPONDER,
				[QPT_UC] = SQD_CONN,
				[QPT_UD] = IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
				[QPT_XRC_SEND] = SQD_CONN | IBV_QP_PORT |
						 REQUESTER,
				[QPT_XRC_RECV] = SQD_CONN | IBV_QP_PORT |
						 IBV_QP_TIMEOUT | RESPONDER,
			},
		},
	},
	[IBV_QPS_SQE] = {
		EXITS,
		/* SQE->RTS: an unreliable QP whose send hit an error is
		 * restarted by the consumer; reliable types never get here. */
		[IBV_QPS_RTS] = {
			.types = T(QPT_UC) | T(QPT_UD),
			.opt = {
				[QPT_UC] = IBV_QP_CUR_STATE |
					   IBV_QP_ACCESS_FLAGS,
				[QPT_UD] = RUN_UD,
			},
		},
	},
	[IBV_QPS_ERR] = {
		EXITS,
	},
};

static int qpt_index(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:	return QPT_RC;
	case IBV_QPT_UC:	return QPT_UC;
	case IBV_QPT_UD:	return QPT_UD;
	case IBV_QPT_XRC_SEND:	return QPT_XRC_SEND;
	case IBV_QPT_XRC_RECV:	return QPT_XRC_RECV;
	case IBV_QPT_RAW_PACKET: return QPT_RAW;
	default:		return -1;
	}
}

static int state_valid(enum ibv_qp_state s)
{
	return (unsigned)s < NSTATES;
}

int hca_qp_modify_attrs(enum ibv_qp_type type, enum ibv_qp_state cur,
			enum ibv_qp_state next, int *req, int *opt)
{
	int t = qpt_index(type);
	const struct transition *tr;

	if (t < 0 || !state_valid(cur) || !state_valid(next))
		return EINVAL;
	tr = &qp_table[cur][next];
	if (!(tr->types & T(t)))
		return EINVAL;
	*req = tr->req[t];
	*opt = tr->opt[t];
	return 0;
}

int hca_qp_modify_check(enum ibv_qp_type type, enum ibv_qp_state cur,
			enum ibv_qp_state next, int attr_mask, int *bad_mask)
{
	int req, opt, bad;

	/* No IBV_QP_STATE: the modify keeps the state (see the header). */
	if (!(attr_mask & IBV_QP_STATE))
		next = cur;

	if (hca_qp_modify_attrs(type, cur, next, &req, &opt))
		bad = IBV_QP_STATE;
	else	/* missing required bits | bits neither required nor allowed */
		bad = (req & ~attr_mask) |
		      (attr_mask & ~(req | opt | IBV_QP_STATE));

	if (bad_mask)
		*bad_mask = bad;
	return bad ? EINVAL : 0;
}

const char *hca_qp_state_str(enum ibv_qp_state s)
{
	static const char *const names[NSTATES] = {
		[IBV_QPS_RESET] = "RESET",
		[IBV_QPS_INIT] = "INIT",
		[IBV_QPS_RTR] = "RTR",
		[IBV_QPS_RTS] = "RTS",
		[IBV_QPS_SQD] = "SQD",
		[IBV_QPS_SQE] = "SQE",
		[IBV_QPS_ERR] = "ERR",
	};

	return state_valid(s) ? names[s] : "UNKNOWN";
}
