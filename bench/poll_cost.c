/*
 * poll_cost: what one empty ibv_poll_cq costs, in nanoseconds — the unit
 * of every busy-polling loop (a ping-pong's waiting side is made of it).
 *
 *   poll_cost [-n POLLS] [-d DEV]
 *
 * One process, one CQ of 256 entries that nothing completes into; seven
 * timed loops of POLLS polls (default 2,000,000), the best one printed
 * (the least disturbed by other processes).
 */
#include <getopt.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

const char bench_prog[] = "poll_cost";

int main(int argc, char **argv)
{
	const char *want = "softib0";
	uint64_t n = 2000000, best = UINT64_MAX;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_cq *cq;
	struct ibv_wc wc[4];
	int c;

	while ((c = getopt(argc, argv, "n:d:h")) != -1) {
		if (c == 'n')
			n = bench_parse_size(optarg, "poll count");
		else if (c == 'd')
			want = optarg;
		else {
			fprintf(stderr, "usage: poll_cost [-n POLLS] [-d DEV]\n");
			return 2;
		}
	}
	if (!n)
		bench_die("-n must be at least 1");
	list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i] && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		bench_die("no device %s", want);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!cq)
		bench_die("ibv_create_cq failed");
	for (int r = 0; r < 7; r++) {
		uint64_t t = bench_now_ns();

		for (uint64_t i = 0; i < n; i++)
			if (ibv_poll_cq(cq, 4, wc) != 0)
				bench_die("a completion out of nowhere");
		t = bench_now_ns() - t;
		if (t < best)
			best = t;
	}
	printf("empty ibv_poll_cq: %.1f ns (best of 7 loops of %llu)\n",
	       (double)best / (double)n, (unsigned long long)n);
	ibv_destroy_cq(cq);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
