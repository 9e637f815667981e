/*
 * sib_rma_cost: the work libsib and the HCA add to one small put, get or
 * 64-bit fetch-add, for instruction counts (valgrind --tool=callgrind:
 * the noise of a shared machine does not move them; the VM has no perf
 * instruction counter, and callgrind cannot run softib between two
 * processes).
 *
 *   sib_rma_cost [-n OPS] [-s SIZE] [-o put|get|fadd]
 *
 * One process, one worker, an endpoint to its own address and a region
 * from sib_mem_map: each operation is posted, then sib_request_wait'ed
 * and freed. On the host link the post executes the operation in the
 * caller (requester, responder, copy; in our own address space the copy
 * is a memcpy, so what is counted is the path around the bytes, the same
 * whatever route moves them). The instructions per operation are the
 * difference of two runs with different -n, divided by the difference
 * of their n (callgrind_annotate gives each run's total).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/sib.h"

static void die(const char *what, sib_status_t st)
{
	fprintf(stderr, "sib_rma_cost: %s: %s\n", what, sib_status_string(st));
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long n = 100000;
	size_t size = 8, blen, alen;
	const char *op = "put";
	int c;
	sib_context_t *ctx;
	sib_worker_t *w;
	sib_ep_t *ep;
	sib_mem_t *mem;
	sib_rkey_t *k;
	void *addr = NULL, *blob = NULL;
	uint64_t base, old = 0;
	sib_status_t st;
	char *buf;
	double t0;

	while ((c = getopt(argc, argv, "n:s:o:")) != -1) {
		switch (c) {
		case 'n': n = atol(optarg); break;
		case 's': size = (size_t)atol(optarg); break;
		case 'o': op = optarg; break;
		default:
			fprintf(stderr, "usage: sib_rma_cost [-n OPS] [-s SIZE] "
				"[-o put|get|fadd]\n");
			return 2;
		}
	}
	buf = calloc(1, size + 8);
	if (!buf)
		return 1;
	if ((st = sib_context_create(NULL, &ctx)) ||
	    (st = sib_worker_create(ctx, NULL, &w)) ||
	    (st = sib_worker_get_address(w, &addr, &alen)) ||
	    (st = sib_ep_create(w, addr, alen, &ep)) ||
	    (st = sib_mem_map(w, NULL, size + 8, &mem)) ||
	    (st = sib_rkey_pack(mem, &blob, &blen)) ||
	    (st = sib_rkey_unpack(ep, blob, blen, &k)))
		die("setup", st);
	sib_address_free(addr);
	sib_rkey_buffer_free(blob);
	base = (uintptr_t)sib_mem_addr(mem);
	t0 = now_s();
	for (long i = 0; i < n; i++) {
		sib_request_t *r;

		buf[0] = (char)i;
		if (!strcmp(op, "get"))
			st = sib_get_nb(ep, buf, size, base, k, NULL, &r);
		else if (!strcmp(op, "fadd"))
			st = sib_atomic_fadd64_nb(ep, base, k, 1, &old, NULL, &r);
		else
			st = sib_put_nb(ep, buf, size, base, k, NULL, &r);
		if (st)
			die(op, st);
		if ((st = sib_request_wait(r, NULL)))
			die("wait", st);
		sib_request_free(r);
	}
	printf("%ld %s of %zu B: %.3f us each%s\n", n, op, size,
	       (now_s() - t0) * 1e6 / (double)n,
	       !strcmp(op, "fadd") && old != (uint64_t)n - 1 ? " (fetch-add WRONG)" : "");
	sib_rkey_destroy(k);
	sib_mem_unmap(mem);
	sib_ep_destroy(ep);
	sib_worker_destroy(w);
	sib_context_destroy(ctx);
	free(buf);
	return 0;
}
