/*
 * bench_common: the error exit, clock, size parsing and TCP meeting point
 * that the programs of bench/ share (see bench_common.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

void bench_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", bench_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bench_parse_size(const char *s, const char *what)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		bench_die("bad %s '%s'", what, s);
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end)
		bench_die("bad %s '%s'", what, s);
	return v;
}

void bench_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		bench_die("sched_setaffinity(%d): %s", cpu, strerror(errno));
}

uint32_t bench_parse_in(const char *s, uint64_t lo, uint64_t hi, char opt)
{
	uint64_t v = bench_parse_size(s, "number");

	if (v < lo || v > hi)
		bench_die("-%c must be in %llu .. %llu", opt,
			  (unsigned long long)lo, (unsigned long long)hi);
	return (uint32_t)v;
}

unsigned bench_parse_tests(const char *s, const char *const names[])
{
	char list[128] = "";
	unsigned all = 0;

	for (unsigned i = 0; names[i]; i++) {
		if (!strcmp(s, names[i]))
			return 1u << i;
		all |= 1u << i;
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s, ",
			 names[i]);
	}
	if (!strcmp(s, "all"))
		return all;
	bench_die("bad test '%s' (%sall)", s, list);
}

void bench_tcp_write(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t r = write(fd, c, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			bench_die("TCP write to the peer: %s", strerror(errno));
		c += r;
		n -= (size_t)r;
	}
}

void bench_tcp_read(int fd, void *p, size_t n, int secs)
{
	char *c = p;

	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r = poll(&pfd, 1, secs * 1000);
		ssize_t got;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			bench_die("poll: %s", strerror(errno));
		if (r == 0)
			bench_die("the peer said nothing for %d s", secs);
		got = read(fd, c, n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			bench_die("TCP read from the peer: %s",
				  strerror(errno));
		if (got == 0)
			bench_die("the peer closed the connection "
				  "(did it fail?)");
		c += got;
		n -= (size_t)got;
	}
}

int bench_tcp_accept(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_ANY) };
	struct pollfd pfd;
	int one = 1, ls, fd;

	ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0)
		bench_die("socket: %s", strerror(errno));
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		bench_die("bind to TCP port %d: %s", port, strerror(errno));
	if (listen(ls, 1) < 0)
		bench_die("listen: %s", strerror(errno));
	pfd = (struct pollfd){ .fd = ls, .events = POLLIN };
	if (poll(&pfd, 1, 120 * 1000) <= 0)
		bench_die("no client connected to port %d within 120 s", port);
	fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		bench_die("accept: %s", strerror(errno));
	close(ls);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int bench_tcp_connect(const char *host, int port)
{
	struct addrinfo hints = { .ai_family = AF_INET,
				  .ai_socktype = SOCK_STREAM }, *ai;
	char service[16];
	int one = 1, fd = -1, err, i;

	snprintf(service, sizeof(service), "%d", port);
	err = getaddrinfo(host, service, &hints, &ai);
	if (err)
		bench_die("cannot resolve %s: %s", host, gai_strerror(err));
	for (i = 0; i < 100; i++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			bench_die("socket: %s", strerror(errno));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		err = errno;
		close(fd);
		fd = -1;
		if (err != ECONNREFUSED)
			break;
		usleep(100 * 1000);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		bench_die("cannot connect to %s port %d: %s", host, port,
			  strerror(err));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

void bench_barrier(int fd)
{
	char c = 'b';

	bench_tcp_write(fd, &c, 1);
	bench_tcp_read(fd, &c, 1, 300);
	if (c != 'b')
		bench_die("protocol error on the TCP connection");
}
