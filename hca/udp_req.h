/*
 * What the UDP requester's two halves share: udp_req.c sends and runs
 * the timers, udp_req_rx.c takes the responder's answers.
 */
#ifndef HCA_UDP_REQ_H
#define HCA_UDP_REQ_H

#include "hca_int.h"

#define HCA_UDP_WINDOW 256          /* packets in flight per QP, at most */
#define HCA_UDP_WINDOW_MIN 8        /* ... and at least, after losses */
#define HCA_NAK_STALL_MAX 64        /* go-backs and NAKs in a row without progress */
#define HCA_PROBE_MIN_NS 200000ULL  /* the shortest early go-back wait */

#define SQ_SLOT(qp, i) (&(qp)->sq[(i) & ((qp)->cap.max_send_wr - 1)])

bool hca_udp_needs_response(const struct hca_swqe *w);
uint32_t hca_udp_window(struct hca_qp *qp);
void hca_udp_rewind(struct hca_qp *qp);
void hca_udp_go_back(struct hca_qp *qp);
bool hca_udp_stalled(struct hca_qp *qp);
uint64_t hca_udp_probe_wait_ns(struct hca_qp *qp);
void hca_udp_rtt_sample(struct hca_qp *qp, uint32_t psn, uint64_t now);

#endif
