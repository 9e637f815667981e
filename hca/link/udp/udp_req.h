/*
 * What the UDP requester's two halves share: udp_req.c sends and runs
 * the timers, udp_req_rx.c takes the responder's answers.
 */
#ifndef HCA_UDP_REQ_H
#define HCA_UDP_REQ_H

#include "hca_int.h"

#define HCA_UDP_WINDOW 256          /* packets in flight per QP, at most, ... */
#define HCA_UDP_WINDOW_BYTES (512u << 10) /* ... or this many bytes' worth */
#define HCA_UDP_WINDOW_MAX 512      /* (512 KiB of 1024-byte packets) */
#define HCA_UDP_WINDOW_MIN 8        /* ... and at least, after losses */
#define HCA_NAK_STALL_MAX 64        /* go-backs and NAKs in a row without progress */
#define HCA_PROBE_MIN_NS 200000ULL  /* the shortest early go-back wait */

#define SQ_SLOT(qp, i) (&(qp)->sq[(i) & ((qp)->cap.max_send_wr - 1)])

bool hca_udp_needs_response(const struct hca_swqe *w);

/*
 * The end of the WQEs with packets or responses in flight: sq_next, and
 * one more when the WQE there is a READ asked for in part (udp_req.c
 * keeps it at sq_next until it is asked for whole).
 */
static inline uint32_t hca_udp_flight_end(const struct hca_qp *qp)
{
	const struct hca_swqe *w = SQ_SLOT(qp, qp->sq_next);

	return qp->sq_next != qp->sq_tail && w->psn_set &&
	       w->wr.opcode == IBV_WR_RDMA_READ && w->rd_hi ? qp->sq_next + 1 : qp->sq_next;
}
uint32_t hca_udp_window(struct hca_qp *qp);
uint32_t hca_udp_window_max(struct hca_qp *qp);
void hca_udp_rewind(struct hca_qp *qp);
void hca_udp_go_back(struct hca_qp *qp);
bool hca_udp_stalled(struct hca_qp *qp);
uint64_t hca_udp_probe_wait_ns(struct hca_qp *qp);
void hca_udp_rtt_sample(struct hca_qp *qp, uint32_t psn, uint64_t now);

#endif
