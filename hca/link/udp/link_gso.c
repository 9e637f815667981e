/*
 * Runs of packets sent as one UDP GSO buffer.
 *
 * A message longer than the path MTU leaves as FIRST, MIDDLE..., LAST
 * packets, and all its MIDDLE packets have the same size. Sent one
 * send() each, the kernel's cost per datagram bounds the link (the
 * sender runs the whole veth path). With UDP_SEGMENT, one send() hands
 * the kernel a buffer of up to 64 packets laid end to end, and it cuts
 * the buffer back into datagrams of that size: each datagram is exactly
 * one RoCE packet, with its own headers, PSN and ICRC, as if sent alone.
 * Measured with bench/udp_raw -G on a veth pair: three times the
 * datagrams per second of one send() each.
 *
 * A run is flushed when the next packet is larger than its packets or
 * goes elsewhere, when it is full, and at the end of each batch of sends
 * (the caller's). A shorter packet (a message's LAST, or ONLY after a
 * run of equal ones) ends the run as its last datagram: UDP GSO cuts a
 * buffer into datagrams of the segment size and a shorter last one, so a
 * message of any length leaves in one send() (a 1 KiB message at the
 * 1024-byte path MTU is FIRST + a LAST of 24 bytes: one call, not two).
 * With fault injection on, packets go one by one (the injector decides per
 * datagram); the pcap file records every packet either way. A kernel that
 * refuses UDP_SEGMENT turns batching off for the process.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>

#include "udp_link.h"

#define GSO_MAX_SEGS 64         /* what every kernel with UDP GSO accepts */
#define GSO_MAX_BYTES 65000     /* a UDP datagram's payload, with margin */

static _Thread_local uint8_t gso_buf[GSO_MAX_BYTES];

static int gso_send(int fd, const uint8_t *buf, size_t len, uint16_t seg)
{
	char ctl[CMSG_SPACE(sizeof(uint16_t))] = { 0 };
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	ssize_t r;

	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	memcpy(CMSG_DATA(c), &seg, sizeof(seg));
	r = sendmsg(fd, &mh, MSG_DONTWAIT);
	if (r < 0 && errno == ECONNREFUSED) /* a stale ICMP error: once more */
		r = sendmsg(fd, &mh, MSG_DONTWAIT);
	return r < 0 ? errno : 0;
}

/*
 * The run and one more datagram (the ACK a QP owes that peer, sealed) in
 * one sendmmsg: the run's GSO buffer, then the ACK. 0 or an errno.
 */
static int gso_send_ack(int fd, const uint8_t *buf, size_t len, uint16_t seg,
			const uint8_t *ack, size_t alen)
{
	char ctl[CMSG_SPACE(sizeof(uint16_t))] = { 0 };
	struct iovec iov[2] = { { (void *)buf, len }, { (void *)ack, alen } };
	struct mmsghdr mm[2] = {
		{ .msg_hdr = { .msg_iov = &iov[0], .msg_iovlen = 1,
			       .msg_control = ctl, .msg_controllen = sizeof(ctl) } },
		{ .msg_hdr = { .msg_iov = &iov[1], .msg_iovlen = 1 } },
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mm[0].msg_hdr);
	int r;

	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	memcpy(CMSG_DATA(c), &seg, sizeof(seg));
	r = sendmmsg(fd, mm, 2, MSG_DONTWAIT);
	if (r < 0 && errno == ECONNREFUSED) /* a stale ICMP error: once more */
		r = sendmmsg(fd, mm, 2, MSG_DONTWAIT);
	if (r < 0)
		return errno;
	if (r == 1 && send(fd, ack, alen, MSG_DONTWAIT) < 0)
		return errno;
	return 0;
}

/*
 * Flush the run with an ACK behind it (ack: hdr_len header bytes, no
 * payload, for the run's peer host): one system call for both where the
 * run goes as one GSO buffer to the process the ACK is for, else the
 * ACK after the run.
 */
void hca_link_batch_flush_ack(struct hca_dev *dev, struct hca_link_batch *b,
			      uint8_t *ack, size_t hdr_len)
{
	struct hca_link *l = &dev->link;
	uint16_t dport;
	size_t alen;
	int fd, err;

	if (b->n < 2 || l->no_gso || l->fault || l->fd < 0) {
		hca_link_batch_flush(dev, b);
		hca_link_send(dev, b->daddr, ack, hdr_len, 0);
		return;
	}
	alen = hca_link_seal(dev, b->daddr, ack, hdr_len, 0, &dport);
	fd = hca_link_peer_fd(l, b->daddr, b->dport);
	if (!alen || dport != b->dport || fd < 0) {
		hca_link_batch_flush(dev, b);
		if (alen)
			hca_link_send_sealed(dev, b->daddr, dport, ack, alen);
		return;
	}
	err = gso_send_ack(fd, gso_buf, b->len, (uint16_t)b->seg, ack, alen);
	if (err == EINVAL || err == EIO || err == ENOPROTOOPT || err == EOPNOTSUPP) {
		l->no_gso = true;
		hca_link_batch_flush(dev, b); /* one by one now */
		hca_link_send_sealed(dev, b->daddr, dport, ack, alen);
		return;
	}
	atomic_fetch_add(err ? &l->cnt->tx_errors : &l->cnt->tx_pkts, (uint64_t)b->n + 1);
	b->n = 0;
	b->len = 0;
}

void hca_link_batch_flush(struct hca_dev *dev, struct hca_link_batch *b)
{
	struct hca_link *l = &dev->link;
	int fd, err = 0;

	if (!b->n)
		return;
	fd = b->n > 1 ? hca_link_peer_fd(l, b->daddr, b->dport) : -1;
	if (fd >= 0 && !l->no_gso) {
		err = gso_send(fd, gso_buf, b->len, (uint16_t)b->seg);
		if (err == EINVAL || err == EIO || err == ENOPROTOOPT ||
		    err == EOPNOTSUPP)
			l->no_gso = true; /* and the run goes one by one */
		else
			atomic_fetch_add(err ? &l->cnt->tx_errors : &l->cnt->tx_pkts,
					 (uint64_t)b->n);
	}
	if (fd < 0 || l->no_gso)
		for (int i = 0; i < b->n; i++) {
			size_t off = (size_t)i * b->seg;

			hca_link_send_sealed(dev, b->daddr, b->dport, gso_buf + off,
					     i + 1 < b->n ? b->seg : b->len - off);
		}
	b->n = 0;
	b->len = 0;
}

/*
 * Queue the packet in pkt (hdr_len header bytes, plen payload bytes) for
 * the process that owns its destination QP on host daddr: sealed now,
 * sent with its run.
 */
void hca_link_batch_add(struct hca_dev *dev, struct hca_link_batch *b, uint32_t daddr,
			uint8_t *pkt, size_t hdr_len, size_t plen)
{
	struct hca_link *l = &dev->link;
	uint16_t dport;
	size_t len;

	if (l->fault || l->no_gso || l->fd < 0) {
		hca_link_send(dev, daddr, pkt, hdr_len, plen);
		return;
	}
	len = hca_link_seal(dev, daddr, pkt, hdr_len, plen, &dport);
	if (!len)
		return;
	/* a run ended by a shorter packet takes nothing more */
	if (b->n && (len > b->seg || b->len != (size_t)b->n * b->seg ||
		     daddr != b->daddr || dport != b->dport ||
		     b->n == GSO_MAX_SEGS || b->len + len > GSO_MAX_BYTES))
		hca_link_batch_flush(dev, b);
	memcpy(gso_buf + b->len, pkt, len);
	if (!b->n)
		b->seg = len;
	b->len += len;
	b->daddr = daddr;
	b->dport = dport;
	b->n++;
}

/* ---- receiving: a GRO run told apart without its control message ---- */

/* Is [p, p + len) one sound packet (shape and ICRC) from saddr? */
static bool sound(struct hca_dev *dev, const uint8_t *p, size_t len, uint32_t saddr)
{
	struct hca_ip4udp ip = { .saddr = saddr, .daddr = dev->link.ip,
				 .sport = dev->link.base, .dport = dev->link.base };

	return !hca_wire_parse(p, len, &ip, NULL, NULL, NULL);
}

/* Does a run of packets of s bytes (the last perhaps shorter) fit? Its
 * first and last packets sound: a damaged packet is taken for a run only
 * if two ICRCs match by chance (2^-64), not one. */
static bool run_fits(struct hca_dev *dev, const uint8_t *p, size_t len, size_t s,
		     uint32_t saddr)
{
	size_t last = (len - 1) / s * s;

	return s < len && sound(dev, p, s, saddr) && sound(dev, p + last, len - last, saddr);
}

/*
 * The segment size of a UDP GRO run read without its control message
 * (link_udp.c: rx_one, take_dgram), found from the packets themselves. A message's FIRST and
 * MIDDLE packets carry a whole path MTU, so those sizes are tried first;
 * then every size (runs of equal small packets: a burst of small SENDs
 * batched by link_gso.c, or coalesced by a NIC's GRO). 0: none fits (a
 * damaged datagram).
 */
size_t hca_link_gro_guess(struct hca_dev *dev, const uint8_t *p, size_t len, uint32_t saddr)
{
	const struct hca_wire_op_info *r = len >= HCA_BTH_LEN ?
					   hca_wire_op(hca_bth_opcode(p)) : NULL;

	if (!r)
		return 0;
	for (size_t mtu = 4096; mtu >= 256; mtu /= 2)
		if (run_fits(dev, p, len, r->hdr_len + mtu + HCA_ICRC_LEN, saddr))
			return r->hdr_len + mtu + HCA_ICRC_LEN;
	for (size_t s = r->hdr_len + HCA_ICRC_LEN; s < len && s <= HCA_PKT_MAX; s += 4)
		if (run_fits(dev, p, len, s, saddr))
			return s;
	return 0;
}
