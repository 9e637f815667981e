/*
 * threads: MPI_THREAD_MULTIPLE with concurrent senders, checked.
 *
 *   mpirun -np N build/test/mpi/threads [-t THREADS] [-n MSGS]
 *
 * Every rank runs THREADS threads (default 4) at once. Thread t of every
 * rank sends MSGS messages (default 50) to every other rank with tag t,
 * sizes cycling from 0 B to 256 KiB (eager and rendezvous mixed), all
 * non-blocking, while it receives the MSGS x (N-1) messages of tag t
 * with MPI_ANY_SOURCE: each message's content, size and per-sender order
 * (MPI's non-overtaking rule holds per sender, tag and communicator)
 * are checked. Then each thread runs MPI_Allreduce on a communicator of
 * its own, concurrently with the others.
 * Exit status 1 also if the library does not provide MPI_THREAD_MULTIPLE.
 */
#include <pthread.h>
#include <unistd.h>

#include "mt_common.h"

#define MAXLEN (256 << 10)

static int nthreads = 4, nmsgs = 50;
static MPI_Comm *tcomm;

static int len_of(int src, int t, int seq)
{
	static const int lens[] = { 0, 1, 8, 100, 1000, 4095, 4097, 12345,
				    65536, 70000, MAXLEN };
	return lens[(src + t + seq) % (sizeof(lens) / sizeof(lens[0]))];
}

/* message identity: (sender, this rank, t * 100000 + seq) */
static unsigned id_of(int t, int seq) { return (unsigned)(t * 100000 + seq); }

static void *worker(void *arg)
{
	int t = (int)(intptr_t)arg, peers = mt_size - 1;
	int nsend = nmsgs * peers, k = 0;
	MPI_Request *req = mt_alloc((size_t)nsend * sizeof(*req));
	uint8_t **sbuf = mt_alloc((size_t)nsend * sizeof(*sbuf));
	uint8_t *rbuf = mt_alloc(MAXLEN);
	int *next = calloc(mt_size, sizeof(int));

	/* sends interleaved across peers, so that the peers' receivers see
	 * several senders at once */
	for (int s = 0; s < nmsgs; s++)
		for (int p = 0; p < mt_size; p++) {
			if (p == mt_rank)
				continue;
			int len = len_of(mt_rank, t, s);
			sbuf[k] = mt_alloc(len);
			mt_fill(sbuf[k], len, mt_rank, p, id_of(t, s));
			MPI_Isend(sbuf[k], len, MPI_BYTE, p, t, MPI_COMM_WORLD,
				  &req[k]);
			k++;
		}
	for (int i = 0; i < nsend; i++) {
		MPI_Status st;
		int cnt, src, seq;
		MPI_Recv(rbuf, MAXLEN, MPI_BYTE, MPI_ANY_SOURCE, t,
			 MPI_COMM_WORLD, &st);
		src = st.MPI_SOURCE;
		if (src < 0 || src >= mt_size || src == mt_rank) {
			mt_fail("thread %d: message from %d", t, src);
			continue;
		}
		seq = next[src]++;
		MPI_Get_count(&st, MPI_BYTE, &cnt);
		MT_CHECK(cnt == len_of(src, t, seq), "thread %d: message %d "
			 "from %d has %d bytes, want %d (overtaken?)", t, seq,
			 src, cnt, len_of(src, t, seq));
		mt_verify(rbuf, cnt, src, mt_rank, id_of(t, seq), "threads");
	}
	MPI_Waitall(nsend, req, MPI_STATUSES_IGNORE);
	for (int i = 0; i < nsend; i++)
		free(sbuf[i]);

	/* a collective per thread, all at once, each on its own comm */
	long v = mt_rank + t, sum = 0;
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, tcomm[t]);
	MT_CHECK(sum == (long)mt_size * (mt_size - 1) / 2 + (long)mt_size * t,
		 "thread %d: allreduce %ld", t, sum);
	free(req);
	free(sbuf);
	free(rbuf);
	free(next);
	return NULL;
}

int main(int argc, char **argv)
{
	int provided, c;
	pthread_t *th;

	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	mt_prog = "threads";
	MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
	while ((c = getopt(argc, argv, "t:n:")) != -1) {
		if (c == 't' && (nthreads = atoi(optarg)) > 0)
			continue;
		if (c == 'n' && (nmsgs = atoi(optarg)) > 0)
			continue;
		if (mt_rank == 0)
			fprintf(stderr, "usage: threads [-t THREADS] [-n MSGS]\n");
		MPI_Finalize();
		return 1;
	}
	if (provided < MPI_THREAD_MULTIPLE || mt_size < 2) {
		mt_fail("MPI_THREAD_MULTIPLE %s, %d ranks (at least 2 needed)",
			provided < MPI_THREAD_MULTIPLE ? "not provided" : "ok",
			mt_size);
		return mt_finish();
	}
	/* the threads' communicators are made here, in the same order on
	 * every rank: creating them concurrently would be erroneous MPI */
	tcomm = mt_alloc(nthreads * sizeof(*tcomm));
	th = mt_alloc(nthreads * sizeof(*th));
	for (int t = 0; t < nthreads; t++)
		MPI_Comm_dup(MPI_COMM_WORLD, &tcomm[t]);
	for (int t = 0; t < nthreads; t++)
		if (pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t)) {
			mt_fail("pthread_create");
			nthreads = t;
			break;
		}
	for (int t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < nthreads; t++)
		MPI_Comm_free(&tcomm[t]);
	free(tcomm);
	free(th);
	if (mt_rank == 0)
		printf("threads: %d threads per rank, %d messages each to "
		       "every peer\n", nthreads, nmsgs);
	return mt_finish();
}
