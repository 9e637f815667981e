/*
 * softib: answers "am I really running on softib?".
 *
 * It shows the device and its port as a verbs client would see them (from
 * the same functions the device uses: dev_attr.h), then what is alive on
 * this host, read from the host's shared segment (seg.h): the processes
 * that have the device open, their QPs with per-QP counters, SRQs, CQs,
 * memory keys and XRC domains.
 *
 * The segment is mapped read-only and never created: a host where no
 * softib process ever ran has nothing to show. Entries change under our
 * feet while we read them; each one is read between two loads of its id
 * and skipped if the id changed, so a row is never a mix of two objects.
 * The numbers are a snapshot, not a consistent cut of the whole device.
 */
#include <stdio.h>
#include <string.h>

#include "softib.h"

/* ---- command line ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: softib [-h] [command]\n"
		"Shows whether this host runs softib, and what is alive on it.\n"
		"\n"
		"commands:\n"
		"  status   device softib0, port 1 (state, LID, MTU, GID[0]), segment (default)\n"
		"  procs    processes that have the device open\n"
		"  qps      every live QP of the host, with its counters\n"
		"  srqs     shared receive queues\n"
		"  cqs      completion queues\n"
		"  mrs      memory keys\n"
		"  xrcds    XRC domains\n"
		"  counters per-QP packets, retransmissions, NAKs, RNR NAKs, drops by\n"
		"           cause; per-process UDP link packets and refusals by cause,\n"
		"           datagrams from other users dropped\n"
		"  sib      libsib workers: endpoints, connections, SRQs, protocol counters\n"
		"  heap-check  the segment heap checked under the segment lock: blocks\n"
		"           in use, quarantined, free; none shared, none lost (exit 1 if not)\n"
		"  all      all of the above\n");
}

struct cmd {
	const char *name;
	void (*show)(const struct view *v);
	const char *title;
};
static const struct cmd cmds[] = {
	{ "procs", show_procs, "processes" },
	{ "qps", show_qps, "queue pairs" },
	{ "srqs", show_srqs, "shared receive queues" },
	{ "cqs", show_cqs, "completion queues" },
	{ "mrs", show_mrs, "memory keys" },
	{ "xrcds", show_xrcds, "XRC domains" },
	{ "counters", show_counters, "counters" },
	{ "sib", show_sib, "libsib workers (transport/)" },
};

#define NCMDS ((int)(sizeof(cmds) / sizeof(cmds[0])))

static int run_all(const struct view *v, int rc)
{
	show_status(v, rc);
	if (rc)
		return rc < 0;
	for (int i = 0; i < NCMDS; i++) {
		printf("\n%s\n", cmds[i].title);
		cmds[i].show(v);
	}
	return 0;
}

/* A listing: nothing to list without a segment, and that is no error. */
static int run_one(const struct cmd *c, const struct view *v, int rc)
{
	if (rc == 1)
		printf("no softib process on this host\n");
	else if (rc == 0)
		c->show(v);
	return rc < 0;
}

static const struct cmd *cmd_find(const char *name)
{
	for (int i = 0; i < NCMDS; i++)
		if (!strcmp(name, cmds[i].name))
			return &cmds[i];
	return NULL;
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "status";
	const struct cmd *c = cmd_find(name);
	struct view v = { 0 };
	int rc, ret;

	if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(name, "heap-check") && argc == 2)
		return softib_heap_check();
	if (argc > 2 || (!c && strcmp(name, "status") && strcmp(name, "all"))) {
		if (argc > 2)
			fprintf(stderr, "softib: one command at a time\n");
		else
			fprintf(stderr, "softib: unknown command '%s'\n", name);
		usage(stderr);
		return 2;
	}
	rc = view_open(&v);
	if (c)
		ret = run_one(c, &v, rc);
	else if (!strcmp(name, "all"))
		ret = run_all(&v, rc);
	else {
		show_status(&v, rc);
		ret = rc < 0;
	}
	view_close(&v);
	return ret;
}
