/*
 * Unit tests of hca/dev_attr.c: the MTU table, LID and GUID derivation, the
 * GID table, the attribute structs (and that they never write past the
 * caller's size), the sysfs file answers, and the host probe.
 */
#include "dev_attr.h"
#include "hca_limits.h" 
#include "cu_run.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CANARY 0xa5

static uint32_t ip(const char *s)
{
	struct in_addr a;

	CU_ASSERT_FATAL(inet_pton(AF_INET, s, &a) == 1);
	return a.s_addr;
}

static struct hca_host_net net_ipv4(const char *addr)
{
	struct hca_host_net n = {
		.ipv4 = ip(addr),
		.ifmtu = 1500,
		.ifname = "eth0",
		.netns_ino = 4026531833ULL,
		.mac = { 0x02, 0xfc, 0x00, 0x00, 0x00, 0x01 },
	};
	return n;
}

static struct hca_host_net net_loopback(uint64_t ino)
{
	struct hca_host_net n = { .netns_ino = ino };
	return n;
}

/* ---- MTU ------------------------------------------------------------------ */

static void test_mtu_table(void)
{
	static const struct {
		int ifmtu;
		enum ibv_mtu mtu;
	} rows[] = {
		{ 0, IBV_MTU_4096 },	/* loopback only */
		{ 65536, IBV_MTU_4096 },
		{ 9000, IBV_MTU_4096 },
		{ 4096 + 68, IBV_MTU_4096 },
		{ 4096 + 67, IBV_MTU_2048 },
		{ 4096, IBV_MTU_2048 },
		{ 2048 + 68, IBV_MTU_2048 },
		{ 2048 + 67, IBV_MTU_1024 },
		{ 1500, IBV_MTU_1024 },	/* Ethernet: 1432 bytes of room */
		{ 1280, IBV_MTU_1024 },	/* IPv6 minimum link MTU */
		{ 1024 + 68, IBV_MTU_1024 },
		{ 1024 + 67, IBV_MTU_512 },
		{ 576, IBV_MTU_256 },	/* IPv4 minimum datagram: 508 of room */
		{ 512 + 68, IBV_MTU_512 },
		{ 512 + 67, IBV_MTU_256 },
		{ 256 + 68, IBV_MTU_256 },
		{ 68, IBV_MTU_256 },	/* too small for anything: the floor */
		{ 1, IBV_MTU_256 },
		{ -1, IBV_MTU_256 },
	};

	CU_ASSERT_EQUAL(HCA_WIRE_OVERHEAD, 68);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		enum ibv_mtu got = hca_mtu_for_ifmtu(rows[i].ifmtu);

		if (got != rows[i].mtu)
			fprintf(stderr, "ifmtu %d: got %d want %d\n",
				rows[i].ifmtu, got, rows[i].mtu);
		CU_ASSERT_EQUAL(got, rows[i].mtu);
	}
}

/* The rule itself, for every interface MTU up to 10000. */
static void test_mtu_rule(void)
{
	for (int ifmtu = 1; ifmtu <= 10000; ifmtu++) {
		enum ibv_mtu m = hca_mtu_for_ifmtu(ifmtu);
		int bytes = 128 << m;

		CU_ASSERT_FATAL(m >= IBV_MTU_256 && m <= IBV_MTU_4096);
		/* fits, unless it is the floor */
		CU_ASSERT(m == IBV_MTU_256 || bytes + 68 <= ifmtu);
		/* and the next size up does not */
		CU_ASSERT(m == IBV_MTU_4096 || 2 * bytes + 68 > ifmtu);
	}
}

/* ---- LID ------------------------------------------------------------------ */

static void test_lid_from_ipv4(void)
{
	struct hca_host_net n = net_ipv4("10.0.0.1");

	CU_ASSERT_EQUAL(hca_host_lid(&n), 0x0001);
	n.ipv4 = ip("192.0.2.2");
	CU_ASSERT_EQUAL(hca_host_lid(&n), 0x0202);
	n.ipv4 = ip("10.1.191.255");
	CU_ASSERT_EQUAL(hca_host_lid(&n), 0xbfff);
	n.ipv4 = ip("10.1.0.0"); /* low bits 0: not a LID */
	CU_ASSERT_EQUAL(hca_host_lid(&n), 0xbfff);
	n.ipv4 = ip("192.168.200.1"); /* low bits 0xc801: multicast range */
	CU_ASSERT_EQUAL(hca_host_lid(&n), 0xc801 - 0xbfff);
	n.ipv4 = ip("10.1.255.255");
	CU_ASSERT_EQUAL(hca_host_lid(&n), 0xffff - 0xbfff);
}

/* Every host of a /17 gets its own LID, and every LID is unicast. */
static void test_lid_unique_in_subnet(void)
{
	static const char *const subnets[] = { "10.7.0.0", "10.7.128.0",
					       "172.16.64.0" };

	for (size_t s = 0; s < 3; s++) {
		static uint8_t seen[0x10000];
		uint32_t base = ntohl(ip(subnets[s]));
		bool dup = false, range = true;

		memset(seen, 0, sizeof(seen));
		for (uint32_t h = 0; h < 0x8000; h++) {
			struct hca_host_net n = net_loopback(0);
			uint16_t lid;

			n.ipv4 = htonl(base + h);
			lid = hca_host_lid(&n);
			if (lid == 0 || lid > 0xbfff)
				range = false;
			if (seen[lid]++)
				dup = true;
		}
		CU_ASSERT(range);
		CU_ASSERT(!dup);
	}
}

static void test_lid_from_netns(void)
{
	uint16_t prev = 0;

	/* Namespace inodes are handed out close together from 0xf0000000. */
	for (uint64_t ino = 0xf0000000ULL; ino < 0xf0000000ULL + 1000; ino++) {
		struct hca_host_net n = net_loopback(ino);
		uint16_t lid = hca_host_lid(&n);

		CU_ASSERT(lid >= 1 && lid <= 0xbfff);
		CU_ASSERT(lid != prev);
		prev = lid;
	}
	for (uint64_t ino = 0; ino < 0xbfff * 3ULL; ino += 7) {
		struct hca_host_net n = net_loopback(ino);
		uint16_t lid = hca_host_lid(&n);

		if (lid == 0 || lid > 0xbfff) {
			CU_FAIL("LID out of unicast range");
			break;
		}
	}
	{
		struct hca_host_net n = net_loopback(UINT64_MAX);

		CU_ASSERT(hca_host_lid(&n) >= 1 && hca_host_lid(&n) <= 0xbfff);
	}
}

/* ---- GUID ----------------------------------------------------------------- */

static uint64_t guid_host(__be64 g)
{
	return be64toh(g);
}

static void test_guid_from_mac(void)
{
	struct hca_host_net n = net_ipv4("192.0.2.2");

	/* 02:fc:00:00:00:01 -> 00fc:00ff:fe00:0001 (U/L bit inverted) */
	CU_ASSERT_EQUAL(guid_host(hca_node_guid(&n, 1000)),
			0x00fc00fffe000001ULL);
	/* the MAC decides, not the user */
	CU_ASSERT_EQUAL(hca_node_guid(&n, 0), hca_node_guid(&n, 1000));
	n.mac[0] = 0x00;
	n.mac[5] = 0x42;
	CU_ASSERT_EQUAL(guid_host(hca_node_guid(&n, 0)), 0x02fc00fffe000042ULL);
}

static void test_guid_hashed(void)
{
	struct hca_host_net a = net_loopback(4026531833ULL);
	struct hca_host_net b = net_loopback(4026531834ULL);
	__be64 ga = hca_node_guid(&a, 1000);
	uint8_t first;

	CU_ASSERT(ga != 0);
	CU_ASSERT_EQUAL(ga, hca_node_guid(&a, 1000)); /* stable */
	CU_ASSERT(ga != hca_node_guid(&a, 1001));     /* per user */
	CU_ASSERT(ga != hca_node_guid(&b, 1000));     /* per namespace */
	memcpy(&first, &ga, 1);
	CU_ASSERT_EQUAL(first & 0x03, 0); /* individual, locally administered */
	/* An interface without a MAC also falls back to the hash. */
	a.ipv4 = ip("10.0.0.1");
	CU_ASSERT_EQUAL(hca_node_guid(&a, 1000), ga);
}

/* ---- GID ------------------------------------------------------------------ */

static void test_gid_ipv4_mapped(void)
{
	struct hca_host_net n = net_ipv4("192.0.2.2");
	union ibv_gid gid, want;

	CU_ASSERT_FATAL(inet_pton(AF_INET6, "::ffff:192.0.2.2", want.raw) == 1);
	memset(&gid, 0x5a, sizeof(gid));
	CU_ASSERT_EQUAL(hca_gid_entry(&n, hca_node_guid(&n, 0), 0, &gid), 0);
	CU_ASSERT_EQUAL(memcmp(gid.raw, want.raw, 16), 0);
}

static void test_gid_link_local(void)
{
	struct hca_host_net n = net_loopback(77);
	__be64 guid = htobe64(0x0123456789abcdefULL);
	union ibv_gid gid, want;

	CU_ASSERT_FATAL(inet_pton(AF_INET6, "fe80::123:4567:89ab:cdef",
				  want.raw) == 1);
	CU_ASSERT_EQUAL(hca_gid_entry(&n, guid, 0, &gid), 0);
	CU_ASSERT_EQUAL(memcmp(gid.raw, want.raw, 16), 0);
	CU_ASSERT_EQUAL(be64toh(gid.global.subnet_prefix), 0xfe80000000000000ULL);
	CU_ASSERT_EQUAL(gid.global.interface_id, guid);
}

static void test_gid_other_entries(void)
{
	struct hca_host_net n = net_ipv4("10.0.0.1");
	union ibv_gid gid, zero;

	memset(&zero, 0, sizeof(zero));
	for (int i = 1; i < HCA_GID_TBL_LEN; i++) {
		memset(&gid, 0x5a, sizeof(gid));
		CU_ASSERT_EQUAL(hca_gid_entry(&n, 1, i, &gid), 0);
		CU_ASSERT_EQUAL(memcmp(&gid, &zero, sizeof(gid)), 0);
	}
	CU_ASSERT_EQUAL(hca_gid_entry(&n, 1, HCA_GID_TBL_LEN, &gid), EINVAL);
	CU_ASSERT_EQUAL(hca_gid_entry(&n, 1, -1, &gid), EINVAL);
	CU_ASSERT_EQUAL(hca_gid_entry(&n, 1, 0, NULL), EINVAL);
	CU_ASSERT_EQUAL(hca_gid_entry(NULL, 1, 0, &gid), EINVAL);
}

/* ---- device attributes ---------------------------------------------------- */

#define BIG (sizeof(struct ibv_device_attr_ex) + 64)

/*
 * Fill into a buffer of canaries with the given size; check that the bytes
 * past size are untouched, and that the bytes written are the full answer's
 * prefix followed by zeros.
 */
static void check_dev_size(size_t size)
{
	static uint8_t full[sizeof(struct ibv_device_attr_ex)];
	uint8_t buf[BIG + 16];
	bool canary_ok = true, tail_zero = true;

	memset(full, 0, sizeof(full));
	CU_ASSERT_FATAL(hca_fill_device_attr_ex((void *)full, sizeof(full),
						htobe64(5)) == 0);

	CU_ASSERT_FATAL(size <= BIG);
	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL_FATAL(
		hca_fill_device_attr_ex((void *)buf, size, htobe64(5)), 0);
	for (size_t i = size; i < sizeof(buf); i++)
		if (buf[i] != CANARY)
			canary_ok = false;
	CU_ASSERT(canary_ok);
	if (size <= sizeof(full)) {
		CU_ASSERT_EQUAL(memcmp(buf, full, size), 0);
	} else {
		CU_ASSERT_EQUAL(memcmp(buf, full, sizeof(full)), 0);
		for (size_t i = sizeof(full); i < size; i++)
			if (buf[i] != 0)
				tail_zero = false;
		CU_ASSERT(tail_zero);
	}
}

static void test_dev_attr_sizes(void)
{
	check_dev_size(sizeof(struct ibv_device_attr));
	check_dev_size(offsetof(struct ibv_device_attr_ex, comp_mask) +
		       sizeof(uint32_t));
	check_dev_size(offsetof(struct ibv_device_attr_ex,
				completion_timestamp_mask));
	check_dev_size(offsetof(struct ibv_device_attr_ex, tso_caps));
	check_dev_size(offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex));
	check_dev_size(offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex) + 1);
	check_dev_size(sizeof(struct ibv_device_attr_ex));
	check_dev_size(BIG); /* a caller built with a newer header */
}

static void test_dev_attr_too_small(void)
{
	uint8_t buf[sizeof(struct ibv_device_attr)];
	bool untouched = true;

	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL(hca_fill_device_attr_ex((void *)buf, sizeof(buf) - 1, 1),
			EINVAL);
	CU_ASSERT_EQUAL(hca_fill_device_attr_ex((void *)buf, 0, 1), EINVAL);
	for (size_t i = 0; i < sizeof(buf); i++)
		if (buf[i] != CANARY)
			untouched = false;
	CU_ASSERT(untouched);
	CU_ASSERT_EQUAL(hca_fill_device_attr_ex(NULL, sizeof(buf), 1), EINVAL);
}

static void test_dev_attr_values(void)
{
	struct ibv_device_attr_ex a;
	const struct ibv_device_attr *d = &a.orig_attr;
	__be64 guid = htobe64(0x00fc00fffe000001ULL);
	static const uint8_t zero[64];

	memset(&a, CANARY, sizeof(a));
	CU_ASSERT_EQUAL_FATAL(hca_fill_device_attr_ex(&a, sizeof(a), guid), 0);
	CU_ASSERT_STRING_EQUAL(d->fw_ver, HCA_FW_VER_STR);
	CU_ASSERT_EQUAL(d->node_guid, guid);
	CU_ASSERT_EQUAL(d->sys_image_guid, guid);
	CU_ASSERT_EQUAL(d->max_mr_size, HCA_MAX_MR_SIZE);
	CU_ASSERT(d->page_size_cap & 4096);
	CU_ASSERT_EQUAL(d->page_size_cap & 4095, 0);
	CU_ASSERT_EQUAL(d->vendor_id, HCA_VENDOR_ID);
	CU_ASSERT_EQUAL(d->vendor_part_id, HCA_VENDOR_PART_ID);
	CU_ASSERT_EQUAL(d->hw_ver, HCA_HW_VER);
	CU_ASSERT_EQUAL(d->max_qp, HCA_QP_PER_PROC);
	CU_ASSERT_EQUAL(d->max_qp_wr, HCA_MAX_QP_WR);
	CU_ASSERT_EQUAL(d->max_sge, HCA_MAX_SGE);
	CU_ASSERT(d->max_sge_rd >= 1 && d->max_sge_rd <= HCA_MAX_SGE);
	CU_ASSERT_EQUAL(d->max_cq, HCA_MAX_CQ);
	CU_ASSERT_EQUAL(d->max_cqe, HCA_MAX_CQE);
	CU_ASSERT_EQUAL(d->max_mr, HCA_MAX_MR);
	CU_ASSERT_EQUAL(d->max_pd, HCA_MAX_PD);
	CU_ASSERT_EQUAL(d->max_qp_rd_atom, HCA_MAX_RD_ATOM);
	CU_ASSERT_EQUAL(d->max_qp_init_rd_atom, HCA_MAX_RD_ATOM);
	CU_ASSERT(d->max_res_rd_atom >= d->max_qp_rd_atom);
	CU_ASSERT_EQUAL(d->max_ee_rd_atom, 0);
	CU_ASSERT_EQUAL(d->max_ee_init_rd_atom, 0);
	CU_ASSERT_EQUAL(d->atomic_cap, IBV_ATOMIC_HCA);
	CU_ASSERT_EQUAL(d->max_ee, 0);
	CU_ASSERT_EQUAL(d->max_rdd, 0);
	CU_ASSERT_EQUAL(d->max_mw, 0);
	CU_ASSERT_EQUAL(d->max_raw_ipv6_qp, 0);
	CU_ASSERT_EQUAL(d->max_raw_ethy_qp, 0);
	CU_ASSERT_EQUAL(d->max_mcast_grp, HCA_MAX_MCAST_GRP);
	CU_ASSERT_EQUAL(d->max_mcast_qp_attach, HCA_MAX_QP_PER_MCG);
	CU_ASSERT_EQUAL(d->max_total_mcast_qp_attach, HCA_MAX_MCAST_ATT);
	CU_ASSERT_EQUAL(d->max_ah, HCA_MAX_AH);
	CU_ASSERT_EQUAL(d->max_fmr, 0);
	CU_ASSERT_EQUAL(d->max_map_per_fmr, 0);
	CU_ASSERT_EQUAL(d->max_srq, HCA_MAX_SRQ);
	CU_ASSERT_EQUAL(d->max_srq_wr, HCA_MAX_SRQ_WR);
	CU_ASSERT_EQUAL(d->max_srq_sge, HCA_MAX_SRQ_SGE);
	CU_ASSERT_EQUAL(d->max_pkeys, HCA_PKEY_TBL_LEN);
	CU_ASSERT_EQUAL(d->phys_port_cnt, 1);

	CU_ASSERT_EQUAL(d->device_cap_flags, HCA_DEVICE_CAP_FLAGS);
	CU_ASSERT(d->device_cap_flags & IBV_DEVICE_XRC);
	CU_ASSERT(d->device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN);
	CU_ASSERT(d->device_cap_flags & IBV_DEVICE_SYS_IMAGE_GUID);
	CU_ASSERT(d->device_cap_flags & IBV_DEVICE_CURR_QP_STATE_MOD);
	CU_ASSERT_FALSE(d->device_cap_flags &
			(IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_MGT_EXTENSIONS |
			 IBV_DEVICE_UD_IP_CSUM | IBV_DEVICE_RC_IP_CSUM |
			 IBV_DEVICE_RAW_IP_CSUM |
			 IBV_DEVICE_MANAGED_FLOW_STEERING));

	/* the extension: seed 001 */
	CU_ASSERT_EQUAL(a.comp_mask, 0);
	CU_ASSERT_EQUAL(memcmp(&a.odp_caps, zero, sizeof(a.odp_caps)), 0);
	CU_ASSERT_EQUAL(a.completion_timestamp_mask, UINT64_MAX);
	CU_ASSERT_EQUAL(a.hca_core_clock, HCA_CORE_CLOCK_KHZ);
	CU_ASSERT_EQUAL(a.device_cap_flags_ex, d->device_cap_flags);
	CU_ASSERT_EQUAL(memcmp(&a.tso_caps, zero, sizeof(a.tso_caps)), 0);
	CU_ASSERT_EQUAL(memcmp(&a.rss_caps, zero, sizeof(a.rss_caps)), 0);
	CU_ASSERT_EQUAL(a.max_wq_type_rq, 0);
	CU_ASSERT_EQUAL(memcmp(&a.packet_pacing_caps, zero,
			       sizeof(a.packet_pacing_caps)), 0);
	CU_ASSERT_EQUAL(a.raw_packet_caps, 0);
	CU_ASSERT_EQUAL(memcmp(&a.tm_caps, zero, sizeof(a.tm_caps)), 0);
	CU_ASSERT_EQUAL(memcmp(&a.cq_mod_caps, zero, sizeof(a.cq_mod_caps)), 0);
	CU_ASSERT_EQUAL(a.max_dm_size, 0);
	CU_ASSERT_EQUAL(memcmp(&a.pci_atomic_caps, zero,
			       sizeof(a.pci_atomic_caps)), 0);
	CU_ASSERT_EQUAL(a.xrc_odp_caps, 0);
	CU_ASSERT_EQUAL(a.phys_port_cnt_ex, 1);
}

/* ---- port attributes ------------------------------------------------------ */

static void check_port_size(size_t size)
{
	struct ibv_port_attr full;
	uint8_t buf[sizeof(struct ibv_port_attr) + 48];
	bool canary_ok = true, tail_zero = true;

	CU_ASSERT_FATAL(size <= sizeof(buf) - 16);
	CU_ASSERT_FATAL(hca_fill_port_attr(&full, sizeof(full), 7,
					   IBV_MTU_1024) == 0);
	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL_FATAL(hca_fill_port_attr((void *)buf, size, 7,
						 IBV_MTU_1024), 0);
	for (size_t i = size; i < sizeof(buf); i++)
		if (buf[i] != CANARY)
			canary_ok = false;
	CU_ASSERT(canary_ok);
	CU_ASSERT_EQUAL(memcmp(buf, &full,
			       size < sizeof(full) ? size : sizeof(full)), 0);
	for (size_t i = sizeof(full); i < size; i++)
		if (buf[i] != 0)
			tail_zero = false;
	CU_ASSERT(tail_zero);
}

static void test_port_attr_sizes(void)
{
	check_port_size(0);
	check_port_size(offsetof(struct ibv_port_attr, lid));
	check_port_size(offsetof(struct ibv_port_attr, port_cap_flags2));
	check_port_size(sizeof(struct ibv_port_attr));
	check_port_size(sizeof(struct ibv_port_attr) + 32);
}

static void test_port_attr_values(void)
{
	struct ibv_port_attr p;

	memset(&p, CANARY, sizeof(p));
	CU_ASSERT_EQUAL_FATAL(hca_fill_port_attr(&p, sizeof(p), 0x0202,
						 IBV_MTU_1024), 0);
	CU_ASSERT_EQUAL(p.state, IBV_PORT_ACTIVE);
	CU_ASSERT_EQUAL(p.phys_state, 5);
	CU_ASSERT_EQUAL(p.link_layer, IBV_LINK_LAYER_INFINIBAND);
	CU_ASSERT_EQUAL(p.max_mtu, IBV_MTU_4096);
	CU_ASSERT_EQUAL(p.active_mtu, IBV_MTU_1024);
	CU_ASSERT_EQUAL(p.lid, 0x0202);
	CU_ASSERT_EQUAL(p.sm_lid, 0x0202);
	CU_ASSERT_EQUAL(p.lmc, 0);
	CU_ASSERT_EQUAL(p.gid_tbl_len, HCA_GID_TBL_LEN);
	CU_ASSERT_EQUAL(p.pkey_tbl_len, HCA_PKEY_TBL_LEN);
	CU_ASSERT_EQUAL(p.port_cap_flags, HCA_PORT_CAP_FLAGS);
	CU_ASSERT(p.port_cap_flags & IBV_PORT_SYS_IMAGE_GUID_SUP);
	CU_ASSERT_EQUAL(p.max_msg_sz, HCA_MAX_MSG_SIZE);
	CU_ASSERT_EQUAL(p.bad_pkey_cntr, 0);
	CU_ASSERT_EQUAL(p.qkey_viol_cntr, 0);
	CU_ASSERT_EQUAL(p.max_vl_num, 1);
	CU_ASSERT_EQUAL(p.active_width, 2);  /* 4X */
	CU_ASSERT_EQUAL(p.active_speed, 32); /* EDR */
	CU_ASSERT_EQUAL(p.flags, 0);
	CU_ASSERT_EQUAL(p.port_cap_flags2, 0);
}

static void test_port_attr_bad_input(void)
{
	struct ibv_port_attr p;

	CU_ASSERT_EQUAL(hca_fill_port_attr(NULL, sizeof(p), 1, IBV_MTU_4096),
			EINVAL);
	CU_ASSERT_EQUAL(hca_fill_port_attr(&p, sizeof(p), 0, IBV_MTU_4096),
			EINVAL);
	CU_ASSERT_EQUAL(hca_fill_port_attr(&p, sizeof(p), 0xc000, IBV_MTU_4096),
			EINVAL);
	CU_ASSERT_EQUAL(hca_fill_port_attr(&p, sizeof(p), 1, (enum ibv_mtu)0),
			EINVAL);
	CU_ASSERT_EQUAL(hca_fill_port_attr(&p, sizeof(p), 1, (enum ibv_mtu)6),
			EINVAL);
	CU_ASSERT_EQUAL(hca_fill_port_attr(&p, sizeof(p), 0xbfff, IBV_MTU_256),
			0);
}

/* ---- sysfs ---------------------------------------------------------------- */

/*
 * Read a file the way rdma-core's ibv_read_sysfs_file() treats what read()
 * returned: a trailing newline becomes the terminator.
 */
static ssize_t sysfs_str(const struct hca_host_net *n, __be64 guid,
			 const char *path, char *buf, size_t size)
{
	ssize_t len = hca_sysfs_read(n, guid, path, buf, size);

	if (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	return len;
}

static void expect_file(const struct hca_host_net *n, __be64 guid,
			const char *path, const char *want)
{
	char buf[256];
	ssize_t len;

	memset(buf, CANARY, sizeof(buf));
	len = hca_sysfs_read(n, guid, path, buf, sizeof(buf));
	if (len < 0 || strlen(want) + 1 != (size_t)len ||
	    memcmp(buf, want, strlen(want)) != 0 || buf[len - 1] != '\n' ||
	    buf[len] != '\0')
		fprintf(stderr, "%s: got %zd \"%.*s\", want \"%s\\n\"\n", path,
			len, len > 0 ? (int)len : 0, buf, want);
	CU_ASSERT_EQUAL(len, (ssize_t)strlen(want) + 1);
	CU_ASSERT(len > 0 && memcmp(buf, want, strlen(want)) == 0);
	CU_ASSERT(len > 0 && buf[len - 1] == '\n' && buf[len] == '\0');
}

static void test_sysfs_device_files(void)
{
	struct hca_host_net n = net_ipv4("192.0.2.2");
	__be64 guid = hca_node_guid(&n, 0);
	char buf[128], want[16];

	expect_file(&n, guid, "board_id", HCA_BOARD_ID);
	expect_file(&n, guid, "fw_ver", HCA_FW_VER_STR);
	snprintf(want, sizeof(want), "%x", HCA_HW_VER);
	expect_file(&n, guid, "hw_rev", want);
	expect_file(&n, guid, "hca_type", "softib");
	expect_file(&n, guid, "node_type", "1: CA");
	expect_file(&n, guid, "node_guid", "00fc:00ff:fe00:0001");
	expect_file(&n, guid, "sys_image_guid", "00fc:00ff:fe00:0001");
	expect_file(&n, guid, "/board_id", HCA_BOARD_ID); /* leading slash */

	CU_ASSERT(sysfs_str(&n, guid, "node_desc", buf, sizeof(buf)) > 0);
	CU_ASSERT(strlen(buf) <= 64);
	CU_ASSERT(strstr(buf, "softib") != NULL);
}

static void test_sysfs_port_files(void)
{
	struct hca_host_net n = net_ipv4("192.0.2.2");
	__be64 guid = hca_node_guid(&n, 0);
	char want[64];

	expect_file(&n, guid, "ports/1/state", "4: ACTIVE");
	expect_file(&n, guid, "ports/1/phys_state", "5: LinkUp");
	expect_file(&n, guid, "ports/1/lid", "0x202");
	expect_file(&n, guid, "ports/1/sm_lid", "0x202");
	expect_file(&n, guid, "ports/1/sm_sl", "0");
	expect_file(&n, guid, "ports/1/lid_mask_count", "0");
	expect_file(&n, guid, "ports/1/link_layer", "InfiniBand");
	expect_file(&n, guid, "ports/1/rate", "100 Gb/sec (4X EDR)");
	snprintf(want, sizeof(want), "0x%08x", (unsigned)HCA_PORT_CAP_FLAGS);
	expect_file(&n, guid, "ports/1/cap_mask", want);
	expect_file(&n, guid, "ports/1/pkeys/0", "0xffff");
	expect_file(&n, guid, "ports/1/gids/0",
		    "0000:0000:0000:0000:0000:ffff:c000:0202");
	expect_file(&n, guid, "ports/1/gids/1",
		    "0000:0000:0000:0000:0000:0000:0000:0000");
	expect_file(&n, guid, "ports/1/gids/15",
		    "0000:0000:0000:0000:0000:0000:0000:0000");
	expect_file(&n, guid, "ports/1/gid_attrs/types/0", "IB/RoCE v1");

	n = net_loopback(3);
	expect_file(&n, htobe64(0x0123456789abcdefULL), "ports/1/gids/0",
		    "fe80:0000:0000:0000:0123:4567:89ab:cdef");
	snprintf(want, sizeof(want), "0x%x", hca_host_lid(&n));
	expect_file(&n, 1, "ports/1/lid", want);
}

static void test_sysfs_enoent(void)
{
	static const char *const missing[] = {
		"", "nonexistent", "ports", "ports/1", "ports/2/state",
		"ports/0/state", "ports/1/gids/", "ports/1/gids/16",
		"ports/1/gids/01", "ports/1/gids/-1", "ports/1/gids/+1",
		"ports/1/gids/0x", "ports/1/gids/99999999999999999999",
		"ports/1/pkeys/1", "ports/1/gid_attrs/types/16",
		"board_id/x", "board_idx", "ports/1/state/", "ports//1/state",
	};
	struct hca_host_net n = net_ipv4("10.0.0.1");
	char buf[64];

	for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
		errno = 0;
		if (hca_sysfs_read(&n, 1, missing[i], buf, sizeof(buf)) != -1 ||
		    errno != ENOENT) {
			fprintf(stderr, "\"%s\" was found\n", missing[i]);
			CU_FAIL("file should not exist");
		}
	}
	errno = 0;
	CU_ASSERT_EQUAL(hca_sysfs_read(NULL, 1, "board_id", buf, sizeof(buf)), -1);
	CU_ASSERT_EQUAL(errno, EINVAL);
	errno = 0;
	CU_ASSERT_EQUAL(hca_sysfs_read(&n, 1, NULL, buf, sizeof(buf)), -1);
	CU_ASSERT_EQUAL(errno, EINVAL);
}

/* Short buffers get what read() would give: a prefix, NUL only if room. */
static void test_sysfs_truncation(void)
{
	struct hca_host_net n = net_ipv4("10.0.0.1");
	size_t full = strlen(HCA_BOARD_ID) + 1;
	char buf[64];

	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL(hca_sysfs_read(&n, 1, "board_id", buf, 4), 4);
	CU_ASSERT_EQUAL(memcmp(buf, HCA_BOARD_ID, 4), 0);
	CU_ASSERT_EQUAL((uint8_t)buf[4], CANARY);

	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL(hca_sysfs_read(&n, 1, "board_id", buf, full),
			(ssize_t)full);
	CU_ASSERT_EQUAL(buf[full - 1], '\n');
	CU_ASSERT_EQUAL((uint8_t)buf[full], CANARY);

	memset(buf, CANARY, sizeof(buf));
	CU_ASSERT_EQUAL(hca_sysfs_read(&n, 1, "board_id", buf, full + 1),
			(ssize_t)full);
	CU_ASSERT_EQUAL(buf[full], '\0');
	CU_ASSERT_EQUAL((uint8_t)buf[full + 1], CANARY);

	CU_ASSERT_EQUAL(hca_sysfs_read(&n, 1, "board_id", buf, 0), 0);
	CU_ASSERT_EQUAL(hca_sysfs_read(&n, 1, "board_id", NULL, 0), 0);
}

/* ---- host probe ----------------------------------------------------------- */

static char *saved_netdev;

static void set_netdev(const char *v)
{
	if (v)
		setenv("SOFTIB_NETDEV", v, 1);
	else
		unsetenv("SOFTIB_NETDEV");
}

static int probe_suite_init(void)
{
	const char *v = getenv("SOFTIB_NETDEV");

	saved_netdev = v ? strdup(v) : NULL;
	return 0;
}

static int probe_suite_clean(void)
{
	set_netdev(saved_netdev);
	free(saved_netdev);
	return 0;
}

static bool is_loopback_identity(const struct hca_host_net *n)
{
	static const uint8_t zero[6];

	return n->ipv4 == 0 && n->ifmtu == 0 && n->ifname[0] == '\0' &&
	       memcmp(n->mac, zero, 6) == 0;
}

static void test_probe_default(void)
{
	struct hca_host_net n;
	struct stat st;

	set_netdev(NULL);
	CU_ASSERT_EQUAL_FATAL(hca_host_net_probe(&n), 0);
	if (stat("/proc/self/ns/net", &st) == 0)
		CU_ASSERT_EQUAL(n.netns_ino, (uint64_t)st.st_ino);
	if (n.ipv4) {
		CU_ASSERT(n.ifname[0] != '\0');
		CU_ASSERT(n.ifmtu > 0);
		CU_ASSERT(if_nametoindex(n.ifname) != 0);
		CU_ASSERT(n.ipv4 != htonl(INADDR_LOOPBACK));
	} else {
		CU_ASSERT(is_loopback_identity(&n));
	}
	CU_ASSERT(hca_host_lid(&n) >= 1 && hca_host_lid(&n) <= 0xbfff);

	/* Naming the interface the probe chose gives the same answer. */
	if (n.ipv4) {
		struct hca_host_net m;

		set_netdev(n.ifname);
		CU_ASSERT_EQUAL(hca_host_net_probe(&m), 0);
		CU_ASSERT_EQUAL(memcmp(&m, &n, sizeof(m)), 0);
		set_netdev(NULL);
	}
	CU_ASSERT_EQUAL(hca_host_net_probe(NULL), EINVAL);
}

static void test_probe_named(void)
{
	struct ifaddrs *ifs, *ifa;
	struct hca_host_net n;
	const char *lo = NULL, *no_v4 = NULL;

	CU_ASSERT_FATAL(getifaddrs(&ifs) == 0);
	/* a non-loopback interface with no IPv4 address, if the host has one */
	for (ifa = ifs; ifa; ifa = ifa->ifa_next) {
		struct ifaddrs *b;
		bool v4 = false;

		if (ifa->ifa_flags & IFF_LOOPBACK) {
			lo = ifa->ifa_name;
			continue; /* named loopback has its own rule */
		}
		for (b = ifs; b; b = b->ifa_next)
			if (!strcmp(b->ifa_name, ifa->ifa_name) && b->ifa_addr &&
			    b->ifa_addr->sa_family == AF_INET)
				v4 = true;
		if (!v4 && !no_v4)
			no_v4 = ifa->ifa_name;
	}

	if (lo) {
		set_netdev(lo);
		CU_ASSERT_EQUAL(hca_host_net_probe(&n), 0);
		CU_ASSERT(is_loopback_identity(&n));
	}
	if (no_v4) {
		set_netdev(no_v4);
		CU_ASSERT_EQUAL(hca_host_net_probe(&n), ENODEV);
	}
	set_netdev("softib-nosuch");
	CU_ASSERT_EQUAL(hca_host_net_probe(&n), ENODEV);
	set_netdev("a-name-too-long-for-any-interface");
	CU_ASSERT_EQUAL(hca_host_net_probe(&n), ENODEV);
	set_netdev(""); /* empty: as if unset */
	CU_ASSERT_EQUAL(hca_host_net_probe(&n), 0);
	set_netdev(NULL);
	freeifaddrs(ifs);
}

/* ---- registry ------------------------------------------------------------- */

static int add_suites(void)
{
	CU_pSuite s;

	s = CU_add_suite("dev_attr_mtu_lid_guid_gid", NULL, NULL);
	if (!s || !CU_add_test(s, "MTU table", test_mtu_table) ||
	    !CU_add_test(s, "MTU rule for ifmtu 1..10000", test_mtu_rule) ||
	    !CU_add_test(s, "LID from IPv4", test_lid_from_ipv4) ||
	    !CU_add_test(s, "LIDs unique in a /17",
			 test_lid_unique_in_subnet) ||
	    !CU_add_test(s, "LID from netns", test_lid_from_netns) ||
	    !CU_add_test(s, "GUID from MAC", test_guid_from_mac) ||
	    !CU_add_test(s, "GUID hashed", test_guid_hashed) ||
	    !CU_add_test(s, "GID 0 IPv4-mapped", test_gid_ipv4_mapped) ||
	    !CU_add_test(s, "GID 0 link-local", test_gid_link_local) ||
	    !CU_add_test(s, "GID other entries", test_gid_other_entries))
		return -1;

	s = CU_add_suite("dev_attr_structs", NULL, NULL);
	if (!s || !CU_add_test(s, "device attr sizes", test_dev_attr_sizes) ||
	    !CU_add_test(s, "device attr too small", test_dev_attr_too_small) ||
	    !CU_add_test(s, "device attr values", test_dev_attr_values) ||
	    !CU_add_test(s, "port attr sizes", test_port_attr_sizes) ||
	    !CU_add_test(s, "port attr values", test_port_attr_values) ||
	    !CU_add_test(s, "port attr bad input", test_port_attr_bad_input))
		return -1;

	s = CU_add_suite("dev_attr_sysfs", NULL, NULL);
	if (!s || !CU_add_test(s, "device files", test_sysfs_device_files) ||
	    !CU_add_test(s, "port files", test_sysfs_port_files) ||
	    !CU_add_test(s, "unknown files", test_sysfs_enoent) ||
	    !CU_add_test(s, "short buffers", test_sysfs_truncation))
		return -1;

	s = CU_add_suite("dev_attr_probe", probe_suite_init, probe_suite_clean);
	if (!s || !CU_add_test(s, "default probe", test_probe_default) ||
	    !CU_add_test(s, "SOFTIB_NETDEV", test_probe_named))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
