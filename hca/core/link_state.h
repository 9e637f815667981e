/*
 * The UDP link's state in a process (struct hca_link, dev->link): its
 * sockets, its receive lock and buffers, the peers' sending sockets, the
 * fault injector's held datagram and the deferred ACKs. Kept by
 * hca/link/udp/ (link_udp.c, link_peers.c, udp_ack.c); part of struct
 * hca_dev (hca_int.h).
 */
#ifndef HCA_LINK_STATE_H
#define HCA_LINK_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hca_fault;
struct hca_pcap;
struct hca_link_counters;
struct hca_qp;

/* Largest datagram: BTH + headers + a 4096-byte MTU payload + ICRC. */
#define HCA_PKT_MAX 4224

/* Connected sending sockets, one per peer process (link_peers.c). */
#define HCA_LINK_PEERS 256

/* QPs whose end-of-message ACK may wait for the application's next move. */
#define HCA_OWED_MAX 64

/* The UDP link of this process (link_udp.c). */
struct hca_link {
	int fd;                 /* bound to port base + our slot */
	int rx_epfd;            /* fd and the peers' sockets: what to read */
	int rx_hot;             /* the socket the poller reads first */
	unsigned rx_polls;      /* polls since the others were looked at */
	unsigned rx_hits;       /* polls in a row that read a datagram */
	uint64_t rx_quiet_until; /* polls skip the sockets until then */
	_Atomic int rx_peers;   /* peers' sockets that receive */
	bool rx_connected;      /* they may (SOFTIB_UDP_RX_CONNECTED) */
	int rcvbuf;             /* SO_RCVBUF asked of receiving sockets */
	uint32_t ip;            /* our IPv4 address, host order */
	uint16_t base, port;
	bool force_udp;         /* SOFTIB_LINK=udp */
	struct hca_fault *fault;
	struct hca_pcap *pcap;
	pthread_mutex_t rx_lock;  /* one receiver at a time: packet order */
	pthread_mutex_t tx_lock;  /* the fault injector's held datagram */
	uint8_t held[HCA_PKT_MAX];
	size_t held_len;
	uint32_t held_to;
	uint16_t held_port;
	uint64_t held_ns;
	struct hca_link_counters *cnt;  /* in our process slot: softib shows them */
	bool no_gso;            /* the kernel refused UDP_SEGMENT */
	bool gro_ok;            /* UDP_GRO may be set (the kernel takes it) */
	_Atomic bool gro;       /* receiving sockets take UDP_GRO datagrams now
				  * (set under rx_lock; peer_socket reads it) */
	bool gro_always;        /* SOFTIB_UDP_GRO=1: never turned off */
	bool rx_bulk;           /* a packet of a multi-packet message came */
	uint64_t gro_bulk_ns;   /* when a tick last saw rx_bulk */
	uint8_t *rxbuf;         /* HCA_RX_BATCH receive slots, under rx_lock */
	size_t rx_slot;         /* bytes per slot: a GRO datagram, or a packet */
	struct { uint32_t daddr; uint16_t dport; int fd; bool rx; } peers[HCA_LINK_PEERS];
	_Atomic int npeers;
	pthread_mutex_t peers_lock;
	/* QPs owing a deferred ACK (udp_resp.c), under rx_lock */
	struct hca_qp *owed[HCA_OWED_MAX];
	_Atomic int nowed;      /* written under rx_lock, peeked without it */
	/* one of them may owe an asked ACK: set (under rx_lock) when one is
	 * owed, cleared by a flush (under rx_lock) that leaves none; peeked
	 * without the lock by a poll that found nothing (udp_ack.c), relaxed */
	_Atomic bool acks_asked;
	/* no ACK owed here rides with another QP's packet before this time
	 * (udp_ack.c hca_udp_ack_take_host): a hint, lowered under rx_lock
	 * as ACKs are owed and recomputed by the look it lets through */
	_Atomic uint64_t ride_from_ns;
};

#endif
