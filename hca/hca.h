/*
 * The software HCA's interface: the only header verbs/ includes from hca/.
 *
 * The HCA shares with the verbs layer the plain value types of
 * <infiniband/verbs.h> (work requests, work completions, attribute
 * structs, GIDs) — they are the device's command formats — but never the
 * layout of the verbs objects (struct ibv_qp, ibv_cq, ...): each HCA
 * object carries an opaque `user` pointer back to the verbs object that
 * wraps it. Every call returns 0 or a positive errno, or NULL with errno.
 */
#ifndef HCA_H
#define HCA_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct hca_dev;
struct hca_ctx;
struct hca_pd;
struct hca_mr;
struct hca_chan;
struct hca_cq;
struct hca_srq;
struct hca_qp;
struct hca_xrcd;

/* An address handle's contents: owned by the verbs object that holds it,
 * handed down with each UD send (hca_qp_post_send_ah). */
struct hca_ah {
	uint16_t dlid;
	uint8_t sl;
	uint8_t is_global;
	uint8_t port_num;
	uint8_t static_rate;
	uint8_t src_path_bits;
	union ibv_gid dgid;
	uint8_t sgid_index, hop_limit, traffic_class;
	uint32_t flow_label;
	uint32_t pd_id;
};

/* ---- device (one per process, shared by its contexts) ---- */
struct hca_dev *hca_dev_get(void);
void hca_dev_put(struct hca_dev *dev);
int hca_dev_query_device(struct hca_dev *dev, struct ibv_device_attr_ex *attr,
			 size_t attr_size);
int hca_dev_query_port(struct hca_dev *dev, uint8_t port,
		       struct ibv_port_attr *attr, size_t attr_size);
int hca_dev_query_gid(struct hca_dev *dev, uint8_t port, int index,
		      union ibv_gid *gid);
int hca_dev_query_pkey(struct hca_dev *dev, uint8_t port, int index,
		       uint16_t *pkey);
__be64 hca_dev_guid(struct hca_dev *dev);
/* Device-independent facts, without opening the segment. */
__be64 hca_host_guid(void);
ssize_t hca_host_sysfs_read(const char *relpath, char *buf, size_t size);

/* ---- context: the async event queue ---- */
struct hca_async_ev {
	enum ibv_event_type type;
	void *user;        /* verbs object of the event, NULL for port/device */
	int port;
};
struct hca_ctx *hca_ctx_open(struct hca_dev *dev, void *user);
void hca_ctx_close(struct hca_ctx *ctx);
int hca_ctx_async_fd(struct hca_ctx *ctx);
int hca_ctx_get_async_event(struct hca_ctx *ctx, struct hca_async_ev *ev);

/* ---- protection domain, memory regions ---- */
struct hca_pd *hca_pd_alloc(struct hca_ctx *ctx);
int hca_pd_dealloc(struct hca_pd *pd);
uint32_t hca_pd_id(struct hca_pd *pd);
struct hca_mr *hca_mr_reg(struct hca_pd *pd, void *addr, size_t len,
			  uint64_t iova, unsigned access);
uint32_t hca_mr_key(struct hca_mr *mr);
int hca_mr_rereg(struct hca_mr *mr, int flags, struct hca_pd *pd, void *addr,
		 size_t len, unsigned access);
int hca_mr_dereg(struct hca_mr *mr);

/* ---- completion channels and CQs ---- */
struct hca_chan *hca_chan_create(struct hca_ctx *ctx);
int hca_chan_fd(struct hca_chan *chan);
int hca_chan_destroy(struct hca_chan *chan);
/* Blocks (unless the fd is non-blocking) for one event; *cq_user is the
 * verbs CQ it names. */
int hca_chan_get_event(struct hca_chan *chan, void **cq_user);

#define HCA_CQ_TIMESTAMPS 1
struct hca_cq *hca_cq_create(struct hca_ctx *ctx, int cqe, struct hca_chan *chan,
			     int flags, void *user);
int hca_cq_size(struct hca_cq *cq);
int hca_cq_resize(struct hca_cq *cq, int cqe);
int hca_cq_destroy(struct hca_cq *cq);
int hca_cq_arm(struct hca_cq *cq, int solicited_only);
/* Fills up to n completions; returns how many, or -1 with errno. The
 * timestamps array (may be NULL) gets each completion's time in ns. */
int hca_cq_poll(struct hca_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts);

/* ---- shared receive queues ---- */
struct hca_srq *hca_srq_create(struct hca_pd *pd, struct ibv_srq_attr *attr,
			       void *user);
int hca_srq_modify(struct hca_srq *srq, struct ibv_srq_attr *attr, int mask);
int hca_srq_query(struct hca_srq *srq, struct ibv_srq_attr *attr);
int hca_srq_destroy(struct hca_srq *srq);
int hca_srq_post_recv(struct hca_srq *srq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad);
uint32_t hca_srq_num(struct hca_srq *srq);

/* ---- XRC domains (xrc.c) ---- */
/* fd < 0: a private domain; else shared by every process of the host that
 * opens the same file. oflags: O_CREAT, O_EXCL as open(2). */
struct hca_xrcd *hca_xrcd_open(struct hca_ctx *ctx, int fd, int oflags);
int hca_xrcd_close(struct hca_xrcd *xrcd);
/* An XRC SRQ: receives of every XRC target QP of the domain that name it. */
struct hca_srq *hca_srq_create_xrc(struct hca_pd *pd, struct hca_xrcd *xrcd,
				   struct hca_cq *cq, struct ibv_srq_attr *attr,
				   void *user);
/* Open (register to) an XRC target QP of the domain by number. */
struct hca_qp *hca_qp_open(struct hca_xrcd *xrcd, uint32_t qpn, void *user);
/* The XRC target QP qpn of the domain, or NULL (a handle this process holds). */
struct hca_qp *hca_xrc_find(struct hca_xrcd *xrcd, uint32_t qpn);

/* ---- queue pairs ---- */
struct hca_qp_init {
	enum ibv_qp_type type;
	struct hca_cq *send_cq, *recv_cq;
	struct hca_srq *srq;
	struct hca_xrcd *xrcd;      /* IBV_QPT_XRC_RECV */
	struct ibv_qp_cap cap;      /* in: asked; out: granted */
	int sq_sig_all;
};
struct hca_qp *hca_qp_create(struct hca_pd *pd, struct hca_qp_init *init,
			     void *user);
uint32_t hca_qp_num(struct hca_qp *qp);
int hca_qp_modify(struct hca_qp *qp, struct ibv_qp_attr *attr, int mask);
int hca_qp_query(struct hca_qp *qp, struct ibv_qp_attr *attr, int mask,
		 struct ibv_qp_init_attr *init);
enum ibv_qp_state hca_qp_state(struct hca_qp *qp);
int hca_qp_destroy(struct hca_qp *qp);
int hca_qp_post_send(struct hca_qp *qp, struct ibv_send_wr *wr,
		     struct ibv_send_wr **bad);
/* ... with ahs[i] the address handle of the list's i-th WR (UD QPs: the
 * HCA copies it at post; hca_qp_post_send refuses a UD WR) */
int hca_qp_post_send_ah(struct hca_qp *qp, struct ibv_send_wr *wr,
			const struct hca_ah *const *ahs, struct ibv_send_wr **bad);
int hca_qp_post_recv(struct hca_qp *qp, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad);
int hca_qp_attach_mcast(struct hca_qp *qp, const union ibv_gid *gid, uint16_t lid);
int hca_qp_detach_mcast(struct hca_qp *qp, const union ibv_gid *gid, uint16_t lid);

#endif
