/*
 * sib_rma.h: what rndv.c, rma.c and mem.c share (not installed): one-sided WR
 * descriptors, user-buffer registrations, the per-worker state of
 * rendezvous and RMA.
 */
#ifndef SIB_RMA_H
#define SIB_RMA_H

#include "sib_int.h"

/* A registration of a user buffer, held for one operation.  Made by
 * sib_reg_get (one ibv_reg_mr per use, or a registration-cache hit),
 * released by sib_reg_put. */
struct sib_reg {
	struct ibv_mr *mr;
	void *cache_entry;       /* the registration cache's, NULL: own MR */
};

#define RKEY_MAGIC 0x5349424bu   /* "SIBK" */

struct sib_mem {
	sib_link_t link;
	sib_worker_t *w;
	void *addr;
	size_t len;
	bool owned;              /* allocated by sib_mem_map */
	int fd;                  /* owned: its memfd, -1: anonymous */
	struct ibv_mr *mr;
	struct sib_reg *reg;     /* SIB_MEM_CACHED: the cache's, mr its */
};

struct sib_rkey_blob {
	uint32_t magic;
	uint32_t owner;          /* worker id of the process that mapped */
	uint64_t host;
	uint64_t addr, len;
	uint32_t rkey;
	uint32_t pad;
};

struct sib_rkey {
	sib_link_t link;
	struct sib_ep *ep;
	uint64_t addr, len;
	uint32_t rkey;
};

/* One one-sided WR (posted through the protocol table's rndv row). */
struct sib_rdma {
	enum ibv_wr_opcode opcode;
	uint64_t laddr;          /* local address (not used when bounced) */
	uint32_t len, lkey;
	uint64_t raddr;
	uint32_t rkey, srqn;     /* the target process's key and SRQ */
	uint64_t cmp, swap;      /* atomics: compare (or add), swap */
	uint64_t *result;        /* atomics: the old value goes here */
	void *ubuf;              /* bounced get / put: the user's buffer */
	uint8_t *slot_addr;      /* the bounce slot used */
	bool bounce, inl, rma;   /* rma: a user operation (counted, flushed) */
	struct sib_reg *reg;     /* released at completion */
	sib_send_cb_t user_cb;   /* rma: the user's callback */
	void *user_arg;
	void *parent;            /* rendezvous piece: its struct sib_rndv_rx */
};

struct sib_rma_w {
	/* registrations */
	uint32_t regs_active;
	uint64_t regs_total, reg_hits, reg_miss_ns;
	struct sib_rcache *rcache;   /* NULL: a registration per use */
	/* regions and keys */
	sib_link_t maps, rkeys;
	uint32_t nmaps, nrkeys;
	/* operations and the worker flush */
	uint64_t rma_ops, access_errors, issued, done;
	struct sib_rdma *rdma_free;  /* descriptors kept for reuse (rma.c) */
	uint32_t nrdma_free;
	sib_link_t flushes;
	int rd_atom;
	/* rendezvous */
	sib_link_t tx, rx, am_kept;
	uint32_t ntx, nrx;
	uint64_t cookie_next, rndv_tx, rndv_rx;
	size_t thresh_local, thresh_remote, chunk;
	bool write_local, write_remote;   /* WRITE variant per path */
	bool destroying;
};

SIB_LOCAL struct sib_reg *sib_reg_get(sib_worker_t *w, void *addr, size_t len,
				      int access);
SIB_LOCAL void sib_reg_put(sib_worker_t *w, struct sib_reg *g);
SIB_LOCAL void sib_rma_done_one(sib_worker_t *w);
SIB_LOCAL bool sib_peer_dead(const struct sib_ep *ep);
SIB_LOCAL void sib_mem_free(struct sib_mem *m);

#endif
