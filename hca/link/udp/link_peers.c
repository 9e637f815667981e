/*
 * Connected sockets, one per peer process (IPv4 address, UDP port), for
 * the UDP link: they send to that peer, and receive what it sends.
 *
 * Why connected: a sendto() on an unconnected socket looks the route up
 * and builds a throw-away route entry for every datagram; on a connected
 * socket the kernel keeps the route. Measured on loopback with
 * bench/udp_raw (8-byte ping-pong, one-way): 2.08 us connected against
 * 2.47 us with sendto/recvfrom. Receiving, a datagram whose 4-tuple
 * matches a connected socket takes the kernel's early demux: the socket
 * is found, and its cached input route used, before the IP layer would
 * look the route up (ip_route_input_slow, fib_table_lookup in a profile
 * of the bound socket's path). See docs/udp-link-performance.md.
 *
 * So each peer socket is bound to our own port (base + slot, the port a
 * QP number names) and connected to the peer's: both ends' sockets then
 * carry the same 4-tuple, and each side's datagrams land on the other's
 * connected socket. The process's bound socket keeps SO_REUSEADDR from
 * after its bind on: our peer sockets can share its port, while another
 * process's bound socket (which binds without it) still cannot — a port
 * taken stays an error, as before. The bound socket receives from peers
 * that have no socket here yet. If the port cannot be shared (a kernel
 * that refuses), a peer socket sends from an ephemeral port and receives
 * nothing, as it did before.
 *
 * Order: a peer's datagrams reach the bound socket until our socket for
 * it exists, then that socket; the few at the switch may be read out of
 * order, which RC and XRC recover from (a NAK, a go-back) and UD allows.
 *
 * The table only grows (a peer process's port is reused by the next
 * process of that slot, so the socket stays valid), up to
 * HCA_LINK_PEERS entries; beyond that, datagrams go by sendto() on the
 * bound socket. Lookups take no lock: an entry is complete before the
 * count that publishes it is raised.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "udp_link.h"

static int peer_socket(struct hca_link *l, uint32_t daddr, uint16_t dport, bool *rx)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(dport),
				  .sin_addr.s_addr = htonl(daddr) };
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons(l->port),
				  .sin_addr.s_addr = htonl(INADDR_ANY) };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int pmtu = IP_PMTUDISC_DO, buf = l->rcvbuf, snd = HCA_UDP_SNDBUF, none = 0, one = 1;

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	*rx = l->rx_connected && l->rx_epfd >= 0 && !bind(fd, (struct sockaddr *)&me, sizeof(me));
	/* receiving: the bound socket's buffer; else keep the queue small */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, *rx ? &buf : &none, sizeof(buf));
	if (*rx && l->gro) /* as the bound socket does (link_udp.c) */
		setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&to, sizeof(to))) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * send() and recvmsg() straight to the kernel: libc's wrappers are
 * thread-cancellation points, and entering and leaving that mode costs
 * two atomic operations a call — measurable on the busy-poll path, which
 * makes one such call per poll. softib's threads are never cancelled
 * inside these calls.
 */
#ifndef SOFTIB_TSAN
long hca_sys_send(int fd, const void *p, size_t len)
{
	return syscall(SYS_sendto, fd, p, len, MSG_DONTWAIT, NULL, 0);
}

long hca_sys_recvmsg(int fd, struct msghdr *mh)
{
	return syscall(SYS_recvmsg, fd, mh, MSG_DONTWAIT);
}

long hca_sys_recvfrom(int fd, void *p, size_t len, struct sockaddr_in *from)
{
	socklen_t fl = sizeof(*from);

	return syscall(SYS_recvfrom, fd, p, len, MSG_DONTWAIT, from, &fl);
}

static long sys_sendmmsg(int fd, struct mmsghdr *mm, unsigned n)
{
	return syscall(SYS_sendmmsg, fd, mm, n, MSG_DONTWAIT);
}
#else
/*
 * The ThreadSanitizer tree (scons tsan=1) goes through libc's wrappers,
 * which TSan intercepts: a datagram then orders what its sender wrote
 * before sending with what its receiver reads after receiving (TSan syncs
 * every socket on one object), as the kernel does. Raw system calls hide
 * that edge, and each transfer between two QPs of one process over the
 * UDP link would be reported as a race.
 */
long hca_sys_send(int fd, const void *p, size_t len)
{
	return send(fd, p, len, MSG_DONTWAIT);
}

long hca_sys_recvmsg(int fd, struct msghdr *mh)
{
	return recvmsg(fd, mh, MSG_DONTWAIT);
}

long hca_sys_recvfrom(int fd, void *p, size_t len, struct sockaddr_in *from)
{
	socklen_t fl = sizeof(*from);

	return recvfrom(fd, p, len, MSG_DONTWAIT, (struct sockaddr *)from, &fl);
}

static long sys_sendmmsg(int fd, struct mmsghdr *mm, unsigned n)
{
	return sendmmsg(fd, mm, n, MSG_DONTWAIT);
}
#endif

/* The connected socket for (daddr, dport), made on first use; -1: none. */
int hca_link_peer_fd(struct hca_link *l, uint32_t daddr, uint16_t dport)
{
	int n = atomic_load_explicit(&l->npeers, memory_order_acquire), fd;

	for (int i = 0; i < n; i++)
		if (l->peers[i].daddr == daddr && l->peers[i].dport == dport)
			return l->peers[i].fd;
	pthread_mutex_lock(&l->peers_lock);
	n = atomic_load_explicit(&l->npeers, memory_order_relaxed);
	for (int i = 0; i < n; i++)
		if (l->peers[i].daddr == daddr && l->peers[i].dport == dport) {
			pthread_mutex_unlock(&l->peers_lock);
			return l->peers[i].fd;
		}
	bool rx = false;

	fd = n < HCA_LINK_PEERS ? peer_socket(l, daddr, dport, &rx) : -1;
	if (fd >= 0) {
		l->peers[n].daddr = daddr;
		l->peers[n].dport = dport;
		l->peers[n].fd = fd;
		l->peers[n].rx = rx;
		atomic_store_explicit(&l->npeers, n + 1, memory_order_release);
		if (rx) {
			struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

			epoll_ctl(l->rx_epfd, EPOLL_CTL_ADD, fd, &ev);
			atomic_fetch_add(&l->rx_peers, 1);
		}
	}
	pthread_mutex_unlock(&l->peers_lock);
	return fd;
}

/*
 * Send on a connected socket. A peer process that went away leaves an
 * ICMP error on the socket, which the next send() reports instead of
 * sending: that send is made again, once.
 */
int hca_link_peer_send(int fd, const uint8_t *p, size_t len)
{
	long r = hca_sys_send(fd, p, len);

	if (r < 0 && errno == ECONNREFUSED)
		r = hca_sys_send(fd, p, len);
	return r < 0 ? -1 : 0;
}

/* Two datagrams on a connected socket in one call; how many left. */
int hca_link_peer_send2(int fd, const uint8_t *p, size_t len, const uint8_t *p2,
			size_t len2)
{
	struct iovec iov[2] = { { (void *)p, len }, { (void *)p2, len2 } };
	struct mmsghdr mm[2] = { { .msg_hdr = { .msg_iov = &iov[0], .msg_iovlen = 1 } },
				 { .msg_hdr = { .msg_iov = &iov[1], .msg_iovlen = 1 } } };
	long r = sys_sendmmsg(fd, mm, 2);

	if (r < 0 && errno == ECONNREFUSED) /* a stale ICMP error: once more */
		r = sys_sendmmsg(fd, mm, 2);
	if (r == 1) /* the second alone */
		r = 1 + (hca_link_peer_send(fd, p2, len2) == 0);
	return (int)r;
}

void hca_link_peers_close(struct hca_link *l)
{
	int n = atomic_load(&l->npeers);

	for (int i = 0; i < n; i++)
		close(l->peers[i].fd);
	atomic_store(&l->npeers, 0);
	pthread_mutex_destroy(&l->peers_lock);
}
