/*
 * The link interface: what a link (hca/link/<name>/) gives the device and
 * the engine, as a table of operations. The device and the engine reach a
 * link only through its row in hca_links[] (hca/link/links.c); a new link
 * is a new folder and a new row, nothing else.
 *
 * Every operation may be NULL (the link has nothing to do there). Rows are
 * walked in table order; the progress engine (progress.c) is the one
 * walker of the receive, acknowledgement and timer operations.
 *
 * Calls upwards go through callbacks registered next to the table
 * (hca_engine, below): core runs a QP's send queue, and a link hands a
 * request it received to the responder, without naming the engine's
 * functions. hca/link/links.c, the one file that sees every layer, fills
 * both.
 */
#ifndef HCA_LINK_OPS_H
#define HCA_LINK_OPS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include <infiniband/verbs.h>

struct hca_dev;
struct hca_qp;
struct hca_swqe;
struct hca_msg;
struct pollfd;

/* Which owed ACKs a flush sends (udp_ack.c). */
enum hca_ack_flush {
	HCA_ACKS_ASKED,         /* those the requester asked for */
	HCA_ACKS_SWEEP,         /* ... and those owed since the last sweep */
	HCA_ACKS_ALL,
};

struct hca_link_ops {
	const char *name;
	/* device open and close: the link's sockets, mailboxes, threads */
	int (*open)(struct hca_dev *dev);
	void (*close)(struct hca_dev *dev);
	/* a connected QP's path was (re)set (modify to RTR): true when the
	 * path is this link's (it then carries the QP's packets: qp->link) */
	bool (*attach)(struct hca_qp *qp);
	/* the QP is going: a packet being handled for it finishes, what it
	 * owes goes out while its path is there (pay), the link forgets it */
	void (*detach)(struct hca_qp *qp, bool pay);
	/* send a QP's WQEs as this link's packets (sq_lock held); NULL: the
	 * engine runs the WQEs itself against the responder (shared memory) */
	void (*sq_progress)(struct hca_qp *qp);
	/* ... if its lock is free (false: it was not): a poll retiring
	 * mailbox sends (mbox.c) */
	bool (*sq_reap)(struct hca_qp *qp, bool timed);
	/* the link's address of a GID, when it has one (IPv4-mapped GIDs
	 * for the UDP link) */
	bool (*gid_addr)(const union ibv_gid *gid, uint32_t *addr);
	/* every path is this link's (SOFTIB_LINK=udp): true, and the
	 * device's own address on the link in *self */
	bool (*forced)(struct hca_dev *dev, uint32_t *self);
	/* the link writes a capture (SOFTIB_PCAP): what goes another way
	 * is written to it too (capture) */
	bool (*capturing)(struct hca_dev *dev);
	/* a UD send to address daddr; returns an enum hca_resp_status */
	int (*send_ud)(struct hca_qp *qp, struct hca_swqe *w, struct hca_msg *m,
		       uint32_t daddr);
	/* a message that went another way, written to the link's capture
	 * (m: a UD send's message; NULL: a connected QP's WQE) */
	void (*capture)(struct hca_qp *qp, struct hca_swqe *w, struct hca_msg *m);
	/* bytes from local buffers to a registered buffer of process (slot,
	 * gen) of this host, and back; keys[i] is the key remote[i] was
	 * checked against (fence.c) */
	int (*mem_write)(struct hca_dev *dev, uint16_t slot, uint32_t gen,
			 const struct iovec *local, int nlocal,
			 const struct iovec *remote, const uint32_t *keys, int nremote);
	int (*mem_read)(struct hca_dev *dev, uint16_t slot, uint32_t gen,
			const struct iovec *local, int nlocal,
			const struct iovec *remote, const uint32_t *keys, int nremote);
	/* the receive side: what arrived is read and handled (wait: the
	 * caller may block on the link's receive lock) */
	void (*rx)(struct hca_dev *dev, bool wait);
	/* requests other processes left for us (a doorbell said so) */
	void (*serve)(struct hca_dev *dev);
	/* acknowledgements owed to peers go out */
	void (*acks_flush)(struct hca_dev *dev, bool wait, enum hca_ack_flush what);
	/* the link's timers: retransmissions, held datagrams */
	void (*tick)(struct hca_dev *dev);
	/* the descriptor the progress thread watches (-1: none) */
	int (*wait_fd)(struct hca_dev *dev);
	/* ... those a thread sleeping for a completion watches itself, and
	 * what it reads when one of them woke it */
	int (*wait_fds)(struct hca_dev *dev, struct pollfd *p, int max);
	void (*rx_sleeper)(struct hca_dev *dev, const struct pollfd *p, int n);
};

/* The links, NULL-terminated (hca/link/links.c) ... */
extern const struct hca_link_ops *const hca_links[];
/* ... the one between the processes of this host, whose mem_write and
 * mem_read every responder uses to reach a registered buffer (its own
 * process's too) */
extern const struct hca_link_ops *const hca_link_host;
/* ... and the one between hosts (UD sends to a remote GID, capture) */
extern const struct hca_link_ops *const hca_link_net;

/* The engine as core and the links call it (hca/link/links.c). */
struct hca_engine_ops {
	/* run a QP's send queue (the waiting list, SQD -> RTS) */
	void (*sq_progress)(struct hca_qp *qp);
	/* ... if its lock is free (false: it was not): a poll retiring
	 * mailbox sends (mbox.c) */
	bool (*sq_reap)(struct hca_qp *qp, bool timed);
	/* a request a link received, to the responder: an enum
	 * hca_resp_status */
	int (*deliver)(struct hca_dev *dev, struct hca_msg *m);
	/* the completion opcode of a send opcode (flushed WQEs) */
	enum ibv_wc_opcode (*wc_opcode)(enum ibv_wr_opcode op);
};
extern const struct hca_engine_ops hca_engine;

/* Walk every link that has an operation (NULL ones skipped). */
#define HCA_LINKS_EACH(l) \
	for (const struct hca_link_ops *const *l##_p = hca_links, *l; \
	     (l = *l##_p) != NULL; l##_p++)

#endif
