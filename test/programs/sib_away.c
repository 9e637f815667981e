/*
 * sib_away: connections complete while a process is away from libsib
 * (blocked elsewhere, as Open MPI blocks in PMIx inside MPI_Comm_accept).
 * Two ranks under mpirun, on two hosts (a connection between hosts is a
 * handshake; inside a host there is none):
 *
 *   A. rank 0 sends to rank 1 (its first message to that host, so the
 *      send waits for a handshake), then stays away from libsib for
 *      AWAY_MS. Rank 1 must have the message within DEADLINE_MS: rank 0's
 *      connection thread took the answer and posted the message.
 *   B. rank 0 stays away for AWAY_MS; rank 1 sends to it (its first
 *      message to rank 0's host). Rank 1's send must complete within
 *      DEADLINE_MS: rank 0's connection thread answered the handshake.
 *      Then rank 0 receives the message.
 *
 * With SIB_ASYNC=0 (no connection thread) both take AWAY_MS at least:
 * the ranks say so and exit 1.
 *
 *   mpirun -np 2 --host h1,h2 sib_away
 * Prints "sib_away rank R: ok (A N ms, B N ms)" per rank.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport/sib.h"

#define AWAY_MS 2500
#define DEADLINE_MS 1500

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Progresses until r completes or ms pass: the time taken, or -1. */
static long wait_for(sib_request_t *r, long ms, sib_status_t *st)
{
	uint64_t t0 = now_ms();

	while ((*st = sib_request_test(r, NULL)) == SIB_INPROGRESS)
		if ((long)(now_ms() - t0) > ms)
			return -1;
	return (long)(now_ms() - t0);
}

/* Rank 0 sends and goes away; rank 1 receives. */
static long phase_a(struct sib_job *job)
{
	char buf[16] = "";
	sib_request_t *r = NULL;
	sib_status_t st;
	long t = 0;

	if (job->rank == 0) {
		if (sib_tag_send_nb(job->eps[1], "away-a", 7, 1, 0, NULL, &r))
			return -2;
		usleep(AWAY_MS * 1000);
		t = wait_for(r, 10000, &st);
	} else {
		if (sib_tag_recv_nb(job->worker, buf, sizeof(buf), 0, 1, ~0ull, 0,
				    NULL, &r))
			return -2;
		t = wait_for(r, DEADLINE_MS, &st);
		if (t >= 0 && strcmp(buf, "away-a"))
			t = -3;
	}
	if (t == -1) /* let it finish, to leave cleanly */
		wait_for(r, 10000, &st);
	sib_request_free(r);
	return t >= 0 && st != SIB_OK ? -4 : t;
}

/* Rank 0 goes away; rank 1's first send to its host must complete. */
static long phase_b(struct sib_job *job)
{
	char buf[16] = "";
	sib_request_t *r = NULL;
	sib_status_t st;
	long t;

	if (job->rank == 0) {
		usleep(AWAY_MS * 1000);
		if (sib_tag_recv_nb(job->worker, buf, sizeof(buf), 1, 2, ~0ull, 0,
				    NULL, &r))
			return -2;
		t = wait_for(r, 10000, &st);
		if (t >= 0 && strcmp(buf, "away-b"))
			t = -3;
	} else {
		if (sib_tag_send_nb(job->eps[0], "away-b", 7, 2, 0, NULL, &r))
			return -2;
		t = wait_for(r, DEADLINE_MS, &st);
		if (t == -1)
			wait_for(r, 10000, &st);
	}
	sib_request_free(r);
	return t >= 0 && st != SIB_OK ? -4 : t;
}

int main(void)
{
	struct sib_job job;
	sib_status_t st = sib_init_pmix(NULL, &job);
	long a, b;
	int bad;

	if (st) {
		fprintf(stderr, "sib_init_pmix: %s\n", sib_status_string(st));
		return 1;
	}
	if (job.size != 2) {
		fprintf(stderr, "sib_away: 2 ranks, not %u\n", job.size);
		return 1;
	}
	sib_job_fence(&job);
	a = phase_a(&job);
	sib_job_fence(&job);
	b = phase_b(&job);
	sib_job_fence(&job);
	/* the deadlines are rank 1's: rank 0's figures include its absence */
	bad = a < 0 || b < 0;
	if (bad)
		fprintf(stderr, "sib_away rank %u: FAILED: phase A %ld, phase B %ld "
			"(-1: not within %d ms while the peer was away %d ms; "
			"-2: not started; -3: wrong bytes; -4: failed)\n",
			job.rank, a, b, DEADLINE_MS, AWAY_MS);
	else
		printf("sib_away rank %u: ok (A %ld ms, B %ld ms)\n", job.rank, a, b);
	sib_fini_pmix(&job);
	return bad;
}
