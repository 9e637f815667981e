/*
 * The progress engine (progress.c): the one function that moves the
 * device forward, whoever calls it — the CQ poll, the completion
 * channel's sleep (ibv_get_cq_event) or the progress thread. Each caller
 * says what it wants done; the work is done in one fixed order: requests
 * other processes left (serve), the links' timers, the waiting QPs, owed
 * ACKs, the links' receive sides.
 */
#ifndef HCA_PROGRESS_H
#define HCA_PROGRESS_H

#include <stdbool.h>

struct hca_dev;
struct pollfd;

enum {
	HCA_PROGRESS_SERVE = 1 << 0,    /* links' serve: doorbelled requests */
	HCA_PROGRESS_TIMERS = 1 << 1,   /* links' tick: retransmission timers */
	HCA_PROGRESS_WAITING = 1 << 2,  /* QPs held by RNR / retry timers, when due */
	HCA_PROGRESS_RX = 1 << 3,       /* links' receive sides */
	HCA_PROGRESS_WAIT = 1 << 4,     /* may block on a link's lock (thread) */
	/* owed ACKs: which (enum hca_ack_flush + 1, in two bits) */
	HCA_PROGRESS_ACKS_ASKED = 1 << 5,
	HCA_PROGRESS_ACKS_SWEEP = 2 << 5,
	HCA_PROGRESS_ACKS_ALL = 3 << 5,
	HCA_PROGRESS_ACKS_MASK = 3 << 5,
};

void hca_progress(struct hca_dev *dev, unsigned what);

/* The progress thread (progress.c): started at device open. */
int hca_progress_start(struct hca_dev *dev);

/*
 * A thread about to sleep for a completion watches the links' sockets
 * itself (hca_dev_link_sleep_begin): their descriptors, and what it reads
 * when one of them woke it. per[] (HCA_LINKS_MAX) keeps which link gave
 * how many.
 */
#define HCA_LINKS_MAX 4
int hca_progress_sleep_fds(struct hca_dev *dev, struct pollfd *p, int max, int *per);
void hca_progress_sleep_rx(struct hca_dev *dev, const struct pollfd *p, const int *per);

#endif
