/*
 * softib_osu.h: what the parts of softib_osu share: its options, the
 * record the two sides swap over TCP, the state of one side (struct
 * bench), and the entry points of the verbs osu_setup (softib_osu_verbs.c)
 * and of the measurement loops (softib_osu_loops.c).
 */
#ifndef SOFTIB_OSU_H
#define SOFTIB_OSU_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#include "bench_common.h"
#include "bench_cma.h"

#define DEFAULT_PORT   18515
#define DEFAULT_MAX    (4u << 20)
#define WINDOW         64
#define SIG_EVERY      16      /* unsignaled sends between signaled ones */
#define SQ_DEPTH       256
#define RQ_DEPTH       256
#define STALL_SECS     20      /* no completion for this long: give up */
#define WIRE_MAGIC     0x53494230u  /* "SIB0" */
#define ACK_IMM        0xac4u
#define DATA_IMM       0xda7au

enum { T_LAT = 1, T_BW = 2, T_BIBW = 4 };
enum op { OP_SEND, OP_WRITE, OP_READ };
extern const char *const osu_op_names[3];

struct opts {
	unsigned tests;
	enum op op;
	int port;
	uint32_t max;
	uint32_t iters;   /* 0: the defaults of each size */
	const char *dev;
	const char *host; /* NULL: server */
	int gidx;         /* -g: source GID index; -1: LID path */
	bool post_time;   /* -P: time the client's ibv_post_send calls */
	bool median;      /* -M: lat (send): the median round trip too */
};

/* What the two sides swap over TCP; every field big-endian. */
struct wire {
	uint32_t magic;
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
	uint64_t addr;
	uint16_t lid;
	uint16_t pad;
	uint32_t tests;
	uint32_t op;
	uint32_t max;
	uint32_t iters;
	uint8_t gid[16];
};

struct bench {
	struct opts o;
	bool server;
	int sock;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_port_attr port;
	union ibv_gid gid;
	uint8_t *buf;           /* [0, max): send region; [max, 2max): receive */
	size_t region;          /* max, at least 64 */
	uint32_t max_inline;
	uint8_t rd_atom;
	uint64_t raddr;         /* peer's buffer */
	uint32_t rkey;
	/* Send queue accounting: a signaled completion carries in wr_id the
	 * number of WRs it retires (itself and the unsignaled ones before). */
	uint32_t unsig;
	uint32_t sq_out;
	uint64_t recv_data;     /* receive completions of data messages */
	uint64_t recv_ack;      /* ... of acks */
	/* -P: how long each ibv_post_send of the client took (ns) */
	uint64_t *post_ns;
	uint32_t npost, post_cap;
	/* -M: each iteration's half round trip (us), client, SEND latency */
	double *rt;
	uint32_t nrt, rt_cap;
	struct cma_floor cma;   /* client, bw tables: the measured floor */
};


static inline double now_us(void)
{
	return bench_now_ns() / 1e3;
}

/* softib_osu_verbs.c: the device, PD, CQ, QP and buffer; the QP connected
 * to the peer's over the TCP socket, whose options must agree. */
void osu_setup(struct bench *b);
void osu_connect_qp(struct bench *b);
void osu_post_recv(struct bench *b);

/* softib_osu_loops.c: one row of a table, the same calls on both sides:
 * the half round trip (us) or the bandwidth (MB/s) at one size. */
double osu_run_lat(struct bench *b, uint32_t size);
double osu_run_bw(struct bench *b, uint32_t size, bool bidir);
/* the medians of the last latency row's -P post times and -M round trips */
double osu_post_median_us(struct bench *b);
double osu_rt_median_us(struct bench *b);

#endif
