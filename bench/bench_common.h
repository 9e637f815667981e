/*
 * bench_common: what the benchmark programs of bench/ share — the error
 * exit, the clock, size arguments with k/m/g suffixes, and the small TCP
 * connection on which the two sides of a benchmark meet (accept or
 * connect, whole-buffer writes and reads, a barrier).
 *
 * Every helper that fails exits through bench_die, with the message
 * prefixed by bench_prog, which each program defines:
 *
 *   const char bench_prog[] = "udp_rc";
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

extern const char bench_prog[];

/* "bench_prog: message\n" on stderr, then exit(1). */
void bench_die(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* A number with an optional k, m or g suffix (powers of 1024); anything
 * else dies with "bad WHAT 'S'". */
uint64_t bench_parse_size(const char *s, const char *what);

/* Runs the calling thread on CPU cpu only (nothing if cpu < 0); dies if
 * the kernel refuses. */
void bench_pin(int cpu);

/* An option's number (k/m/g suffixes allowed) in lo .. hi, else dies
 * with "-OPT must be in lo .. hi". */
uint32_t bench_parse_in(const char *s, uint64_t lo, uint64_t hi, char opt);
/* A -t argument: names[i] (a NULL-terminated list) gives bit i, "all"
 * every bit; anything else dies naming the choices. */
unsigned bench_parse_tests(const char *s, const char *const names[]);

/* Writes all n bytes to the peer. */
void bench_tcp_write(int fd, const void *p, size_t n);
/* Reads n bytes, waiting at most secs for each piece. */
void bench_tcp_read(int fd, void *p, size_t n, int secs);
/* Listens on TCP port (any address) and accepts one client within 120 s;
 * the connection is TCP_NODELAY. */
int bench_tcp_accept(int port);
/* Connects, retrying for 10 s while the server does not listen yet. */
int bench_tcp_connect(const char *host, int port);
/* Both sides call it at the same point: neither passes before the other
 * has arrived. */
void bench_barrier(int fd);

#endif
