/*
 * spawn: processes added to a running job, checked.
 *
 *   mpirun -np N build/test/mpi/spawn [-c CHILDREN]
 *
 * The N parents spawn two groups of CHILDREN processes each (default 2),
 * X and Y, one MPI_Comm_spawn each. Where the parents run on several
 * hosts, X is placed on the last parent's host and Y on the first's, so
 * that what follows crosses hosts.
 *   1. parents and each group talk over the intercommunicator: every child
 *      gets a message from parent 0 and answers it; then the intercomm is
 *      merged and an MPI_Allreduce runs over parents and children;
 *   2. X and Y, which know nothing of each other, meet by MPI_Comm_accept
 *      (X) and MPI_Comm_connect (Y) on a port X opened, whose name the
 *      parents pass on; child i of X and child i of Y swap messages of
 *      1 B .. 1 MiB, checked, and MPI_Allreduce runs over the merged X+Y;
 *   3. everything is disconnected; the children's own verdict reaches the
 *      parents, who exit non-zero if any child saw a difference.
 */
#include <limits.h>
#include <unistd.h>

#include "mt_common.h"

#define TAG_HELLO 21
#define TAG_PORT  22
#define TAG_DONE  23
#define TAG_XY    24
#define XY_MAX    (1 << 20)

/* Sum over the merged communicator of (rank + 1): n (n + 1) / 2. */
static void check_merged_sum(MPI_Comm inter, int high, const char *what)
{
	MPI_Comm merged;
	int r, n;
	long v, sum = 0;

	MPI_Intercomm_merge(inter, high, &merged);
	MPI_Comm_rank(merged, &r);
	MPI_Comm_size(merged, &n);
	v = r + 1;
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, merged);
	MT_CHECK(sum == (long)n * (n + 1) / 2, "%s: merged allreduce %ld, "
		 "want %ld over %d ranks", what, sum, (long)n * (n + 1) / 2,
		 n);
	MPI_Comm_free(&merged);
}

/* Child i of X and child i of Y swap messages over the X-Y intercomm. */
static void xy_exchange(MPI_Comm xy, int is_x)
{
	int r, remote;
	uint8_t *s = mt_alloc(XY_MAX), *d = mt_alloc(XY_MAX);

	MPI_Comm_rank(xy, &r);
	MPI_Comm_remote_size(xy, &remote);
	if (r < remote)
		for (int sz = 1; sz <= XY_MAX; sz *= 4) {
			int me = is_x ? r : 1000 + r, peer = is_x ? 1000 + r : r;
			mt_fill(s, sz, me, peer, (unsigned)sz);
			memset(d, 0, sz);
			MPI_Sendrecv(s, sz, MPI_BYTE, r, TAG_XY, d, sz,
				     MPI_BYTE, r, TAG_XY, xy,
				     MPI_STATUS_IGNORE);
			mt_verify(d, sz, peer, me, (unsigned)sz, "X-Y message");
		}
	free(s);
	free(d);
}

static int child(const char *group)
{
	MPI_Comm parent, xy;
	int r, is_x = group[0] == 'X';
	char port[MPI_MAX_PORT_NAME] = "";
	long hello = 0;

	MPI_Comm_get_parent(&parent);
	if (parent == MPI_COMM_NULL) {
		mt_fail("child %s: no parent", group);
		return mt_finish();
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &r);
	MPI_Recv(&hello, 1, MPI_LONG, 0, TAG_HELLO, parent, MPI_STATUS_IGNORE);
	MT_CHECK(hello == 4200 + r + (is_x ? 0 : 100), "child %s %d: hello "
		 "%ld", group, r, hello);
	hello += 1;
	MPI_Send(&hello, 1, MPI_LONG, 0, TAG_HELLO, parent);
	check_merged_sum(parent, 1, "parent+child");

	/* X opens the port and hands its name to parent 0, which gives it to
	 * Y; X accepts, Y connects */
	if (is_x) {
		if (r == 0) {
			MPI_Open_port(MPI_INFO_NULL, port);
			MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0,
				 TAG_PORT, parent);
		}
		MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &xy);
	} else {
		if (r == 0)
			MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0,
				 TAG_PORT, parent, MPI_STATUS_IGNORE);
		MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &xy);
	}
	xy_exchange(xy, is_x);
	check_merged_sum(xy, !is_x, "X+Y");
	MPI_Comm_disconnect(&xy);
	if (is_x && r == 0)
		MPI_Close_port(port);

	/* our verdict to the parents, before our own */
	unsigned long fails = 0, mine = atomic_load(&mt_fails);
	MPI_Reduce(&mine, &fails, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0,
		   MPI_COMM_WORLD);
	if (r == 0)
		MPI_Send(&fails, 1, MPI_UNSIGNED_LONG, 0, TAG_DONE, parent);
	MPI_Comm_disconnect(&parent);
	return mt_finish();
}

/* Spawns one group of n children of this program on host (NULL: where
 * Open MPI likes). */
static MPI_Comm spawn_group(const char *self, const char *group, int n,
			    const char *host)
{
	char *args[] = { "child", (char *)group, NULL };
	MPI_Comm inter;
	MPI_Info info;
	int *errs = mt_alloc(n * sizeof(int));

	MPI_Info_create(&info);
	if (host)
		MPI_Info_set(info, "host", host);
	MPI_Comm_spawn(self, args, n, info, 0, MPI_COMM_WORLD, &inter, errs);
	for (int i = 0; i < n; i++)
		MT_CHECK(errs[i] == MPI_SUCCESS, "spawn %s: child %d error %d",
			 group, i, errs[i]);
	MPI_Info_free(&info);
	free(errs);
	return inter;
}

static int parent(const char *self, int nchild)
{
	char host[HOST_NAME_MAX + 1], first[HOST_NAME_MAX + 1],
	     last[HOST_NAME_MAX + 1];
	MPI_Comm x, y;
	int multi;

	/* the first and the last parent's hosts */
	gethostname(host, sizeof(host));
	host[sizeof(host) - 1] = 0;
	memcpy(first, host, sizeof(host));
	memcpy(last, host, sizeof(host));
	MPI_Bcast(first, sizeof(first), MPI_CHAR, 0, MPI_COMM_WORLD);
	MPI_Bcast(last, sizeof(last), MPI_CHAR, mt_size - 1, MPI_COMM_WORLD);
	multi = strcmp(first, last) != 0;

	x = spawn_group(self, "X", nchild, multi ? last : NULL);
	y = spawn_group(self, "Y", nchild, multi ? first : NULL);

	if (mt_rank == 0)
		for (int g = 0; g < 2; g++)
			for (int i = 0; i < nchild; i++) {
				long v = 4200 + i + 100 * g, back = 0;
				MPI_Comm c = g ? y : x;
				MPI_Send(&v, 1, MPI_LONG, i, TAG_HELLO, c);
				MPI_Recv(&back, 1, MPI_LONG, i, TAG_HELLO, c,
					 MPI_STATUS_IGNORE);
				MT_CHECK(back == v + 1, "child %c%d answered "
					 "%ld", g ? 'Y' : 'X', i, back);
			}
	check_merged_sum(x, 0, "parents+X");
	check_merged_sum(y, 0, "parents+Y");

	if (mt_rank == 0) {
		char port[MPI_MAX_PORT_NAME];
		unsigned long cf[2] = { 0, 0 };
		MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, TAG_PORT, x,
			 MPI_STATUS_IGNORE);
		MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, TAG_PORT, y);
		MPI_Recv(&cf[0], 1, MPI_UNSIGNED_LONG, 0, TAG_DONE, x,
			 MPI_STATUS_IGNORE);
		MPI_Recv(&cf[1], 1, MPI_UNSIGNED_LONG, 0, TAG_DONE, y,
			 MPI_STATUS_IGNORE);
		MT_CHECK(cf[0] + cf[1] == 0, "the children saw %lu + %lu "
			 "differences", cf[0], cf[1]);
	}
	MPI_Comm_disconnect(&x);
	MPI_Comm_disconnect(&y);
	if (mt_rank == 0)
		printf("spawn: %d parents on %s, 2 x %d children, "
		       "connect/accept between them\n", mt_size,
		       multi ? "several hosts" : "one host", nchild);
	return mt_finish();
}

int main(int argc, char **argv)
{
	int c, nchild = 2;

	if (argc == 3 && !strcmp(argv[1], "child")) {
		mt_init(&argc, &argv, argv[2][0] == 'X' ? "spawn(child X)"
						       : "spawn(child Y)");
		return child(argv[2]);
	}
	mt_init(&argc, &argv, "spawn");
	while ((c = getopt(argc, argv, "c:")) != -1)
		if (c != 'c' || (nchild = atoi(optarg)) < 1) {
			if (mt_rank == 0)
				fprintf(stderr, "usage: spawn [-c CHILDREN]\n");
			MPI_Finalize();
			return 1;
		}
	/* the children run this program from wherever Open MPI starts them */
	char self[PATH_MAX];
	if (!realpath(argv[0], self))
		snprintf(self, sizeof(self), "%s", argv[0]);
	return parent(self, nchild);
}
