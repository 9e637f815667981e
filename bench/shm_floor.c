/*
 * shm_floor: the floors softib's intra-host latency is measured against.
 *
 *   shm_floor [-t lat|cma] [-a CPU] [-b CPU] [-m SIZE] [-n ITERS]
 *
 * -t lat (default): a two-process ping-pong through shared memory, the
 *   least any intra-host message transport can cost. Each direction has
 *   a cache line holding a sequence word and a payload area; the sender
 *   copies its payload (from a private buffer) into the area, then
 *   publishes the sequence with a release store; the receiver busy-polls
 *   the word with acquire loads and copies the payload out into its
 *   private buffer. Sizes 1 B .. SIZE (default 4 MiB), osu's iteration
 *   counts (as build/bin/softib_osu), half the round trip.
 * -t cma: the cost of one process_vm_writev of each size 1 B .. 4 KiB
 *   toward a second process (which only sleeps), averaged over ITERS
 *   calls — the system call softib's small messages used to pay.
 *
 * -a / -b pin the first and second process to a CPU (default: 0 and 1),
 * so that every anchor of bench/verbs_vs_floor.sh has the same placement.
 * Output: osu-style two columns, "size latency_us".
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "bench_cma.h"

const char bench_prog[] = "shm_floor";

#define MAX_SIZE_DEFAULT (4u << 20)

/* One direction: the sequence word alone on its line, then the payload. */
struct lane {
	_Atomic uint64_t seq;
	char pad[56];
	char data[];
};

static uint32_t iters_for(uint32_t size, uint32_t forced)
{
	uint64_t n = forced ? forced : (size <= 8192 ? 10000 : 1000);

	if (size > 65536) {
		n = n * 65536 / size;
		if (n < 20)
			n = 20;
	}
	return (uint32_t)n;
}

static uint32_t skip_for(uint32_t size)
{
	return size <= 8192 ? 100 : size <= 65536 ? 10 : 2;
}

/* Wait for `want` on the lane, then copy its payload out. */
static void lane_recv(struct lane *l, uint64_t want, char *priv, uint32_t size)
{
	while (atomic_load_explicit(&l->seq, memory_order_acquire) != want)
		;
	memcpy(priv, l->data, size);
}

static void lane_send(struct lane *l, uint64_t seq, const char *priv, uint32_t size)
{
	memcpy(l->data, priv, size);
	atomic_store_explicit(&l->seq, seq, memory_order_release);
}

static void run_lat(int cpu_a, int cpu_b, uint32_t max, uint32_t forced)
{
	size_t lane_bytes = sizeof(struct lane) + max;
	char *shm = mmap(NULL, 2 * lane_bytes + 4096, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct lane *ab, *ba;
	char *priv = malloc(max);
	uint64_t seq = 0;
	pid_t pid;

	if (shm == MAP_FAILED || !priv)
		bench_die("out of memory");
	ab = (struct lane *)shm;
	ba = (struct lane *)(shm + ((lane_bytes + 4095) & ~(size_t)4095));
	memset(priv, 'a', max);
	pid = fork();
	if (pid < 0)
		bench_die("fork: %s", strerror(errno));
	if (pid == 0) { /* the echoing side: the same sizes, the same order */
		bench_pin(cpu_b);
		for (uint32_t size = 1; size <= max; size *= 2) {
			uint32_t n = iters_for(size, forced) + skip_for(size);

			for (uint32_t i = 0; i < n; i++) {
				seq++;
				lane_recv(ab, seq, priv, size);
				lane_send(ba, seq, priv, size);
			}
		}
		_exit(0);
	}
	bench_pin(cpu_a);
	printf("# shared-memory ping-pong floor (cpu %d <-> cpu %d)\n", cpu_a, cpu_b);
	printf("# Size          Latency (us)\n");
	for (uint32_t size = 1; size <= max; size *= 2) {
		uint32_t n = iters_for(size, forced), skip = skip_for(size);
		uint64_t t0 = 0;

		for (uint32_t i = 0; i < n + skip; i++) {
			if (i == skip)
				t0 = bench_now_ns();
			seq++;
			lane_send(ab, seq, priv, size);
			lane_recv(ba, seq, priv, size);
		}
		printf("%-10u %17.2f\n", size,
		       (double)(bench_now_ns() - t0) / 1000.0 / (2.0 * n));
		fflush(stdout);
	}
	waitpid(pid, NULL, 0);
}

static void run_cma(int cpu_a, int cpu_b, uint32_t forced)
{
	uint32_t max = 4096, n = forced ? forced : 20000;
	struct cma_floor f;

	cma_floor_start(&f, max, cpu_b);
	if (!f.child)
		bench_die("no target process for process_vm_writev");
	bench_pin(cpu_a);
	printf("# one process_vm_writev to another process (cpu %d -> cpu %d)\n",
	       cpu_a, cpu_b);
	printf("# Size          Latency (us)\n");
	for (uint32_t size = 1; size <= max; size *= 2) {
		double us = cma_floor_call_us(&f, size, n);

		if (us == 0)
			bench_die("process_vm_writev of %u bytes failed", size);
		printf("%-10u %17.2f\n", size, us);
		fflush(stdout);
	}
	cma_floor_stop(&f);
}

int main(int argc, char **argv)
{
	const char *test = "lat";
	int cpu_a = 0, cpu_b = 1, c;
	uint32_t max = MAX_SIZE_DEFAULT, iters = 0;

	while ((c = getopt(argc, argv, "t:a:b:m:n:h")) != -1) {
		switch (c) {
		case 't':
			test = optarg;
			break;
		case 'a':
			cpu_a = atoi(optarg);
			break;
		case 'b':
			cpu_b = atoi(optarg);
			break;
		case 'm':
			max = (uint32_t)bench_parse_size(optarg, "size");
			break;
		case 'n':
			iters = (uint32_t)bench_parse_size(optarg, "iteration count");
			break;
		default:
			fprintf(stderr, "usage: shm_floor [-t lat|cma] [-a CPU] [-b CPU] "
					"[-m SIZE] [-n ITERS]\n");
			return 2;
		}
	}
	if (!max)
		bench_die("-m must be at least 1");
	if (!strcmp(test, "lat"))
		run_lat(cpu_a, cpu_b, max, iters);
	else if (!strcmp(test, "cma"))
		run_cma(cpu_a, cpu_b, iters);
	else
		bench_die("unknown test '%s' (lat, cma)", test);
	return 0;
}
