/*
 * p2p_sizes: messages of every protocol size, checked byte for byte.
 *
 *   mpirun -np N build/test/mpi/p2p_sizes [-m MAX] [-s LIST]
 *
 * Sizes: 0..4, then 2^k - 1, 2^k and 2^k + 1 for every power of two up
 * to MAX (default 8m), plus any given with -s (comma list, k/m suffixes:
 * the eager and rendezvous limits of the transport under test, and one
 * byte either side). Rank r pairs with r + N/2 (mod N): with ranks placed
 * host by host, pairs cross hosts. For each size every pair does
 *   - a ping-pong, receive posted before the message arrives (expected);
 *   - a message that arrives before its receive is posted (unexpected:
 *     the sender's Isend, then a barrier, then the Irecv);
 *   - both directions at once (Irecv + Isend on both sides).
 * With an odd N the last rank only takes part in the barriers.
 */
#include <unistd.h>

#include "mt_common.h"

#define MAX_SIZES 256

static int nsizes;
static long sizes[MAX_SIZES];

static void add_size(long s)
{
	for (int i = 0; i < nsizes; i++)
		if (sizes[i] == s)
			return;
	if (nsizes < MAX_SIZES)
		sizes[nsizes++] = s;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return (x > y) - (x < y);
}

static int parse(int argc, char **argv)
{
	long max = 8l << 20, extra[64];
	int c, nextra = 0;

	while ((c = getopt(argc, argv, "m:s:")) != -1) {
		switch (c) {
		case 'm':
			if ((max = mt_parse_size(optarg)) < 0)
				return -1;
			break;
		case 's':
			if ((nextra = mt_parse_sizes(optarg, extra, 64)) < 0)
				return -1;
			break;
		default:
			return -1;
		}
	}
	for (long s = 0; s <= 4 && s <= max; s++)
		add_size(s);
	for (long p = 8; p <= max; p *= 2) {
		add_size(p - 1);
		add_size(p);
		if (p + 1 <= max)
			add_size(p + 1);
	}
	for (int i = 0; i < nextra; i++)
		add_size(extra[i]);
	qsort(sizes, nsizes, sizeof(long), cmp_long);
	return 0;
}

static void one_size(long n, int peer, uint8_t *sbuf, uint8_t *rbuf,
		     unsigned id)
{
	bool first = mt_rank < peer;
	MPI_Request req[2];
	MPI_Status st;
	int cnt;

	/* expected: the receive is posted, then the ping arrives */
	if (peer >= 0) {
		mt_fill(sbuf, n, mt_rank, peer, id);
		if (first) {
			MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
				 &st);
		} else {
			MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
				 &st);
			MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
		}
		MPI_Get_count(&st, MPI_BYTE, &cnt);
		MT_CHECK(cnt == n, "ping-pong of %ld: count %d", n, cnt);
		mt_verify(rbuf, n, peer, mt_rank, id, "ping-pong");
	}

	/* unexpected: both sides' messages are sent (eager ones arrive, large
	 * ones announce themselves) before any receive is posted */
	id++;
	if (peer >= 0) {
		mt_fill(sbuf, n, mt_rank, peer, id);
		MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD,
			  &req[0]);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (peer >= 0) {
		usleep(1000); /* let eager data land in the unexpected queue */
		memset(rbuf, 0, n);
		MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE);
		MPI_Wait(&req[0], MPI_STATUS_IGNORE);
		mt_verify(rbuf, n, peer, mt_rank, id, "unexpected");
	}

	/* both ways at once */
	id++;
	if (peer >= 0) {
		mt_fill(sbuf, n, mt_rank, peer, id);
		memset(rbuf, 0, n);
		MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD,
			  &req[0]);
		MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD,
			  &req[1]);
		MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
		mt_verify(rbuf, n, peer, mt_rank, id, "both ways");
	}
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_sizes");
	if (parse(argc, argv) || mt_size < 2) {
		if (mt_rank == 0)
			fprintf(stderr, "usage: mpirun -np N (N >= 2) p2p_sizes "
				"[-m MAX] [-s SIZE,SIZE...]\n");
		MPI_Finalize();
		return 1;
	}
	int half = mt_size / 2, peer;
	if (mt_size % 2 && mt_rank == mt_size - 1)
		peer = -1;
	else
		peer = mt_rank < half ? mt_rank + half : mt_rank - half;
	long max = sizes[nsizes - 1];
	uint8_t *sbuf = mt_alloc(max), *rbuf = mt_alloc(max);

	for (int i = 0; i < nsizes; i++)
		one_size(sizes[i], peer, sbuf, rbuf, (unsigned)i * 3);
	if (mt_rank == 0)
		printf("p2p_sizes: %d sizes from %ld to %ld bytes\n", nsizes,
		       sizes[0], max);
	free(sbuf);
	free(rbuf);
	return mt_finish();
}
