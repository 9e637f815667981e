/*
 * rma: one-sided communication, checked.
 *
 *   mpirun -np N build/test/mpi/rma [-m MAX]
 *
 * Through MPI_Win_allocate (the window the implementation places) and
 * MPI_Win_create (the user's own memory, which a one-sided component
 * must register):
 *   fence      every rank puts a block into its right neighbour's window
 *              and gets one from its left, sizes 1 B .. MAX (default 1m),
 *              between fences
 *   lock       passive target: MPI_Win_lock, MPI_Put, MPI_Win_flush, then
 *              MPI_Get of what was put, exclusive lock
 *   accumulate MPI_Accumulate (sum) of every rank into rank 0's counters
 *   fetch_op   MPI_Fetch_and_op (+1) by every rank, many times, on one
 *              counter: the final value is the number of increments and
 *              the values fetched are each of 0 .. total-1 exactly once
 *   cas        MPI_Compare_and_swap: exactly one rank wins a cell
 *   pscw       post / start / complete / wait with a neighbour group
 * Which one-sided component runs is Open MPI's choice (osc rdma over a
 * BTL that does put/get/atomics; osc sm or pt2pt otherwise).
 */
#include <unistd.h>

#include "mt_common.h"

#define FOPS 200 /* fetch-and-op increments per rank */

static long maxsz = 1l << 20;

static void test_fence(MPI_Win win, uint8_t *base, const char *what)
{
	int right = (mt_rank + 1) % mt_size;
	int left = (mt_rank + mt_size - 1) % mt_size;
	uint8_t *src = mt_alloc(maxsz), *got = mt_alloc(maxsz);

	/* window layout: [0, maxsz) is written by the left neighbour's put;
	 * [maxsz, 2 maxsz) is the owner's own data that others get */
	for (long sz = 1; sz <= maxsz; sz *= 16) {
		unsigned id = (unsigned)sz;
		MPI_Win_fence(0, win);
		mt_fill(base + maxsz, sz, mt_rank, -1, id);
		memset(base, 0, sz);
		MPI_Win_fence(0, win);
		mt_fill(src, sz, mt_rank, right, id);
		MPI_Put(src, (int)sz, MPI_BYTE, right, 0, (int)sz, MPI_BYTE,
			win);
		MPI_Get(got, (int)sz, MPI_BYTE, left, maxsz, (int)sz, MPI_BYTE,
			win);
		MPI_Win_fence(0, win);
		mt_verify(base, sz, left, mt_rank, id, what);
		mt_verify(got, sz, left, -1, id, what);
	}
	MPI_Win_fence(0, win);
	free(src);
	free(got);
}

static void test_lock(MPI_Win win, const char *what)
{
	int right = (mt_rank + 1) % mt_size;
	uint8_t *src = mt_alloc(maxsz), *got = mt_alloc(maxsz);

	/* each rank owns the first half of its right neighbour's window for
	 * this test: nobody else writes there */
	for (long sz = 1; sz <= maxsz; sz *= 16) {
		unsigned id = (unsigned)sz + 7;
		mt_fill(src, sz, mt_rank, right, id);
		memset(got, 0, sz);
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win);
		MPI_Put(src, (int)sz, MPI_BYTE, right, 0, (int)sz, MPI_BYTE,
			win);
		MPI_Win_flush(right, win);
		MPI_Get(got, (int)sz, MPI_BYTE, right, 0, (int)sz, MPI_BYTE,
			win);
		MPI_Win_unlock(right, win);
		mt_verify(got, sz, mt_rank, right, id, what);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	free(src);
	free(got);
}

/* counters: int64 cells at offset 0 of rank 0's window (first 64) and of
 * the last rank's (cell 0, for cas) */
static void test_atomics(MPI_Win win, int64_t *cells, const char *what)
{
	enum { NC = 64 };
	int64_t add[NC], one = 1, old, *fetched = mt_alloc(FOPS * 8);
	int last = mt_size - 1;

	MPI_Win_fence(0, win);
	memset(cells, 0, NC * sizeof(int64_t));
	MPI_Win_fence(0, win);

	/* accumulate: cell k of rank 0 gets the sum of (r + k) over r */
	for (int k = 0; k < NC; k++)
		add[k] = mt_rank + k;
	MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
	MPI_Accumulate(add, NC, MPI_INT64_T, 0, 0, NC, MPI_INT64_T, MPI_SUM,
		       win);
	MPI_Win_unlock(0, win);
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == 0) {
		MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
		for (int k = 0; k < NC; k++) {
			int64_t want = (int64_t)mt_size * (mt_size - 1) / 2 +
				       (int64_t)mt_size * k;
			if (cells[k] != want) {
				mt_fail("%s: accumulate cell %d = %lld, want "
					"%lld", what, k, (long long)cells[k],
					(long long)want);
				break;
			}
		}
		MPI_Win_unlock(0, win);
	}
	MPI_Barrier(MPI_COMM_WORLD);

	/* fetch-and-op on rank 0's cell 0 (reset first), all at once */
	if (mt_rank == 0) {
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
		cells[0] = 0;
		MPI_Win_unlock(0, win);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_lock_all(0, win);
	for (int i = 0; i < FOPS; i++) {
		MPI_Fetch_and_op(&one, &fetched[i], MPI_INT64_T, 0, 0, MPI_SUM,
				 win);
		MPI_Win_flush(0, win);
	}
	MPI_Win_unlock_all(win);
	MPI_Barrier(MPI_COMM_WORLD);
	int64_t *all = mt_rank == 0 ? mt_alloc((size_t)FOPS * mt_size * 8)
				    : NULL;
	MPI_Gather(fetched, FOPS, MPI_INT64_T, all, FOPS, MPI_INT64_T, 0,
		   MPI_COMM_WORLD);
	if (mt_rank == 0) {
		long total = (long)FOPS * mt_size;
		uint8_t *seen = calloc(total, 1);
		MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
		MT_CHECK(cells[0] == total, "%s: fetch_and_op counter %lld, "
			 "want %ld", what, (long long)cells[0], total);
		MPI_Win_unlock(0, win);
		for (long i = 0; i < total; i++) {
			if (all[i] < 0 || all[i] >= total || seen[all[i]]++) {
				mt_fail("%s: fetch_and_op fetched %lld twice "
					"or out of range", what,
					(long long)all[i]);
				break;
			}
		}
		free(seen);
		free(all);
	}

	/* compare-and-swap: -1 -> rank on the last rank's cell 0 */
	if (mt_rank == last) {
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, last, 0, win);
		cells[0] = -1;
		MPI_Win_unlock(last, win);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	int64_t cmp = -1, mine = mt_rank;
	MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win);
	MPI_Compare_and_swap(&mine, &cmp, &old, MPI_INT64_T, last, 0, win);
	MPI_Win_unlock(last, win);
	int won = old == -1, winners = 0;
	MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MT_CHECK(winners == 1, "%s: %d ranks won the compare-and-swap", what,
		 winners);
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == last) {
		MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win);
		MT_CHECK(cells[0] >= 0 && cells[0] < mt_size, "%s: cas cell "
			 "holds %lld", what, (long long)cells[0]);
		MPI_Win_unlock(last, win);
	}
	free(fetched);
}

/* post/start/complete/wait: each rank exposes its window to its left
 * neighbour and accesses its right one */
static void test_pscw(MPI_Win win, uint8_t *base, const char *what)
{
	int right = (mt_rank + 1) % mt_size;
	int left = (mt_rank + mt_size - 1) % mt_size;
	MPI_Group world, gl, gr;
	int64_t v = 1000 + mt_rank;

	MPI_Win_fence(0, win);
	memset(base, 0, 8);
	MPI_Win_fence(0, win);
	MPI_Comm_group(MPI_COMM_WORLD, &world);
	MPI_Group_incl(world, 1, &left, &gl);
	MPI_Group_incl(world, 1, &right, &gr);
	MPI_Win_post(gl, 0, win);
	MPI_Win_start(gr, 0, win);
	MPI_Put(&v, 1, MPI_INT64_T, right, 0, 1, MPI_INT64_T, win);
	MPI_Win_complete(win);
	MPI_Win_wait(win);
	int64_t got;
	memcpy(&got, base, 8);
	MT_CHECK(got == 1000 + left, "%s: pscw put %lld, want %d", what,
		 (long long)got, 1000 + left);
	MPI_Group_free(&gl);
	MPI_Group_free(&gr);
	MPI_Group_free(&world);
}

static void run_all(MPI_Win win, uint8_t *base, const char *kind)
{
	char what[64];

	snprintf(what, sizeof(what), "fence (%s)", kind);
	test_fence(win, base, what);
	snprintf(what, sizeof(what), "lock (%s)", kind);
	test_lock(win, what);
	snprintf(what, sizeof(what), "atomics (%s)", kind);
	test_atomics(win, (int64_t *)(void *)base, what);
	snprintf(what, sizeof(what), "pscw (%s)", kind);
	test_pscw(win, base, what);
}

int main(int argc, char **argv)
{
	int c;
	MPI_Win win;
	uint8_t *base;

	mt_init(&argc, &argv, "rma");
	while ((c = getopt(argc, argv, "m:")) != -1)
		if (c != 'm' || (maxsz = mt_parse_size(optarg)) < 1024) {
			if (mt_rank == 0)
				fprintf(stderr, "usage: rma [-m MAX >= 1k]\n");
			MPI_Finalize();
			return 1;
		}
	if (mt_size < 2) {
		fprintf(stderr, "rma: needs at least 2 ranks\n");
		MPI_Finalize();
		return 1;
	}

	MPI_Win_allocate(2 * maxsz, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base,
			 &win);
	run_all(win, base, "MPI_Win_allocate");
	MPI_Win_free(&win);

	base = mt_alloc(2 * maxsz);
	MPI_Win_create(base, 2 * maxsz, 1, MPI_INFO_NULL, MPI_COMM_WORLD,
		       &win);
	run_all(win, base, "MPI_Win_create");
	MPI_Win_free(&win);
	free(base);
	return mt_finish();
}
