/*
 * shm_full: a full /dev/shm makes the create verbs fail with ENOMEM; it
 * never kills the process with SIGBUS.
 *
 *   shm_full FILLER     (FILLER: a file to make in the segment's tmpfs)
 *
 * The segment is a sparse tmpfs file: a page of it is allocated when it
 * is first touched, and a page tmpfs cannot allocate is a SIGBUS in
 * whoever touches it. So, once the device is open and a first QP and MR
 * exist, this program fills the tmpfs (FILLER grows until ENOSPC), then
 * registers MRs (each new one takes an entry of the segment's MR table:
 * thousands of them run over pages never touched before) and creates
 * CQs and QPs (rings from the segment's heap) until each has failed a few
 * times. Every failure must be ENOMEM, and create_qp must have failed
 * (else the tmpfs was not full and nothing was shown). Then FILLER goes, and a QP and an
 * MR can be made again. test_shm_full.sh runs it on a tmpfs of a few MiB
 * mounted over /dev/shm in a mount namespace of its own.
 *
 * Exit 0: all held (the counts are printed); 1: a wrong errno, no
 * create_qp failure, or no QP once there is room again; 2: setup.
 * Killed by SIGBUS: the bug.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_MRS    6000    /* 6000 x 48 B entries: ~70 pages of the table */
#define MAX_QPS    400
#define MAX_CQS    400
#define FAILS_SEEN 8       /* failures of a kind before moving on */
#define BUF_LEN    4096

struct counts {
	int ok, enomem, other, last_other;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static char buf[BUF_LEN];

static void __attribute__((noreturn)) die(const char *what)
{
	fprintf(stderr, "shm_full: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void count(struct counts *c, void *obj)
{
	if (obj)
		c->ok++;
	else if (errno == ENOMEM)
		c->enomem++;
	else {
		c->other++;
		c->last_other = errno;
	}
}

static void *reg_one(struct ibv_cq *cq)
{
	(void)cq;
	return ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
}

static void *cq_one(struct ibv_cq *cq)
{
	(void)cq;
	return ibv_create_cq(ctx, 256, NULL, NULL, 0);
}

static void *qp_one(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 256, .max_recv_wr = 256,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};

	return ibv_create_qp(pd, &a);
}

/* Make objects until FAILS_SEEN of them failed or max were tried. */
static void run(const char *what, void *(*make)(struct ibv_cq *),
		struct ibv_cq *cq, int max, struct counts *c)
{
	for (int i = 0; i < max && c->enomem + c->other < FAILS_SEEN; i++)
		count(c, make(cq));
	printf("shm_full: %-10s %d made, %d ENOMEM, %d other errors%s%s\n", what,
	       c->ok, c->enomem, c->other, c->other ? ", last: " : "",
	       c->other ? strerror(c->last_other) : "");
}

/* Grow the filler until the tmpfs refuses a block (ENOSPC). */
static void fill(const char *path)
{
	static char chunk[65536];
	long long total = 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		die(path);
	memset(chunk, 0xa5, sizeof(chunk));
	for (;;) {
		ssize_t n = write(fd, chunk, sizeof(chunk));

		if (n > 0) {
			total += n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != ENOSPC)
			die("filling the tmpfs");
		break;
	}
	/* what is left is less than a chunk: take it a page at a time */
	for (;;) {
		ssize_t n = write(fd, chunk, 4096);

		if (n <= 0)
			break;
		total += n;
	}
	close(fd);
	printf("shm_full: the tmpfs is full (filler %lld KiB)\n", total >> 10);
}

int main(int argc, char **argv)
{
	struct ibv_device **l;
	struct counts mrs = { 0 }, cqs = { 0 }, qps = { 0 };
	struct ibv_cq *cq;
	int bad = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: shm_full FILLER\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	l = ibv_get_device_list(NULL);
	if (!l || !l[0] || !(ctx = ibv_open_device(l[0])))
		die("no device");
	ibv_free_device_list(l);
	if (!(pd = ibv_alloc_pd(ctx)) || !(cq = cq_one(NULL)) || !qp_one(cq) ||
	    !reg_one(NULL))
		die("the first objects");

	fill(argv[1]);
	run("reg_mr", reg_one, NULL, MAX_MRS, &mrs);
	run("create_cq", cq_one, NULL, MAX_CQS, &cqs);
	run("create_qp", qp_one, cq, MAX_QPS, &qps);
	if (mrs.other + cqs.other + qps.other) {
		printf("shm_full: FAIL: an error other than ENOMEM\n");
		bad = 1;
	}
	/* the MR table may be backed from the start; the rings are not */
	if (!qps.enomem) {
		printf("shm_full: FAIL: create_qp never failed: the tmpfs was not "
		       "full, nothing shown\n");
		bad = 1;
	}

	if (unlink(argv[1]))
		die("removing the filler");
	if (!qp_one(cq) || !reg_one(NULL)) {
		printf("shm_full: FAIL: no QP or MR once the tmpfs has room again: %s\n",
		       strerror(errno));
		bad = 1;
	} else {
		printf("shm_full: a QP and an MR made once the filler is gone\n");
	}
	/* the objects go with the process (the device reclaims them) */
	return bad;
}
