/*
 * Private structures of the verbs layer, shared by the files of verbs/ only.
 *
 * Each verbs object is the public struct of <infiniband/verbs.h> (first
 * member, so the pointer an application holds is the wrapper's address)
 * plus the HCA object it stands for.  The HCA object's `user` pointer is
 * the public struct, which is how events and completion channels name it.
 *
 * Events and destruction.  An event the HCA queued for an object may still
 * be waiting in a queue when the object is destroyed; the man pages promise
 * that a destroyed object is never handed out in an event, and that destroy
 * waits until every event it handed out was acknowledged.  So each object
 * that can get events carries a struct vb_obj on its context's list: an
 * event is delivered only for an object still on the list, and counted
 * there (`reported`); destroy takes the object off the list, then waits
 * until the application's acknowledgements (the public *_completed fields)
 * catch up with `reported`.
 */
#ifndef VERBS_INT_H
#define VERBS_INT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hca.h"

#define vb_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* The one device, as the device list hands it out. */
#define VB_DEV_NAME     "softib0"
#define VB_UVERBS_NAME  "uverbs0"
#define VB_DEV_PATH     "/sys/class/infiniband_verbs/" VB_UVERBS_NAME
#define VB_IBDEV_PATH   "/sys/class/infiniband/" VB_DEV_NAME
#define VB_NUM_PORTS    1

/*
 * Size of the struct that the IBVERBS_1.1 ibv_query_port() fills for
 * binaries built before port_cap_flags2 existed: every field up to and
 * including `flags`, padded to 48 bytes.
 */
#define VB_COMPAT_PORT_ATTR_SIZE offsetof(struct ibv_port_attr, port_cap_flags2)

/* GID types as rdma-core's private driver.h numbers them (ABI values). */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum ibv_gid_type_sysfs *type);

/* Exported, but declared only in rdma-core's uninstalled driver.h. */
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			size_t size);

/* ---- event bookkeeping (context.c) ---- */
enum vb_ev_kind { VB_EV_ASYNC, VB_EV_COMP, VB_EV_KINDS };

struct vb_obj {
	struct vb_obj *prev, *next;
	void *user;                     /* the public struct */
	uint32_t reported[VB_EV_KINDS]; /* events handed out (objs_lock) */
	/*
	 * Non-zero for a legacy XRC receive-QP registration (xrc_legacy.c):
	 * its events go out as OFED gave them, naming the QP by this number,
	 * so they hold no pointer and need no acknowledgement.  Set before
	 * vb_obj_add(), never changed after.
	 */
	uint32_t xrc_legacy_qpn;
};

struct vb_context {
	struct verbs_context vctx;      /* ibv_context is its last member */
	struct hca_dev *dev;
	struct hca_ctx *hctx;
	pthread_mutex_t objs_lock;
	struct vb_obj objs;             /* list head of live objects */
};

static inline struct vb_context *vb_ctx(struct ibv_context *c)
{
	return vb_container_of(c, struct vb_context, vctx.context);
}

void vb_obj_add(struct vb_context *c, struct vb_obj *o, void *user);
void vb_obj_del(struct vb_context *c, struct vb_obj *o);
bool vb_obj_report(struct vb_context *c, void *user, enum vb_ev_kind kind);
/* An async event for a QP: as vb_obj_report(), except that for a legacy
 * XRC registration nothing is counted and *legacy_qpn gets its number. */
bool vb_obj_report_qp(struct vb_context *c, void *user, uint32_t *legacy_qpn);
/* Wait (on mutex/cond) until *done has caught up with `reported`. */
void vb_obj_wait_acked(pthread_mutex_t *mutex, pthread_cond_t *cond,
		       const uint32_t *done, uint32_t reported);

/* ---- objects ---- */
struct vb_pd {
	struct ibv_pd pd;
	struct hca_pd *h;
	atomic_int ahs;                 /* AHs on it: the HCA does not see them */
};

struct vb_mr {
	struct ibv_mr mr;
	struct hca_mr *h;
};

struct vb_chan {
	struct ibv_comp_channel ch;
	struct hca_chan *h;
};

/* The completion being read through the ibv_cq_ex interface. */
struct vb_cq_cur {
	struct ibv_wc wc;
	uint64_t ts;
};

struct vb_cq {
	struct ibv_cq_ex cq;            /* ibv_cq is its prefix */
	struct hca_cq *h;
	struct vb_obj obj;
	uint64_t wc_flags;              /* what the ibv_cq_ex reader may ask */
	bool single_threaded;
	pthread_mutex_t poll_lock;      /* held from start_poll to end_poll */
	struct vb_cq_cur cur;
};

struct vb_srq {
	struct ibv_srq srq;
	struct hca_srq *h;
	struct vb_obj obj;
	/* An XRC SRQ of a legacy domain counts itself there (xrc_legacy.c):
	 * ibv_close_xrc_domain() is EBUSY while any remains.  NULL otherwise. */
	atomic_int *xrc_srqs;
};

/* An XRC domain of the modern API (xrc.c). */
struct vb_xrcd {
	struct ibv_xrcd xrcd;
	struct hca_xrcd *h;
};

/* Work requests built through the ibv_qp_ex interface (qp_ex.c). */
struct vb_wr_meta {
	uint32_t sge_first;             /* index into sges */
	bool inl;                       /* the SGEs are offsets into inl */
};

struct vb_wr_batch {
	pthread_mutex_t lock;           /* held from wr_start to complete/abort */
	struct ibv_send_wr *wrs;
	struct vb_wr_meta *meta;
	uint32_t n, cap;
	struct ibv_sge *sges;
	uint32_t nsge, sge_cap;
	uint8_t *inl;
	size_t inl_len, inl_cap;
	int err;                        /* first error of the batch */
};

struct vb_qp {
	struct ibv_qp_ex qpx;           /* ibv_qp is its prefix */
	struct hca_qp *h;
	struct vb_obj obj;
	bool is_qp_ex;                  /* created with SEND_OPS_FLAGS */
	struct ibv_qp_cap cap;          /* what was granted */
	struct vb_wr_batch wr;
};

struct vb_ah {
	struct ibv_ah ah;
	struct hca_ah h;
};

static inline struct vb_pd *vb_pd(struct ibv_pd *pd)
{
	return vb_container_of(pd, struct vb_pd, pd);
}

static inline struct vb_cq *vb_cq(struct ibv_cq *cq)
{
	return vb_container_of((struct ibv_cq_ex *)cq, struct vb_cq, cq);
}

static inline struct vb_cq *vb_cq_ex(struct ibv_cq_ex *cq)
{
	return vb_container_of(cq, struct vb_cq, cq);
}

static inline struct vb_srq *vb_srq(struct ibv_srq *srq)
{
	return vb_container_of(srq, struct vb_srq, srq);
}

static inline struct vb_xrcd *vb_xrcd(struct ibv_xrcd *xrcd)
{
	return vb_container_of(xrcd, struct vb_xrcd, xrcd);
}

static inline struct vb_qp *vb_qp(struct ibv_qp *qp)
{
	return vb_container_of(qp, struct vb_qp, qpx.qp_base);
}

static inline struct vb_qp *vb_qp_ex(struct ibv_qp_ex *qpx)
{
	return vb_container_of(qpx, struct vb_qp, qpx);
}

/* ---- entry points of one file used by another ---- */
/* device.c */
bool vb_device_is_ours(struct ibv_device *device);

/* query.c */
int vb_query_port(struct ibv_context *context, uint8_t port_num,
		  struct ibv_port_attr *attr, size_t attr_len);
int vb_query_device_ex(struct ibv_context *context,
		       const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t attr_size);

/* cq.c */
int vb_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int vb_req_notify_cq(struct ibv_cq *cq, int solicited_only);
struct ibv_cq_ex *vb_create_cq_ex(struct ibv_context *context,
				  struct ibv_cq_init_attr_ex *attr);
/* cq_ex.c */
void vb_cq_ex_init_ops(struct vb_cq *cq);

/* srq.c */
int vb_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad);
struct ibv_srq *vb_create_srq_ex(struct ibv_context *context,
				 struct ibv_srq_init_attr_ex *attr);
int vb_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
/* Any kind of SRQ: xrcd and cq are NULL for a basic one.  xrc_srqs: see
 * struct vb_srq. */
struct ibv_srq *vb_srq_create(struct ibv_pd *pd, void *srq_context,
			      struct ibv_srq_attr *attr, struct hca_xrcd *xrcd,
			      struct ibv_cq *cq, atomic_int *xrc_srqs);

/* qp.c */
int vb_post_send_ud(struct hca_qp *h, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		 struct ibv_send_wr **bad);
int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		 struct ibv_recv_wr **bad);
struct ibv_qp *vb_create_qp_ex(struct ibv_context *context,
			       struct ibv_qp_init_attr_ex *attr);
struct ibv_qp *vb_open_qp(struct ibv_context *context,
			  struct ibv_qp_open_attr *attr);
/* The part of a modify mask a QP type uses (the rest is ignored). */
int vb_qp_mask_used(enum ibv_qp_type type, int mask);
/* qp_ex.c */
int vb_wr_init(struct vb_qp *qp);
void vb_wr_fini(struct vb_qp *qp);

/* xrc.c: XRC domains of the modern API */
struct ibv_xrcd *vb_open_xrcd(struct ibv_context *context,
			      struct ibv_xrcd_init_attr *attr);
int vb_close_xrcd(struct ibv_xrcd *xrcd);
/* xrc_legacy.c: an event of a legacy registration, as OFED reported it */
void vb_xrc_legacy_event(struct ibv_async_event *event, uint32_t qpn);

/* ops_unsupported.c: the ops softib does not implement, as explicit stubs */
void vb_set_unsupported_ops(struct verbs_context *vctx);

#endif
