/*
 * softib_osu: osu-style latency and bandwidth at the verbs level, between
 * two processes over softib0 (RC QPs).
 *
 *   server:  softib_osu [options]
 *   client:  softib_osu [options] HOST
 *
 * The two sides meet on a small TCP connection (port -p) where they swap
 * what each needs to connect its QP (LID, GID, QPN, PSN, rkey, address)
 * and their options, which must agree.  The client prints the tables.
 *
 * Tests (-t): lat   ping-pong, half the round trip (sizes 0, 1, 2, 4 ...);
 *                   for RDMA READ the time of one read, as osu_get_latency
 *             bw    windows of 64 back-to-back messages, then an ack
 *             bibw  both sides send windows at once; the sum is reported
 * Operations (-o): send, write (RDMA WRITE; the last of a window carries an
 * immediate so that the target can ack it), read (RDMA READ; nothing to ack).
 *
 * Bandwidth is in MB/s (10^6 bytes per second).  From 64 KiB up each row
 * also gives the shared-memory floor measured by the client in this run
 * (bench_cma.c: back-to-back process_vm_writev of that size into a forked
 * child of its own) and the ratio to it.
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
#include <time.h>

#include "softib_osu.h"

const char bench_prog[] = "softib_osu";

const char *const osu_op_names[3] = { "send", "write", "read" };

static void usage(void)
{
	fprintf(stderr,
		"usage: softib_osu [options]          (server)\n"
		"       softib_osu [options] HOST     (client)\n"
		"  -p PORT    TCP port of the exchange (default %d)\n"
		"  -t TEST    lat | bw | bibw | all (default lat)\n"
		"  -o OP      send | write | read (default send)\n"
		"  -m SIZE    largest message, k/m suffixes allowed "
		"(default 4m)\n"
		"  -n ITERS   iterations per size (default: osu's, fewer for "
		"large sizes)\n"
		"  -d DEV     device (default softib0)\n"
		"  -g INDEX   address the peer by GID (global path, source GID "
		"INDEX),\n"
		"             as across hosts (the UDP link) it must be\n"
		"  -P         lat: also the median time of one ibv_post_send "
		"(client),\n"
		"             the requester's own cost, whatever the peer does\n"
		"  -M         lat (send): also the median of the iterations' "
		"half round trips,\n"
		"             which a loaded machine's stalls move less than the mean\n"
		"Both sides must be given the same -t -o -m -n.\n",
		DEFAULT_PORT);
	exit(2);
}

static const char *const test_names[] = { "lat", "bw", "bibw", NULL };

static void parse_opts(int argc, char **argv, struct opts *o)
{
	int c;
	uint64_t v;

	*o = (struct opts){ .tests = T_LAT, .op = OP_SEND,
			    .port = DEFAULT_PORT, .max = DEFAULT_MAX,
			    .dev = "softib0", .gidx = -1 };
	while ((c = getopt(argc, argv, "p:t:o:m:n:d:g:PMh")) != -1) {
		switch (c) {
		case 'p':
			o->port = (int)bench_parse_in(optarg, 1, 65535, 'p');
			break;
		case 't':
			o->tests = bench_parse_tests(optarg, test_names);
			break;
		case 'o':
			if (!strcmp(optarg, "send"))
				o->op = OP_SEND;
			else if (!strcmp(optarg, "write"))
				o->op = OP_WRITE;
			else if (!strcmp(optarg, "read"))
				o->op = OP_READ;
			else
				bench_die("bad operation '%s' "
					  "(send, write, read)", optarg);
			break;
		case 'm':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > (1u << 30))
				bench_die("-m must be in 1 .. 1g");
			o->max = (uint32_t)v;
			break;
		case 'n':
			v = bench_parse_size(optarg, "size");
			if (v < 1 || v > 100000000)
				bench_die("-n must be in 1 .. 10^8");
			o->iters = (uint32_t)v;
			break;
		case 'd':
			o->dev = optarg;
			break;
		case 'P':
			o->post_time = true;
			break;
		case 'M':
			o->median = true;
			break;
		case 'g':
			o->gidx = (int)bench_parse_in(optarg, 0, 255, 'g');
			break;
		default:
			usage();
		}
	}
	if (optind < argc)
		o->host = argv[optind++];
	if (optind < argc)
		usage();
}

static void print_bw_row(struct bench *b, uint32_t size, double mbs)
{
	double floor = size >= CMA_FLOOR_MIN ? cma_floor_mbs(&b->cma, size) : 0;

	if (floor > 0)
		printf("%-10u%18.2f%14.0f%11.3f\n", size, mbs, floor, mbs / floor);
	else
		printf("%-10u%18.2f\n", size, mbs);
	fflush(stdout);
}

static void table(struct bench *b, unsigned test)
{
	const char *op = osu_op_names[b->o.op];
	bool client = !b->server;
	uint32_t first = test == T_LAT && b->o.op == OP_SEND ? 0 : 1;

	if (client) {
		if (test == T_LAT)
			printf("# softib verbs latency test (%s)\n"
			       "# Size          Latency (us)%s%s\n", op,
			       b->post_ns ? "   post (us, median)" : "",
			       b->rt ? "   median (us)" : "");
		else
			printf("# softib verbs %sbandwidth test (%s)\n"
			       "# Size      Bandwidth (MB/s)   CMA (MB/s)"
			       "      ratio\n",
			       test == T_BIBW ? "bi-directional " : "", op);
		fflush(stdout);
	}
	for (uint64_t size = first; size <= b->o.max;
	     size = size ? size * 2 : 1) {
		if (test == T_LAT) {
			double us;

			b->npost = 0;
			us = osu_run_lat(b, (uint32_t)size);
			if (client && b->post_ns)
				printf("%-10u%18.2f%22.3f", (uint32_t)size, us,
				       osu_post_median_us(b));
			else if (client)
				printf("%-10u%18.2f", (uint32_t)size, us);
			if (client && b->rt)
				printf("%16.2f", osu_rt_median_us(b));
			if (client)
				printf("\n");
			if (client)
				fflush(stdout);
		} else {
			double mbs = osu_run_bw(b, (uint32_t)size, test == T_BIBW);

			if (client)
				print_bw_row(b, (uint32_t)size, mbs);
		}
	}
	if (client)
		printf("\n");
}

int main(int argc, char **argv)
{
	struct bench b = { 0 };

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_opts(argc, argv, &b.o);
	b.server = b.o.host == NULL;
	srand48(getpid() ^ (long)time(NULL));
	/* the floor's child is forked before any verbs object exists */
	if (!b.server && b.o.tests & (T_BW | T_BIBW) && b.o.max >= CMA_FLOOR_MIN)
		cma_floor_start(&b.cma, b.o.max, -1);
	osu_setup(&b);
	b.sock = b.server ? bench_tcp_accept(b.o.port)
			  : bench_tcp_connect(b.o.host, b.o.port);
	osu_connect_qp(&b);
	if (b.o.post_time && !b.server) {
		b.post_cap = 1u << 16;
		b.post_ns = calloc(b.post_cap, sizeof(*b.post_ns));
		if (!b.post_ns)
			bench_die("out of memory");
	}
	if (b.o.median && !b.server && b.o.op == OP_SEND) {
		b.rt_cap = 1u << 20;
		b.rt = calloc(b.rt_cap, sizeof(*b.rt));
		if (!b.rt)
			bench_die("out of memory");
	}
	for (unsigned t = T_LAT; t <= T_BIBW; t <<= 1)
		if (b.o.tests & t)
			table(&b, t);
	bench_barrier(b.sock);
	close(b.sock);
	if (ibv_destroy_qp(b.qp) || ibv_destroy_cq(b.cq) ||
	    ibv_dereg_mr(b.mr) || ibv_dealloc_pd(b.pd) ||
	    ibv_close_device(b.ctx))
		bench_die("tearing down the verbs objects failed");
	free(b.buf);
	cma_floor_stop(&b.cma);
	return 0;
}
