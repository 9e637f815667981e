/*
 * sib_rma: rendezvous and RMA across processes, under mpirun (PMIx).
 *
 *   tag    - a ring (rank r sends to r+1): 0 B .. 64 MiB across every
 *            protocol boundary (short, eager, the rendezvous threshold,
 *            read pieces), contiguous and iovec on either side, receives
 *            posted before and after the message, every byte checked;
 *   rma    - every rank maps a region and gives its key to all; each rank
 *            owns the words w with w % size == rank in every region, puts
 *            random values at random owned offsets of every target (sizes
 *            8 B .. 64 KiB), gets them back, and after a fence each target
 *            checks its whole region against the serial model; fetch-add
 *            totals checked exactly, compare-swap has exactly one winner;
 *   errors - a put outside the next rank's region and a get through an
 *            unmapped key fail with SIB_ERR_REMOTE_ACCESS; the same
 *            endpoint then puts and sends normally;
 *   (SIB_TEST_WRITE_REFUSED=1, one host with CMA: a rendezvous whose
 *            receiver makes its buffer read-only after its RTR: the send
 *            ends SIB_ERR_REMOTE_ACCESS, the receive not OK)
 *   -k V   - rank V dies (SIGKILL) with a rendezvous to V+1 announced and
 *            one from V-1 to it unfinished: V+1's receive and V-1's send
 *            end with SIB_ERR_PEER_FAILED (mpirun --enable-recovery);
 *   and every survivor's counters show no registration or rendezvous left.
 * Prints "sib_rma rank R: ok".
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "transport/sib.h"   /* installed as build/include/sib.h */

static struct sib_job job;
static int fails;

#define FAIL(...)                                                         \
	do {                                                              \
		fprintf(stderr, "rank %u: ", job.rank);                   \
		fprintf(stderr, __VA_ARGS__);                             \
		fprintf(stderr, "\n");                                    \
		fails++;                                                  \
	} while (0)

static uint8_t pat(uint32_t src, size_t n, int f, size_t i)
{
	return (uint8_t)((i * 131u) ^ (i >> 9) ^ (src * 37u) ^ (n * 7u) ^ (unsigned)f);
}

static sib_status_t wait_req(sib_request_t *r, struct sib_tag_status *st)
{
	sib_status_t s = sib_request_wait(r, st);

	sib_request_free(r);
	return s;
}

static void make_iov(struct sib_iov *v, int n, uint8_t *b, size_t len)
{
	size_t off = 0;

	for (int i = 0; i < n; i++) {
		size_t l = i == n - 1 ? len - off : len / (size_t)n + (size_t)(i & 1);

		if (off + l > len)
			l = len - off;
		v[i] = (struct sib_iov){ b + off, l };
		off += l;
	}
}

/* ---------------- tag ---------------- */

static void ring_one(size_t n, int f, uint64_t tag, uint8_t *sb, uint8_t *rb)
{
	uint32_t me = job.rank, to = (me + 1) % job.size,
		 from = (me + job.size - 1) % job.size;
	struct sib_iov sv[4], rv[3];
	struct sib_op_params io = { .flags = SIB_OP_IOV };
	sib_request_t *s, *r = NULL;
	struct sib_tag_status st;
	bool late = tag & 1;   /* receive posted after the message came */

	for (size_t i = 0; i < n; i++)
		sb[i] = pat(me, n, f, i);
	memset(rb, 0xee, n + 1);
	make_iov(sv, 4, sb, n);
	make_iov(rv, 3, rb, n);
	if (!late && sib_tag_recv_nb(job.worker, f & 2 ? (void *)rv : rb, f & 2 ? 3 : n,
				     from, tag, ~0ull, 1, f & 2 ? &io : NULL, &r))
		FAIL("recv_nb");
	if (sib_tag_send_nb(job.eps[to], f & 1 ? (void *)sv : sb, f & 1 ? 4 : n,
			    tag, 1, f & 1 ? &io : NULL, &s)) {
		FAIL("send_nb %zu", n);
		return;
	}
	if (late) {
		struct sib_tag_status ps;

		while (sib_tag_probe_nb(job.worker, from, tag, ~0ull, 1, &ps, NULL))
			sib_worker_progress(job.worker);
		if (ps.length != n)
			FAIL("probe length %zu, wanted %zu", ps.length, n);
		if (sib_tag_recv_nb(job.worker, f & 2 ? (void *)rv : rb, f & 2 ? 3 : n,
				    from, tag, ~0ull, 1, f & 2 ? &io : NULL, &r))
			FAIL("recv_nb");
	}
	if (wait_req(r, &st) || st.length != n || st.source != from)
		FAIL("receive of %zu (flags %d): %s, length %zu", n, f,
		     sib_status_string(st.status), st.length);
	if (wait_req(s, NULL))
		FAIL("send of %zu", n);
	for (size_t i = 0; i < n; i++)
		if (rb[i] != pat(from, n, f, i)) {
			FAIL("size %zu flags %d: byte %zu is %u, wanted %u", n, f, i,
			     rb[i], pat(from, n, f, i));
			break;
		}
	if (rb[n] != 0xee)
		FAIL("size %zu: written past the end", n);
}

static void phase_tag(void)
{
	struct sib_worker_attr a;
	size_t big = 64u << 20;
	uint8_t *sb = malloc(big + 1), *rb = malloc(big + 1);
	uint64_t tag = 0;

	sib_worker_query(job.worker, &a);
	size_t sizes[] = { 0, 1, a.short_max, a.short_max + 1, a.rndv_thresh_local,
			   a.rndv_thresh_local + 1, a.rndv_thresh_remote,
			   a.rndv_thresh_remote + 1, a.eager_max, a.eager_max + 1,
			   65536, (1u << 20) + 3, (4u << 20) + 1, (9u << 20) + 5 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (int f = 0; f < 4; f++)
			ring_one(sizes[i], f, ++tag, sb, rb);
	ring_one(big, 0, 1000, sb, rb);
	ring_one(big, 3, 1002, sb, rb);
	free(sb);
	free(rb);
}

/* ---------------- rma ---------------- */

#define REGION (4u << 20)
#define CNT 64                 /* the first 64 bytes: atomics' words */

struct peer_key {
	uint64_t base;
	sib_rkey_t *k;
};

/* Map a region, give {base, key} to every rank, take theirs. */
static sib_mem_t *share(size_t len, struct peer_key *pk, uint64_t tag)
{
	sib_mem_t *mem;
	void *blob;
	size_t blen;
	uint8_t msg[512], in[512];
	sib_request_t *r;

	if (sib_mem_map(job.worker, NULL, len, &mem) ||
	    sib_rkey_pack(mem, &blob, &blen) || blen + 8 > sizeof(msg)) {
		FAIL("mem_map / rkey_pack");
		exit(1);
	}
	if (job.rank == 0 && tag == 77)
		printf("sib_rma: regions %s\n", sib_mem_fd(mem) >= 0 ?
		       "memfd (mapping route)" : "private (cross-memory attach)");
	*(uint64_t *)msg = (uintptr_t)sib_mem_addr(mem);
	memcpy(msg + 8, blob, blen);
	sib_rkey_buffer_free(blob);
	for (uint32_t t = 0; t < job.size; t++)
		if (sib_tag_send_nb(job.eps[t], msg, blen + 8, tag, 2, NULL, &r) ||
		    wait_req(r, NULL))
			FAIL("key to %u", t);
	for (uint32_t i = 0; i < job.size; i++) {
		struct sib_tag_status st;

		if (sib_tag_recv_nb(job.worker, in, sizeof(in), SIB_ANY_SOURCE, tag,
				    ~0ull, 2, NULL, &r) || wait_req(r, &st)) {
			FAIL("key receive");
			continue;
		}
		pk[st.source].base = *(uint64_t *)in;
		if (sib_rkey_unpack(job.eps[st.source], in + 8, st.length - 8,
				    &pk[st.source].k))
			FAIL("rkey_unpack from %u", st.source);
	}
	return mem;
}

static void flush_all(void)
{
	sib_request_t *f;

	if (sib_worker_flush(job.worker, &f) == SIB_INPROGRESS && wait_req(f, NULL))
		FAIL("worker flush");
}

static void phase_rma(int rounds)
{
	uint32_t me = job.rank, n = job.size;
	struct peer_key *pk = calloc(n, sizeof(*pk));
	size_t slice = ((REGION - CNT) / n) & ~(size_t)7;
	uint8_t **model = calloc(n, sizeof(*model)), *buf = malloc(slice);
	uint64_t *reg, *olds = calloc(n, 8), sum = 0;
	sib_mem_t *mem = share(REGION, pk, 77);
	sib_request_t *r;
	const int K = 50;

	reg = sib_mem_addr(mem);
	for (uint32_t t = 0; t < n; t++)
		model[t] = calloc(1, slice);
	sib_job_fence(&job);
	srand(1234 + me);
	/* my slice of every region: random puts, random gets checked against
	 * the model, everyone at once */
	for (int round = 0; round < rounds * 16; round++)
		for (uint32_t t = 0; t < n; t++) {
			size_t len = (size_t)8 << (rand() % 14), off;
			uint64_t mine = pk[t].base + CNT + (uint64_t)me * slice;

			if (len > slice)
				len = slice;
			off = ((size_t)rand() % (slice - len + 1)) & ~(size_t)7;
			for (size_t i = 0; i < len; i++)
				model[t][off + i] = (uint8_t)rand();
			if (sib_put_nb(job.eps[t], model[t] + off, len, mine + off,
				       pk[t].k, NULL, &r) || wait_req(r, NULL))
				FAIL("put %zu to %u", len, t);
			off = ((size_t)rand() % (slice - len + 1)) & ~(size_t)7;
			memset(buf, 0, len);
			if (sib_get_nb(job.eps[t], buf, len, mine + off, pk[t].k, NULL, &r) ||
			    wait_req(r, NULL))
				FAIL("get %zu from %u", len, t);
			else if (memcmp(buf, model[t] + off, len))
				FAIL("get %zu at %zu from %u: not the model", len, off, t);
		}
	/* atomics: K fetch-adds of me+1 on word 0 of every region, in flight
	 * together; one compare-swap 0 -> me+1 on word 1 */
	for (uint32_t t = 0; t < n; t++) {
		for (int i = 0; i < K; i++) {
			if (sib_atomic_fadd64_nb(job.eps[t], pk[t].base, pk[t].k, me + 1,
						 NULL, NULL, &r))
				FAIL("fadd");
			sib_request_free(r);
		}
		if (sib_atomic_cswap64_nb(job.eps[t], pk[t].base + 8, pk[t].k, 0,
					  me + 1, &olds[t], NULL, &r) || wait_req(r, NULL))
			FAIL("cswap");
	}
	flush_all();
	/* whole slices back, against the model */
	for (uint32_t t = 0; t < n; t++) {
		if (sib_get_nb(job.eps[t], buf, slice, pk[t].base + CNT + (uint64_t)me * slice,
			       pk[t].k, NULL, &r) || wait_req(r, NULL))
			FAIL("get slice");
		else if (memcmp(buf, model[t], slice))
			FAIL("slice at %u differs from the model", t);
	}
	/* tell each target whether my compare-swap won */
	for (uint32_t t = 0; t < n; t++) {
		uint64_t wonb = olds[t] == 0 ? me + 1 : 0;

		if (sib_tag_send_nb(job.eps[t], &wonb, 8, 78, 2, NULL, &r) || wait_req(r, NULL))
			FAIL("won to %u", t);
	}
	{
		uint64_t winner = 0, x;
		int winners = 0;

		for (uint32_t i = 0; i < n; i++) {
			if (sib_tag_recv_nb(job.worker, &x, 8, SIB_ANY_SOURCE, 78, ~0ull, 2,
					    NULL, &r) || wait_req(r, NULL))
				FAIL("won receive");
			if (x) {
				winners++;
				winner = x;
			}
		}
		sib_job_fence(&job);   /* every rank's atomics are done */
		for (uint32_t i = 0; i < n; i++)
			sum += i + 1;
		if (reg[0] != sum * K)
			FAIL("fetch-add total %lu, wanted %lu", (unsigned long)reg[0],
			     (unsigned long)(sum * K));
		if (winners != 1 || reg[1] != winner)
			FAIL("compare-swap: %d winners, word %lu", winners,
			     (unsigned long)reg[1]);
	}
	sib_job_fence(&job);
	for (uint32_t t = 0; t < n; t++) {
		sib_rkey_destroy(pk[t].k);
		free(model[t]);
	}
	sib_mem_unmap(mem);
	free(pk);
	free(model);
	free(buf);
	free(olds);
}

/* A barrier through libsib itself: waiting progresses, so a peer that
 * reconnects to me (after an access error broke its send QP) gets its
 * handshake answered; a PMIx fence would leave it unanswered. */
static void sib_barrier(uint64_t tag)
{
	sib_request_t *s[64], *r[64];
	uint8_t b[64];

	for (uint32_t t = 0; t < job.size && t < 64; t++) {
		sib_tag_recv_nb(job.worker, &b[t], 1, t, tag, ~0ull, 4, NULL, &r[t]);
		sib_tag_send_nb(job.eps[t], "", 0, tag, 4, NULL, &s[t]);
	}
	for (uint32_t t = 0; t < job.size && t < 64; t++) {
		wait_req(s[t], NULL);
		wait_req(r[t], NULL);
	}
}

/*
 * A rendezvous whose receiver makes its buffer read-only after its RTR
 * went out (one host, CMA: the sender's RDMA WRITE fails with a remote
 * access error): the FIN_W the sender posts behind its writes comes back
 * flushed and must not be sent again, so rank 1's receive ends with an
 * error, never SIB_OK, and rank 0's send with the access error; the pair
 * then talks normally. Rank 0 makes no progress until rank 1 has
 * protected its buffer (a PMIx fence, which does not progress libsib).
 */
static void phase_write_refused(void)
{
	size_t len = 256u << 10;
	uint8_t *src = malloc(len), *dst = NULL;
	struct sib_tag_status ts = { 0 };
	sib_request_t *r = NULL;
	sib_status_t st = SIB_OK;

	memset(src, 5, len);
	if (job.rank == 1) {
		dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		memset(dst, 0, len);
		if (sib_tag_recv_nb(job.worker, dst, len, 0, 4200, ~0ull, 0, NULL, &r))
			FAIL("receive");
	}
	sib_job_fence(&job);
	if (job.rank == 0 && sib_tag_send_nb(job.eps[1], src, len, 4200, 0, NULL, &r))
		FAIL("send");
	if (job.rank == 1) {
		for (int i = 0; i < 200; i++) {   /* the RTS comes, the RTR goes */
			sib_worker_progress(job.worker);
			usleep(1000);
		}
		mprotect(dst, len, PROT_READ);
	}
	sib_job_fence(&job);
	if (job.rank == 0 && (st = wait_req(r, NULL)) != SIB_ERR_REMOTE_ACCESS)
		FAIL("send whose writes were refused: %s", sib_status_string(st));
	if (job.rank == 1 && (st = wait_req(r, &ts)) == SIB_OK)
		FAIL("receive whose writes were refused ended OK");
	sib_barrier(4201);
	if (job.rank == 1)
		munmap(dst, len);
	free(src);
}

/* Accesses outside a region and through an unmapped key. */
static void phase_errors(void)
{
	uint32_t n = job.size, to = (job.rank + 1) % n;
	struct peer_key *pk = calloc(n, sizeof(*pk)), *gone = calloc(n, sizeof(*gone));
	sib_mem_t *mem = share(65536, pk, 80), *mem2 = share(4096, gone, 81);
	uint8_t b[256] = { 1 };
	uint64_t x;
	sib_request_t *r;
	sib_status_t st = SIB_OK;

	sib_job_fence(&job);
	sib_mem_unmap(mem2);   /* everyone's second key now names nothing */
	sib_job_fence(&job);
	if (sib_put_nb(job.eps[to], b, 64, pk[to].base + 65536 - 32, pk[to].k, NULL, &r) ||
	    (st = wait_req(r, NULL)) != SIB_ERR_REMOTE_ACCESS)
		FAIL("put outside the region: %s", sib_status_string(st));
	if (sib_get_nb(job.eps[to], &x, 8, gone[to].base, gone[to].k, NULL, &r) ||
	    (st = wait_req(r, NULL)) != SIB_ERR_REMOTE_ACCESS)
		FAIL("get through an unmapped key: %s", sib_status_string(st));
	if (sib_put_nb(job.eps[to], b, 200, pk[to].base + 1000, pk[to].k, NULL, &r) ||
	    (st = wait_req(r, NULL)) != SIB_OK)
		FAIL("put after the errors: %s", sib_status_string(st));
	sib_barrier(4000);
	ring_one(100000, 0, 2000, malloc(100001), malloc(100001));   /* leaks 200 KB: fine */
	if (sib_ep_status(job.eps[to]))
		FAIL("endpoint failed after access errors");
	sib_barrier(4001);
	if (((uint8_t *)sib_mem_addr(mem))[1000] != 1)
		FAIL("the put after the errors did not land");
	for (uint32_t t = 0; t < n; t++) {
		sib_rkey_destroy(pk[t].k);
		sib_rkey_destroy(gone[t].k);
	}
	sib_mem_unmap(mem);
	free(pk);
	free(gone);
}

/* Rank v dies with a rendezvous to v+1 announced and one from v-1 to it
 * unfinished. */
static void phase_death(uint32_t v)
{
	uint32_t me = job.rank, n = job.size;
	size_t big = 8u << 20;
	uint8_t *b = malloc(big);
	sib_request_t *r;
	struct sib_tag_status st;
	sib_status_t s;

	memset(b, 7, big);
	sib_job_fence(&job);
	if (me == v) {
		if (sib_tag_send_nb(job.eps[(v + 1) % n], b, big, 3000, 3, NULL, &r))
			FAIL("send");
		for (int i = 0; i < 200; i++) {   /* the RTS goes out */
			sib_worker_progress(job.worker);
			usleep(1000);
		}
		raise(SIGKILL);
	}
	if (me == (v + 1) % n) {
		/* the RTS is here; read after the sender died */
		while (sib_tag_probe_nb(job.worker, v, 3000, ~0ull, 3, &st, NULL))
			sib_worker_progress(job.worker);
		usleep(800000);
		if (sib_tag_recv_nb(job.worker, b, big, v, 3000, ~0ull, 3, NULL, &r))
			FAIL("recv");
		s = wait_req(r, &st);
		printf("rank %u: rendezvous receive from dead rank %u: %s\n", me, v,
		       sib_status_string(s));
		if (s != SIB_ERR_PEER_FAILED)
			FAIL("receive from the dead: %s", sib_status_string(s));
	}
	if (me == (v + n - 1) % n) {
		if (sib_tag_send_nb(job.eps[v], b, big, 3001, 3, NULL, &r))
			FAIL("send");
		s = wait_req(r, NULL);
		printf("rank %u: rendezvous send to dead rank %u: %s\n", me, v,
		       sib_status_string(s));
		if (s != SIB_ERR_PEER_FAILED)
			FAIL("send to the dead: %s", sib_status_string(s));
	}
	free(b);
}

int main(int argc, char **argv)
{
	int victim = -1, opt, only_errors = 0;
	struct sib_worker_attr a;

	while ((opt = getopt(argc, argv, "k:e")) != -1)
		if (opt == 'k')
			victim = atoi(optarg);
		else if (opt == 'e')
			only_errors = 1;   /* the errors phase alone */
	if (sib_init_pmix(NULL, &job)) {
		fprintf(stderr, "sib_init_pmix failed\n");
		return 1;
	}
	if (victim < 0) {
		if (!only_errors) {
			phase_tag();
			phase_rma(4);
		}
		phase_errors();
		if (getenv("SIB_TEST_WRITE_REFUSED") && job.size >= 2)
			phase_write_refused();
	} else {
		phase_death((uint32_t)victim % job.size);
	}
	sib_worker_query(job.worker, &a);
	if (a.regs_active || a.rndv_tx_active || a.rndv_rx_active)
		FAIL("left: %u registrations, %u + %u rendezvous", a.regs_active,
		     a.rndv_tx_active, a.rndv_rx_active);
	if (victim < 0)
		sib_job_fence(&job);
	printf("sib_rma rank %u: %s (rndv tx %lu rx %lu, reg hits %lu misses %lu)\n",
	       job.rank, fails ? "FAILED" : "ok", (unsigned long)a.rndv_tx,
	       (unsigned long)a.rndv_rx, (unsigned long)a.reg_hits,
	       (unsigned long)a.regs_total);
	fflush(stdout);
	if (victim >= 0)
		_exit(fails != 0);   /* no collective with a dead rank */
	sib_fini_pmix(&job);
	return fails != 0;
}
