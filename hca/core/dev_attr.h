/*
 * The device's identity and its attribute answers: who this host is on the
 * network (address, interface MTU, MAC, network namespace), and from that the
 * port's LID, MTU and GID table, the node GUID, the device and port attribute
 * structs of query_device_ex / query_port, and the sysfs files that
 * ibv_read_sysfs_file() is asked for.
 *
 * Everything here is a pure function of its arguments (plus, for the probe
 * and the GUID fallback, what the host says about itself at the time of the
 * call): no global state.  The device code calls these once per process and
 * keeps the results.  Errors are positive errno values, as in the verbs.
 */
#ifndef HCA_DEV_ATTR_H
#define HCA_DEV_ATTR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <infiniband/verbs.h>

struct hca_host_net {
	uint32_t ipv4;          /* network byte order; 0 when the host has only loopback */
	int      ifmtu;         /* MTU of that interface; 0 when none */
	char     ifname[16];    /* "" when none */
	uint64_t netns_ino;     /* inode of /proc/self/ns/net: a network namespace is a host */
	uint8_t  mac[6];        /* of that interface, zero when none */
};

/*
 * Bytes that an MTU-sized payload carries on the UDP link besides itself:
 * IPv4 20 + UDP 8 + BTH 12 + the largest extended headers a full-MTU packet
 * can carry + ICRC 4.  The largest is an XRC RDMA WRITE Only with Immediate:
 * XRCETH 4 + RETH 16 + ImmDt 4 = 24 (a UD send carries DETH 8 + ImmDt 4 = 12,
 * atomics carry AtomicETH 28 but no payload).
 */
#define HCA_WIRE_OVERHEAD  (20 + 8 + 12 + 24 + 4)

/*
 * device_cap_flags: only what softib does.  Left out on purpose:
 * RESIZE_MAX_WR, SRQ_RESIZE (QP and SRQ rings are sized at creation; modify
 * does not resize them), BAD_PKEY_CNTR, BAD_QKEY_CNTR (the port counters are
 * not kept: they read 0), SHUTDOWN_PORT, CHANGE_PHY_PORT, INIT_TYPE,
 * UD_AV_PORT_ENFORCE (one port that never changes state), PORT_ACTIVE_EVENT
 * (the port is active from the start and never transitions, so the event is
 * never raised), AUTO_PATH_MIG, N_NOTIFY_CQ, memory windows, checksum
 * offloads and flow steering.
 */
#define HCA_DEVICE_CAP_FLAGS                                                   \
	(IBV_DEVICE_CURR_QP_STATE_MOD | /* modify_qp honours IBV_QP_CUR_STATE */ \
	 IBV_DEVICE_SYS_IMAGE_GUID |    /* sys_image_guid is reported */         \
	 IBV_DEVICE_RC_RNR_NAK_GEN |    /* the RC responder sends RNR NAKs */    \
	 IBV_DEVICE_XRC)                /* XRC domains, SRQs and QPs */

/*
 * port_cap_flags: the system image GUID is supported.  No CM MAD agent, SM,
 * SNMP or vendor classes exist; IP_BASED_GIDS is a RoCE port's flag and the
 * link layer here is InfiniBand.
 */
#define HCA_PORT_CAP_FLAGS  (IBV_PORT_SYS_IMAGE_GUID_SUP)

/*
 * Link width and speed codes of struct ibv_port_attr (the IB PortInfo
 * encodings): 4X (2) EDR (32), 100 Gb/s, which is the order of what the
 * shared-memory link moves between two processes (~12-15 GB/s measured).
 */
#define HCA_PORT_WIDTH_4X   2
#define HCA_PORT_SPEED_EDR  32
#define HCA_PORT_RATE_STR   "100 Gb/sec (4X EDR)"
#define HCA_PHYS_STATE_LINK_UP 5

/* Highest unicast LID; LIDs 0xC000..0xFFFE are multicast, 0xFFFF permissive. */
#define HCA_LID_UNICAST_MAX 0xBFFF

/*
 * Probe the host's network identity: SOFTIB_NETDEV names the interface when
 * set (error ENODEV if it has no IPv4; naming a loopback interface asks for
 * the loopback-only identity), otherwise the first UP, non-loopback interface
 * with an IPv4 address (getifaddrs), else only loopback.  Returns 0 or an
 * errno (ENODEV, or what getifaddrs / the MTU ioctl failed with).
 */
int hca_host_net_probe(struct hca_host_net *out);

/*
 * Largest IB MTU whose packet (payload + HCA_WIRE_OVERHEAD) fits in ifmtu;
 * IBV_MTU_4096 when ifmtu == 0 (loopback only).  IBV_MTU_256 at least.
 */
enum ibv_mtu hca_mtu_for_ifmtu(int ifmtu);

/*
 * LID unique to the host, in 0x0001..0xBFFF.  With an IPv4 address it is the
 * low 16 bits of the address, folded modulo 0xBFFF (0 becomes 0xBFFF), so it
 * equals those bits whenever they are a unicast LID, and hosts of one /17
 * subnet never share a LID.  Otherwise it comes from netns_ino: network
 * namespace inodes are allocated close together, and consecutive inodes get
 * consecutive LIDs.
 */
uint16_t hca_host_lid(const struct hca_host_net *net);

/*
 * Stable node GUID, network byte order: the modified EUI-64 of the MAC when
 * there is one (as IPv6 builds its interface identifier), else a hash of
 * (netns_ino, uid, /etc/machine-id if readable) marked as locally
 * administered.  Never 0.
 */
__be64 hca_node_guid(const struct hca_host_net *net, uid_t uid);

/*
 * GID table entry of port 1.  Index 0: ::ffff:a.b.c.d when ipv4 != 0, else
 * fe80::<node_guid>.  Other indexes below HCA_GID_TBL_LEN: all-zero GID.
 * EINVAL for an index out of the table or a NULL pointer.
 */
int hca_gid_entry(const struct hca_host_net *net, __be64 node_guid, int index,
		  union ibv_gid *gid);

/*
 * Fill the extended device attributes.  Exactly attr_size bytes are written:
 * the fields of struct ibv_device_attr_ex that fit, and zeros in any bytes
 * beyond it (a caller built with a newer header then sees its unknown
 * capabilities as absent, as rdma-core's own query does).  EINVAL if
 * attr_size < sizeof(struct ibv_device_attr) or attr is NULL.
 */
int hca_fill_device_attr_ex(struct ibv_device_attr_ex *attr, size_t attr_size,
			    __be64 node_guid);

/*
 * Port 1 attributes.  Exactly attr_size bytes are written, like
 * hca_fill_device_attr_ex (attr_size is the caller's sizeof, from the
 * query_port op; the 1.1 compat struct is shorter).  EINVAL for a NULL attr,
 * a LID outside 0x0001..0xBFFF or an active_mtu that is not an ibv_mtu.
 */
int hca_fill_port_attr(struct ibv_port_attr *attr, size_t attr_size,
		       uint16_t lid, enum ibv_mtu active_mtu);

/*
 * Answer a read of one of the device's sysfs files, relpath being the path
 * under its ibdev_path ("board_id", "ports/1/gids/0", ...; leading slashes
 * are ignored).  The text is what the kernel's sysfs shows, newline
 * included.  Behaves like read() on the file from offset 0: copies
 * min(size, length) bytes into buf, adds a NUL after them when there is
 * room, and returns the number of text bytes copied.  -1 with errno ENOENT
 * for a file the device does not have, EINVAL for NULL arguments.
 */
ssize_t hca_sysfs_read(const struct hca_host_net *net, __be64 node_guid,
		       const char *relpath, char *buf, size_t size);

#endif
