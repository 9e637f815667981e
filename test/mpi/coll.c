/*
 * coll: collectives with checked results.
 *
 *   mpirun -np N build/test/mpi/coll [-m MAX]
 *
 *   bcast      from every root, sizes 1 B .. MAX (default 1m)
 *   allreduce  sum of int64, max of double, MPI_IN_PLACE, a user-defined
 *              operation; counts 1 .. MAX/8
 *   alltoall   block (i, j) carries a pattern naming i, j and the round;
 *              blocks of 1 B .. MAX/N
 *   alltoallv  rank i sends j a block of (i + j) % 5 * 1000 + 1 bytes
 *   also:      the same on a split communicator (every other rank), so
 *              that a communicator's numbering is honoured
 * Exit status 0 if every element was right (mt_common.h).
 */
#include <unistd.h>

#include "mt_common.h"

static long maxsz = 1l << 20;

static void test_bcast(MPI_Comm comm, const char *what)
{
	int r, n;
	uint8_t *buf = mt_alloc(maxsz);

	MPI_Comm_rank(comm, &r);
	MPI_Comm_size(comm, &n);
	for (long sz = 1; sz <= maxsz; sz *= 8)
		for (int root = 0; root < n; root++) {
			if (r == root)
				mt_fill(buf, sz, root, -1, (unsigned)sz);
			else
				memset(buf, 0, sz);
			MPI_Bcast(buf, (int)sz, MPI_BYTE, root, comm);
			mt_verify(buf, sz, root, -1, (unsigned)sz, what);
		}
	free(buf);
}

/* a user operation: element-wise a*b mod 1000003, commutative */
static void mulmod(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	int64_t *a = in, *b = inout;

	for (int i = 0; i < *len; i++)
		b[i] = a[i] * b[i] % 1000003;
}

static void test_allreduce(MPI_Comm comm, const char *what)
{
	int r, n;
	long maxc = maxsz / 8;
	int64_t *a = mt_alloc(maxc * 8), *b = mt_alloc(maxc * 8);
	double *d = mt_alloc(maxc * 8), *e = mt_alloc(maxc * 8);
	MPI_Op op;

	MPI_Comm_rank(comm, &r);
	MPI_Comm_size(comm, &n);
	MPI_Op_create(mulmod, 1, &op);
	for (long c = 1; c <= maxc; c *= 8) {
		for (long i = 0; i < c; i++) {
			a[i] = r * 1000 + i;
			d[i] = (double)((r * 7 + i) % n) + 0.5;
		}
		MPI_Allreduce(a, b, (int)c, MPI_INT64_T, MPI_SUM, comm);
		MPI_Allreduce(d, e, (int)c, MPI_DOUBLE, MPI_MAX, comm);
		int bad = 0;
		for (long i = 0; i < c && !bad; i++) {
			int64_t want = 1000ll * n * (n - 1) / 2 + (int64_t)n * i;
			if (b[i] != want) {
				mt_fail("%s: sum[%ld] of %ld = %lld, want %lld",
					what, i, c, (long long)b[i],
					(long long)want);
				bad = 1;
			}
			/* the max over the ranks of (q*7 + i) % n, + 0.5 */
			double m = 0;
			for (int q = 0; q < n; q++)
				if ((q * 7 + i) % n + 0.5 > m)
					m = (q * 7 + i) % n + 0.5;
			if (e[i] != m) {
				mt_fail("%s: max[%ld] = %g, want %g", what, i,
					e[i], m);
				bad = 1;
			}
		}
		/* in place, with the user operation */
		for (long i = 0; i < c; i++)
			a[i] = (r + 2) * (i % 100 + 1) % 1000003;
		MPI_Allreduce(MPI_IN_PLACE, a, (int)c, MPI_INT64_T, op, comm);
		for (long i = 0; i < c && !bad; i++) {
			int64_t want = 1;
			for (int q = 0; q < n; q++)
				want = want * ((q + 2) * (i % 100 + 1) %
					       1000003) % 1000003;
			if (a[i] != want) {
				mt_fail("%s: user op[%ld] = %lld, want %lld",
					what, i, (long long)a[i],
					(long long)want);
				bad = 1;
			}
		}
	}
	MPI_Op_free(&op);
	free(a);
	free(b);
	free(d);
	free(e);
}

static void test_alltoall(MPI_Comm comm, const char *what)
{
	int r, n;
	MPI_Comm_rank(comm, &r);
	MPI_Comm_size(comm, &n);
	long maxb = maxsz / n;
	uint8_t *s = mt_alloc(maxb * n), *d = mt_alloc(maxb * n);

	for (long b = 1; b <= maxb; b *= 4) {
		for (int j = 0; j < n; j++)
			mt_fill(s + j * b, b, r, j, (unsigned)b);
		memset(d, 0, b * n);
		MPI_Alltoall(s, (int)b, MPI_BYTE, d, (int)b, MPI_BYTE, comm);
		for (int i = 0; i < n; i++)
			if (mt_verify(d + i * b, b, i, r, (unsigned)b, what))
				break;
	}

	/* alltoallv: irregular blocks */
	int *sc = mt_alloc(n * sizeof(int)), *sd = mt_alloc(n * sizeof(int));
	int *rc = mt_alloc(n * sizeof(int)), *rd = mt_alloc(n * sizeof(int));
	int st = 0, rt = 0;
	for (int j = 0; j < n; j++) {
		sc[j] = (r + j) % 5 * 1000 + 1;
		rc[j] = (j + r) % 5 * 1000 + 1;
		sd[j] = st;
		rd[j] = rt;
		st += sc[j];
		rt += rc[j];
	}
	uint8_t *vs = mt_alloc(st), *vd = mt_alloc(rt);
	for (int j = 0; j < n; j++)
		mt_fill(vs + sd[j], sc[j], r, j, 4242);
	MPI_Alltoallv(vs, sc, sd, MPI_BYTE, vd, rc, rd, MPI_BYTE, comm);
	for (int i = 0; i < n; i++)
		if (mt_verify(vd + rd[i], rc[i], i, r, 4242, "alltoallv"))
			break;
	free(vs);
	free(vd);
	free(sc);
	free(sd);
	free(rc);
	free(rd);
	free(s);
	free(d);
}

int main(int argc, char **argv)
{
	int c;
	MPI_Comm half;

	mt_init(&argc, &argv, "coll");
	while ((c = getopt(argc, argv, "m:")) != -1)
		if (c != 'm' || (maxsz = mt_parse_size(optarg)) < 64) {
			if (mt_rank == 0)
				fprintf(stderr, "usage: coll [-m MAX >= 64]\n");
			MPI_Finalize();
			return 1;
		}
	test_bcast(MPI_COMM_WORLD, "bcast");
	test_allreduce(MPI_COMM_WORLD, "allreduce");
	test_alltoall(MPI_COMM_WORLD, "alltoall");
	MPI_Barrier(MPI_COMM_WORLD);

	MPI_Comm_split(MPI_COMM_WORLD, mt_rank % 2, mt_rank, &half);
	test_bcast(half, "bcast (split)");
	test_allreduce(half, "allreduce (split)");
	test_alltoall(half, "alltoall (split)");
	MPI_Comm_free(&half);
	return mt_finish();
}
