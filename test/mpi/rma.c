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
 *   ops        MPI_Fetch_and_op with every operation a network may do
 *              natively or by a compare-and-swap loop (replace: the
 *              values fetched and the last one form one chain; bor, band,
 *              bxor, min, max: the final value; no_op), on 64-bit and on
 *              32-bit integers (which a 64-bit network atomic must reach
 *              through the word around them); MPI_Get_accumulate
 *   cas loop   every rank, the owner included, increments one counter
 *              by a loop of MPI_Compare_and_swap: each value is won by
 *              one rank only, and the counter ends at the number of wins
 *              (the owner reaches its own memory by another path than
 *              the others: the two must be atomic with each other)
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

/* The value of word w in the ops test after every rank's operation:
 * word k of the last rank's window. */
static int64_t ops_want(int k, int n)
{
	int64_t v = k == 1 ? -1 : 0;

	for (int r = 0; r < n; r++) {
		switch (k) {
		case 0: v |= (int64_t)1 << (r % 63); break;
		case 1: v &= ~((int64_t)1 << (r % 63)); break;
		case 2: v ^= (int64_t)(r + 1) * 0x10001; break;
		case 3: v = r == 0 || 1000 - r < v ? 1000 - r : v; break;
		case 4: v = r == 0 || r * r - 7 > v ? r * r - 7 : v; break;
		default: break;
		}
	}
	return v;
}

/* Fetch-and-op with each operation on words of the last rank's window
 * (reset by it first; the windows' displacement unit is 1 byte): 0 bor,
 * 1 band, 2 bxor, 3 min, 4 max (64-bit), 5 replace chain, then at byte 48
 * and 52 32-bit sum and bor; then get_accumulate and no_op. */
static void test_ops(MPI_Win win, int64_t *cells, const char *what)
{
	int last = mt_size - 1;
	MPI_Op ops[5] = { MPI_BOR, MPI_BAND, MPI_BXOR, MPI_MIN, MPI_MAX };
	int64_t v, old;

	MPI_Win_fence(0, win);
	if (mt_rank == last) {
		memset(cells, 0, 8 * sizeof(int64_t));
		cells[1] = -1;
		cells[3] = INT64_MAX;
		cells[4] = INT64_MIN;
	}
	MPI_Win_fence(0, win);
	MPI_Win_lock_all(0, win);
	for (int k = 0; k < 5; k++) {
		int r = mt_rank;
		v = k == 0 || k == 1 ? (int64_t)1 << (r % 63) :
		    k == 2 ? (int64_t)(r + 1) * 0x10001 :
		    k == 3 ? 1000 - r : (int64_t)r * r - 7;
		if (k == 1)
			v = ~v;
		MPI_Fetch_and_op(&v, &old, MPI_INT64_T, last, 8 * k, ops[k],
				 win);
		MPI_Win_flush(last, win);
	}
	/* replace: a chain 0 -> r1+1 -> r2+1 ...: every fetched value and
	 * the final one, each once */
	v = mt_rank + 1;
	int64_t chain;
	MPI_Fetch_and_op(&v, &chain, MPI_INT64_T, last, 40, MPI_REPLACE,
			 win);
	MPI_Win_flush(last, win);
	int32_t one32 = 1, bit32 = 1 << (mt_rank % 31), o32;
	for (int i = 0; i < 10; i++) {
		MPI_Fetch_and_op(&one32, &o32, MPI_INT32_T, last, 48,
				 MPI_SUM, win);
		MPI_Win_flush(last, win);
	}
	MPI_Fetch_and_op(&bit32, &o32, MPI_INT32_T, last, 52, MPI_BOR, win);
	MPI_Win_flush(last, win);
	MPI_Win_unlock_all(win);
	MPI_Barrier(MPI_COMM_WORLD);

	int64_t *chains = mt_rank == 0 ? mt_alloc(8 * (size_t)mt_size) : NULL;
	MPI_Gather(&chain, 1, MPI_INT64_T, chains, 1, MPI_INT64_T, 0,
		   MPI_COMM_WORLD);
	/* every rank reads the words back through MPI (get_accumulate with
	 * no_op, which must not change them) */
	int64_t got[6];
	int32_t got32[2];
	MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win);
	MPI_Get_accumulate(NULL, 0, MPI_INT64_T, got, 6, MPI_INT64_T, last,
			   0, 6, MPI_INT64_T, MPI_NO_OP, win);
	MPI_Get_accumulate(NULL, 0, MPI_INT32_T, got32, 2, MPI_INT32_T, last,
			   48, 2, MPI_INT32_T, MPI_NO_OP, win);
	MPI_Win_unlock(last, win);
	for (int k = 0; k < 5; k++)
		MT_CHECK(got[k] == ops_want(k, mt_size), "%s: fetch_and_op "
			 "word %d = %#llx, want %#llx", what, k,
			 (long long)got[k], (long long)ops_want(k, mt_size));
	MT_CHECK(got[5] >= 1 && got[5] <= mt_size, "%s: replace left %lld",
		 what, (long long)got[5]);
	int32_t bits = 0;
	for (int r = 0; r < mt_size; r++)
		bits |= 1 << (r % 31);
	MT_CHECK(got32[0] == 10 * mt_size && got32[1] == bits,
		 "%s: 32-bit fetch_and_op: sum %d (want %d), bor %#x (want "
		 "%#x)", what, got32[0], 10 * mt_size, got32[1], bits);
	if (mt_rank == 0) {
		uint8_t *seen = calloc(mt_size + 1, 1);
		for (int r = 0; r < mt_size; r++)
			if (chains[r] < 0 || chains[r] > mt_size ||
			    seen[chains[r]]++)
				mt_fail("%s: replace fetched %lld twice or out "
					"of range", what, (long long)chains[r]);
		if (got[5] >= 1 && got[5] <= mt_size && seen[got[5]])
			mt_fail("%s: replace's last value %lld also fetched",
				what, (long long)got[5]);
		free(seen);
		free(chains);
	}
	MPI_Barrier(MPI_COMM_WORLD);

	/* get_accumulate with sum: rank r adds r+1 to word 0 of rank 0's
	 * window and fetches; the sums seen differ and the last is whole */
	MPI_Win_fence(0, win);
	if (mt_rank == 0)
		cells[0] = 0;
	MPI_Win_fence(0, win);
	v = mt_rank + 1;
	MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
	MPI_Get_accumulate(&v, 1, MPI_INT64_T, &old, 1, MPI_INT64_T, 0, 0, 1,
			   MPI_INT64_T, MPI_SUM, win);
	MPI_Win_unlock(0, win);
	MPI_Win_fence(0, win);
	if (mt_rank == 0)
		MT_CHECK(cells[0] == (int64_t)mt_size * (mt_size + 1) / 2,
			 "%s: get_accumulate sum %lld", what,
			 (long long)cells[0]);
	MT_CHECK(old >= 0 && old <= (int64_t)mt_size * (mt_size + 1) / 2 - v,
		 "%s: get_accumulate fetched %lld", what, (long long)old);
	MPI_Win_fence(0, win);
}

/* A counter on rank 0 incremented by compare-and-swap loops from every
 * rank, rank 0 included: the values won are each won once. */
static void test_cas_loop(MPI_Win win, int64_t *cells, const char *what)
{
	enum { WINS = 40 };
	int64_t *won = mt_alloc(WINS * 8), cur, next, old, zero = 0;

	MPI_Win_fence(0, win);
	if (mt_rank == 0)
		cells[0] = 0;
	MPI_Win_fence(0, win);
	MPI_Win_lock_all(0, win);
	for (int i = 0; i < WINS; i++) {
		MPI_Fetch_and_op(&zero, &cur, MPI_INT64_T, 0, 0, MPI_NO_OP, win);
		MPI_Win_flush(0, win);
		for (;;) {
			next = cur + 1;
			MPI_Compare_and_swap(&next, &cur, &old, MPI_INT64_T, 0, 0,
					     win);
			MPI_Win_flush(0, win);
			if (old == cur)
				break;
			cur = old;
		}
		won[i] = cur;
	}
	MPI_Win_unlock_all(win);
	MPI_Barrier(MPI_COMM_WORLD);
	int64_t *all = mt_rank == 0 ? mt_alloc((size_t)WINS * mt_size * 8)
				    : NULL;
	MPI_Gather(won, WINS, MPI_INT64_T, all, WINS, MPI_INT64_T, 0,
		   MPI_COMM_WORLD);
	if (mt_rank == 0) {
		long total = (long)WINS * mt_size;
		uint8_t *seen = calloc(total, 1);
		MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
		MT_CHECK(cells[0] == total, "%s: cas loop counter %lld, want "
			 "%ld", what, (long long)cells[0], total);
		MPI_Win_unlock(0, win);
		for (long i = 0; i < total; i++)
			if (all[i] < 0 || all[i] >= total || seen[all[i]]++) {
				mt_fail("%s: cas loop value %lld won twice or "
					"out of range", what, (long long)all[i]);
				break;
			}
		free(seen);
		free(all);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	free(won);
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
	snprintf(what, sizeof(what), "ops (%s)", kind);
	test_ops(win, (int64_t *)(void *)base, what);
	snprintf(what, sizeof(what), "cas loop (%s)", kind);
	test_cas_loop(win, (int64_t *)(void *)base, what);
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
