/*
 * softib_status.c: `softib status` (the default command): device softib0
 * and its port as a verbs client sees them (the device's own functions,
 * dev_attr.h), then the segment: its version and live processes, the
 * heap's free bytes, clamped UDP receive buffers, and the segments of
 * other softib builds.
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <endian.h>

#include "dev_attr.h"
#include "softib.h"

static unsigned long netns_ino(void)
{
	struct stat st;

	return stat("/proc/self/ns/net", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

static const char *mtu_name(enum ibv_mtu m)
{
	static const char *const names[] = { "?", "256", "512", "1024", "2048", "4096" };

	return (unsigned)m < sizeof(names) / sizeof(names[0]) ? names[m] : "?";
}

static const char *port_state_name(enum ibv_port_state s)
{
	static const char *const names[] = { "PORT_NOP", "PORT_DOWN", "PORT_INIT",
					     "PORT_ARMED", "PORT_ACTIVE",
					     "PORT_ACTIVE_DEFER" };

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

static void print_gid(const union ibv_gid *g)
{
	for (int i = 0; i < 16; i += 2)
		printf("%02x%02x%s", g->raw[i], g->raw[i + 1], i < 14 ? ":" : "\n");
}

static void print_guid(__be64 guid)
{
	uint64_t g = be64toh(guid);

	printf("%04x:%04x:%04x:%04x\n", (unsigned)(g >> 48) & 0xffff,
	       (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff,
	       (unsigned)g & 0xffff);
}

static void print_iface(const struct hca_host_net *net)
{
	char ip[INET_ADDRSTRLEN];
	struct in_addr a = { .s_addr = net->ipv4 };

	if (!net->ipv4) {
		printf("  interface     none (loopback only)\n");
		return;
	}
	inet_ntop(AF_INET, &a, ip, sizeof(ip));
	printf("  interface     %s %s mtu %d\n", net->ifname, ip, net->ifmtu);
}

static void print_port(const struct hca_host_net *net, __be64 guid)
{
	struct ibv_port_attr pa;
	enum ibv_mtu mtu = hca_mtu_for_ifmtu(net->ifmtu);
	uint16_t lid = hca_host_lid(net);
	union ibv_gid gid;

	printf("port 1\n");
	if (hca_fill_port_attr(&pa, sizeof(pa), lid, mtu) == 0)
		printf("  state         %s (%d)\n", port_state_name(pa.state), pa.state);
	printf("  LID           0x%04x\n", lid);
	printf("  active MTU    %s (%d)\n", mtu_name(mtu), mtu);
	printf("  link layer    InfiniBand\n");
	printf("  GID[0]        ");
	if (hca_gid_entry(net, guid, 0, &gid) == 0)
		print_gid(&gid);
	else
		printf("?\n");
	print_iface(net);
}

/* The layout part of a segment name after prefix: "v<version>.<size>". */
static size_t layout_len(const char *name, size_t n)
{
	return name[n] == '-' ? strcspn(name + n + 1, "-") : 0;
}

/*
 * Segments of this user and host made by other softib builds (another
 * layout, so another name): their processes run a library other than the
 * one this tool was built with. Named only, never read. Not listed: the
 * lock files beside segments, and segments of this build under another
 * SOFTIB_SEG_TAG (the same library, another group of processes).
 */
static void print_other_segments(const char *ours)
{
	char prefix[64];
	struct dirent *de;
	DIR *d = opendir("/dev/shm");
	size_t n, len, our_len;

	if (!d)
		return;
	n = (size_t)snprintf(prefix, sizeof(prefix), "softib-%u-%lu",
			     (unsigned)getuid(), netns_ino());
	our_len = layout_len(ours + 1, n);
	while ((de = readdir(d))) {
		len = strlen(de->d_name);
		if (strncmp(de->d_name, prefix, n) || de->d_name[n] != '-' ||
		    (len > 5 && !strcmp(de->d_name + len - 5, ".lock")))
			continue;
		if (layout_len(de->d_name, n) == our_len &&
		    !strncmp(de->d_name + n, ours + 1 + n, our_len + 1))
			continue;
		printf("other segment   /%s (another softib build: not read)\n", de->d_name);
	}
	closedir(d);
}

/*
 * The UDP receive buffers of the live processes: a buffer the kernel
 * clamped below what was asked (net.core.rmem_max) drops bursts on the
 * UDP link, which then shows as retransmissions; say so here, and how to
 * lift it.
 */
static void print_rcvbuf(const struct view *v)
{
	uint64_t want = 0, least = UINT64_MAX;
	int n = 0, clamped = 0;

	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		const struct hca_proc *p = &v->seg->procs[s];
		uint64_t w = atomic_load(&p->link.rcvbuf_want);
		uint64_t g = atomic_load(&p->link.rcvbuf_got);

		if (atomic_load(&p->state) != HCA_PROC_LIVE || !w)
			continue;
		n++;
		if (g < w) {
			clamped++;
			want = w > want ? w : want;
			least = g < least ? g : least;
		}
	}
	if (!n)
		return;
	if (!clamped) {
		printf("UDP rcvbuf      as asked in every process\n");
		return;
	}
	printf("UDP rcvbuf      CLAMPED in %d of %d process%s: %llu KiB granted, "
	       "%llu KiB asked\n", clamped, n, n == 1 ? "" : "es",
	       (unsigned long long)least >> 10, (unsigned long long)want >> 10);
	printf("                (net.core.rmem_max; raise it: sysctl -w "
	       "net.core.rmem_max=%llu)\n", (unsigned long long)want);
}

/*
 * The heap's free bytes: the part never handed out (above the bump
 * pointer), the blocks on the free lists and those in quarantine (freed,
 * waiting to go back to their lists). Read without the lock, so exact
 * only while nothing allocates or frees; a walk that meets an offset
 * outside the heap, or more blocks than the heap can hold, stops there
 * and says so (-1).
 */
static long long heap_free_bytes(const struct view *v)
{
	const struct hca_seg *seg = v->seg;
	uint64_t lo = seg->heap_off, hi = seg->heap_off + seg->heap_size;
	uint64_t total, max_blocks = seg->heap_size >> HCA_HEAP_MIN_ORDER;
	uint32_t nq = seg->nquar;

	if (hi > v->len || seg->heap_bump > seg->heap_size || nq > HCA_QUARANTINE_LEN) {
		fprintf(stderr, "softib: heap header out of bounds (bump %llu, %u in quarantine)\n",
			(unsigned long long)seg->heap_bump, nq);
		return -1;
	}
	total = seg->heap_size - seg->heap_bump;
	for (unsigned o = HCA_HEAP_MIN_ORDER; o <= HCA_HEAP_MAX_ORDER; o++) {
		uint64_t n = 0;

		for (uint64_t off = seg->heap_free[o]; off; n++) {
			if (off < lo || off + (1ULL << o) > hi || n > max_blocks) {
				fprintf(stderr, "softib: free list of order %u: %s at block %llu "
					"(offset %llu)\n", o, n > max_blocks ? "a cycle" :
					"an offset outside the heap", (unsigned long long)n,
					(unsigned long long)off);
				return -1;
			}
			total += 1ULL << o;
			off = *(const uint64_t *)((const char *)seg + off);
		}
	}
	for (uint32_t i = 0; i < nq; i++)
		total += 1ULL << seg->quar[i].order;
	return (long long)total;
}

static void print_segment(const struct view *v, int rc)
{
	printf("segment         %s", v->name);
	if (rc == 1)
		printf(" (absent)\nno softib process on this host\n");
	else if (rc < 0)
		printf(" (unusable)\n");
	else
		printf(" (version %u, %d live process%s)\n", v->seg->version,
		       live_procs(v->seg), live_procs(v->seg) == 1 ? "" : "es");
	if (rc == 0) {
		long long f = heap_free_bytes(v);

		if (f < 0)
			printf("heap free       ? (the heap changed under the walk: ask again)\n");
		else
			printf("heap free       %lld bytes of %llu\n", f,
			       (unsigned long long)v->seg->heap_size);
	}
	if (rc == 0)
		print_rcvbuf(v);
	print_other_segments(v->name);
}

void show_status(const struct view *v, int rc)
{
	struct hca_host_net net;
	__be64 guid;
	int err = hca_host_net_probe(&net);

	if (err) {
		fprintf(stderr, "softib: host probe: %s\n", strerror(err));
		memset(&net, 0, sizeof(net));
	}
	guid = hca_node_guid(&net, getuid());
	printf("device          softib0\n");
	printf("transport       InfiniBand (software HCA in user space)\n");
	printf("node GUID       ");
	print_guid(guid);
	print_port(&net, guid);
	print_segment(v, rc);
}

