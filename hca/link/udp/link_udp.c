/*
 * The inter-host link: RoCEv2 packets in UDP datagrams.
 *
 * Each softib process has one UDP socket. Its port is derived from its
 * process slot: base + slot, base being the RoCEv2 port 4791
 * (SOFTIB_UDP_PORT moves it). A QP number names its owner's slot (bits
 * 16..23, minus one: qp_num.c), so a requester anywhere finds the port of any QP from the
 * QP number alone, and the responder and requester of a QP always run in
 * the QP's own process. tshark decodes port 4791 as RoCEv2 by itself; the
 * other ports with `-d udp.port==N,infiniband` (docs/udp-link.md) — the
 * pcap files softib writes put 4791 on every packet, so they decode as
 * they are.
 *
 * Outgoing datagrams pass the fault injector (SOFTIB_FAULT) and are
 * recorded by the pcap writer (SOFTIB_PCAP). Incoming ones are parsed and
 * checked (ICRC included); a bad one is dropped and counted by cause.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "udp_link.h"

/* peers' sockets receive too (link_peers.c); docs/udp-link-performance.md
 * says why this is not yet the default */
#define HCA_RX_CONNECTED_DEFAULT false

static uint32_t host_ip(struct hca_dev *dev)
{
	return dev->net.ipv4 ? ntohl(dev->net.ipv4) : INADDR_LOOPBACK;
}

static uint16_t port_base(void)
{
	const char *p = getenv("SOFTIB_UDP_PORT");
	long v = p ? strtol(p, NULL, 10) : 0;

	return v > 0 && v + HCA_MAX_PROCS < 65536 ? (uint16_t)v : HCA_ROCE_PORT;
}

/* The UDP port of the process that owns QP qpn: the slot is in the
 * number's high byte, plus one (qp_num.c). */
static uint16_t qpn_port(const struct hca_link *l, uint32_t qpn)
{
	return (uint16_t)(l->base + (((qpn >> 16) - 1) & 0xff));
}

/* SOFTIB_UDP_RCVBUF (bytes, 64 KiB .. 1 GiB), else HCA_UDP_RCVBUF. */
static int rcvbuf_wanted(void)
{
	const char *s = getenv("SOFTIB_UDP_RCVBUF");
	long v = s ? strtol(s, NULL, 0) : 0;

	return v >= (64 << 10) && v <= (1L << 30) ? (int)v : HCA_UDP_RCVBUF;
}

/*
 * UDP GRO: a run of datagrams a peer sent as one GSO buffer (link_gso.c)
 * crosses a veth pair as one buffer, and with UDP_GRO on the receiving
 * socket it is queued and read whole (the kernel says the segment size),
 * instead of being cut back into datagrams at our socket — by the
 * sender's CPU, in its send(), one queued datagram and one read each.
 * A read may then return up to 64 KiB: every receive slot is that large
 * (HCA_RX_BATCH of them, 1 MiB of address space, touched as far as the
 * data go). Without UDP_GRO (an old kernel), slots of one packet.
 * docs/udp-link-performance.md gives what it was worth.
 *
 * But a socket with UDP_GRO on makes every datagram's way slower, the
 * lone small ones of a ping-pong too: 0.15 us of a 2.8 us one-way UDP
 * ping-pong between two namespace hosts here (the same program with and
 * without the option, 9 rounds of 10; set and cleared again: no cost).
 * So the option is on only while runs may come: from the first packet of
 * a multi-packet message (bulk: what the peer sends as GSO runs) until
 * the link's tick has seen none for HCA_GRO_IDLE_NS. SOFTIB_UDP_GRO=1
 * keeps it on for good (as before), SOFTIB_UDP_NO_GRO=1 never sets it.
 */
#define HCA_RX_BATCH 16
#define HCA_RX_GRO_SLOT 65536
#define HCA_GRO_IDLE_NS (100ULL * 1000000ULL)

/* UDP_GRO on or off on every receiving socket; rx_lock held (or none
 * reads yet). A datagram the kernel queued whole before it went off is
 * still told apart (take_dgram), so a switch loses nothing. */
static void gro_set(struct hca_link *l, bool on)
{
	int v = on;
	int np = atomic_load_explicit(&l->npeers, memory_order_acquire);

	if (!l->gro_ok || l->gro == on)
		return;
	setsockopt(l->fd, SOL_UDP, UDP_GRO, &v, sizeof(v));
	for (int i = 0; i < np; i++)
		if (l->peers[i].rx)
			setsockopt(l->peers[i].fd, SOL_UDP, UDP_GRO, &v, sizeof(v));
	l->gro = on;
}

static void rx_buffers(struct hca_link *l)
{
	int one = 1;
	const char *always = getenv("SOFTIB_UDP_GRO");

	l->gro_ok = !getenv("SOFTIB_UDP_NO_GRO") &&
		    !setsockopt(l->fd, SOL_UDP, UDP_GRO, &one, sizeof(one));
	l->rx_slot = l->gro_ok ? HCA_RX_GRO_SLOT : HCA_PKT_MAX;
	l->rxbuf = calloc(HCA_RX_BATCH, l->rx_slot);
	if (!l->rxbuf && l->gro_ok) { /* no room for large slots: without GRO */
		setsockopt(l->fd, SOL_UDP, UDP_GRO, &(int){ 0 }, sizeof(int));
		l->gro_ok = false;
		l->rx_slot = HCA_PKT_MAX;
		l->rxbuf = calloc(HCA_RX_BATCH, l->rx_slot);
	}
	l->gro = l->gro_ok;
	l->gro_always = l->gro_ok && always && strcmp(always, "0");
	if (!l->gro_always)
		gro_set(l, false); /* until bulk comes */
}

static int link_socket(struct hca_link *l)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(l->port),
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	int buf = l->rcvbuf, snd = HCA_UDP_SNDBUF, got = 0;
	socklen_t gl = sizeof(got);

	l->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (l->fd < 0)
		return errno;
	/* DF, as RoCE sends: no IP fragments (the path MTU bounds packets),
	 * and the kernel need not pick an IP ID per datagram */
	int pmtu = IP_PMTUDISC_DO;

	setsockopt(l->fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
	setsockopt(l->fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	setsockopt(l->fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
	/* the kernel grants at most net.core.rmem_max (and reports twice
	 * what it grants, its bookkeeping included): a smaller buffer drops
	 * bursts, so what was granted is published for softib status */
	if (!getsockopt(l->fd, SOL_SOCKET, SO_RCVBUF, &got, &gl))
		atomic_store(&l->cnt->rcvbuf_got, (uint64_t)got / 2);
	atomic_store(&l->cnt->rcvbuf_want, (uint64_t)buf);
	if (bind(l->fd, (struct sockaddr *)&a, sizeof(a))) {
		int err = errno;
		close(l->fd);
		l->fd = -1;
		return err;
	}
	/* only now: our peer sockets may share the port, another process's
	 * bound socket (binding without it) still may not (link_peers.c) */
	int one = 1;
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = l->fd };

	setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	rx_buffers(l);
	if (!l->rxbuf) {
		close(l->fd);
		l->fd = -1;
		return ENOMEM;
	}
	l->rx_hot = l->fd;
	l->rx_epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->rx_epfd >= 0 && epoll_ctl(l->rx_epfd, EPOLL_CTL_ADD, l->fd, &ev)) {
		close(l->rx_epfd);
		l->rx_epfd = -1;
	}
	return 0;
}

/* What to wait on for the link's datagrams: all its receiving sockets. */
int hca_link_wait_fd(struct hca_dev *dev)
{
	/* the bound socket alone unless peers' sockets receive: an epoll
	 * set inside the progress thread's would cost a call per wake-up */
	return dev->link.rx_connected && dev->link.rx_epfd >= 0 ? dev->link.rx_epfd :
								 dev->link.fd;
}

int hca_link_init(struct hca_dev *dev)
{
	struct hca_link *l = &dev->link;
	const char *force = getenv("SOFTIB_LINK"), *rxc;
	char msg[160];
	int rc;

	l->fd = l->rx_epfd = -1;
	l->cnt = &dev->seg->procs[dev->slot].link;
	memset(l->cnt, 0, sizeof(*l->cnt));
	l->ip = host_ip(dev);
	l->base = port_base();
	l->port = (uint16_t)(l->base + dev->slot);
	l->force_udp = force && !strcmp(force, "udp");
	l->rcvbuf = rcvbuf_wanted();
	rxc = getenv("SOFTIB_UDP_RX_CONNECTED");
	l->rx_connected = rxc ? strcmp(rxc, "0") != 0 : HCA_RX_CONNECTED_DEFAULT;
	if ((rc = hca_mutex_init(&l->rx_lock)) || (rc = hca_mutex_init(&l->tx_lock)) ||
	    (rc = hca_mutex_init(&l->peers_lock)))
		return rc;
	rc = hca_fault_open_env(&l->fault, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, "softib: %s\n", msg);
		return rc;
	}
	rc = hca_pcap_open_env(&l->pcap);
	if (rc)
		fprintf(stderr, "softib: SOFTIB_PCAP: %s\n", strerror(rc));
	/* no UDP port (taken by another program): the host link still works */
	if (link_socket(l))
		fprintf(stderr, "softib: UDP port %u unavailable: %s; inter-host link off\n",
			l->port, strerror(errno));
	return 0;
}

void hca_link_fini(struct hca_dev *dev)
{
	struct hca_link *l = &dev->link;

	hca_link_acks_flush(dev, true, HCA_ACKS_ALL);
	if (l->fd >= 0)
		close(l->fd);
	hca_link_peers_close(l);
	if (l->rx_epfd >= 0)
		close(l->rx_epfd);
	free(l->rxbuf);
	l->rxbuf = NULL;
	if (l->fault)
		hca_fault_close(l->fault);
	if (l->pcap)
		hca_pcap_close(l->pcap);
}

/* ---- sending ---- */

static void send_raw(struct hca_link *l, uint32_t daddr, uint16_t dport,
		     const uint8_t *p, size_t len)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(dport),
				  .sin_addr.s_addr = htonl(daddr) };
	int fd = hca_link_peer_fd(l, daddr, dport), rc;

	if (fd >= 0)
		rc = hca_link_peer_send(fd, p, len);
	else
		rc = (int)sendto(l->fd, p, len, MSG_DONTWAIT, (struct sockaddr *)&to,
				 sizeof(to));
	if (rc < 0)
		atomic_fetch_add(&l->cnt->tx_errors, 1);
	else
		atomic_fetch_add(&l->cnt->tx_pkts, 1);
}

static void release_held(struct hca_link *l)
{
	if (l->held_len) {
		send_raw(l, l->held_to, l->held_port, l->held, l->held_len);
		l->held_len = 0;
	}
}

/* The fault injector decides what the wire does to this datagram. */
static void send_faulty(struct hca_link *l, uint32_t daddr, uint16_t dport,
			uint8_t *p, size_t len)
{
	struct hca_fault_decision d;

	pthread_mutex_lock(&l->tx_lock);
	hca_fault_decide(l->fault, len, &d);
	if (d.delay_us && d.action != HCA_FAULT_DROP) {
		struct timespec ts = { 0, (long)d.delay_us * 1000 };
		nanosleep(&ts, NULL);
	}
	switch (d.action) {
	case HCA_FAULT_DROP:
		break;
	case HCA_FAULT_DUP:
		send_raw(l, daddr, dport, p, len);
		send_raw(l, daddr, dport, p, len);
		break;
	case HCA_FAULT_HOLD:
		if (!l->held_len && len <= sizeof(l->held)) {
			memcpy(l->held, p, len);
			l->held_len = len;
			l->held_to = daddr;
			l->held_port = dport;
			l->held_ns = hca_now_ns();
			pthread_mutex_unlock(&l->tx_lock);
			return;
		}
		send_raw(l, daddr, dport, p, len);
		break;
	case HCA_FAULT_CORRUPT:
		hca_fault_flip(p, d.bit);
		send_raw(l, daddr, dport, p, len);
		break;
	default:
		send_raw(l, daddr, dport, p, len);
	}
	release_held(l);
	pthread_mutex_unlock(&l->tx_lock);
}

/* A held datagram goes out after at most a millisecond. */
void hca_link_tick(struct hca_dev *dev)
{
	struct hca_link *l = &dev->link;

	/* no bulk for a while: UDP_GRO off again (see gro_set) */
	if ((l->gro || l->rx_bulk) && !l->gro_always &&
	    !pthread_mutex_trylock(&l->rx_lock)) {
		uint64_t now = hca_now_ns();

		if (l->rx_bulk) {
			l->rx_bulk = false;
			l->gro_bulk_ns = now;
		} else if (now - l->gro_bulk_ns > HCA_GRO_IDLE_NS) {
			gro_set(l, false);
		}
		pthread_mutex_unlock(&l->rx_lock);
	}
	if (!l->fault || !l->held_len)
		return;
	pthread_mutex_lock(&l->tx_lock);
	if (l->held_len && hca_now_ns() - l->held_ns > 1000000)
		release_held(l);
	pthread_mutex_unlock(&l->tx_lock);
}

/*
 * Seal (pad + ICRC) the packet whose headers and payload are in pkt
 * (hdr_len header bytes, plen payload bytes), bound for the process that
 * owns its destination QP on host daddr, and record it (SOFTIB_PCAP).
 * The ICRC covers IP and UDP headers as the receiver will rebuild them:
 * see docs/wire.md. Returns its length (0: it cannot be sent) and the
 * UDP port it goes to.
 */
/* The ICRC and lengths sealed, and the packet written to the capture. */
static size_t seal_captured(struct hca_link *l, uint32_t daddr, uint8_t *pkt,
			    size_t hdr_len, size_t plen)
{
	struct hca_ip4udp ip = { .saddr = l->ip, .daddr = daddr, .sport = l->base,
				 .dport = l->base };
	size_t len = hca_wire_seal(pkt, &ip, hdr_len, plen);

	if (len && l->pcap)
		hca_pcap_write(l->pcap, &ip, pkt, len);
	return len;
}

size_t hca_link_seal(struct hca_dev *dev, uint32_t daddr, uint8_t *pkt, size_t hdr_len,
		     size_t plen, uint16_t *dport)
{
	size_t len = seal_captured(&dev->link, daddr, pkt, hdr_len, plen);

	*dport = qpn_port(&dev->link, hca_bth_dqpn(pkt));
	return len;
}

/* A sealed packet onto the wire: through the fault injector, if any. */
void hca_link_send_sealed(struct hca_dev *dev, uint32_t daddr, uint16_t dport,
			  uint8_t *pkt, size_t len)
{
	struct hca_link *l = &dev->link;

	if (l->fault)
		send_faulty(l, daddr, dport, pkt, len);
	else
		send_raw(l, daddr, dport, pkt, len);
}

int hca_link_send(struct hca_dev *dev, uint32_t daddr, uint8_t *pkt, size_t hdr_len,
		  size_t plen)
{
	uint16_t dport;
	size_t len;

	if (dev->link.fd < 0)
		return ENETDOWN;
	len = hca_link_seal(dev, daddr, pkt, hdr_len, plen, &dport);
	if (!len)
		return EINVAL;
	hca_link_send_sealed(dev, daddr, dport, pkt, len);
	return 0;
}

/*
 * Two packets for one peer process in one system call (sendmmsg): a
 * request and the ACK its QP owes (udp_req.c). pkt2 has hdr_len2 header
 * bytes and no payload. Falls back to two sends where one call cannot do
 * (fault injection decides per datagram; no connected socket).
 */
int hca_link_send_pair(struct hca_dev *dev, uint32_t daddr, uint8_t *pkt, size_t hdr_len,
		       size_t plen, uint8_t *pkt2, size_t hdr_len2)
{
	struct hca_link *l = &dev->link;
	uint16_t dport, dport2;
	size_t len, len2;
	int fd, rc;

	if (l->fd < 0)
		return ENETDOWN;
	len = hca_link_seal(dev, daddr, pkt, hdr_len, plen, &dport);
	len2 = hca_link_seal(dev, daddr, pkt2, hdr_len2, 0, &dport2);
	if (!len || !len2)
		return EINVAL;
	fd = l->fault || dport != dport2 ? -1 : hca_link_peer_fd(l, daddr, dport);
	if (fd < 0) {
		hca_link_send_sealed(dev, daddr, dport, pkt, len);
		hca_link_send_sealed(dev, daddr, dport2, pkt2, len2);
		return 0;
	}
	rc = hca_link_peer_send2(fd, pkt, len, pkt2, len2);
	atomic_fetch_add(&l->cnt->tx_pkts, (uint64_t)(rc > 0 ? rc : 0));
	if (rc < 2)
		atomic_fetch_add(&l->cnt->tx_errors, (uint64_t)(2 - (rc > 0 ? rc : 0)));
	return 0;
}

/* Record a packet that the shared-memory link carried instead. */
void hca_link_capture(struct hca_dev *dev, uint32_t daddr, uint8_t *pkt, size_t hdr_len,
		      size_t plen)
{
	seal_captured(&dev->link, daddr, pkt, hdr_len, plen);
}

/* ---- receiving ---- */

/* One packet handled; its parse error (0: none), counted unless quiet. */
static int dispatch_q(struct hca_dev *dev, const uint8_t *pkt, size_t len, uint32_t saddr,
		      bool quiet)
{
	struct hca_link *l = &dev->link;
	struct hca_ip4udp ip = { .saddr = saddr, .daddr = l->ip, .sport = l->base,
				 .dport = l->base };
	struct hca_wire_hdr h;
	const uint8_t *pl;
	size_t plen;
	struct hca_qp_ent *e;
	struct hca_qp *qp;
	int err = hca_wire_parse(pkt, len, &ip, &h, &pl, &plen);

	if (err) {
		if (!quiet)
			atomic_fetch_add(&l->cnt->bad[err < 8 ? err : 0], 1);
		return err;
	}
	/* a QP that is gone, or not ours (a reused port): dropped */
	e = hca_qp_lookup(dev->seg, h.dqpn);
	if (!e || e->owner != dev->slot || e->owner_gen != dev->gen) {
		atomic_fetch_add(&l->cnt->unknown_qp, 1);
		return 0;
	}
	/* no pin (obj_tab.c): we hold rx_lock, and hca_qp_destroy takes it
	 * (qp_link_barrier) after it has cleared the slot and before it frees
	 * anything — a QP found here outlives this packet's handling */
	qp = atomic_load_explicit(&dev->qp_tab[h.dqpn & (HCA_MAX_QP - 1)],
				  memory_order_acquire);
	if (!qp || qp->qpn != h.dqpn) {
		atomic_fetch_add(&l->cnt->unknown_qp, 1);
		return 0;
	}
	HCA_COUNT_1W(l->cnt->rx_pkts); /* rx_lock held */
	/* part of a multi-packet message: the peer sends such as GSO runs,
	 * which UDP_GRO lets us read whole (gro_set) */
	if (hca_wire_op(h.opcode)->pos != HCA_POS_ONLY) {
		l->rx_bulk = true;
		if (!l->gro)
			gro_set(l, true);
	}
	if (hca_wire_op(h.opcode)->flags & HCA_WF_RESPONSE)
		hca_udp_req_rx(qp, &h, pl, plen);
	else
		hca_udp_resp_rx(qp, &h, pl, plen, saddr);
	return 0;
}

static void dispatch(struct hca_dev *dev, const uint8_t *pkt, size_t len, uint32_t saddr)
{
	dispatch_q(dev, pkt, len, saddr, false);
}

/*
 * Receive what is waiting, in order, in one thread at a time: a QP's
 * packets must be handled in the order they came. `wait` says whether to
 * queue behind another receiver (the progress thread) or give up (poll).
 * recvmmsg takes what is queued in one call: a poller that finds one
 * datagram returns with it at once, not after a second call that finds
 * none (that call cost as much as a third of a raw UDP ping-pong).
 */
#define HCA_RX_QUIET_NS 5000 /* see hca_link_rx_sleeper */

/* A datagram read: one packet, or (UDP GRO) a run of packets of gso
 * bytes each, the last one perhaps shorter. */
static void deliver(struct hca_dev *dev, const uint8_t *p, size_t len, size_t gso,
		    uint32_t saddr)
{
	if (!gso || gso >= len) {
		dispatch(dev, p, len, saddr);
		return;
	}
	for (size_t off = 0; off < len; off += gso)
		dispatch(dev, p + off, len - off < gso ? len - off : gso, saddr);
}

/* The segment size a GRO datagram's control message gives (0: none). */
static size_t gro_size(struct msghdr *mh)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
			int v;

			memcpy(&v, CMSG_DATA(c), sizeof(v));
			return v > 0 ? (size_t)v : 0;
		}
	return 0;
}

#define HCA_RX_CTL CMSG_SPACE(sizeof(int))

/*
 * A datagram read, with the segment size its control message gave (gso;
 * 0: none). Without one it may still be a UDP GRO run: read by recvfrom
 * (no control message), or queued whole while UDP_GRO was on and read
 * after it went off (gro_set). So it is first taken for one packet
 * (parsed once: the common case costs nothing more); if it is not one
 * sound packet, the segment size is found from its packets (hca_link_gro_guess, link_gso.c).
 */
static void take_dgram(struct hca_dev *dev, const uint8_t *p, size_t len, size_t gso,
		       uint32_t saddr)
{
	size_t seg;

	if (gso || !dev->link.gro_ok) {
		deliver(dev, p, len, gso, saddr);
		return;
	}
	/* one packet (the common case: parsed once) */
	if (len <= HCA_PKT_MAX && !dispatch_q(dev, p, len, saddr, true))
		return;
	seg = hca_link_gro_guess(dev, p, len, saddr);
	if (seg)
		deliver(dev, p, len, seg, saddr);
	else /* counted once, as the packet it claims to be */
		dispatch(dev, p, len, saddr);
}

/* Everything queued on socket fd (up to 256 datagrams), rx_lock held;
 * poller: an application's busy poll drains it (rx_poll). */
static void rx_drain_fd(struct hca_dev *dev, int fd, bool poller)
{
	struct hca_link *l = &dev->link;
	struct sockaddr_in from[HCA_RX_BATCH];
	struct iovec iov[HCA_RX_BATCH];
	struct mmsghdr mm[HCA_RX_BATCH];
	union { char b[HCA_RX_CTL]; struct cmsghdr align; } ctl[HCA_RX_BATCH];

	for (int n = 0; n < 256; n += HCA_RX_BATCH) {
		int got;

		for (int i = 0; i < HCA_RX_BATCH; i++) {
			iov[i] = (struct iovec){ l->rxbuf + (size_t)i * l->rx_slot, l->rx_slot };
			mm[i].msg_hdr = (struct msghdr){ .msg_name = &from[i],
							 .msg_namelen = sizeof(from[i]),
							 .msg_iov = &iov[i], .msg_iovlen = 1,
							 .msg_control = l->gro_ok ? ctl[i].b : NULL,
							 .msg_controllen = l->gro_ok ? HCA_RX_CTL : 0 };
		}
		got = recvmmsg(fd, mm, HCA_RX_BATCH, MSG_DONTWAIT, NULL);
		if (got < 0 && errno == ECONNREFUSED) /* a peer's ICMP error, */
			continue;                      /* reported once */
		for (int i = 0; i < got; i++)
			take_dgram(dev, iov[i].iov_base, mm[i].msg_len,
				   l->gro_ok ? gro_size(&mm[i].msg_hdr) : 0,
				   ntohl(from[i].sin_addr.s_addr));
		if (poller && got > 0) /* still polling: the socket stays ours */
			hca_dev_poller_busy(dev);
		if (got < HCA_RX_BATCH)
			break;
	}
}

/* Every receiving socket with something queued, rx_lock held. */
static void rx_drain(struct hca_dev *dev)
{
	struct hca_link *l = &dev->link;
	struct epoll_event ev[16];
	int n;

	if (l->fd < 0)
		return;
	if (l->rx_epfd < 0 || !atomic_load_explicit(&l->rx_peers, memory_order_relaxed)) {
		rx_drain_fd(dev, l->fd, false);
		return;
	}
	n = epoll_wait(l->rx_epfd, ev, 16, 0);
	for (int i = 0; i < n; i++)
		rx_drain_fd(dev, ev[i].data.fd, false);
}

/*
 * One datagram from socket fd, if one waits; rx_lock held. Read with
 * recvfrom, not recvmsg: a busy poller makes one such call per poll,
 * nearly all finding nothing, and recvmsg's are dearer (the message
 * header and its iovec copied in from user memory, the lengths copied
 * back: 1.68-1.85 us against 1.17-1.26 for recvfrom on an empty socket
 * on this VM, docs/udp-link-performance.md). recvfrom brings no control
 * message, so a UDP GRO run (several packets in one datagram) is told
 * from one packet by the packet itself: a datagram that is not one sound
 * packet is cut at the size hca_link_gro_guess finds.
 */
static bool rx_one(struct hca_dev *dev, int fd)
{
	struct hca_link *l = &dev->link;
	struct sockaddr_in from = { 0 };
	long r = hca_sys_recvfrom(fd, l->rxbuf, l->rx_slot, &from);
	uint32_t saddr = ntohl(from.sin_addr.s_addr);

	if (r <= 0)
		return false;
	take_dgram(dev, l->rxbuf, (size_t)r, 0, saddr);
	return true;
}

/*
 * A poller: one datagram a call, its next poll takes the next (the
 * cheapest call both when one waits and when none does). It reads the
 * socket that last had something — with one peer, that peer's socket —
 * and looks at the others every 8th poll; with several peers' sockets it
 * asks the kernel which one is ready. HCA_RX_STREAK polls in a row that
 * find a datagram say that they come faster than this poller reads them
 * one by one (a ping-pong makes at most two: the message, then an ACK):
 * the poll takes all that is queued then (one recvmmsg), so a poller
 * that polls slowly does not fall behind a stream while it keeps the
 * socket from the progress thread (cq.c marks it as a poller every 8
 * polls).
 */
#define HCA_RX_STREAK 3

static void rx_poll(struct hca_dev *dev)
{
	struct hca_link *l = &dev->link;
	int peers = atomic_load_explicit(&l->rx_peers, memory_order_relaxed);
	struct epoll_event ev;

	/* a sleeper has just emptied the sockets (hca_link_rx_sleeper): the
	 * application's polls right after its wake-up find nothing there */
	if (l->rx_quiet_until) {
		if (hca_now_ns() < l->rx_quiet_until)
			return;
		l->rx_quiet_until = 0;
	}

	if (peers <= 1) {
		if (rx_one(dev, l->rx_hot)) {
			if (++l->rx_hits >= HCA_RX_STREAK)
				rx_drain_fd(dev, l->rx_hot, true);
			return;
		}
		l->rx_hits = 0;
	}
	if (!peers || (peers == 1 && (++l->rx_polls & 7)))
		return;
	if (epoll_wait(l->rx_epfd, &ev, 1, 0) == 1) {
		l->rx_hot = ev.data.fd;
		rx_one(dev, l->rx_hot);
	}
}

void hca_link_rx(struct hca_dev *dev, bool wait)
{
	struct hca_link *l = &dev->link;

	if (wait)
		pthread_mutex_lock(&l->rx_lock);
	else if (pthread_mutex_trylock(&l->rx_lock))
		return;
	if (!wait) {
		if (l->fd >= 0)
			rx_poll(dev);
		pthread_mutex_unlock(&l->rx_lock);
		return;
	}
	rx_drain(dev);
	/* the progress thread: no application to go first */
	hca_link_acks_flush_locked(dev, HCA_ACKS_ALL);
	pthread_mutex_unlock(&l->rx_lock);
}

/*
 * The sockets an application thread sleeping for a completion watches
 * (hca_chan_get_event): the bound one and the peers', at most max — or,
 * with more peers than that, the set of them all. poll() on the sockets
 * themselves says which to read, with no epoll_wait to ask. Returns how
 * many entries of p it filled.
 */
int hca_link_wait_fds(struct hca_dev *dev, struct pollfd *p, int max)
{
	struct hca_link *l = &dev->link;
	int np = atomic_load_explicit(&l->npeers, memory_order_acquire), n = 0;

	if (l->fd < 0 || max < 1)
		return 0;
	if (l->rx_epfd < 0 || atomic_load(&l->rx_peers) >= max) {
		p[0] = (struct pollfd){ .fd = hca_link_wait_fd(dev), .events = POLLIN };
		return 1;
	}
	p[n++] = (struct pollfd){ .fd = l->fd, .events = POLLIN };
	for (int i = 0; i < np && n < max; i++)
		if (l->peers[i].rx)
			p[n++] = (struct pollfd){ .fd = l->peers[i].fd, .events = POLLIN };
	return n;
}

/*
 * That thread, woken, takes what came on the sockets poll() marked. Owed
 * ACKs stay owed: the application is about to answer, and the ACK goes
 * with its answer (or before it sleeps again).
 */
void hca_link_rx_sleeper(struct hca_dev *dev, const struct pollfd *p, int n)
{
	struct hca_link *l = &dev->link;

	pthread_mutex_lock(&l->rx_lock);
	for (int i = 0; i < n; i++) {
		if (!p[i].revents)
			continue;
		if (p[i].fd == l->rx_epfd)
			rx_drain(dev);
		else
			rx_drain_fd(dev, p[i].fd, false);
	}
	/* the polls of the next microseconds (the application taking its
	 * completion, answering, arming, looking once more before it sleeps
	 * again) would each make a system call to find the sockets empty:
	 * they skip them; anything that comes meanwhile waits for the next
	 * look, at worst the sleep that follows */
	l->rx_quiet_until = hca_now_ns() + HCA_RX_QUIET_NS;
	pthread_mutex_unlock(&l->rx_lock);
}

/* A datagram handed in as if received from saddr (tests, fuzzing). */
void hca_link_inject(struct hca_dev *dev, const uint8_t *pkt, size_t len, uint32_t saddr)
{
	pthread_mutex_lock(&dev->link.rx_lock);
	dispatch(dev, pkt, len, saddr);
	pthread_mutex_unlock(&dev->link.rx_lock);
}

/* Where a path leads over UDP: the IPv4 address of an IPv4-mapped GID. */
bool hca_link_gid_ip(const union ibv_gid *gid, uint32_t *ip)
{
	static const uint8_t v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (memcmp(gid->raw, v4map, 12))
		return false;
	*ip = (uint32_t)gid->raw[12] << 24 | (uint32_t)gid->raw[13] << 16 |
	      (uint32_t)gid->raw[14] << 8 | gid->raw[15];
	return true;
}
