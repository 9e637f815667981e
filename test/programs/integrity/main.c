/*
 * integrity: data-integrity stress of the verbs data path.
 *
 *   integrity [-p procs] [-q qps_per_proc] [-n messages] [-s seed]
 *             [-t rc|uc|ud|all] [-d dev] [-T timeout]
 *
 * A server process and `procs` forked client processes.  Every client opens
 * `qps_per_proc` QPs of each chosen transport, each connected to a QP of its
 * own in the server; the two meet over a socketpair made before the fork.
 *
 * Every client QP runs a stream of operations drawn from a PRNG seeded by
 * (seed, sender): opcode, size (1 B .. 64 KiB, a few up to 1 MiB; up to the
 * path MTU on UD), remote offset.  The server runs the same PRNG, so it
 * knows what each message must be before it arrives: it posts each receive
 * for the message that will consume it (random scatter lists, 1..4 SGEs,
 * random offsets, canary bytes around and after every piece) and checks
 * every byte, the completion's opcode, length, immediate and source, and
 * the order.  Payloads carry the sender id and sequence number in their
 * first 8 bytes (when they have 8), then a pattern keyed by (seed, sender,
 * sequence).  Client sends use random gather lists and inline data (the
 * buffer is scribbled over right after an inline post).
 *
 *   SEND, SEND_WITH_IMM     checked in the server's receive buffer
 *   RDMA_WRITE              followed by a SEND_WITH_IMM naming the region,
 *                           on which the server checks it and its guards
 *   RDMA_WRITE_WITH_IMM     the server checks the region on its completion
 *   RDMA_READ               (RC) the client checks against the server's
 *                           read region, whose contents both know
 *   ATOMIC_FETCH_AND_ADD    (RC) on counters shared by all clients (final
 *                           sums, monotone fetches) and on a word private to
 *                           the QP (every fetched value exact)
 *   ATOMIC_CMP_AND_SWP      (RC) on the private word, hits and misses
 *
 * Flow control goes over the socketpair: the server tells each client up to
 * which sequence number receives are posted and which operations it has
 * checked, so UC and UD lose nothing and a write region is not reused
 * before the server has checked it.
 *
 * Prints a summary; exits non-zero on any error.
 */
#include "integrity.h"

static void usage(void)
{
	fprintf(stderr,
		"usage: integrity [-p procs] [-q qps_per_proc] [-n messages] "
		"[-s seed] [-t rc|uc|ud|all] [-d dev] [-T timeout]\n"
		"  defaults: -p 4 -q 2 -n 100000 -s 1 -t all -d softib0 -T 14\n"
		"  -T: the RC QPs' ACK timeout exponent (4.096 us * 2^T)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int c;

	P = (struct params){ .procs = 4, .qps = 2, .messages = 100000,
			     .seed = 1, .ntypes = 3,
			     .types = { Q_RC, Q_UC, Q_UD }, .dev = "softib0",
			     .timeout = 14 };
	while ((c = getopt(argc, argv, "p:q:n:s:t:d:T:h")) != -1) {
		char *end;

		switch (c) {
		case 'p':
			P.procs = atoi(optarg);
			if (P.procs < 1 || P.procs > MAX_PROCS)
				tp_die("-p must be 1..%d", MAX_PROCS);
			break;
		case 'q':
			P.qps = atoi(optarg);
			if (P.qps < 1 || P.qps > MAX_QPS)
				tp_die("-q must be 1..%d", MAX_QPS);
			break;
		case 'n':
			P.messages = strtoull(optarg, &end, 0);
			if (*end || P.messages > 1000000000ull)
				tp_die("bad -n '%s'", optarg);
			break;
		case 's':
			P.seed = strtoull(optarg, &end, 0);
			if (*end)
				tp_die("bad -s '%s'", optarg);
			break;
		case 't':
			P.ntypes = 1;
			if (!strcmp(optarg, "rc"))
				P.types[0] = Q_RC;
			else if (!strcmp(optarg, "uc"))
				P.types[0] = Q_UC;
			else if (!strcmp(optarg, "ud"))
				P.types[0] = Q_UD;
			else if (!strcmp(optarg, "all"))
				P.ntypes = 3;
			else
				tp_die("bad -t '%s' (rc, uc, ud, all)", optarg);
			break;
		case 'd':
			P.dev = optarg;
			break;
		case 'T':
			c = atoi(optarg);
			if (c < 0 || c > 31)
				tp_die("-T must be 0..31");
			P.timeout = (uint8_t)c;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	return server_run();
}
