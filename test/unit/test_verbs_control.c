/*
 * Black-box tests of the verbs control path, through the public API of
 * build/.../libibverbs.so.1 exactly as an rdma-core 44 program reaches it
 * (exported verbs and the inline wrappers of <infiniband/verbs.h>): the
 * device list, contexts, queries that must not write past the caller's
 * size, PD/MR, CQ and completion channels, SRQ. The QPs, AHs, destroy
 * ordering, refused features and the qp_ex/cq_ex loopback are
 * test_verbs_qp.c.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "cu_run.h"
#include "verbs_suite.h"

#define CANARY 0xa5

/* Declared only in rdma-core's uninstalled headers. */
enum gid_type_sysfs { GID_TYPE_SYSFS_IB_ROCE_V1, GID_TYPE_SYSFS_ROCE_V2 };
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum gid_type_sysfs *type);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			size_t size);
const char *ibv_get_sysfs_path(void);
struct ibv_xrc_domain;
struct ibv_xrc_domain *ibv_open_xrc_domain(struct ibv_context *context,
					   int fd, int oflag);
int ibv_reg_xrc_rcv_qp(struct ibv_xrc_domain *xrc_domain, uint32_t xrc_qp_num);

static bool all_canary(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		if (c[i] != CANARY)
			return false;
	return true;
}

/* ---- device list, context ---- */

static void test_device_list(void)
{
	int n = -1;
	struct ibv_device **l = ibv_get_device_list(&n);

	CU_ASSERT_FATAL(l != NULL);
	CU_ASSERT_EQUAL(n, 1);
	CU_ASSERT_PTR_NULL(l[n]);
	CU_ASSERT_STRING_EQUAL(ibv_get_device_name(l[0]), "softib0");
	CU_ASSERT_EQUAL(l[0]->node_type, IBV_NODE_CA);
	CU_ASSERT_EQUAL(l[0]->transport_type, IBV_TRANSPORT_IB);
	CU_ASSERT_STRING_EQUAL(l[0]->dev_name, "uverbs0");
	CU_ASSERT_STRING_EQUAL(l[0]->ibdev_path, "/sys/class/infiniband/softib0");
	CU_ASSERT_NOT_EQUAL(ibv_get_device_guid(l[0]), 0);
	CU_ASSERT_EQUAL(ibv_get_device_guid(l[0]), dev_attr.node_guid);
	CU_ASSERT_EQUAL(ibv_get_device_index(l[0]), 0);
	ibv_free_device_list(l);
}

static void test_open_close(void)
{
	struct ibv_context *c = ibv_open_device(dev_list[0]);
	struct pollfd pfd;

	CU_ASSERT_FATAL(c != NULL);
	CU_ASSERT_PTR_EQUAL(c->device, dev_list[0]);
	CU_ASSERT_EQUAL(c->num_comp_vectors, 1);
	CU_ASSERT(fcntl(c->cmd_fd, F_GETFD) >= 0);
	CU_ASSERT(fcntl(c->async_fd, F_GETFD) >= 0);
	/* the async fd is pollable, and idle */
	pfd = (struct pollfd){ .fd = c->async_fd, .events = POLLIN };
	CU_ASSERT_EQUAL(poll(&pfd, 1, 0), 0);
	CU_ASSERT_EQUAL(ibv_close_device(c), 0);
}

static void test_async_nonblocking(void)
{
	struct ibv_async_event ev;
	int fl = fcntl(ctx->async_fd, F_GETFL);

	CU_ASSERT_FATAL(fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	errno = 0;
	CU_ASSERT_EQUAL(ibv_get_async_event(ctx, &ev), -1);
	CU_ASSERT_EQUAL(errno, EAGAIN);
	fcntl(ctx->async_fd, F_SETFL, fl);
}

/* ---- queries ---- */

static void test_query_device(void)
{
	CU_ASSERT_EQUAL(dev_attr.phys_port_cnt, 1);
	CU_ASSERT(dev_attr.max_qp > 0 && dev_attr.max_qp_wr > 0);
	CU_ASSERT(dev_attr.max_cqe > 0 && dev_attr.max_srq_wr > 0);
	CU_ASSERT(dev_attr.max_sge > 0);
	CU_ASSERT_EQUAL(dev_attr.atomic_cap, IBV_ATOMIC_HCA);
	CU_ASSERT_EQUAL(ibv_query_device(ctx, NULL), EINVAL);
}

static void test_query_device_ex(void)
{
	struct verbs_context *v = verbs_get_ctx_op(ctx, query_device_ex);
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	unsigned char buf[sizeof(struct ibv_device_attr_ex) + 64];
	struct ibv_device_attr_ex ax;
	size_t small = sizeof(struct ibv_device_attr);

	CU_ASSERT_FATAL(v != NULL);
	/* the inline wrapper, with our own sizeof */
	CU_ASSERT_EQUAL(ibv_query_device_ex(ctx, NULL, &ax), 0);
	CU_ASSERT_EQUAL(ax.orig_attr.max_qp, dev_attr.max_qp);
	CU_ASSERT_NOT_EQUAL(ax.completion_timestamp_mask, 0);
	CU_ASSERT_NOT_EQUAL(ax.hca_core_clock, 0);
	CU_ASSERT_EQUAL(ibv_query_device_ex(ctx, &in, &ax), EINVAL);
	/* the op, as older callers reach it: never past attr_size */
	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL(v->query_device_ex(ctx, NULL, (void *)buf, small), 0);
	CU_ASSERT(all_canary(buf + small, sizeof(buf) - small));
	CU_ASSERT_EQUAL(((struct ibv_device_attr *)buf)->max_qp, dev_attr.max_qp);
	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL(v->query_device_ex(ctx, NULL, (void *)buf, small + 12), 0);
	CU_ASSERT(all_canary(buf + small + 12, sizeof(buf) - small - 12));
	CU_ASSERT_EQUAL(v->query_device_ex(ctx, NULL, &ax, small - 1), EINVAL);
	CU_ASSERT_EQUAL(v->query_device_ex(ctx, &in, &ax, sizeof(ax)), EINVAL);
}

static void test_query_port(void)
{
	unsigned char buf[sizeof(struct ibv_port_attr) + 16];
	struct ibv_port_attr *pa = (void *)buf;
	struct ibv_port_attr tmp;

	CU_ASSERT_EQUAL(port_attr.state, IBV_PORT_ACTIVE);
	CU_ASSERT_EQUAL(port_attr.phys_state, 5); /* LinkUp */
	CU_ASSERT_EQUAL(port_attr.link_layer, IBV_LINK_LAYER_INFINIBAND);
	CU_ASSERT(port_attr.lid != 0 && port_attr.lid < 0xc000);
	CU_ASSERT(port_attr.active_mtu >= IBV_MTU_256 &&
		  port_attr.active_mtu <= IBV_MTU_4096);
	CU_ASSERT(port_attr.gid_tbl_len > 0 && port_attr.pkey_tbl_len > 0);
	/* the IBVERBS_1.1 symbol fills the 48-byte struct of older headers */
	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL((ibv_query_port)(ctx, 1, (void *)buf), 0);
	CU_ASSERT(all_canary(buf + 48, sizeof(buf) - 48));
	CU_ASSERT_EQUAL(pa->state, IBV_PORT_ACTIVE);
	CU_ASSERT_EQUAL(pa->lid, port_attr.lid);
	CU_ASSERT_EQUAL(pa->link_layer, IBV_LINK_LAYER_INFINIBAND);
	CU_ASSERT_NOT_EQUAL(ibv_query_port(ctx, 2, &tmp), 0);
	CU_ASSERT_NOT_EQUAL(ibv_query_port(ctx, 0, &tmp), 0);
}

static void test_query_gid_pkey(void)
{
	static const union ibv_gid zero;
	struct ibv_gid_entry e, tbl[64];
	enum gid_type_sysfs type = GID_TYPE_SYSFS_ROCE_V2;
	union ibv_gid gid;
	__be16 pkey;
	ssize_t n;

	CU_ASSERT_EQUAL(ibv_query_gid(ctx, 1, 0, &gid), 0);
	CU_ASSERT(memcmp(&gid, &zero, sizeof(gid)) != 0);
	CU_ASSERT_NOT_EQUAL(ibv_query_gid(ctx, 1, port_attr.gid_tbl_len, &gid), 0);
	CU_ASSERT_NOT_EQUAL(ibv_query_gid(ctx, 2, 0, &gid), 0);

	CU_ASSERT_EQUAL(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
	CU_ASSERT(memcmp(&e.gid, &gid, sizeof(gid)) == 0);
	CU_ASSERT_EQUAL(e.gid_index, 0);
	CU_ASSERT_EQUAL(e.port_num, 1);
	CU_ASSERT_EQUAL(e.gid_type, IBV_GID_TYPE_IB);
	CU_ASSERT_EQUAL(e.ndev_ifindex, 0);
	CU_ASSERT_EQUAL(ibv_query_gid_ex(ctx, 1, 0, &e, 1), EINVAL);
	if (port_attr.gid_tbl_len > 1 &&
	    !ibv_query_gid(ctx, 1, port_attr.gid_tbl_len - 1, &gid) &&
	    !memcmp(&gid, &zero, sizeof(gid)))
		CU_ASSERT_EQUAL(ibv_query_gid_ex(ctx, 1, port_attr.gid_tbl_len - 1,
						 &e, 0), ENODATA);

	n = ibv_query_gid_table(ctx, tbl, 64, 0);
	CU_ASSERT(n >= 1);
	CU_ASSERT_EQUAL(tbl[0].gid_index, 0);
	CU_ASSERT_EQUAL(ibv_query_gid_table(ctx, tbl, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(ibv_query_gid_table(ctx, tbl, 64, 1), -EINVAL);

	CU_ASSERT_EQUAL(ibv_query_gid_type(ctx, 1, 0, &type), 0);
	CU_ASSERT_EQUAL(type, GID_TYPE_SYSFS_IB_ROCE_V1);
	CU_ASSERT_EQUAL(ibv_query_gid_type(ctx, 1, port_attr.gid_tbl_len - 1, &type), 0);
	CU_ASSERT_NOT_EQUAL(ibv_query_gid_type(ctx, 1, port_attr.gid_tbl_len, &type), 0);

	CU_ASSERT_EQUAL(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
	CU_ASSERT_EQUAL(be16toh(pkey), 0xffff);
	CU_ASSERT_NOT_EQUAL(ibv_query_pkey(ctx, 1, port_attr.pkey_tbl_len, &pkey), 0);
	CU_ASSERT_EQUAL(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)), 0);
	CU_ASSERT_EQUAL(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)), -1);
}

static void test_sysfs(void)
{
	char buf[64];
	const char *dir = dev_list[0]->ibdev_path;
	int n;

	CU_ASSERT_STRING_EQUAL(ibv_get_sysfs_path(), "/sys");
	n = ibv_read_sysfs_file(dir, "board_id", buf, sizeof(buf));
	CU_ASSERT(n > 0);
	CU_ASSERT_EQUAL((size_t)n, strlen(buf));
	CU_ASSERT(n > 0 && buf[n - 1] != '\n');
	n = ibv_read_sysfs_file(dir, "fw_ver", buf, sizeof(buf));
	CU_ASSERT(n > 0);
	/* a text that does not fit with its NUL is refused, not truncated */
	CU_ASSERT_EQUAL(ibv_read_sysfs_file(dir, "node_guid", buf, 4), -1);
	CU_ASSERT_EQUAL(ibv_read_sysfs_file(dir, "no_such_file", buf, sizeof(buf)), -1);
}

/* ---- PD, MR ---- */

static void test_pd_mr(void)
{
	static char a[4096], b[4096];
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *m1, *m2, *m3;

	CU_ASSERT_FATAL(pd != NULL);
	CU_ASSERT_PTR_EQUAL(pd->context, ctx);
	m1 = ibv_reg_mr(pd, a, sizeof(a), IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	m2 = ibv_reg_mr(pd, b, sizeof(b), 0);
	m3 = ibv_reg_mr_iova2(pd, b, 100, 0x10000, IBV_ACCESS_LOCAL_WRITE);
	CU_ASSERT_FATAL(m1 && m2 && m3);
	CU_ASSERT_PTR_EQUAL(m1->pd, pd);
	CU_ASSERT_PTR_EQUAL(m1->context, ctx);
	CU_ASSERT_PTR_EQUAL(m1->addr, a);
	CU_ASSERT_EQUAL(m1->length, sizeof(a));
	CU_ASSERT(m1->lkey != m2->lkey && m1->lkey != m3->lkey && m2->lkey != m3->lkey);
	CU_ASSERT(m1->rkey != m2->rkey && m1->rkey != m3->rkey && m2->rkey != m3->rkey);

	/* remote write or atomic access needs local write (ibv_reg_mr(3)) */
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_reg_mr(pd, a, sizeof(a), IBV_ACCESS_REMOTE_WRITE));
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_reg_mr(pd, a, sizeof(a), IBV_ACCESS_REMOTE_ATOMIC));
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_reg_mr(NULL, a, sizeof(a), 0));
	CU_ASSERT_EQUAL(errno, EINVAL);

	CU_ASSERT_EQUAL(ibv_rereg_mr(m2, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				     IBV_ACCESS_LOCAL_WRITE), 0);
	CU_ASSERT_EQUAL(ibv_rereg_mr(m2, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
				     a, 128, 0), 0);
	CU_ASSERT_PTR_EQUAL(m2->addr, a);
	CU_ASSERT_EQUAL(m2->length, 128);
	CU_ASSERT_EQUAL(ibv_rereg_mr(m2, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				     IBV_ACCESS_REMOTE_WRITE), IBV_REREG_MR_ERR_INPUT);
	CU_ASSERT_EQUAL(ibv_rereg_mr(m2, 0x100, NULL, NULL, 0, 0),
			IBV_REREG_MR_ERR_INPUT);

	CU_ASSERT_EQUAL(ibv_dealloc_pd(pd), EBUSY);
	CU_ASSERT_EQUAL(ibv_dereg_mr(m1), 0);
	CU_ASSERT_EQUAL(ibv_dereg_mr(m2), 0);
	CU_ASSERT_EQUAL(ibv_dereg_mr(m3), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(pd), 0);
}

/* ---- CQ, completion channel ---- */

static void test_cq(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_context *other = ibv_open_device(dev_list[0]);
	struct ibv_comp_channel *och = other ? ibv_create_comp_channel(other) : NULL;
	struct ibv_cq *cq, *bad;
	struct pollfd pfd;
	struct ibv_wc wc;

	CU_ASSERT_FATAL(ch && other && och);
	CU_ASSERT_PTR_EQUAL(ch->context, ctx);
	CU_ASSERT(fcntl(ch->fd, F_GETFD) >= 0);
	pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	CU_ASSERT_EQUAL(poll(&pfd, 1, 0), 0);

	cq = ibv_create_cq(ctx, 10, &pfd, ch, 0);
	CU_ASSERT_FATAL(cq != NULL);
	CU_ASSERT(cq->cqe >= 10);
	CU_ASSERT_PTR_EQUAL(cq->cq_context, &pfd);
	CU_ASSERT_PTR_EQUAL(cq->channel, ch);
	CU_ASSERT_EQUAL(ibv_poll_cq(cq, 1, &wc), 0);
	CU_ASSERT_EQUAL(ibv_req_notify_cq(cq, 0), 0);
	CU_ASSERT_EQUAL(ibv_req_notify_cq(cq, 1), 0);
	CU_ASSERT_EQUAL(ibv_resize_cq(cq, 100), 0);
	CU_ASSERT(cq->cqe >= 100);
	CU_ASSERT_EQUAL(ibv_resize_cq(cq, 0), EINVAL);
	CU_ASSERT_EQUAL(ibv_destroy_comp_channel(ch), EBUSY);

	errno = 0;
	CU_ASSERT_PTR_NULL(bad = ibv_create_cq(ctx, 0, NULL, NULL, 0));
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_PTR_NULL(bad = ibv_create_cq(ctx, dev_attr.max_cqe + 1, NULL, NULL, 0));
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_PTR_NULL(bad = ibv_create_cq(ctx, 1, NULL, NULL, 1));
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_PTR_NULL(bad = ibv_create_cq(ctx, 1, NULL, och, 0));
	CU_ASSERT_EQUAL(errno, EINVAL);

	CU_ASSERT_EQUAL(ibv_destroy_cq(cq), 0);
	CU_ASSERT_EQUAL(ibv_destroy_comp_channel(ch), 0);
	CU_ASSERT_EQUAL(ibv_destroy_comp_channel(och), 0);
	CU_ASSERT_EQUAL(ibv_close_device(other), 0);
}

static void test_cq_ex(void)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = 16,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
	};
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);

	CU_ASSERT_FATAL(cq != NULL);
	CU_ASSERT(cq->cqe >= 16);
	CU_ASSERT_EQUAL(ibv_start_poll(cq, &pa), ENOENT);
	/* a failed start_poll leaves the CQ usable: no end_poll, no lock held */
	CU_ASSERT_EQUAL(ibv_start_poll(cq, &pa), ENOENT);
	CU_ASSERT_EQUAL(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);

	a.wc_flags = IBV_WC_EX_WITH_CVLAN;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_cq_ex(ctx, &a));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
	a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_cq_ex(ctx, &a));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
	a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	cq = ibv_create_cq_ex(ctx, &a);
	CU_ASSERT_FATAL(cq != NULL);
	CU_ASSERT_EQUAL(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
	a.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_cq_ex(ctx, &a));
	CU_ASSERT_EQUAL(errno, EOPNOTSUPP);
}

/* ---- SRQ ---- */

static void test_srq(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_srq_init_attr ia = { .srq_context = pd,
					.attr = { .max_wr = 100, .max_sge = 2 } };
	struct ibv_srq_attr sa;
	struct ibv_srq *srq;
	uint32_t num;

	CU_ASSERT_FATAL(pd != NULL);
	srq = ibv_create_srq(pd, &ia);
	CU_ASSERT_FATAL(srq != NULL);
	CU_ASSERT(ia.attr.max_wr >= 100 && ia.attr.max_sge >= 2);
	CU_ASSERT_PTR_EQUAL(srq->srq_context, pd);
	CU_ASSERT_PTR_EQUAL(srq->pd, pd);
	sa.srq_limit = 10;
	CU_ASSERT_EQUAL(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), 0);
	memset(&sa, 0, sizeof(sa));
	CU_ASSERT_EQUAL(ibv_query_srq(srq, &sa), 0);
	CU_ASSERT_EQUAL(sa.srq_limit, 10);
	CU_ASSERT(sa.max_wr >= 100 && sa.max_sge >= 2);
	sa.srq_limit = sa.max_wr + 1;
	CU_ASSERT_EQUAL(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), EINVAL);
	CU_ASSERT_EQUAL(ibv_get_srq_num(srq, &num), 0);

	ia.attr.max_wr = dev_attr.max_srq_wr + 1;
	errno = 0;
	CU_ASSERT_PTR_NULL(ibv_create_srq(pd, &ia));
	CU_ASSERT_EQUAL(errno, EINVAL);

	CU_ASSERT_EQUAL(ibv_dealloc_pd(pd), EBUSY);
	CU_ASSERT_EQUAL(ibv_destroy_srq(srq), 0);
	CU_ASSERT_EQUAL(ibv_dealloc_pd(pd), 0);
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("verbs_control", verbs_suite_init, verbs_suite_clean);

	if (!s)
		return -1;
	if (!CU_add_test(s, "device list has softib0", test_device_list) ||
	    !CU_add_test(s, "open and close a context", test_open_close) ||
	    !CU_add_test(s, "async fd non-blocking: EAGAIN", test_async_nonblocking) ||
	    !CU_add_test(s, "query_device", test_query_device) ||
	    !CU_add_test(s, "query_device_ex never past attr_size", test_query_device_ex) ||
	    !CU_add_test(s, "query_port, and the 48-byte 1.1 symbol", test_query_port) ||
	    !CU_add_test(s, "GIDs, GID table, GID type, P_Keys", test_query_gid_pkey) ||
	    !CU_add_test(s, "sysfs files of the device", test_sysfs) ||
	    !CU_add_test(s, "PD and MR", test_pd_mr) ||
	    !CU_add_test(s, "CQ and completion channel", test_cq) ||
	    !CU_add_test(s, "CQ ex creation and flags", test_cq_ex) ||
	    !CU_add_test(s, "SRQ", test_srq))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
