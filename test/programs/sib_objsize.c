/*
 * sib_objsize: what one verbs object of each kind costs on softib, for the
 * scale model (docs/scale-model.md).  Makes K objects of a kind and
 * reports, per object, the growth of this process's private memory
 * (/proc/self/smaps_rollup: Private_Clean + Private_Dirty) and of the
 * host's shared segment (allocated blocks of /dev/shm/softib-*; the
 * segment's own QP directory entry, about 300 B, is pre-sized and not seen
 * here), and the QP number space each takes.
 *
 *   sib_objsize [K]      (default 200)
 * Kinds: RC QP (64 send WRs, receives through an SRQ), RC QP with its own
 * receive queue (64 + 64), XRC send QP (256 send WRs, as libsib makes
 * them), XRC receive QP, UD QP (64 + 64).
 */
#include <dirent.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static long private_kib(void)
{
	char line[256];
	long v, sum = 0;
	FILE *f = fopen("/proc/self/smaps_rollup", "r");

	while (f && fgets(line, sizeof(line), f))
		if ((sscanf(line, "Private_Clean: %ld kB", &v) == 1) ||
		    (sscanf(line, "Private_Dirty: %ld kB", &v) == 1))
			sum += v;
	if (f)
		fclose(f);
	return sum;
}

static long shared_kib(void)
{
	const char *tag = getenv("SOFTIB_SEG_TAG");
	struct dirent *d;
	DIR *dir = opendir("/dev/shm");
	long sum = 0;
	char p[600];
	struct stat st;

	while (dir && (d = readdir(dir))) {
		if (strncmp(d->d_name, "softib-", 7))
			continue;
		if (tag && *tag && !strstr(d->d_name, tag))
			continue;
		snprintf(p, sizeof(p), "/dev/shm/%s", d->d_name);
		if (!stat(p, &st))
			sum += (long)st.st_blocks / 2;
	}
	if (dir)
		closedir(dir);
	return sum;
}

enum kind { RC_SRQ, RC_RQ, XRC_SEND, XRC_RECV, UD, NKINDS };
static const char *names[] = { "RC QP, receives through an SRQ (64 send WRs)",
			       "RC QP with its own RQ (64 send + 64 recv WRs)",
			       "XRC send QP (256 send WRs, libsib's)",
			       "XRC receive QP", "UD QP (64 + 64)" };

int main(int argc, char **argv)
{
	int k = argc > 1 ? atoi(argv[1]) : 200;
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c = l && l[0] ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_xrcd *xrcd;
	struct ibv_qp **qps = calloc((size_t)k, sizeof(*qps));
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64, .max_sge = 1 } };
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
					 IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = -1, .oflags = O_CREAT };

	if (!c)
		return 1;
	pd = ibv_alloc_pd(c);
	cq = ibv_create_cq(c, 4096, NULL, NULL, 0);
	srq = ibv_create_srq(pd, &sa);
	xrcd = ibv_open_xrcd(c, &xa);
	if (!pd || !cq || !srq || !xrcd)
		return 1;
	printf("# %d objects of each kind; per object:\n", k);
	printf("# %-48s %12s %12s\n", "kind", "private B", "shared B");
	fflush(stdout);
	/* each kind in a process of its own: freed memory of one kind must
	 * not hide what the next costs */
	for (int kind = 0; kind < NKINDS; kind++) {
		pid_t pid = fork();

		if (pid > 0) {
			waitpid(pid, NULL, 0);
			continue;
		}
		c = ibv_open_device(l[0]);
		pd = ibv_alloc_pd(c);
		cq = ibv_create_cq(c, 4096, NULL, NULL, 0);
		srq = ibv_create_srq(pd, &sa);
		xrcd = ibv_open_xrcd(c, &xa);
		if (!pd || !cq || !srq || !xrcd)
			_exit(1);
		long p0 = private_kib(), s0 = shared_kib();
		int made = 0;

		for (int i = 0; i < k; i++) {
			struct ibv_qp_init_attr_ex a = {
				.send_cq = cq, .recv_cq = cq,
				.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
				.cap = { .max_send_wr = 64, .max_recv_wr = 64,
					 .max_send_sge = 1, .max_recv_sge = 1 },
			};

			switch (kind) {
			case RC_SRQ: a.qp_type = IBV_QPT_RC; a.srq = srq;
				a.cap.max_recv_wr = 0; break;
			case RC_RQ: a.qp_type = IBV_QPT_RC; break;
			case XRC_SEND: a.qp_type = IBV_QPT_XRC_SEND;
				a.cap.max_send_wr = 256; a.recv_cq = NULL;
				a.cap.max_recv_wr = 0; break;
			case XRC_RECV: memset(&a, 0, sizeof(a));
				a.qp_type = IBV_QPT_XRC_RECV;
				a.comp_mask = IBV_QP_INIT_ATTR_XRCD; a.xrcd = xrcd; break;
			case UD: a.qp_type = IBV_QPT_UD; break;
			}
			qps[i] = ibv_create_qp_ex(c, &a);
			made += qps[i] != NULL;
		}
		long dp = private_kib() - p0, ds = shared_kib() - s0;

		printf("%-50s %12ld %12ld\n", names[kind],
		       made ? dp * 1024 / made : -1, made ? ds * 1024 / made : -1);
		fflush(stdout);
		for (int i = 0; i < k; i++)
			if (qps[i])
				ibv_destroy_qp(qps[i]);
		_exit(0);
	}
	ibv_destroy_srq(srq);
	ibv_close_xrcd(xrcd);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	ibv_free_device_list(l);
	return 0;
}
