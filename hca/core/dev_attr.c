/*
 * The device's identity and attribute answers (see dev_attr.h): the host
 * probe, the LID/MTU/GID/GUID derivations, the query_device_ex and
 * query_port structs, and the device's sysfs files.  No global state.
 */
#include "dev_attr.h"
#include "hca_limits.h" /* the device's capacities */

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netpacket/packet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- host probe ---------------------------------------------------------- */

static uint64_t netns_inode(void)
{
	struct stat st;

	/* Without /proc the namespace cannot be told apart: 0 stands for it. */
	if (stat("/proc/self/ns/net", &st) != 0)
		return 0;
	return (uint64_t)st.st_ino;
}

/*
 * The MTU as this network namespace sees it.  An ioctl on a socket asks the
 * namespace the process is in; /sys/class/net would answer for whichever
 * namespace sysfs was mounted in.
 */
static int iface_mtu(const char *name, int *mtu)
{
	struct ifreq ifr;
	int fd, err = 0;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, SIOCGIFMTU, &ifr) != 0)
		err = errno;
	else
		*mtu = ifr.ifr_mtu;
	close(fd);
	return err;
}

/* The link-layer address comes with the AF_PACKET entry of the interface. */
static void iface_mac(const struct ifaddrs *ifs, const char *name,
		      uint8_t mac[6])
{
	for (const struct ifaddrs *ifa = ifs; ifa; ifa = ifa->ifa_next) {
		const struct sockaddr_ll *ll;

		if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_PACKET ||
		    strcmp(ifa->ifa_name, name) != 0)
			continue;
		ll = (const struct sockaddr_ll *)ifa->ifa_addr;
		if (ll->sll_halen == 6) {
			memcpy(mac, ll->sll_addr, 6);
			return;
		}
	}
}

static bool ifa_has_ipv4(const struct ifaddrs *ifa)
{
	return ifa->ifa_addr && ifa->ifa_addr->sa_family == AF_INET &&
	       ((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr.s_addr;
}

int hca_host_net_probe(struct hca_host_net *out)
{
	const struct ifaddrs *pick = NULL;
	struct ifaddrs *ifs;
	const char *want;
	bool want_is_loopback = false;
	int err = 0;

	if (!out)
		return EINVAL;
	memset(out, 0, sizeof(*out));
	out->netns_ino = netns_inode();

	want = getenv("SOFTIB_NETDEV");
	if (want && !*want)
		want = NULL;
	if (want && strlen(want) >= sizeof(out->ifname))
		return ENODEV; /* longer than any interface name can be */

	if (getifaddrs(&ifs) != 0)
		return errno ? errno : EIO;

	for (const struct ifaddrs *ifa = ifs; ifa; ifa = ifa->ifa_next) {
		if (want) {
			if (strcmp(ifa->ifa_name, want) != 0)
				continue;
			if (ifa->ifa_flags & IFF_LOOPBACK) {
				want_is_loopback = true;
				break;
			}
		} else if (!(ifa->ifa_flags & IFF_UP) ||
			   (ifa->ifa_flags & IFF_LOOPBACK)) {
			continue;
		}
		if (ifa_has_ipv4(ifa)) {
			pick = ifa;
			break;
		}
	}

	/*
	 * Naming the loopback interface is how a user asks for the
	 * loopback-only identity on a host that has other interfaces: a
	 * loopback address is no host's identity (every namespace has one).
	 */
	if (want_is_loopback)
		goto out;
	if (!pick) {
		if (want)
			err = ENODEV;
		goto out;
	}

	err = iface_mtu(pick->ifa_name, &out->ifmtu);
	if (err)
		goto out;
	out->ipv4 = ((const struct sockaddr_in *)pick->ifa_addr)->sin_addr.s_addr;
	snprintf(out->ifname, sizeof(out->ifname), "%s", pick->ifa_name);
	iface_mac(ifs, out->ifname, out->mac);
out:
	freeifaddrs(ifs);
	if (err) {
		uint64_t ino = out->netns_ino;

		memset(out, 0, sizeof(*out));
		out->netns_ino = ino;
	}
	return err;
}

/* ---- MTU, LID, GUID, GID ------------------------------------------------- */

enum ibv_mtu hca_mtu_for_ifmtu(int ifmtu)
{
	if (ifmtu == 0)
		return IBV_MTU_4096; /* loopback only: no wire to fit */
	for (enum ibv_mtu m = IBV_MTU_4096; m > IBV_MTU_256; m--) {
		/* IB MTU code m stands for 128 << m bytes (1 = 256). */
		if ((128 << m) + HCA_WIRE_OVERHEAD <= ifmtu)
			return m;
	}
	return IBV_MTU_256;
}

uint16_t hca_host_lid(const struct hca_host_net *net)
{
	uint32_t v;

	if (!net)
		return 1;
	if (net->ipv4) {
		/*
		 * The low 16 bits of the address, kept as they are when they
		 * are a unicast LID.  Folding modulo 0xBFFF only maps together
		 * values 0xBFFF apart, which two hosts of one /17 never are.
		 */
		v = (ntohl(net->ipv4) & 0xffff) % HCA_LID_UNICAST_MAX;
		return v ? (uint16_t)v : HCA_LID_UNICAST_MAX;
	}
	return (uint16_t)(net->netns_ino % HCA_LID_UNICAST_MAX + 1);
}

/* FNV-1a over a byte string, then a 64-bit finaliser to spread the bits. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint64_t hash_final(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* /etc/machine-id: 32 hex digits and a newline; "" when unreadable. */
static size_t read_machine_id(char *buf, size_t size)
{
	ssize_t n;
	int fd;

	fd = open("/etc/machine-id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, size);
	close(fd);
	if (n <= 0)
		return 0;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	return (size_t)n;
}

static bool mac_is_zero(const uint8_t mac[6])
{
	static const uint8_t zero[6];

	return memcmp(mac, zero, 6) == 0;
}

__be64 hca_node_guid(const struct hca_host_net *net, uid_t uid)
{
	uint8_t g[8];
	__be64 guid;

	if (net && !mac_is_zero(net->mac)) {
		/*
		 * Modified EUI-64: OUI, ff:fe, the rest of the MAC, with the
		 * universal/local bit inverted, as IPv6 and RoCE devices do.
		 */
		g[0] = net->mac[0] ^ 0x02;
		g[1] = net->mac[1];
		g[2] = net->mac[2];
		g[3] = 0xff;
		g[4] = 0xfe;
		g[5] = net->mac[3];
		g[6] = net->mac[4];
		g[7] = net->mac[5];
	} else {
		uint64_t h = 0xcbf29ce484222325ULL, ino = net ? net->netns_ino : 0;
		uint32_t u = (uint32_t)uid;
		char mid[64];
		size_t n = read_machine_id(mid, sizeof(mid));

		h = hash_bytes(h, &ino, sizeof(ino));
		h = hash_bytes(h, &u, sizeof(u));
		h = hash_bytes(h, mid, n);
		h = hash_final(h);
		for (int i = 0; i < 8; i++)
			g[i] = (uint8_t)(h >> (56 - 8 * i));
		/*
		 * In modified EUI-64 terms: an individual (not group) and
		 * locally administered identifier, so it can never equal one
		 * derived from a real MAC.
		 */
		g[0] &= (uint8_t)~0x03;
		if (!(g[1] | g[2] | g[3] | g[4] | g[5] | g[6] | g[7]))
			g[7] = 1;
	}
	memcpy(&guid, g, sizeof(guid));
	return guid;
}

int hca_gid_entry(const struct hca_host_net *net, __be64 node_guid, int index,
		  union ibv_gid *gid)
{
	if (!net || !gid || index < 0 || index >= HCA_GID_TBL_LEN)
		return EINVAL;
	memset(gid, 0, sizeof(*gid));
	if (index != 0)
		return 0; /* unused entries read as zeros */
	if (net->ipv4) {
		/* IPv4-mapped IPv6 address ::ffff:a.b.c.d (RFC 4291 2.5.5.2) */
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &net->ipv4, 4);
	} else {
		/* the default GID: link-local prefix fe80::/64 + node GUID */
		gid->raw[0] = 0xfe;
		gid->raw[1] = 0x80;
		memcpy(&gid->raw[8], &node_guid, 8);
	}
	return 0;
}

/* ---- query_device_ex / query_port ---------------------------------------- */

/*
 * Write exactly size bytes at dst: the first min(size, ours) bytes of src,
 * zeros after them.
 */
static void copy_sized(void *dst, size_t size, const void *src, size_t ours)
{
	size_t n = size < ours ? size : ours;

	memcpy(dst, src, n);
	if (size > n)
		memset((char *)dst + n, 0, size - n);
}

int hca_fill_device_attr_ex(struct ibv_device_attr_ex *attr, size_t attr_size,
			    __be64 node_guid)
{
	struct ibv_device_attr_ex a;
	struct ibv_device_attr *d = &a.orig_attr;

	if (!attr || attr_size < sizeof(struct ibv_device_attr))
		return EINVAL;

	/* Everything not set below is a capability softib does not have. */
	memset(&a, 0, sizeof(a));
	snprintf(d->fw_ver, sizeof(d->fw_ver), "%s", HCA_FW_VER_STR);
	d->node_guid = node_guid;
	d->sys_image_guid = node_guid; /* one device per system image */
	d->max_mr_size = HCA_MAX_MR_SIZE;
	/* Registration tracks byte ranges: any page size from 4 KiB up. */
	d->page_size_cap = ~(uint64_t)(4096 - 1);
	d->vendor_id = HCA_VENDOR_ID;
	d->vendor_part_id = HCA_VENDOR_PART_ID;
	d->hw_ver = HCA_HW_VER;
	/* what one process can hold: the 65,536 QP numbers of its slot (a
	 * host holds up to 254 times that: as many as its memory allows) */
	d->max_qp = HCA_QP_PER_PROC;
	d->max_qp_wr = HCA_MAX_QP_WR;
	d->device_cap_flags = HCA_DEVICE_CAP_FLAGS;
	d->max_sge = HCA_MAX_SGE;
	d->max_sge_rd = HCA_MAX_SGE; /* READ responses scatter like receives */
	d->max_cq = HCA_MAX_CQ;
	d->max_cqe = HCA_MAX_CQE;
	d->max_mr = HCA_MAX_MR;
	d->max_pd = HCA_MAX_PD;
	d->max_qp_rd_atom = HCA_MAX_RD_ATOM;
	d->max_qp_init_rd_atom = HCA_MAX_RD_ATOM;
	/* responder resources are per QP, so every QP may hold its share */
	d->max_res_rd_atom = HCA_MAX_RD_ATOM * HCA_QP_PER_PROC;
	d->atomic_cap = IBV_ATOMIC_HCA; /* atomic among softib atomics only */
	d->max_mcast_grp = HCA_MAX_MCAST_GRP;
	d->max_mcast_qp_attach = HCA_MAX_QP_PER_MCG;
	d->max_total_mcast_qp_attach = HCA_MAX_MCAST_ATT;
	d->max_ah = HCA_MAX_AH;
	d->max_srq = HCA_MAX_SRQ;
	d->max_srq_wr = HCA_MAX_SRQ_WR;
	d->max_srq_sge = HCA_MAX_SRQ_SGE;
	d->max_pkeys = HCA_PKEY_TBL_LEN;
	/*
	 * 4.096 us << 15 = 134 ms: a responder is a process (or its progress
	 * thread) that the scheduler may hold off on a loaded machine, so a
	 * peer's ACK timeout must allow for it.
	 */
	d->local_ca_ack_delay = 15;
	d->phys_port_cnt = 1;

	/* comp_mask: no optional field of the extension is defined yet. */
	a.comp_mask = 0;
	/* Completion timestamps are CLOCK_MONOTONIC nanoseconds: a 1 GHz clock
	 * whose counter uses all 64 bits. */
	a.completion_timestamp_mask = UINT64_MAX;
	a.hca_core_clock = HCA_CORE_CLOCK_KHZ;
	a.device_cap_flags_ex = HCA_DEVICE_CAP_FLAGS;
	a.phys_port_cnt_ex = 1;
	/* odp, tso, rss, packet pacing, raw packet, tag matching, CQ
	 * moderation, device memory, PCI atomics, XRC ODP: none (zero). */

	copy_sized(attr, attr_size, &a, sizeof(a));
	return 0;
}

int hca_fill_port_attr(struct ibv_port_attr *attr, size_t attr_size,
		       uint16_t lid, enum ibv_mtu active_mtu)
{
	struct ibv_port_attr p;

	if (!attr || lid == 0 || lid > HCA_LID_UNICAST_MAX ||
	    active_mtu < IBV_MTU_256 || active_mtu > IBV_MTU_4096)
		return EINVAL;

	memset(&p, 0, sizeof(p));
	p.state = IBV_PORT_ACTIVE;
	p.max_mtu = IBV_MTU_4096;
	p.active_mtu = active_mtu;
	p.gid_tbl_len = HCA_GID_TBL_LEN;
	p.port_cap_flags = HCA_PORT_CAP_FLAGS;
	p.max_msg_sz = HCA_MAX_MSG_SIZE;
	p.bad_pkey_cntr = 0;
	p.qkey_viol_cntr = 0;
	p.pkey_tbl_len = HCA_PKEY_TBL_LEN;
	p.lid = lid;
	/* LIDs are self-assigned: the port is its own subnet manager's
	 * address, which is what tools that ask for the SM LID may use. */
	p.sm_lid = lid;
	p.lmc = 0;
	p.max_vl_num = 1; /* PortInfo encoding 1: VL0 only */
	p.sm_sl = 0;
	p.subnet_timeout = 18; /* 4.096 us << 18 = 1.07 s */
	p.init_type_reply = 0;
	p.active_width = HCA_PORT_WIDTH_4X;
	p.active_speed = HCA_PORT_SPEED_EDR;
	p.phys_state = HCA_PHYS_STATE_LINK_UP;
	p.link_layer = IBV_LINK_LAYER_INFINIBAND;
	p.flags = 0; /* LID-routed: no GRH required */
	p.port_cap_flags2 = 0;

	copy_sized(attr, attr_size, &p, sizeof(p));
	return 0;
}

/* ---- sysfs files --------------------------------------------------------- */

/*
 * What the files are made from.  Each file is a row of sysfs_files[]: a
 * fixed path, or a directory whose entries are numbered 0..count-1.
 */
struct sysfs_ctx {
	const struct hca_host_net *net;
	__be64 guid;
};

typedef int (*sysfs_show_fn)(const struct sysfs_ctx *c, int index, char *out,
			     size_t size);

struct sysfs_file {
	const char *path;  /* the file, or the directory with a trailing '/' */
	int count;         /* entries of a numbered directory; 0 for a file */
	sysfs_show_fn show;
};

/* A GUID as sysfs shows it: four groups of four hex digits. */
static int show_guid(__be64 guid, char *out, size_t size)
{
	uint64_t g = be64toh(guid);

	return snprintf(out, size, "%04x:%04x:%04x:%04x\n",
			(unsigned)(g >> 48) & 0xffff,
			(unsigned)(g >> 32) & 0xffff,
			(unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
}

static int show_node_guid(const struct sysfs_ctx *c, int i, char *out,
			  size_t size)
{
	(void)i;
	return show_guid(c->guid, out, size);
}

static int show_node_type(const struct sysfs_ctx *c, int i, char *out,
			  size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "%d: CA\n", IBV_NODE_CA);
}

static int show_node_desc(const struct sysfs_ctx *c, int i, char *out,
			  size_t size)
{
	char host[65];

	(void)c, (void)i;
	/* "<host> <device>" as rdma-ndd would set it; at most 64 chars. */
	if (gethostname(host, sizeof(host)) != 0 || !host[0])
		return snprintf(out, size, "softib\n");
	host[sizeof(host) - 1] = '\0';
	return snprintf(out, size, "%.57s softib\n", host);
}

static int show_fw_ver(const struct sysfs_ctx *c, int i, char *out, size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "%s\n", HCA_FW_VER_STR);
}

static int show_hw_rev(const struct sysfs_ctx *c, int i, char *out, size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "%x\n", HCA_HW_VER);
}

static int show_hca_type(const struct sysfs_ctx *c, int i, char *out,
			 size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "softib\n");
}

static int show_board_id(const struct sysfs_ctx *c, int i, char *out,
			 size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "%s\n", HCA_BOARD_ID);
}

static int show_state(const struct sysfs_ctx *c, int i, char *out, size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "%d: ACTIVE\n", IBV_PORT_ACTIVE);
}

static int show_phys_state(const struct sysfs_ctx *c, int i, char *out,
			   size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "%d: LinkUp\n", HCA_PHYS_STATE_LINK_UP);
}

static int show_lid(const struct sysfs_ctx *c, int i, char *out, size_t size)
{
	(void)i;
	return snprintf(out, size, "0x%x\n", hca_host_lid(c->net));
}

static int show_zero_dec(const struct sysfs_ctx *c, int i, char *out,
			 size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "0\n");
}

static int show_cap_mask(const struct sysfs_ctx *c, int i, char *out,
			 size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "0x%08x\n", (unsigned)HCA_PORT_CAP_FLAGS);
}

static int show_rate(const struct sysfs_ctx *c, int i, char *out, size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "%s\n", HCA_PORT_RATE_STR);
}

static int show_link_layer(const struct sysfs_ctx *c, int i, char *out,
			   size_t size)
{
	(void)c, (void)i;
	return snprintf(out, size, "InfiniBand\n");
}

/* A GID in full, uncompressed: eight groups of four hex digits. */
static int show_gid(const struct sysfs_ctx *c, int i, char *out, size_t size)
{
	union ibv_gid gid;
	const uint8_t *r = gid.raw;

	if (hca_gid_entry(c->net, c->guid, i, &gid) != 0)
		return -1;
	return snprintf(out, size,
			"%02x%02x:%02x%02x:%02x%02x:%02x%02x:"
			"%02x%02x:%02x%02x:%02x%02x:%02x%02x\n",
			r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8],
			r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
}

static int show_gid_type(const struct sysfs_ctx *c, int i, char *out,
			 size_t size)
{
	(void)c, (void)i;
	/* An InfiniBand port's GIDs are of type IB, which the kernel names
	 * together with RoCE v1 (they share the value 0). */
	return snprintf(out, size, "IB/RoCE v1\n");
}

static int show_pkey(const struct sysfs_ctx *c, int i, char *out, size_t size)
{
	(void)c;
	return snprintf(out, size, "0x%04x\n", i == 0 ? HCA_DEFAULT_PKEY : 0);
}

static const struct sysfs_file sysfs_files[] = {
	{ "node_type", 0, show_node_type },
	{ "node_guid", 0, show_node_guid },
	{ "sys_image_guid", 0, show_node_guid },
	{ "node_desc", 0, show_node_desc },
	{ "fw_ver", 0, show_fw_ver },
	{ "hw_rev", 0, show_hw_rev },
	{ "hca_type", 0, show_hca_type },
	{ "board_id", 0, show_board_id },
	{ "ports/1/state", 0, show_state },
	{ "ports/1/phys_state", 0, show_phys_state },
	{ "ports/1/lid", 0, show_lid },
	{ "ports/1/sm_lid", 0, show_lid },
	{ "ports/1/sm_sl", 0, show_zero_dec },
	{ "ports/1/lid_mask_count", 0, show_zero_dec },
	{ "ports/1/cap_mask", 0, show_cap_mask },
	{ "ports/1/rate", 0, show_rate },
	{ "ports/1/link_layer", 0, show_link_layer },
	{ "ports/1/gids/", HCA_GID_TBL_LEN, show_gid },
	{ "ports/1/gid_attrs/types/", HCA_GID_TBL_LEN, show_gid_type },
	{ "ports/1/pkeys/", HCA_PKEY_TBL_LEN, show_pkey },
};

/*
 * A directory entry's number as sysfs names it: decimal, no sign, no
 * leading zeros, below count.  -1 for anything else.
 */
static int entry_index(const char *s, int count)
{
	long v = 0;

	if (!*s || (s[0] == '0' && s[1]))
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
		if (v >= count)
			return -1;
	}
	return (int)v;
}

ssize_t hca_sysfs_read(const struct hca_host_net *net, __be64 node_guid,
		       const char *relpath, char *buf, size_t size)
{
	const struct sysfs_ctx c = { .net = net, .guid = node_guid };
	char text[128];
	int len = -1;
	size_t n;

	if (!net || !relpath || (!buf && size)) {
		errno = EINVAL;
		return -1;
	}
	while (*relpath == '/')
		relpath++;

	for (size_t k = 0; k < sizeof(sysfs_files) / sizeof(sysfs_files[0]); k++) {
		const struct sysfs_file *f = &sysfs_files[k];
		size_t plen = strlen(f->path);
		int index = 0;

		if (f->count == 0) {
			if (strcmp(relpath, f->path) != 0)
				continue;
		} else {
			if (strncmp(relpath, f->path, plen) != 0)
				continue;
			index = entry_index(relpath + plen, f->count);
			if (index < 0)
				break;
		}
		len = f->show(&c, index, text, sizeof(text));
		break;
	}
	if (len < 0) {
		errno = ENOENT;
		return -1;
	}
	if ((size_t)len >= sizeof(text))
		len = sizeof(text) - 1; /* cannot happen: every text is short */

	/* like read() from offset 0 of a file holding text */
	n = (size_t)len < size ? (size_t)len : size;
	if (n)
		memcpy(buf, text, n);
	if (n < size)
		buf[n] = '\0';
	return (ssize_t)n;
}
