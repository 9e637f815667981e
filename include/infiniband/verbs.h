/*
 * softib's <infiniband/verbs.h>: rdma-core's header, plus the legacy XRC
 * API of OFED 1.x (DESIGN.md, decision 2), so that a program written for
 * OFED compiles unmodified with `-I build/include`.  A program written for
 * rdma-core compiles and runs unchanged with it: every rdma-core type keeps
 * its layout, every call still reaches rdma-core's own symbol, and the
 * binary runs on rdma-core's libibverbs too (as long as it makes none of
 * the legacy calls, which exist only in softib, at version SOFTIB_XRC_1.0).
 * Define SOFTIB_NO_LEGACY_XRC before including it to get rdma-core's header
 * alone.
 *
 * The legacy names over rdma-core's ABI, item by item (docs/xrc.md tells
 * how both APIs reach the same objects):
 *
 *   struct ibv_xrc_domain        OFED's layout (context, handle), a type of
 *                                its own beside rdma-core's struct ibv_xrcd.
 *   the eight calls              OFED's prototypes, declared below.
 *   IBV_QPT_XRC                  = IBV_QPT_XRC_SEND.  In OFED it was the
 *                                type of the send side (created with
 *                                ibv_create_qp()); the receive side was
 *                                made by ibv_create_xrc_rcv_qp() and has
 *                                type IBV_QPT_XRC_RECV here.  OFED's value
 *                                was 5: source, not binary, compatibility.
 *   wr.xrc_remote_srq_num        a macro for qp_type.xrc.remote_srqn, the
 *                                same field (OFED had it as a member of
 *                                struct ibv_send_wr; rdma-core's layout
 *                                puts the number there).  Also works as a
 *                                designator: { .xrc_remote_srq_num = n }.
 *   srq->xrc_srq_num             a macro for `handle`: softib sets every
 *                                SRQ's handle to its SRQ number (what
 *                                ibv_get_srq_num() returns).  rdma-core's
 *                                struct ibv_srq has no room for OFED's
 *                                three XRC members, and every SRQ shares
 *                                its layout, so:
 *   srq->xrc_domain, srq->xrc_cq NOT PROVIDED: they cannot coexist with
 *                                rdma-core's struct ibv_srq.  Keep the
 *                                domain and CQ given to ibv_create_xrc_srq().
 *   qp->xrc_domain               NOT PROVIDED, for the same reason (struct
 *                                ibv_qp); an XRC send QP needs no domain.
 *   init_attr.xrc_domain         a real member: `struct ibv_qp_init_attr`
 *                                names, in code compiled with this header,
 *                                struct softib_ofed_qp_init_attr, which is
 *                                rdma-core's struct ibv_qp_init_attr with
 *                                OFED's xrc_domain appended (so 8 bytes
 *                                longer).  ibv_create_qp() and
 *                                ibv_query_qp() are macros that hand it to
 *                                rdma-core's functions, which read and
 *                                write only the common prefix.  Only
 *                                ibv_create_xrc_rcv_qp() reads xrc_domain
 *                                (and ibv_query_xrc_rcv_qp() writes it);
 *                                ibv_create_qp() ignores it, since a send
 *                                QP belongs to no domain.
 *   event.element.xrc_qp_num     a real member: `struct ibv_async_event`
 *   IBV_XRC_QP_EVENT_FLAG        names struct softib_ofed_async_event,
 *                                rdma-core's layout with OFED's xrc_qp_num
 *                                added to the union (same size);
 *                                ibv_get_async_event() and
 *                                ibv_ack_async_event() are macros over
 *                                rdma-core's.  An event of a receive QP
 *                                that this process registered through the
 *                                legacy calls comes as OFED sent it:
 *                                event_type | IBV_XRC_QP_EVENT_FLAG, the
 *                                QP named by xrc_qp_num, not by a pointer.
 *   struct ibv_more_ops,         NOT PROVIDED: rdma-core's struct
 *   context->more_ops            ibv_context has no such member; the
 *                                legacy calls are plain functions here.
 *
 * What the renaming costs: C++ code that passes these two structs across
 * a boundary between objects compiled with and without this header sees
 * two different mangled names; code that declares its own identifiers
 * xrc_srq_num or xrc_remote_srq_num has them rewritten; taking the address
 * of ibv_create_qp, ibv_query_qp, ibv_get_async_event or
 * ibv_ack_async_event gives rdma-core's prototype, which takes the
 * rdma-core struct.
 */
#ifndef SOFTIB_INFINIBAND_VERBS_H
#define SOFTIB_INFINIBAND_VERBS_H

#include_next <infiniband/verbs.h>

#ifndef SOFTIB_NO_LEGACY_XRC

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The legacy XRC layer of this header is present. */
#define SOFTIB_LEGACY_XRC 1

/* rdma-core's own structs, under names that the renaming below leaves. */
typedef struct ibv_qp_init_attr softib_rdma_qp_init_attr;
typedef struct ibv_async_event softib_rdma_async_event;

struct ibv_xrc_domain {
	struct ibv_context *context;
	uint32_t handle;        /* unique within the process */
};

#define IBV_QPT_XRC IBV_QPT_XRC_SEND

/* OFED declared it as an enumerator beyond int's range: a macro here. */
#define IBV_XRC_QP_EVENT_FLAG 0x80000000U

struct softib_ofed_qp_init_attr {
	void *qp_context;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	struct ibv_qp_cap cap;
	enum ibv_qp_type qp_type;
	int sq_sig_all;
	struct ibv_xrc_domain *xrc_domain;  /* OFED's, after rdma-core's */
};

struct softib_ofed_async_event {
	union {
		struct ibv_cq *cq;
		struct ibv_qp *qp;
		struct ibv_srq *srq;
		struct ibv_wq *wq;
		int port_num;
		uint32_t xrc_qp_num;        /* OFED's */
	} element;
	enum ibv_event_type event_type;
};

/* The renamed structs begin with rdma-core's, field for field. */
#define SOFTIB_SAME_FIELD(a, b, f) \
	(offsetof(a, f) == offsetof(b, f) && sizeof(((a *)0)->f) == sizeof(((b *)0)->f))
typedef char softib_check_qp_init_attr[
	(SOFTIB_SAME_FIELD(struct softib_ofed_qp_init_attr, softib_rdma_qp_init_attr, qp_context) &&
	 SOFTIB_SAME_FIELD(struct softib_ofed_qp_init_attr, softib_rdma_qp_init_attr, send_cq) &&
	 SOFTIB_SAME_FIELD(struct softib_ofed_qp_init_attr, softib_rdma_qp_init_attr, recv_cq) &&
	 SOFTIB_SAME_FIELD(struct softib_ofed_qp_init_attr, softib_rdma_qp_init_attr, srq) &&
	 SOFTIB_SAME_FIELD(struct softib_ofed_qp_init_attr, softib_rdma_qp_init_attr, cap) &&
	 SOFTIB_SAME_FIELD(struct softib_ofed_qp_init_attr, softib_rdma_qp_init_attr, qp_type) &&
	 SOFTIB_SAME_FIELD(struct softib_ofed_qp_init_attr, softib_rdma_qp_init_attr, sq_sig_all) &&
	 offsetof(struct softib_ofed_qp_init_attr, xrc_domain) >= sizeof(softib_rdma_qp_init_attr))
	? 1 : -1];
typedef char softib_check_async_event[
	(SOFTIB_SAME_FIELD(struct softib_ofed_async_event, softib_rdma_async_event, element) &&
	 SOFTIB_SAME_FIELD(struct softib_ofed_async_event, softib_rdma_async_event, event_type) &&
	 sizeof(struct softib_ofed_async_event) == sizeof(softib_rdma_async_event))
	? 1 : -1];
#undef SOFTIB_SAME_FIELD

/* Typed conversions: the macros below accept only the renamed structs. */
static inline softib_rdma_qp_init_attr *
softib_qp_init_attr_rdma(struct softib_ofed_qp_init_attr *attr)
{
	return (softib_rdma_qp_init_attr *)(void *)attr;
}

static inline softib_rdma_async_event *
softib_async_event_rdma(struct softib_ofed_async_event *event)
{
	return (softib_rdma_async_event *)(void *)event;
}

#define ibv_qp_init_attr softib_ofed_qp_init_attr
#define ibv_async_event softib_ofed_async_event

#define ibv_create_qp(pd, qp_init_attr) \
	ibv_create_qp((pd), softib_qp_init_attr_rdma(qp_init_attr))
#define ibv_query_qp(qp, attr, attr_mask, init_attr) \
	ibv_query_qp((qp), (attr), (attr_mask), softib_qp_init_attr_rdma(init_attr))
#define ibv_get_async_event(context, event) \
	ibv_get_async_event((context), softib_async_event_rdma(event))
#define ibv_ack_async_event(event) \
	ibv_ack_async_event(softib_async_event_rdma(event))

#define xrc_remote_srq_num qp_type.xrc.remote_srqn
#define xrc_srq_num handle

/*
 * The calls.  Each returns 0 or an errno value (NULL with errno for the
 * two that return an object).  A receive QP lives while any process has
 * it registered (its creator counts as registered) and goes when the last
 * one unregisters, closes the domain, or exits.  A QP number that names
 * no receive QP of the domain is EINVAL.
 */
struct ibv_xrc_domain *ibv_open_xrc_domain(struct ibv_context *context,
					   int fd, int oflag);
int ibv_close_xrc_domain(struct ibv_xrc_domain *d);
struct ibv_srq *ibv_create_xrc_srq(struct ibv_pd *pd,
				   struct ibv_xrc_domain *domain,
				   struct ibv_cq *cq,
				   struct ibv_srq_init_attr *srq_init_attr);
int ibv_create_xrc_rcv_qp(struct ibv_qp_init_attr *init_attr,
			  uint32_t *rcv_qpn);
int ibv_modify_xrc_rcv_qp(struct ibv_xrc_domain *domain, uint32_t qpn,
			  struct ibv_qp_attr *attr, int attr_mask);
int ibv_query_xrc_rcv_qp(struct ibv_xrc_domain *domain, uint32_t qpn,
			 struct ibv_qp_attr *attr, int attr_mask,
			 struct ibv_qp_init_attr *init_attr);
int ibv_reg_xrc_rcv_qp(struct ibv_xrc_domain *domain, uint32_t qpn);
int ibv_unreg_xrc_rcv_qp(struct ibv_xrc_domain *domain, uint32_t qpn);

#ifdef __cplusplus
}
#endif

#endif /* SOFTIB_NO_LEGACY_XRC */
#endif /* SOFTIB_INFINIBAND_VERBS_H */
