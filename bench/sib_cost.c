/*
 * sib_cost: the work libsib adds to one small tagged message, for
 * instruction counts (valgrind --tool=callgrind; perf's instruction counter
 * is not available on every VM), which the noise of a shared machine does
 * not move as it moves a ping-pong's time.  Compare with msg_cost (the same
 * message at the verbs level).
 *
 *   sib_cost [-n MESSAGES] [-s SIZE] [-p] [-w WINDOW] [-d]
 *
 * One process, one worker, an endpoint to its own address (on the host
 * link a post executes the SEND in the caller: requester, responder and
 * copy): each message is a posted receive, a tagged send, and the progress
 * calls that complete both.  -p posts the receive after the send (the
 * message arrives unexpected).  Nothing waits on another process, so the
 * instructions per message are the difference of two runs with different
 * -n, divided by the difference of their n.  Also prints the progress
 * calls per message (1 when nothing is polled in vain) and the time.
 * -w WINDOW: osu_mbw_mr's shape instead: WINDOW receives posted, WINDOW
 * sends (a burst: batched, transport/batch.c), then every request waited
 * for; n rounded down to whole windows.
 * -d: sends pass SIB_OP_NOREQ (a send done in its call makes no request:
 * nothing to wait for or free).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/sib.h"

static void die(const char *what, sib_status_t st)
{
	fprintf(stderr, "sib_cost: %s: %s\n", what, sib_status_string(st));
	exit(1);
}

static struct sib_op_params send_op;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long wait_both(sib_worker_t *w, sib_request_t *a, sib_request_t *b)
{
	long polls = 0;

	while ((a && sib_request_test(a, NULL) == SIB_INPROGRESS) ||
	       sib_request_test(b, NULL) == SIB_INPROGRESS)
		polls++;
	(void)w;
	return polls;
}

/* WINDOW receives, WINDOW sends, then wait: n / WINDOW times */
static void windows(sib_worker_t *w, sib_ep_t *ep, long n, int win, char *sb,
		    char *rb, size_t size)
{
	sib_request_t **rq = calloc((size_t)win * 2, sizeof(*rq));
	sib_status_t st;

	if (!rq)
		die("window", SIB_ERR_NO_MEMORY);
	for (long k = 0; k < n / win; k++) {
		for (int i = 0; i < win; i++)
			if ((st = sib_tag_recv_nb(w, rb + (size_t)i * size, size,
						  SIB_ANY_SOURCE, 7, ~0ull, 0, NULL,
						  &rq[i])))
				die("recv", st);
		for (int i = 0; i < win; i++)
			if ((st = sib_tag_send_nb(ep, sb, size, 7, 0, &send_op,
						  &rq[win + i])) < 0)
				die("send", st);
		for (int i = 0; i < 2 * win; i++) {
			if (!rq[i])
				continue;   /* SIB_DONE */
			if ((st = sib_request_wait(rq[i], NULL)))
				die("wait", st);
			sib_request_free(rq[i]);
		}
	}
	free(rq);
}

int main(int argc, char **argv)
{
	long n = 100000, polls = 0;
	size_t size = 8;
	int c, late = 0, win = 0;
	sib_context_t *ctx;
	sib_worker_t *w;
	sib_ep_t *ep;
	void *addr = NULL;
	size_t alen;
	sib_status_t st;
	char *sb, *rb;
	double t0;

	while ((c = getopt(argc, argv, "n:s:pw:d")) != -1) {
		switch (c) {
		case 'n': n = atol(optarg); break;
		case 's': size = (size_t)atol(optarg); break;
		case 'p': late = 1; break;
		case 'w': win = atoi(optarg); break;
		case 'd': send_op.flags = SIB_OP_NOREQ; break;
		default:
			fprintf(stderr, "usage: sib_cost [-n MESSAGES] [-s SIZE] [-p] "
				"[-w WINDOW] [-d]\n");
			return 2;
		}
	}
	sb = calloc(1, size + 1);
	rb = calloc((size_t)(win > 0 ? win : 1), size + 1);
	if (!sb || !rb)
		return 1;
	if ((st = sib_context_create(NULL, &ctx)) ||
	    (st = sib_worker_create(ctx, NULL, &w)) ||
	    (st = sib_worker_get_address(w, &addr, &alen)) ||
	    (st = sib_ep_create(w, addr, alen, &ep)))
		die("setup", st);
	sib_address_free(addr);
	t0 = now_s();
	if (win > 0) {
		windows(w, ep, n, win, sb, rb, size);
		n -= n % win;
		printf("%ld messages of %zu B, window %d: %.3f us each\n", n, size,
		       win, (now_s() - t0) * 1e6 / (double)n);
		n = 0;   /* done: only the teardown below */
	}
	for (long i = 0; i < n; i++) {
		sib_request_t *s, *r;

		sb[0] = (char)i;
		if (!late && (st = sib_tag_recv_nb(w, rb, size, SIB_ANY_SOURCE, 7,
						   ~0ull, 0, NULL, &r)))
			die("recv", st);
		if ((st = sib_tag_send_nb(ep, sb, size, 7, 0, &send_op, &s)) < 0)
			die("send", st);
		if (late) {
			while (sib_worker_progress(w) == 0)
				polls++;
			if ((st = sib_tag_recv_nb(w, rb, size, SIB_ANY_SOURCE, 7,
						  ~0ull, 0, NULL, &r)))
				die("recv", st);
		}
		polls += wait_both(w, s, r);
		if (size && rb[0] != (char)i)
			die("data", SIB_ERR_IO);
		sib_request_free(s);
		sib_request_free(r);
	}
	if (!win)
		printf("%ld messages of %zu B%s: %.3f us each, %.2f progress calls in vain each\n",
		       n, size, late ? " (unexpected)" : "",
		       (now_s() - t0) * 1e6 / (double)n, (double)polls / (double)n);
	sib_ep_destroy(ep);
	sib_worker_destroy(w);
	sib_context_destroy(ctx);
	free(sb);
	free(rb);
	return 0;
}
