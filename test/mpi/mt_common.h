/*
 * What the MPI correctness programs of test/mpi/ share: failure counting,
 * a data pattern, size lists, and the verdict at the end.
 *
 * Every check that fails prints one line (the first few per rank) and is
 * counted; mt_finish() sums the counts over MPI_COMM_WORLD, rank 0 prints
 * "<prog>: ok" or "<prog>: FAILED (n differences)", and the program exits
 * with status 1 on any difference anywhere. MPI errors themselves abort
 * the job (MPI's default handler), which mpirun also reports as failure.
 */
#ifndef MT_COMMON_H
#define MT_COMMON_H

#include <mpi.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *mt_prog __attribute__((unused)) = "mpi-test";
static int mt_rank, mt_size;
/* counted from any thread (threads.c) */
static atomic_ulong mt_fails;

static inline void mt_init(int *argc, char ***argv, const char *prog)
{
	mt_prog = prog;
	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
}

__attribute__((format(printf, 1, 2)))
static inline void mt_fail(const char *fmt, ...)
{
	va_list ap;

	if (atomic_fetch_add(&mt_fails, 1) >= 10)
		return;
	fprintf(stderr, "%s: rank %d: ", mt_prog, mt_rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* MT_CHECK(cond, fmt, ...): counts and reports a failed condition. */
#define MT_CHECK(cond, ...) \
	do { if (!(cond)) mt_fail(__VA_ARGS__); } while (0)

/* Byte i of a message identified by (src, dst, id): a stale, misrouted or
 * shifted buffer shows. */
static inline uint8_t mt_byte(int src, int dst, unsigned id, size_t i)
{
	return (uint8_t)(i * 131 + (size_t)src * 17 + (size_t)dst * 5 +
			 id * 29 + (i >> 8) + 1);
}

static inline void mt_fill(void *p, size_t n, int src, int dst, unsigned id)
{
	uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = mt_byte(src, dst, id, i);
}

/* 0 if the buffer holds the pattern; else reports the first difference. */
static inline int mt_verify(const void *p, size_t n, int src, int dst, unsigned id,
		     const char *what)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i] != mt_byte(src, dst, id, i)) {
			mt_fail("%s: %zu bytes from %d to %d (id %u): byte %zu "
				"is %u, want %u", what, n, src, dst, id, i,
				b[i], mt_byte(src, dst, id, i));
			return 1;
		}
	return 0;
}

static inline void *mt_alloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "%s: rank %d: out of memory (%zu bytes)\n",
			mt_prog, mt_rank, n);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}

/* A size with an optional k or m suffix (powers of 1024); -1 if bad. */
static inline long mt_parse_size(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (end == s || v < 0)
		return -1;
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	return *end ? -1 : v;
}

/* Parses "a,b,c" into sizes[] (at most max); returns the count, -1 if bad. */
static inline int mt_parse_sizes(const char *list, long *sizes, int max)
{
	char buf[1024], *save = NULL, *tok;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", list);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == max || (sizes[n] = mt_parse_size(tok)) < 0)
			return -1;
		n++;
	}
	return n;
}

/* The sum of every rank's failures; rank 0 prints the verdict. Returns
 * the exit status (0 or 1) after MPI_Finalize. */
static inline int mt_finish(void)
{
	unsigned long all = 0, mine = atomic_load(&mt_fails);

	MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG, MPI_SUM,
		      MPI_COMM_WORLD);
	if (mt_rank == 0) {
		if (all)
			printf("%s: FAILED (%lu differences)\n", mt_prog, all);
		else
			printf("%s: ok (%d ranks)\n", mt_prog, mt_size);
		fflush(stdout);
	}
	MPI_Finalize();
	return all ? 1 : 0;
}

#endif
