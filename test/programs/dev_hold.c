/*
 * dev_hold: open softib0, say so, and keep it open — a live process on
 * the device while the integration scripts look at what the host holds.
 *
 *   dev_hold [-d dev] [-t secs] [-n]
 *
 * Prints "open <pid>" once ibv_open_device has returned (and a PD has
 * been allocated, so the device is really started), then waits until its
 * standard input reaches end of file (not with -n) or secs have passed
 * (default 600), closes the device and exits 0. Exit 1 if the device
 * cannot be opened.
 */
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *name = "softib0";
	int secs = 600, opt, n, watch_stdin = 1;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	char buf[64];

	while ((opt = getopt(argc, argv, "d:t:n")) != -1) {
		if (opt == 'n')
			watch_stdin = 0;
		else if (opt == 'd')
			name = optarg;
		else if (opt == 't')
			secs = atoi(optarg);
		else
			return 2;
	}
	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "dev_hold: cannot open %s\n", name);
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	if (!pd) {
		fprintf(stderr, "dev_hold: ibv_alloc_pd failed\n");
		return 1;
	}
	printf("open %d\n", (int)getpid());
	fflush(stdout);
	for (time_t end = time(NULL) + secs; time(NULL) < end;) {
		struct pollfd p = { .fd = watch_stdin ? 0 : -1, .events = POLLIN };

		if (poll(&p, 1, 1000) > 0 && read(0, buf, sizeof(buf)) <= 0)
			break;
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
