/*
 * The UDP link's interface (hca/link/udp/): RoCEv2 packets in UDP
 * datagrams (link_udp.c), its peers' sockets (link_peers.c), GSO runs
 * (link_gso.c), the requester and responder over it (udp_req*.c,
 * udp_resp.c), deferred ACKs (udp_ack.c).
 */
#ifndef HCA_UDP_LINK_H
#define HCA_UDP_LINK_H

#include "engine.h"
#include "fault.h"
#include "pcap.h"
#include "wire.h"
#include "link_ops.h"

/* udp_ops.c: the link's row in hca_links */
extern const struct hca_link_ops hca_udp_link_ops;

/* link_udp.c, udp_req.c, udp_resp.c */
int hca_link_init(struct hca_dev *dev);
void hca_link_fini(struct hca_dev *dev);
void hca_link_tick(struct hca_dev *dev);
void hca_link_rx(struct hca_dev *dev, bool wait);
struct pollfd;
int hca_link_wait_fd(struct hca_dev *dev);
int hca_link_wait_fds(struct hca_dev *dev, struct pollfd *p, int max);
void hca_link_rx_sleeper(struct hca_dev *dev, const struct pollfd *p, int n);
void hca_link_inject(struct hca_dev *dev, const uint8_t *pkt, size_t len, uint32_t saddr);
int hca_link_send(struct hca_dev *dev, uint32_t daddr, uint8_t *pkt, size_t hdr_len,
		  size_t plen);
bool hca_link_gid_ip(const union ibv_gid *gid, uint32_t *ip);
void hca_link_capture(struct hca_dev *dev, uint32_t daddr, uint8_t *pkt, size_t hdr_len,
		      size_t plen);
void hca_udp_capture(struct hca_qp *qp, struct hca_swqe *w);
void hca_udp_capture_ud(struct hca_qp *qp, struct hca_swqe *w, struct hca_msg *m);
void hca_udp_req_rx(struct hca_qp *qp, const struct hca_wire_hdr *h,
		    const uint8_t *pl, size_t plen);
void hca_udp_resp_rx(struct hca_qp *qp, const struct hca_wire_hdr *h,
		     const uint8_t *pl, size_t plen, uint32_t saddr);
void hca_udp_sq_progress(struct hca_qp *qp);
void hca_udp_ack_flush(struct hca_qp *qp);
bool hca_udp_ack_take(struct hca_qp *qp, bool asked_only, struct hca_wire_hdr *h,
		      uint32_t *daddr);
int hca_link_send_pair(struct hca_dev *dev, uint32_t daddr, uint8_t *pkt, size_t hdr_len,
		       size_t plen, uint8_t *pkt2, size_t hdr_len2);
void hca_udp_ack_flush_asked(struct hca_qp *qp);
void hca_udp_ack_owe(struct hca_qp *qp, uint32_t daddr, uint32_t psn, bool asked);
bool hca_udp_ack_rides(struct hca_qp *qp);
bool hca_udp_ack_take_host(struct hca_qp *self, uint32_t daddr, struct hca_wire_hdr *h);
void hca_udp_send_answer(struct hca_qp *qp, uint32_t daddr, struct hca_wire_hdr *h,
			 const uint8_t *pl, size_t plen);
void hca_link_acks_flush(struct hca_dev *dev, bool wait, enum hca_ack_flush what);
void hca_link_acks_flush_locked(struct hca_dev *dev, enum hca_ack_flush what);
void hca_link_forget(struct hca_dev *dev, struct hca_qp *qp);
int hca_link_peer_fd(struct hca_link *l, uint32_t daddr, uint16_t dport);
int hca_link_peer_send(int fd, const uint8_t *p, size_t len);
int hca_link_peer_send2(int fd, const uint8_t *p, size_t len, const uint8_t *p2,
			size_t len2);
struct sockaddr_in;
long hca_sys_send(int fd, const void *p, size_t len);
long hca_sys_recvmsg(int fd, struct msghdr *mh);
long hca_sys_recvfrom(int fd, void *p, size_t len, struct sockaddr_in *from);
void hca_link_peers_close(struct hca_link *l);

/* A run of equal packets for one peer, the last one perhaps shorter,
 * sent as one UDP GSO buffer (link_gso.c); its bytes live in a
 * per-thread buffer until flushed. */
struct hca_link_batch {
	uint32_t daddr;
	uint16_t dport;
	size_t seg;             /* every packet's size but the last's */
	size_t len;             /* the run's bytes */
	int n;
};
size_t hca_link_seal(struct hca_dev *dev, uint32_t daddr, uint8_t *pkt, size_t hdr_len,
		     size_t plen, uint16_t *dport);
void hca_link_send_sealed(struct hca_dev *dev, uint32_t daddr, uint16_t dport,
			  uint8_t *pkt, size_t len);
void hca_link_batch_add(struct hca_dev *dev, struct hca_link_batch *b, uint32_t daddr,
			uint8_t *pkt, size_t hdr_len, size_t plen);
void hca_link_batch_flush(struct hca_dev *dev, struct hca_link_batch *b);
void hca_link_batch_flush_ack(struct hca_dev *dev, struct hca_link_batch *b,
			      uint8_t *ack, size_t hdr_len);
/* ... and received: a UDP GRO run's segment size, from its packets (0: none) */
size_t hca_link_gro_guess(struct hca_dev *dev, const uint8_t *p, size_t len, uint32_t saddr);
enum hca_resp_status hca_udp_send_ud(struct hca_qp *qp, struct hca_swqe *w,
				     struct hca_msg *m, uint32_t daddr);
void hca_udp_path_set(struct hca_qp *qp);
uint8_t hca_wire_transport(enum ibv_qp_type t);

#endif
