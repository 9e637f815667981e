/*
 * softib_osu_loops.c: softib_osu's measurement loops: polling and
 * posting (the send queue's accounting of unsignaled WRs), the iteration
 * counts per size, the latency ping-pong and the bandwidth windows.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "softib_osu.h"

/* ---- data path ---- */

/* Polls the CQ once: counts completions, reposts receives.  Dies on an
 * error completion.  Returns how many completions it saw. */
static int progress(struct bench *b)
{
	struct ibv_wc wc[32];
	int n = ibv_poll_cq(b->cq, 32, wc);

	if (n < 0)
		bench_die("ibv_poll_cq failed");
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			bench_die("completion error: %s (status %d, opcode %d, "
			    "vendor_err %#x)", ibv_wc_status_str(wc[i].status),
			    wc[i].status, wc[i].opcode, wc[i].vendor_err);
		if (wc[i].opcode & IBV_WC_RECV) {
			if ((wc[i].wc_flags & IBV_WC_WITH_IMM) &&
			    be32toh(wc[i].imm_data) == ACK_IMM)
				b->recv_ack++;
			else
				b->recv_data++;
			osu_post_recv(b);
		} else {
			b->sq_out -= (uint32_t)wc[i].wr_id;
		}
	}
	return n;
}

/* Stall watch for the busy-wait loops: call with the loop's spin count. */
static void check_stall(uint64_t spins, double *since, const char *what)
{
	double t;

	if (spins == 0) {
		*since = now_us();
		return;
	}
	if (spins % 4096)
		return;
	t = now_us();
	if (t - *since > STALL_SECS * 1e6)
		bench_die("nothing happened for %d s while waiting for %s "
		    "(is the peer alive?)", STALL_SECS, what);
}

static void wait_sq_empty(struct bench *b)
{
	double since = 0;

	for (uint64_t s = 0; b->sq_out; s++) {
		if (progress(b))
			s = 0;
		check_stall(s, &since, "send completions");
	}
}

static void wait_count(struct bench *b, const uint64_t *count, uint64_t want,
		       const char *what)
{
	double since = 0;

	for (uint64_t s = 0; *count < want; s++) {
		if (progress(b))
			s = 0;
		check_stall(s, &since, what);
	}
}

/* Posts one WR of the benchmark: SEND from the send region, WRITE from the
 * send region into the peer's receive region, READ from the peer's send
 * region into the local receive region.  Signals every SIG_EVERY-th WR and
 * those asked for. */
static void post(struct bench *b, enum ibv_wr_opcode opcode, uint32_t size,
		 uint32_t imm, bool signal)
{
	struct ibv_sge sge = { .addr = (uintptr_t)b->buf, .length = size,
			       .lkey = b->mr->lkey };
	struct ibv_send_wr wr = { .opcode = opcode }, *bad;
	double since = 0;
	int err;

	for (uint64_t s = 0; b->sq_out >= SQ_DEPTH; s++) {
		if (progress(b))
			s = 0;
		check_stall(s, &since, "room in the send queue");
	}
	if (size) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	switch (opcode) {
	case IBV_WR_RDMA_READ:
		sge.addr = (uintptr_t)(b->buf + b->region);
		wr.wr.rdma.remote_addr = b->raddr;
		wr.wr.rdma.rkey = b->rkey;
		break;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		wr.wr.rdma.remote_addr = b->raddr + b->region;
		wr.wr.rdma.rkey = b->rkey;
		/* fall through */
	default:
		if (size && size <= b->max_inline)
			wr.send_flags |= IBV_SEND_INLINE;
		break;
	}
	if (opcode == IBV_WR_SEND_WITH_IMM ||
	    opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htobe32(imm);
	b->unsig++;
	if (signal || b->unsig >= SIG_EVERY) {
		wr.send_flags |= IBV_SEND_SIGNALED;
		wr.wr_id = b->unsig;
		b->unsig = 0;
	}
	b->sq_out++;
	if (b->post_ns && b->npost < b->post_cap) {
		uint64_t t = bench_now_ns();

		err = ibv_post_send(b->qp, &wr, &bad);
		b->post_ns[b->npost++] = bench_now_ns() - t;
	} else {
		err = ibv_post_send(b->qp, &wr, &bad);
	}
	if (err)
		bench_die("ibv_post_send: %s", strerror(err));
}

/* Sends the ack of a window: an empty SEND carrying ACK_IMM. */
static void post_ack(struct bench *b, bool signal)
{
	post(b, IBV_WR_SEND_WITH_IMM, 0, ACK_IMM, signal);
}

/* After each size every WR is retired: the last WR of a size is always
 * signaled, so none is left unsignaled behind it. */
static void quiesce(struct bench *b)
{
	if (b->unsig)
		bench_die("internal error: %u unsignaled WRs at the end of "
			  "a size", b->unsig);
	wait_sq_empty(b);
}

/* ---- iteration counts: osu's defaults, scaled down for large sizes so
 * that `-t all` up to 4 MiB stays well under a minute ---- */

static uint32_t lat_iters(const struct opts *o, uint32_t size)
{
	uint64_t n = o->iters ? o->iters : (size <= 8192 ? 10000 : 1000);

	if (size > 65536) {
		n = n * 65536 / size;
		if (n < 20)
			n = o->iters && o->iters < 20 ? o->iters : 20;
	}
	return (uint32_t)n;
}

static uint32_t lat_skip(uint32_t size)
{
	return size <= 8192 ? 100 : size <= 65536 ? 10 : 2;
}

static uint32_t bw_iters(const struct opts *o, uint32_t size)
{
	uint64_t n = o->iters ? o->iters : (size <= 8192 ? 100 : 20);
	uint64_t budget = 512ull << 20; /* bytes per size, roughly */

	if ((uint64_t)size * WINDOW * n > budget) {
		n = budget / ((uint64_t)size * WINDOW);
		if (n < 2)
			n = 2;
	}
	return (uint32_t)n;
}

static uint32_t bw_skip(uint32_t size)
{
	return size <= 8192 ? 10 : 2;
}

/* ---- the tests ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* -M: the median half round trip of the last osu_run_lat, in us. */
double osu_rt_median_us(struct bench *b)
{
	if (!b->nrt)
		return 0;
	qsort(b->rt, b->nrt, sizeof(*b->rt), cmp_double);
	return b->rt[b->nrt / 2];
}

/* -P: the median of the post times recorded since the last call, in us. */
double osu_post_median_us(struct bench *b)
{
	double m;

	if (!b->npost)
		return 0;
	qsort(b->post_ns, b->npost, sizeof(*b->post_ns), cmp_u64);
	m = (double)b->post_ns[b->npost / 2] / 1000.0;
	b->npost = 0;
	return m;
}

double osu_run_lat(struct bench *b, uint32_t size)
{
	uint32_t iters = lat_iters(&b->o, size), skip = lat_skip(size);
	volatile uint8_t *rx = b->buf + b->region + (size ? size - 1 : 0);
	uint8_t *tx = b->buf + (size ? size - 1 : 0);
	double t0 = 0, since;
	uint64_t base = b->recv_data;
	bool client = !b->server;

	if (b->o.op == OP_WRITE) {
		/* Arrival is seen by polling the last byte of the receive
		 * region for the tag of the iteration. */
		*rx = 0;
		bench_barrier(b->sock);
	}
	b->nrt = 0;
	for (uint32_t i = 0; i < iters + skip; i++) {
		uint8_t tag = (uint8_t)(i % 255 + 1);
		bool last = i == iters + skip - 1;
		double ti;

		if (i == skip)
			t0 = now_us();
		switch (b->o.op) {
		case OP_SEND:
			ti = now_us();
			if (client)
				post(b, IBV_WR_SEND, size, 0, last);
			wait_count(b, &b->recv_data, base + i + 1,
				   "the peer's message");
			if (!client)
				post(b, IBV_WR_SEND, size, 0, last);
			if (b->rt && i >= skip && b->nrt < b->rt_cap)
				b->rt[b->nrt++] = (now_us() - ti) / 2;
			break;
		case OP_WRITE:
			if (client) {
				*tx = tag;
				post(b, IBV_WR_RDMA_WRITE, size, 0, last);
			}
			since = 0;
			for (uint64_t s = 0; *rx != tag; s++) {
				if (progress(b))
					s = 0;
				check_stall(s, &since, "the peer's write");
			}
			if (!client) {
				*tx = tag;
				post(b, IBV_WR_RDMA_WRITE, size, 0, last);
			}
			break;
		case OP_READ:
			if (client) {
				post(b, IBV_WR_RDMA_READ, size, 0, true);
				wait_sq_empty(b);
			}
			break;
		}
	}
	double t = now_us() - t0;
	quiesce(b);
	bench_barrier(b->sock);
	return b->o.op == OP_READ ? t / iters : t / (2.0 * iters);
}

/* One window of messages toward the peer; for WRITE the last one carries
 * DATA_IMM so that the peer sees the window end. */
static void post_window(struct bench *b, uint32_t size)
{
	for (int w = 0; w < WINDOW; w++) {
		bool last = w == WINDOW - 1;

		switch (b->o.op) {
		case OP_SEND:
			post(b, IBV_WR_SEND, size, 0, last);
			break;
		case OP_WRITE:
			post(b, last ? IBV_WR_RDMA_WRITE_WITH_IMM :
				       IBV_WR_RDMA_WRITE, size, DATA_IMM, last);
			break;
		case OP_READ:
			post(b, IBV_WR_RDMA_READ, size, 0, last);
			break;
		}
	}
}

/* Receive completions one window produces at the peer. */
static uint64_t window_recvs(const struct bench *b)
{
	return b->o.op == OP_SEND ? WINDOW : b->o.op == OP_WRITE ? 1 : 0;
}

/* Returns MB/s (client side; the server's figure is meaningless). */
double osu_run_bw(struct bench *b, uint32_t size, bool bidir)
{
	uint32_t iters = bw_iters(&b->o, size), skip = bw_skip(size);
	uint64_t data0 = b->recv_data, ack0 = b->recv_ack;
	uint64_t per = window_recvs(b);
	bool sender = bidir || !b->server;
	double t0 = 0, t;

	for (uint32_t i = 0; i < iters + skip; i++) {
		if (i == skip)
			t0 = now_us();
		if (sender) {
			post_window(b, size);
			wait_sq_empty(b);
		}
		if (bidir || b->server)
			wait_count(b, &b->recv_data, data0 + (i + 1) * per,
				   "the peer's window");
		if (!bidir && b->o.op != OP_READ) {
			if (b->server)
				post_ack(b, i == iters + skip - 1);
			else
				wait_count(b, &b->recv_ack, ack0 + i + 1,
					   "the peer's ack");
		}
	}
	t = now_us() - t0;
	quiesce(b);
	bench_barrier(b->sock);
	return (bidir ? 2.0 : 1.0) * size * WINDOW * iters / t;
}

