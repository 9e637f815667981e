/*
 * tp_common.c: what the test programs share (tp_common.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tp_common.h"

__attribute__((weak)) const char *tp_who = "test";
void (*tp_on_die)(void);

void tp_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", tp_who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (tp_on_die)
		tp_on_die();
	exit(1);
}

double tp_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t tp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void tp_xfer(int fd, void *p, size_t n, bool out, int secs)
{
	uint8_t *c = p;

	while (n) {
		ssize_t r;

		if (!out) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };

			if (poll(&pfd, 1, secs * 1000) <= 0)
				tp_die("no word from the peer for %d s", secs);
		}
		r = out ? write(fd, c, n) : read(fd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			tp_die("control socket %s: %s", out ? "write" : "read",
			       r ? strerror(errno) : "the peer closed it");
		c += r;
		n -= (size_t)r;
	}
}
