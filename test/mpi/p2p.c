/*
 * p2p: MPI point-to-point matching, checked.
 *
 *   mpirun -np N build/test/mpi/p2p        (N >= 2)
 *
 *   tags      every rank sends every other rank a burst of messages with
 *             distinct tags; the receiver posts its receives in the
 *             reverse tag order: each must match by tag, not by arrival
 *   wildcard  every rank sends rank 0 a numbered stream; rank 0 receives
 *             with MPI_ANY_SOURCE / MPI_ANY_TAG and checks the status
 *             (source, tag, count) and that each source's messages arrive
 *             in the order sent (MPI's non-overtaking rule)
 *   mixed     specific and wildcard receives posted together
 *   comms     the same (source, tag) on MPI_COMM_WORLD, a duplicate and a
 *             split communicator must never match each other
 *   probe     MPI_Probe / MPI_Iprobe of unknown sizes, then the receive
 *   modes     MPI_Ssend, MPI_Sendrecv_replace, persistent requests
 * Exit status 0 if every check passed (mt_common.h).
 */
#include "mt_common.h"

#define BURST   16
#define STREAM  64
#define MAXLEN  2048

/* Message length of (src, seq): varies, crossing no protocol boundary of
 * interest here (p2p_sizes does that). */
static int len_of(int src, int seq) { return (src * 37 + seq * 101) % MAXLEN; }

static void test_tags(void)
{
	int n = mt_size;
	uint8_t *sbuf = mt_alloc((size_t)n * BURST * MAXLEN);
	uint8_t *rbuf = mt_alloc((size_t)n * BURST * MAXLEN);
	MPI_Request *req = mt_alloc(2 * (size_t)n * BURST * sizeof(*req));
	int nreq = 0;

	/* receives first, tags in reverse order; then sends in order */
	for (int p = 0; p < n; p++)
		for (int t = BURST - 1; t >= 0 && p != mt_rank; t--)
			MPI_Irecv(rbuf + ((size_t)p * BURST + t) * MAXLEN,
				  MAXLEN, MPI_BYTE, p, 100 + t, MPI_COMM_WORLD,
				  &req[nreq++]);
	for (int p = 0; p < n; p++)
		for (int t = 0; t < BURST && p != mt_rank; t++) {
			uint8_t *b = sbuf + ((size_t)p * BURST + t) * MAXLEN;
			mt_fill(b, len_of(mt_rank, t), mt_rank, p, t);
			MPI_Isend(b, len_of(mt_rank, t), MPI_BYTE, p, 100 + t,
				  MPI_COMM_WORLD, &req[nreq++]);
		}
	MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
	for (int p = 0; p < n; p++)
		for (int t = 0; t < BURST && p != mt_rank; t++)
			mt_verify(rbuf + ((size_t)p * BURST + t) * MAXLEN,
				  len_of(p, t), p, mt_rank, t, "tags");
	free(sbuf);
	free(rbuf);
	free(req);
}

static void test_wildcard(void)
{
	uint8_t *buf = mt_alloc(MAXLEN);

	if (mt_rank != 0) {
		for (int s = 0; s < STREAM; s++) {
			mt_fill(buf, len_of(mt_rank, s), mt_rank, 0, s);
			/* tag = sequence number: the receiver checks order */
			MPI_Send(buf, len_of(mt_rank, s), MPI_BYTE, 0, s,
				 MPI_COMM_WORLD);
		}
	} else {
		int *next = calloc(mt_size, sizeof(int));
		for (int k = 0; k < STREAM * (mt_size - 1); k++) {
			MPI_Status st;
			int cnt, src;
			MPI_Recv(buf, MAXLEN, MPI_BYTE, MPI_ANY_SOURCE,
				 MPI_ANY_TAG, MPI_COMM_WORLD, &st);
			src = st.MPI_SOURCE;
			MPI_Get_count(&st, MPI_BYTE, &cnt);
			if (src <= 0 || src >= mt_size) {
				mt_fail("wildcard: source %d", src);
				continue;
			}
			MT_CHECK(st.MPI_TAG == next[src], "wildcard: from %d "
				 "tag %d arrived, %d expected (overtaken)", src,
				 st.MPI_TAG, next[src]);
			MT_CHECK(cnt == len_of(src, st.MPI_TAG), "wildcard: "
				 "count %d, want %d", cnt,
				 len_of(src, st.MPI_TAG));
			mt_verify(buf, cnt, src, 0, st.MPI_TAG, "wildcard");
			next[src] = st.MPI_TAG + 1;
		}
		free(next);
	}
	free(buf);
}

/* Rank 0 posts a receive from each peer with a specific tag, and as many
 * wildcard receives; every peer sends one message with that tag and one
 * with another. Specific receives were posted first, so MPI's order rule
 * gives each the message it names. */
static void test_mixed(void)
{
	int peers = mt_size - 1;
	int32_t *got = mt_alloc(2 * (size_t)mt_size * sizeof(int32_t));
	MPI_Request *req = mt_alloc(2 * (size_t)mt_size * sizeof(*req));
	MPI_Status *st = mt_alloc(2 * (size_t)mt_size * sizeof(*st));

	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank == 0) {
		for (int p = 1; p <= peers; p++)
			MPI_Irecv(&got[p], 1, MPI_INT32_T, p, 7,
				  MPI_COMM_WORLD, &req[p - 1]);
		for (int k = 0; k < peers; k++)
			MPI_Irecv(&got[mt_size + k], 1, MPI_INT32_T,
				  MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
				  &req[peers + k]);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (mt_rank != 0) {
		int32_t a = 1000 + mt_rank, b = 2000 + mt_rank;
		MPI_Send(&a, 1, MPI_INT32_T, 0, 7, MPI_COMM_WORLD);
		MPI_Send(&b, 1, MPI_INT32_T, 0, 8, MPI_COMM_WORLD);
	} else {
		MPI_Waitall(2 * peers, req, st);
		for (int p = 1; p <= peers; p++)
			MT_CHECK(got[p] == 1000 + p, "mixed: specific receive "
				 "from %d got %d", p, got[p]);
		for (int k = 0; k < peers; k++) {
			int s = st[peers + k].MPI_SOURCE;
			MT_CHECK(st[peers + k].MPI_TAG == 8 &&
				 got[mt_size + k] == 2000 + s, "mixed: wildcard "
				 "got %d tag %d from %d", got[mt_size + k],
				 st[peers + k].MPI_TAG, s);
		}
	}
	free(got);
	free(req);
	free(st);
}

static void test_comms(void)
{
	MPI_Comm dup, half;
	int right = (mt_rank + 1) % mt_size;
	int left = (mt_rank + mt_size - 1) % mt_size;
	int32_t v[3] = { 0 }, w[3];
	MPI_Request req[3];

	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	MPI_Comm_split(MPI_COMM_WORLD, mt_rank % 2, -mt_rank, &half);
	int hr, hs;
	MPI_Comm_rank(half, &hr);
	MPI_Comm_size(half, &hs);
	/* the key -rank reverses the order inside each half */
	MT_CHECK(hr == (mt_size - 1 - mt_rank) / 2 || mt_size % 2,
		 "split: rank %d in its half", hr);

	/* same tag, same ranks, three communicators; received in the
	 * opposite order to the sends */
	MPI_Irecv(&v[2], 1, MPI_INT32_T, left, 5, dup, &req[0]);
	MPI_Irecv(&v[1], 1, MPI_INT32_T, MPI_ANY_SOURCE, 5, half, &req[1]);
	MPI_Irecv(&v[0], 1, MPI_INT32_T, left, 5, MPI_COMM_WORLD, &req[2]);
	w[0] = 10 * mt_rank + 0;
	w[1] = 10 * mt_rank + 1;
	w[2] = 10 * mt_rank + 2;
	MPI_Send(&w[0], 1, MPI_INT32_T, right, 5, MPI_COMM_WORLD);
	/* in the half: to the next rank of the half, in its own numbering */
	MPI_Send(&w[1], 1, MPI_INT32_T, (hr + 1) % hs, 5, half);
	MPI_Send(&w[2], 1, MPI_INT32_T, right, 5, dup);
	MPI_Waitall(3, req, MPI_STATUSES_IGNORE);
	MT_CHECK(v[0] == 10 * left, "comms: world got %d", v[0]);
	MT_CHECK(v[2] == 10 * left + 2, "comms: dup got %d", v[2]);
	MT_CHECK(v[1] % 10 == 1 && (v[1] / 10) % 2 == mt_rank % 2,
		 "comms: split got %d", v[1]);
	MPI_Comm_free(&half);
	MPI_Comm_free(&dup);
}

static void test_probe(void)
{
	int right = (mt_rank + 1) % mt_size;
	int left = (mt_rank + mt_size - 1) % mt_size;
	int len = 1 + (mt_rank * 977) % (64 << 10);
	uint8_t *s = mt_alloc(len);
	MPI_Request req;
	MPI_Status st;
	int flag = 0, cnt;

	mt_fill(s, len, mt_rank, right, 77);
	MPI_Isend(s, len, MPI_BYTE, right, 77, MPI_COMM_WORLD, &req);
	while (!flag)
		MPI_Iprobe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &flag, &st);
	MT_CHECK(st.MPI_SOURCE == left, "iprobe: source %d", st.MPI_SOURCE);
	MPI_Probe(left, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
	MPI_Get_count(&st, MPI_BYTE, &cnt);
	int want = 1 + (left * 977) % (64 << 10);
	MT_CHECK(cnt == want && st.MPI_TAG == 77, "probe: %d bytes tag %d, "
		 "want %d tag 77", cnt, st.MPI_TAG, want);
	uint8_t *r = mt_alloc(cnt);
	MPI_Recv(r, cnt, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD,
		 MPI_STATUS_IGNORE);
	mt_verify(r, cnt, left, mt_rank, 77, "probe");
	MPI_Wait(&req, MPI_STATUS_IGNORE);
	free(s);
	free(r);
}

static void test_modes(void)
{
	int right = (mt_rank + 1) % mt_size;
	int left = (mt_rank + mt_size - 1) % mt_size;
	enum { N = 3000 };
	int32_t *buf = mt_alloc(N * sizeof(int32_t));
	int32_t x = mt_rank, y = -1;
	MPI_Request req[2];

	/* Ssend completes only once matched: the receive is posted first
	 * on the odd ranks, later on the even, never deadlocking a ring */
	if (mt_rank % 2) {
		MPI_Irecv(&y, 1, MPI_INT32_T, left, 9, MPI_COMM_WORLD, &req[0]);
		MPI_Ssend(&x, 1, MPI_INT32_T, right, 9, MPI_COMM_WORLD);
		MPI_Wait(&req[0], MPI_STATUS_IGNORE);
	} else {
		MPI_Isend(&x, 1, MPI_INT32_T, right, 9, MPI_COMM_WORLD, &req[0]);
		MPI_Recv(&y, 1, MPI_INT32_T, left, 9, MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE);
		MPI_Wait(&req[0], MPI_STATUS_IGNORE);
	}
	MT_CHECK(y == left, "ssend: got %d", y);

	for (int i = 0; i < N; i++)
		buf[i] = mt_rank * N + i;
	MPI_Sendrecv_replace(buf, N, MPI_INT32_T, right, 10, left, 10,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	for (int i = 0; i < N; i++)
		if (buf[i] != left * N + i) {
			mt_fail("sendrecv_replace: [%d] = %d", i, buf[i]);
			break;
		}

	/* persistent requests, started several times */
	MPI_Send_init(&x, 1, MPI_INT32_T, right, 11, MPI_COMM_WORLD, &req[0]);
	MPI_Recv_init(&y, 1, MPI_INT32_T, left, 11, MPI_COMM_WORLD, &req[1]);
	for (int k = 0; k < 5; k++) {
		x = mt_rank * 100 + k;
		MPI_Startall(2, req);
		MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
		MT_CHECK(y == left * 100 + k, "persistent: round %d got %d", k,
			 y);
	}
	MPI_Request_free(&req[0]);
	MPI_Request_free(&req[1]);
	free(buf);
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p");
	if (mt_size < 2) {
		fprintf(stderr, "p2p: needs at least 2 ranks\n");
		MPI_Finalize();
		return 1;
	}
	test_tags();
	test_wildcard();
	test_mixed();
	test_comms();
	test_probe();
	test_modes();
	return mt_finish();
}
