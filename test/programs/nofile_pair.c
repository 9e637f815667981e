/*
 * nofile_pair: two processes without a file descriptor to spare exchange
 * RC SENDs for a while; neither may take the other — nor any other live
 * process of the host — for dead (issue 15 item 3: an EMFILE from
 * pidfd_open or from opening /proc/<pid>/stat proves nothing).
 *
 *   nofile_pair [-t secs] [-d dev]
 *
 * A parent and a child (forked; they swap QP numbers over a socketpair)
 * open the device, create a CQ, an RC QP and an MR, post their receives,
 * and then lower RLIMIT_NOFILE to just above their highest open
 * descriptor: from then on every pidfd_open and every open() fails with
 * EMFILE (checked). They connect and ping-pong SENDs of 64 B and of
 * 48 KiB (above the inline receive threshold: the payload moves by
 * cross-memory attach or the bounce path) until secs have passed, each
 * byte checked. Prints "pids PARENT CHILD" once both have lowered their
 * limits, and "ok N round trips" at the end. Exit 0 if every completion
 * succeeded and every byte matched; else 1.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "tp_common.h"

#define BIG   (48 * 1024)
#define SMALL 64
#define NRECV 8

const char *tp_who = "nofile_pair";

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;           /* NRECV receive slots of BIG, then the send slot */
	uint16_t lid;
};

static void open_side(struct side *s, const char *dev)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = NRECV,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	struct ibv_device **list;
	struct ibv_port_attr port;
	int n, i;

	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev))
			break;
	if (!list || i == n)
		tp_die("no device %s", dev);
	s->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!s->ctx || ibv_query_port(s->ctx, 1, &port))
		tp_die("ibv_open_device: %s", strerror(errno));
	s->lid = port.lid;
	s->pd = ibv_alloc_pd(s->ctx);
	s->buf = calloc(NRECV + 1, BIG);
	if (!s->pd || !s->buf)
		tp_die("ibv_alloc_pd: %s", strerror(errno));
	s->mr = ibv_reg_mr(s->pd, s->buf, (size_t)(NRECV + 1) * BIG, IBV_ACCESS_LOCAL_WRITE);
	s->cq = ibv_create_cq(s->ctx, 2 * NRECV + 8, NULL, NULL, 0);
	if (!s->mr || !s->cq)
		tp_die("ibv_reg_mr / ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = s->cq;
	s->qp = ibv_create_qp(s->pd, &ia);
	if (!s->qp || ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		tp_die("ibv_create_qp / INIT: %s", strerror(errno));
}

static void post_recv(struct side *s, int k)
{
	struct ibv_sge sge = { (uintptr_t)(s->buf + (size_t)k * BIG), BIG, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)k, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(s->qp, &wr, &bad))
		tp_die("ibv_post_recv failed");
}

static void connect_qp(struct side *s, uint32_t qpn, uint16_t lid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qpn,
		.rq_psn = 0, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .dlid = lid, .port_num = 1 },
	};

	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		tp_die("modify to RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		tp_die("modify to RTS failed");
}

/* No descriptor above the highest open one: every new one is EMFILE. */
static void starve_fds(void)
{
	struct rlimit rl;
	struct dirent *de;
	int maxfd = 0, fd;
	DIR *d = opendir("/proc/self/fd");

	if (!d)
		tp_die("opendir /proc/self/fd: %s", strerror(errno));
	while ((de = readdir(d)))
		if (atoi(de->d_name) > maxfd && atoi(de->d_name) != dirfd(d))
			maxfd = atoi(de->d_name);
	closedir(d);
	/* fill the holes below it: a new descriptor takes the lowest free */
	while ((fd = open("/dev/null", O_RDONLY)) >= 0 && fd < maxfd)
		;
	if (fd > maxfd)
		maxfd = fd;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		tp_die("getrlimit: %s", strerror(errno));
	rl.rlim_cur = (rlim_t)maxfd + 1;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		tp_die("setrlimit: %s", strerror(errno));
	fd = open("/proc/self/stat", O_RDONLY);
	if (fd >= 0 || errno != EMFILE)
		tp_die("a descriptor could still be opened (fd %d, %s)", fd, strerror(errno));
}

#define STOP (1ULL << 63)

static uint8_t pattern(uint64_t round, size_t i)
{
	return (uint8_t)(round * 131 + i * 7 + (i >> 8));
}

static size_t msg_len(uint64_t round)
{
	return round & 1 ? BIG : SMALL;
}

/* Message `round`: its number in the first 8 bytes, then the pattern. */
static void send_msg(struct side *s, uint64_t round)
{
	size_t len = msg_len(round);
	uint8_t *p = s->buf + (size_t)NRECV * BIG;
	struct ibv_sge sge = { (uintptr_t)p, (uint32_t)len, s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1000, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	memcpy(p, &round, 8);
	for (size_t i = 8; i < len; i++)
		p[i] = pattern(round, i);
	if (ibv_post_send(s->qp, &wr, &bad))
		tp_die("ibv_post_send failed");
}

/*
 * Poll until our send (if any) and one receive are done; the received
 * message checked byte by byte and its receive posted again. Returns the
 * round the received message carried.
 */
static uint64_t wait_round(struct side *s, int sent)
{
	time_t limit = time(NULL) + 30;
	int got_send = !sent, got_recv = 0;
	uint64_t round = 0;

	while (!got_send || !got_recv) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(s->cq, 1, &wc);

		if (n < 0)
			tp_die("ibv_poll_cq failed");
		if (!n) {
			if (time(NULL) > limit)
				tp_die("no completion for 30 s");
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			tp_die("%s (wr_id %" PRIu64 ")", ibv_wc_status_str(wc.status), wc.wr_id);
		if (wc.wr_id == 1000) {
			got_send = 1;
			continue;
		}
		uint8_t *p = s->buf + wc.wr_id * BIG;

		memcpy(&round, p, 8);
		if (wc.byte_len != msg_len(round))
			tp_die("round %" PRIu64 ": %u bytes", (uint64_t)(round & ~STOP), wc.byte_len);
		for (size_t i = 8; i < wc.byte_len; i++)
			if (p[i] != pattern(round, i))
				tp_die("round %" PRIu64 ": byte %zu wrong", (uint64_t)(round & ~STOP), i);
		post_recv(s, (int)wc.wr_id);
		got_recv = 1;
	}
	return round;
}

int main(int argc, char **argv)
{
	const char *dev = "softib0";
	int secs = 10, opt, sv[2], status;
	struct { uint32_t qpn; uint16_t lid; } me, peer;
	struct side s;
	uint64_t round = 0;
	pid_t child;
	char c = 0;

	while ((opt = getopt(argc, argv, "t:d:")) != -1) {
		if (opt == 't')
			secs = atoi(optarg);
		else if (opt == 'd')
			dev = optarg;
		else
			return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		tp_die("socketpair: %s", strerror(errno));
	child = fork();
	if (child < 0)
		tp_die("fork: %s", strerror(errno));
	int fd = child ? sv[0] : sv[1];
	close(child ? sv[1] : sv[0]);
	tp_who = child ? "nofile_pair parent" : "nofile_pair child";
	memset(&s, 0, sizeof(s));
	open_side(&s, dev);
	for (int k = 0; k < NRECV; k++)
		post_recv(&s, k);
	me.qpn = s.qp->qp_num;
	me.lid = s.lid;
	if (write(fd, &me, sizeof(me)) != sizeof(me) ||
	    read(fd, &peer, sizeof(peer)) != sizeof(peer))
		tp_die("exchange failed");
	starve_fds();
	connect_qp(&s, peer.qpn, peer.lid);
	/* both starved and connected before the first message */
	if (write(fd, &c, 1) != 1 || read(fd, &c, 1) != 1)
		tp_die("sync failed");
	if (child)
		printf("pids %d %d\n", (int)getpid(), (int)child);
	time_t end = time(NULL) + secs;
	for (;; round++) {
		if (child) { /* the parent leads, the child echoes */
			uint64_t r = time(NULL) >= end ? round | STOP : round;

			send_msg(&s, r);
			if (wait_round(&s, 1) != r)
				tp_die("round %" PRIu64 ": another echo", round);
			if (r & STOP)
				break;
		} else {
			uint64_t r = wait_round(&s, 0);

			send_msg(&s, r);
			/* our send's completion: the next wait_round counts it */
			struct ibv_wc wc;
			int n;

			while (!(n = ibv_poll_cq(s.cq, 1, &wc)))
				;
			if (n < 0 || wc.status != IBV_WC_SUCCESS || wc.wr_id != 1000)
				tp_die("echo of round %" PRIu64 " failed", (uint64_t)(r & ~STOP));
			if (r & STOP)
				break;
		}
	}
	if (!child)
		return 0;
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		tp_die("the child failed");
	printf("ok %" PRIu64 " round trips\n", round);
	return 0;
}
