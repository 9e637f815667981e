/*
 * The UDP link's row in the link table (core/link_ops.h): the link
 * between hosts, RoCEv2 packets in UDP datagrams. It carries the send
 * queue of a connected QP whose path leads off the host (attach), UD
 * sends to a remote GID, its socket's receive side, the ACKs the
 * responder defers, and the retransmission timers.
 */
#include "udp_link.h"

static bool udp_attach(struct hca_qp *qp)
{
	hca_udp_path_set(qp);
	return qp->udp;
}

/*
 * A packet being handled for the QP finishes first (the link's receive
 * lock); its owed ACK goes while its directory entry (the path) is there
 * (pay) — what it acknowledges was received, and the peer must not retry
 * it into a QP that is gone — and it leaves the owed list.
 */
static void udp_detach(struct hca_qp *qp, bool pay)
{
	struct hca_dev *dev = qp->dev;

	pthread_mutex_lock(&dev->link.rx_lock);
	if (pay)
		hca_udp_ack_flush(qp);
	hca_link_forget(dev, qp);
	pthread_mutex_unlock(&dev->link.rx_lock);
}

static int udp_send_ud(struct hca_qp *qp, struct hca_swqe *w, struct hca_msg *m,
		       uint32_t daddr)
{
	return hca_udp_send_ud(qp, w, m, daddr);
}

static bool udp_forced(struct hca_dev *dev, uint32_t *self)
{
	*self = dev->link.ip;
	return dev->link.force_udp;
}

static bool udp_capturing(struct hca_dev *dev)
{
	return dev->link.pcap != NULL;
}

static void udp_capture(struct hca_qp *qp, struct hca_swqe *w, struct hca_msg *m)
{
	if (m)
		hca_udp_capture_ud(qp, w, m);
	else
		hca_udp_capture(qp, w);
}

const struct hca_link_ops hca_udp_link_ops = {
	.name = "udp",
	.open = hca_link_init,
	.close = hca_link_fini,
	.attach = udp_attach,
	.detach = udp_detach,
	.sq_progress = hca_udp_sq_progress,
	.gid_addr = hca_link_gid_ip,
	.forced = udp_forced,
	.capturing = udp_capturing,
	.send_ud = udp_send_ud,
	.capture = udp_capture,
	.rx = hca_link_rx,
	.acks_flush = hca_link_acks_flush,
	.tick = hca_link_tick,
	.wait_fd = hca_link_wait_fd,
	.wait_fds = hca_link_wait_fds,
	.rx_sleeper = hca_link_rx_sleeper,
};
