/*
 * softib_sib.c: `softib sib`, the libsib workers of this host (and user):
 * each worker's endpoints with their locality (same package / same host /
 * remote), its connections (which XRC send QP serves which host), the XRC
 * receive QPs it made for other hosts' senders, SRQ occupancy per size
 * class, and the counters of each protocol.  It reads the files libsib
 * publishes under /dev/shm (sib-stats-<uid>-<SOFTIB_SEG_TAG>-<pid>-<id>,
 * transport/stats.c: the workers of the segment this softib looks at);
 * files of processes that are gone are skipped (and removed).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "softib.h"

static const char *const labels[][2] = {
	{ "worker", "worker" }, { "srq", "  SRQ" }, { "conn", "  send QP" },
	{ "rqp", "  recv QP" }, { "ep", "  endpoint" }, { "proto", "  protocol" },
	{ "counters", "  counters" },
};

static void show_file(const char *path)
{
	char line[1024];
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' ');
		const char *label = NULL;

		if (!sp)
			continue;
		*sp = 0;
		for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++)
			if (!strcmp(line, labels[i][0]))
				label = labels[i][1];
		printf("%-11s %s", label ? label : line, sp + 1);
	}
	fclose(f);
	putchar('\n');
}

void show_sib(const struct view *v)
{
	char prefix[160], path[600];
	struct dirent *d;
	DIR *dir = opendir("/dev/shm");
	int n = 0;

	(void)v;
	if (!dir) {
		printf("no /dev/shm\n");
		return;
	}
	snprintf(prefix, sizeof(prefix), "sib-stats-%u-%s-", (unsigned)getuid(),
		 getenv("SOFTIB_SEG_TAG") ? getenv("SOFTIB_SEG_TAG") : "");
	while ((d = readdir(dir))) {
		int pid;

		if (strncmp(d->d_name, prefix, strlen(prefix)) ||
		    strstr(d->d_name, ".tmp"))
			continue;
		pid = atoi(d->d_name + strlen(prefix));
		snprintf(path, sizeof(path), "/dev/shm/%s", d->d_name);
		if (pid <= 0 || (kill(pid, 0) && errno == ESRCH)) {
			unlink(path);   /* its process is gone */
			continue;
		}
		show_file(path);
		n++;
	}
	closedir(dir);
	if (!n)
		printf("no libsib worker on this host\n");
}
