/*
 * tp_common.h: what the test programs of test/programs/ share (each
 * program links tp_common.c): the error exit that names the program, the
 * monotonic clock, and whole-buffer transfers on the control socket (a
 * socketpair or TCP connection between the two sides of a test).
 */
#ifndef TP_COMMON_H
#define TP_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The program's name in tp_die's messages ("test" unless the program
 * defines it); a side may change it after a fork ("x[child]"). */
extern const char *tp_who;
/* Called by tp_die before it exits, if set (a verdict line on stdout). */
extern void (*tp_on_die)(void);

/* "<tp_who>: <message>\n" on stderr, then exit(1). */
void tp_die(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));

/* CLOCK_MONOTONIC in seconds, and in nanoseconds. */
double tp_now_s(void);
int64_t tp_now_ns(void);

/*
 * Writes (out) or reads all n bytes on fd, retrying on EINTR; a read
 * waits at most secs for each piece. Any failure, a closed peer or the
 * silence dies with a message.
 */
void tp_xfer(int fd, void *p, size_t n, bool out, int secs);

#endif
