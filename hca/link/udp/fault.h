/*
 * Built-in fault injection for the UDP link's sending side: the kernels
 * softib runs on have no netem, so the link asks this module, for every
 * datagram it is about to send, what to do with it.  Configured by
 *
 *   SOFTIB_FAULT="loss=0.1,dup=0.05,reorder=0.05,corrupt=0.01,delay_us=200,seed=7"
 *
 * Pure logic, no sockets: a seeded PRNG with per-instance state, so the
 * same seed gives the same decisions for the same sequence of datagrams.
 * hca_fault_decide() is thread-safe (one mutex per instance).
 */
#ifndef HCA_FAULT_H
#define HCA_FAULT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/*
 * loss, dup, reorder and corrupt are the probabilities (0..1, or "N%") of
 * the four mutually exclusive faults; their sum is at most 1.  delay_us
 * holds back every datagram that goes out by that many microseconds, plus
 * a uniform 0..jitter_us.  seed 0 (or none) means the fixed default seed,
 * so runs are reproducible unless a seed is chosen.
 */
struct hca_fault_cfg {
	double loss, dup, reorder, corrupt;
	uint32_t delay_us, jitter_us;
	uint64_t seed;
};

enum hca_fault_action {
	HCA_FAULT_SEND,         /* send it (after delay_us) */
	HCA_FAULT_DROP,         /* do not send it */
	HCA_FAULT_DUP,          /* send it twice */
	HCA_FAULT_HOLD,         /* send it right after the next datagram */
	HCA_FAULT_CORRUPT,      /* flip bit `bit` of it, then send it */
	HCA_FAULT_NACTIONS
};

/*
 * What to do with one datagram.  HOLD: the sender keeps it and sends it
 * after the next datagram it sends (the two swap places); one datagram is
 * held at a time (a second HOLD while one is held sends the new one at
 * once and then the held one), and a held datagram is released after at
 * most a millisecond even if no other comes, so a last packet is late,
 * not lost.  CORRUPT: flip bit `bit` (0 .. 8 * len - 1, bit i being
 * 1 << (i % 8) of byte i / 8) of a copy, e.g. with hca_fault_flip().
 */
struct hca_fault_decision {
	enum hca_fault_action action;
	uint32_t delay_us;      /* 0 unless configured; not for DROP */
	size_t bit;             /* CORRUPT only */
};

struct hca_fault_stats {
	uint64_t decisions;
	uint64_t actions[HCA_FAULT_NACTIONS];
	uint64_t delayed;
};

struct hca_fault {
	struct hca_fault_cfg cfg;
	pthread_mutex_t lock;   /* guards rng and stats */
	uint64_t rng;
	struct hca_fault_stats stats;
};

/*
 * Parses "key=value,key=value" (keys: loss, dup, reorder, corrupt,
 * delay_us, jitter_us, seed; spaces around items allowed; empty string:
 * no faults) into *cfg.  0, or EINVAL with a one-line reason in msg.
 */
int hca_fault_parse(const char *spec, struct hca_fault_cfg *cfg,
		    char *msg, size_t msglen);

int hca_fault_init(struct hca_fault *f, const struct hca_fault_cfg *cfg);
void hca_fault_fini(struct hca_fault *f);

/*
 * From SOFTIB_FAULT: 0 with *out NULL when it is unset or empty; 0 with
 * a new instance; EINVAL (and msg) on a bad value; ENOMEM.
 */
int hca_fault_open_env(struct hca_fault **out, char *msg, size_t msglen);
void hca_fault_close(struct hca_fault *f);

/* Decides the fate of the next datagram, len bytes long; returns d->action. */
enum hca_fault_action hca_fault_decide(struct hca_fault *f, size_t len,
				       struct hca_fault_decision *d);

void hca_fault_get_stats(struct hca_fault *f, struct hca_fault_stats *out);

const char *hca_fault_action_name(enum hca_fault_action a);

static inline void hca_fault_flip(uint8_t *buf, size_t bit)
{
	buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
}

#endif
