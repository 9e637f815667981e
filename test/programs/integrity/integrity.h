/*
 * integrity.h: what the parts of the integrity program share: its limits,
 * the kinds of operation, the deterministic stream both sides draw from,
 * the socketpair records and the verbs setup helpers.
 *
 * stream.c   randomness, message patterns, the operation stream, layouts
 *            and the byte checks
 * setup.c    options, messages, the socketpair channel, verbs setup
 * client.c   a client process: posts its QPs' streams, checks READs and
 *            atomics
 * server.c   the server: forks the clients, checks every byte received
 * main.c     the command line
 */
#ifndef INTEGRITY_H
#define INTEGRITY_H

#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include "../tp_common.h" /* tp_die, tp_now_s, tp_who */

#define MAX_PROCS    64
#define MAX_QPS      64           /* per process and transport */
#define MAX_SGE      4
#define LARGE        (1u << 20)   /* the largest message */
#define FOOT_EXTRA   128          /* lead, gaps and notify around data */
#define NSLOT        4            /* write slots per QP */
#define GUARD        64           /* canary bytes checked around a write */
#define SLOT         (LARGE + 4 * GUARD)
#define WAREA        ((size_t)NSLOT * SLOT)
#define RSIZE        (LARGE + 65536)  /* the read region */
#define NSHARED      8            /* shared atomic counters */
#define SQ_DEPTH     128
#define RQ_WINDOW    32           /* receives posted ahead per server QP */
#define FIFO_CAP     256
#define CANARY       0x5a
#define SCRIBBLE     0xee
#define QKEY         0x11111111u
#define NOTIFY_X     0x4e4f5446u
#define STALL_SECS   30
#define MAX_ERR_SHOW 30
#define GRH_LEN      40

enum qtype { Q_RC, Q_UC, Q_UD, Q_NTYPES };

enum kind {
	K_SEND, K_SEND_IMM, K_WRITE, K_WRITE_IMM, K_READ,
	K_FAA_SHARED, K_FAA_PRIV, K_CAS_PRIV, K_NKINDS
};

#define GOLDEN 0x9e3779b97f4a7c15ull

struct rng {
	uint64_t s;
};

/* What a message's bytes are: header (sender, seq) in bytes 0..7 when
 * hdr is set, then the pattern keyed by key, by byte position. */
struct msgid {
	uint64_t key;
	uint32_t sid, seq;
	bool hdr;
};

struct params {
	int procs, qps;
	uint64_t messages;
	uint64_t seed;
	int ntypes;
	int types[Q_NTYPES];
	const char *dev;
	uint32_t mtu;            /* UD payload limit, from the server */
	uint8_t timeout;         /* RC ACK timeout (4.096 us * 2^timeout) */
};

struct op {
	uint32_t seq;
	uint8_t kind;
	uint32_t len;     /* data bytes; 8 for atomics */
	uint64_t roff;    /* write/read region offset; counter index */
	uint64_t arg;     /* add value or swap value */
	bool cas_hit;
	uint32_t imm;
	uint64_t key;
};

struct ring {
	uint8_t *base;
	uint64_t size, head, tail; /* head, tail: ever-growing */
};

struct layout {
	int n;
	uint32_t off[MAX_SGE], len[MAX_SGE]; /* relative to the footprint */
};

enum rec_tag {
	R_CQP = 1,     /* client -> server: idx, a = qpn, b = sid */
	R_CREADY,      /* a = nqps, b = lid, c/d = gid */
	R_SPORT,       /* server -> client: a = mtu bytes, b = mtu enum,
			  c = lid, d = link layer */
	R_SGID,        /* a/b = gid */
	R_SGLOBAL,     /* a = read addr, b = read rkey, c = atomic addr,
			  d = atomic rkey */
	R_SQP,         /* idx, a = qpn, b = write addr, c = write rkey,
			  d = recv_limit << 32 | done_limit */
	R_SREADY,
	R_UPDATE,      /* idx, a = recv_limit, b = done_limit */
	R_FPRIV,       /* client -> server at the end: idx = global QP,
			  a = private word's value */
	R_FSHARED,     /* idx = counter, a = sum of adds */
	R_FKIND,       /* idx = kind, a = ops, b = bytes */
	R_FINAL,       /* a = ops, b = bytes, c = errors */
};

struct rec {
	uint32_t tag, idx;
	uint64_t a, b, c, d;
};

struct chan {
	int fd;
	size_t len;
	uint8_t buf[64 * sizeof(struct rec)];
};

struct port {
	struct ibv_port_attr attr;
	union ibv_gid gid;
};

extern const char *const type_names[];
extern const char *const kind_names[];
extern const uint8_t kind_weight[Q_NTYPES][K_NKINDS];
extern struct params P;

bool consumes_recv(int k);
bool is_write(int k);
bool is_atomic(int k);
uint64_t mix64(uint64_t z);
uint64_t rng64(struct rng *r);
uint32_t rng_below(struct rng *r, uint32_t n);
uint64_t pattern_word(uint64_t key, uint64_t w);
void stream_fill(const struct msgid *m, uint64_t pos, uint8_t *out,
			size_t n);
uint32_t sender_id(int client, int type, int q);
uint64_t stream_seed(uint32_t sid);
struct msgid op_msgid(const struct op *op, uint32_t sid);
struct msgid read_msgid(void);
uint32_t gen_len(struct rng *r, int type);
void gen_op(struct rng *r, int type, uint32_t sid, uint32_t seq,
		   struct op *op);
int64_t ring_alloc(struct ring *r, uint64_t n, uint64_t *end);
void ring_release(struct ring *r, uint64_t end);
uint64_t ring_used(const struct ring *r);
void layout_make(struct rng *r, uint32_t total, struct layout *lo);
int layout_sges(const struct layout *lo, uint8_t *base, uint32_t lkey,
		       struct ibv_sge *sge);
void scatter_fill(const struct layout *lo, uint8_t *base,
			 const struct msgid *m, uint64_t pos0);
void gather(const struct layout *lo, const uint8_t *base, uint64_t pos,
		   uint8_t *out, size_t n);
int64_t find_not_canary(const uint8_t *p, size_t n);
int64_t compare_stream(const uint8_t *p, size_t n,
			      const struct msgid *m, uint64_t pos,
			      uint8_t *got, uint8_t *want);
bool check_scatter(const uint8_t *base, uint32_t fp,
			  const struct layout *lo, uint32_t skip, uint32_t n,
			  const struct msgid *m, uint64_t pos0, char *msg,
			  size_t msz);
__attribute__((format(printf, 1, 2)))
void report(const char *fmt, ...);
bool chan_try_send(struct chan *ch, const struct rec *r, size_t n);
void chan_send(struct chan *ch, const struct rec *r, size_t n);
int chan_recv(struct chan *ch, struct rec *r, int wait_ms);
void chan_expect(struct chan *ch, struct rec *r, uint32_t tag);
struct ibv_context *open_dev(struct port *pt);
void *alloc_mem(size_t n);
struct ibv_mr *reg(struct ibv_pd *pd, void *p, size_t n, int access);
struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, int type,
			      uint32_t sq, uint32_t rq, uint32_t *inl);
void fill_ah(struct ibv_ah_attr *ah, uint16_t lid, const uint8_t *gid,
		    bool eth);
void connect_qp(struct ibv_qp *qp, int type, uint32_t dqpn,
		       uint16_t dlid, const uint8_t *dgid, bool eth,
		       enum ibv_mtu mtu, uint32_t rq_psn, uint32_t sq_psn);
uint32_t psn_of(uint32_t sid, int dir);
int per_client(void);
uint32_t ops_of(int gi);
uint64_t priv_init(int gi);

int client_main(int id, int fd);
int server_run(void);

#endif
