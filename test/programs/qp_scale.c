/*
 * The QP number space at scale (issue 10), for test_qp_scale.sh.
 *
 *   qp_scale many [-n N] [-t T]
 *       one process creates N RC QPs (default: the device's max_qp, which
 *       is the per-process limit), checks that the next one is refused
 *       with ENOMEM (NULL + errno), that every number is distinct, 24-bit
 *       and never 0, 1 or 0xffffff; then connects the last T QPs created
 *       in pairs and moves a SEND over each (every byte checked); then
 *       destroys them all, and checks that the numbers freed last do not
 *       come back first.
 *   qp_scale pair [-n N] [-w W]
 *       a parent and a child, N connected RC QPs each (QP i of one to QP
 *       i of the other); each posts a receive on every QP, then SENDs one
 *       message on every QP; each checks every message it got (the QP's
 *       index and the sender in it). At most W SENDs outstanding per
 *       process (default: all N).
 *
 * The path is LID + GID of this host: the shared-memory link, or the UDP
 * link when SOFTIB_LINK=udp. Prints "qp_scale: PASS" (and timings) on
 * success, exits non-zero with a reason otherwise.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tp_common.h"

#define MSG 64
#define TIMEOUT_S 60

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_port_attr port;
static union ibv_gid gid;
static bool have_gid;
static const char *who = "qp_scale";

#define DIE(...) do { fprintf(stderr, "%s: ", who); fprintf(stderr, __VA_ARGS__); \
		      fputc('\n', stderr); exit(1); } while (0)

static void dev_open(int cqe)
{
	struct ibv_device **l = ibv_get_device_list(NULL);

	if (!l || !l[0])
		DIE("no device");
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!ctx || ibv_query_port(ctx, 1, &port))
		DIE("open: %s", strerror(errno));
	have_gid = !ibv_query_gid(ctx, 1, 0, &gid);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("pd/cq: %s", strerror(errno));
}

static struct ibv_qp *qp_new(void)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};

	return ibv_create_qp(pd, &ia);
}

static void qp_connect(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		DIE("INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = dest & 0xffffff;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = port.lid;
	a.ah_attr.port_num = 1;
	if (have_gid) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = gid;
		a.ah_attr.grh.hop_limit = 1;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		DIE("RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = qp->qp_num & 0xffffff;
	a.timeout = 18; /* about 1 s, as MPI libraries set it */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS: %s", strerror(errno));
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, uint8_t *buf, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)buf, MSG, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	if (ibv_post_recv(qp, &wr, &bad))
		DIE("post_recv: %s", strerror(errno));
}

static void post_send(struct ibv_qp *qp, struct ibv_mr *mr, uint8_t *buf, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)buf, MSG, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	int rc = ibv_post_send(qp, &wr, &bad); /* one WQE per QP: never full */

	if (rc)
		DIE("post_send: %s", strerror(rc));
}

/*
 * Wait for nrecv receive and nsend send completions, all successful.
 * Receive i's wr_id is i; each message says which QP index and which
 * side sent it: check it against the buffer of that receive.
 */
struct progress {
	unsigned r, s;    /* receive and send completions so far */
};

/*
 * Poll until the counts reach nrecv and nsend (or, with window, until
 * fewer than window sends are outstanding out of posted).
 */
static void drain_to(struct progress *p, unsigned nrecv, unsigned nsend,
		     uint8_t *rbuf, uint32_t tag)
{
	double end = tp_now_s() + TIMEOUT_S;
	unsigned r = p->r, s = p->s;
	struct ibv_wc wc[64];

	while (r < nrecv || s < nsend) {
		int n = ibv_poll_cq(cq, 64, wc);

		if (n < 0)
			DIE("poll_cq");
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				DIE("completion %s for wr %llu (op %d)",
				    ibv_wc_status_str(wc[i].status),
				    (unsigned long long)wc[i].wr_id, wc[i].opcode);
			if (wc[i].opcode == IBV_WC_RECV) {
				uint8_t *b = rbuf + wc[i].wr_id * MSG;
				uint32_t idx, t;

				memcpy(&idx, b, 4);
				memcpy(&t, b + 4, 4);
				if (idx != wc[i].wr_id || t != tag || wc[i].byte_len != MSG ||
				    b[MSG - 1] != (uint8_t)(idx * 7))
					DIE("message %llu: wrong contents (idx %u tag %x)",
					    (unsigned long long)wc[i].wr_id, idx, t);
				r++;
			} else {
				s++;
			}
		}
		if (tp_now_s() > end)
			DIE("timeout: %u/%u receives, %u/%u sends", r, nrecv, s, nsend);
	}
	p->r = r;
	p->s = s;
}

static void drain(unsigned nrecv, unsigned nsend, uint8_t *rbuf, uint32_t tag)
{
	struct progress p = { 0, 0 };

	drain_to(&p, nrecv, nsend, rbuf, tag);
}

static void fill(uint8_t *b, uint32_t idx, uint32_t tag)
{
	memset(b, (uint8_t)(idx * 7), MSG);
	memcpy(b, &idx, 4);
	memcpy(b + 4, &tag, 4);
}

/* ---- one process, the per-process limit ---- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int run_many(int n, int t)
{
	struct ibv_device_attr da;
	struct ibv_qp **qps;
	uint32_t *nums;
	double t0;

	dev_open(4 * t + 16);
	if (ibv_query_device(ctx, &da))
		DIE("query_device");
	if (n <= 0)
		n = da.max_qp;
	if (t > n || t % 2)
		DIE("-t must be even and at most -n");
	qps = calloc((size_t)n, sizeof(*qps));
	nums = calloc((size_t)n, sizeof(*nums));
	if (!qps || !nums)
		DIE("out of memory");
	t0 = tp_now_s();
	for (int i = 0; i < n; i++) {
		qps[i] = qp_new();
		if (!qps[i])
			DIE("create_qp %d of %d: %s", i + 1, n, strerror(errno));
		nums[i] = qps[i]->qp_num;
	}
	double t_create = tp_now_s() - t0;

	if (n == da.max_qp) {
		struct ibv_qp *over;

		errno = 0;
		over = qp_new();
		if (over || errno != ENOMEM)
			DIE("QP %d past max_qp %d: %s (errno %d), not ENOMEM",
			    n + 1, da.max_qp, over ? "created" : "refused", errno);
		printf("QP %d past max_qp: NULL, errno ENOMEM\n", n + 1);
	}
	uint32_t *sorted = malloc((size_t)n * sizeof(*sorted));

	memcpy(sorted, nums, (size_t)n * sizeof(*sorted));
	qsort(sorted, (size_t)n, sizeof(*sorted), cmp_u32);
	for (int i = 0; i < n; i++) {
		if (sorted[i] <= 1 || sorted[i] >= 0xffffff)
			DIE("QP number %#x is reserved", sorted[i]);
		if (i && sorted[i] == sorted[i - 1])
			DIE("QP number %#x twice", sorted[i]);
	}
	free(sorted);

	/* traffic on the QPs created last: pairs (n-t, n-t+1), ... */
	uint8_t *sbuf = calloc((size_t)t, MSG), *rbuf = calloc((size_t)t, MSG);
	struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, (size_t)t * MSG, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, (size_t)t * MSG, IBV_ACCESS_LOCAL_WRITE);

	if (!smr || !rmr)
		DIE("reg_mr: %s", strerror(errno));
	for (int i = 0; i < t; i++) {
		struct ibv_qp *q = qps[n - t + i], *peer = qps[n - t + (i ^ 1)];

		qp_connect(q, peer->qp_num);
		post_recv(q, rmr, rbuf + (size_t)i * MSG, (uint64_t)i);
	}
	for (int i = 0; i < t; i++) {
		/* QP i sends to its peer i ^ 1, whose receive i ^ 1 gets it */
		fill(sbuf + (size_t)i * MSG, (uint32_t)(i ^ 1), 0x5ca1e);
		post_send(qps[n - t + i], smr, sbuf + (size_t)i * MSG, (uint64_t)i);
	}
	drain((unsigned)t, (unsigned)t, rbuf, 0x5ca1e);
	printf("traffic on the last %d QPs: %d SENDs, every byte checked\n", t, t);

	/* a number freed does not come back at once */
	uint32_t last = qps[n - 1]->qp_num;

	t0 = tp_now_s();
	for (int i = 0; i < n; i++)
		if (ibv_destroy_qp(qps[i]))
			DIE("destroy_qp %d: %s", i, strerror(errno));
	double t_destroy = tp_now_s() - t0;

	/* the numbers freed last are the last to come back: none of the
	 * last 16 destroyed in the next 16 created */
	for (int i = 0; i < 16; i++) {
		struct ibv_qp *q = qp_new();

		if (!q)
			DIE("create after destroy: %s", strerror(errno));
		for (int k = n - 16 > 0 ? n - 16 : 0; k < n; k++)
			if (q->qp_num == nums[k])
				DIE("QP number %#x came back at once", q->qp_num);
		ibv_destroy_qp(q);
	}
	printf("%d QPs: created in %.2f s, destroyed in %.2f s; first %#x, last %#x\n",
	       n, t_create, t_destroy, nums[0], last);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	free(sbuf);
	free(rbuf);
	free(qps);
	free(nums);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("qp_scale: PASS\n");
	return 0;
}

/* ---- two processes, N connected QPs each ---- */

static void xwrite(int fd, const void *p, size_t len)
{
	const char *c = p;

	while (len) {
		ssize_t k = write(fd, c, len);

		if (k <= 0)
			DIE("pipe write: %s", strerror(errno));
		c += k;
		len -= (size_t)k;
	}
}

static void xread(int fd, void *p, size_t len)
{
	char *c = p;

	while (len) {
		ssize_t k = read(fd, c, len);

		if (k <= 0)
			DIE("pipe read: %s", k ? strerror(errno) : "peer gone");
		c += k;
		len -= (size_t)k;
	}
}

static void side(int n, int window, int rd, int wr, uint32_t my_tag, uint32_t peer_tag)
{
	struct ibv_qp **qps = calloc((size_t)n, sizeof(*qps));
	uint32_t *mine = calloc((size_t)n, 4), *theirs = calloc((size_t)n, 4);
	uint8_t *sbuf = calloc((size_t)n, MSG), *rbuf = calloc((size_t)n, MSG);
	double t0 = tp_now_s();
	char c = 0;

	if (!qps || !mine || !theirs || !sbuf || !rbuf)
		DIE("out of memory");
	dev_open(2 * n + 16);
	struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, (size_t)n * MSG, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, (size_t)n * MSG, IBV_ACCESS_LOCAL_WRITE);

	if (!smr || !rmr)
		DIE("reg_mr: %s", strerror(errno));
	for (int i = 0; i < n; i++) {
		qps[i] = qp_new();
		if (!qps[i])
			DIE("create_qp %d: %s", i, strerror(errno));
		mine[i] = qps[i]->qp_num;
	}
	xwrite(wr, mine, (size_t)n * 4);
	xread(rd, theirs, (size_t)n * 4);
	for (int i = 0; i < n; i++) {
		qp_connect(qps[i], theirs[i]);
		post_recv(qps[i], rmr, rbuf + (size_t)i * MSG, (uint64_t)i);
	}
	double t_setup = tp_now_s() - t0;

	/* both sides' receives are posted before anyone sends */
	xwrite(wr, &c, 1);
	xread(rd, &c, 1);
	/*
	 * At most window SENDs outstanding: over UDP, 10,000 QPs sending at
	 * once overflow the receiving socket, and their retransmissions,
	 * timed alike, would collide again — an application paces itself
	 * the same way.
	 */
	struct progress pr = { 0, 0 };

	t0 = tp_now_s();
	for (int i = 0; i < n; i++) {
		if ((unsigned)i >= pr.s + (unsigned)window)
			drain_to(&pr, 0, (unsigned)i - (unsigned)window + 1, rbuf, peer_tag);
		fill(sbuf + (size_t)i * MSG, (uint32_t)i, my_tag);
		post_send(qps[i], smr, sbuf + (size_t)i * MSG, (uint64_t)i);
	}
	drain_to(&pr, (unsigned)n, (unsigned)n, rbuf, peer_tag);
	double t_xfer = tp_now_s() - t0;

	/* the peer's last ACKs are in before anyone destroys a QP */
	xwrite(wr, &c, 1);
	xread(rd, &c, 1);
	for (int i = 0; i < n; i++)
		ibv_destroy_qp(qps[i]);
	printf("%s: %d QPs created and connected in %.2f s; %d messages each way in %.3f s\n",
	       who, n, t_setup, n, t_xfer);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static int run_pair(int n, int window)
{
	int p2c[2], c2p[2], st;
	pid_t pid;

	if (pipe(p2c) || pipe(c2p))
		DIE("pipe");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		DIE("fork");
	if (pid == 0) {
		who = "qp_scale child";
		close(p2c[1]);
		close(c2p[0]);
		side(n, window, p2c[0], c2p[1], 0xc41d, 0x9a7e);
		exit(0);
	}
	who = "qp_scale parent";
	close(p2c[0]);
	close(c2p[1]);
	side(n, window, c2p[0], p2c[1], 0x9a7e, 0xc41d);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		DIE("child failed");
	printf("qp_scale: PASS\n");
	return 0;
}

int main(int argc, char **argv)
{
	int n = 0, t = 64, w = 0, opt;
	const char *mode = argc > 1 ? argv[1] : "";

	optind = 2;
	while ((opt = getopt(argc, argv, "n:t:w:")) != -1) {
		if (opt == 'n')
			n = atoi(optarg);
		else if (opt == 'w')
			w = atoi(optarg);
		else if (opt == 't')
			t = atoi(optarg);
		else
			return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "many"))
		return run_many(n, t);
	if (!strcmp(mode, "pair"))
		return run_pair(n > 0 ? n : 10000, w > 0 ? w : n > 0 ? n : 10000);
	fprintf(stderr, "usage: qp_scale many [-n N] [-t T] | pair [-n N] [-w W]\n");
	return 2;
}
