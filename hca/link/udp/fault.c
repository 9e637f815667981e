/*
 * Fault injection (see fault.h): the SOFTIB_FAULT parser, a splitmix64
 * generator per instance, and the per-datagram decision.
 *
 * One uniform draw picks among the exclusive faults by cumulative
 * probability, so each fault's rate is exactly what was configured (a
 * dropped datagram cannot also be duplicated); further draws, only when
 * needed, pick the corrupted bit and the jitter.
 */
#include "fault.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x5eed50f71bULL
#define MAX_DELAY_US 10000000u          /* 10 s: beyond that, a typo */

/* ---- the parser: a table of keys ---- */

enum key_kind { KEY_PROB, KEY_US, KEY_SEED };

struct key {
	const char *name;
	enum key_kind kind;
	size_t off;             /* offsetof the field in hca_fault_cfg */
};

static const struct key keys[] = {
	{ "loss", KEY_PROB, offsetof(struct hca_fault_cfg, loss) },
	{ "dup", KEY_PROB, offsetof(struct hca_fault_cfg, dup) },
	{ "reorder", KEY_PROB, offsetof(struct hca_fault_cfg, reorder) },
	{ "corrupt", KEY_PROB, offsetof(struct hca_fault_cfg, corrupt) },
	{ "delay_us", KEY_US, offsetof(struct hca_fault_cfg, delay_us) },
	{ "jitter_us", KEY_US, offsetof(struct hca_fault_cfg, jitter_us) },
	{ "seed", KEY_SEED, offsetof(struct hca_fault_cfg, seed) },
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static int fail(char *msg, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (msg && len) {
		int n = snprintf(msg, len, "SOFTIB_FAULT: ");

		va_start(ap, fmt);
		if (n >= 0 && (size_t)n < len)
			vsnprintf(msg + n, len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return EINVAL;
}

static const struct key *key_find(const char *name, size_t n)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strlen(keys[i].name) == n && !strncmp(keys[i].name, name, n))
			return &keys[i];
	return NULL;
}

/* A probability: a decimal in [0, 1], or a percentage "N%" up to 100. */
static bool parse_prob(const char *v, double *out)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (end == v || errno || !isfinite(x))
		return false;
	if (*end == '%') {
		x /= 100;
		end++;
	}
	if (*end || x < 0 || x > 1)
		return false;
	*out = x;
	return true;
}

/* An unsigned decimal or 0x-hex number no larger than max. */
static bool parse_uint(const char *v, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long x;

	if (*v < '0' || *v > '9')               /* no sign, no space */
		return false;
	errno = 0;
	x = strtoull(v, &end, 0);
	if (*end || errno || x > max)
		return false;
	*out = x;
	return true;
}

static bool set_value(const struct key *k, const char *v, struct hca_fault_cfg *cfg)
{
	char *field = (char *)cfg + k->off;
	uint64_t u;

	switch (k->kind) {
	case KEY_PROB:
		return parse_prob(v, (double *)field);
	case KEY_US:
		if (!parse_uint(v, MAX_DELAY_US, &u))
			return false;
		*(uint32_t *)field = (uint32_t)u;
		return true;
	case KEY_SEED:
		return parse_uint(v, UINT64_MAX, (uint64_t *)field);
	}
	return false;
}

static const char *kind_hint(enum key_kind k)
{
	switch (k) {
	case KEY_PROB:
		return "a probability from 0 to 1, or a percentage";
	case KEY_US:
		return "microseconds, 0 to 10000000";
	case KEY_SEED:
		return "an unsigned 64-bit number";
	}
	return "";
}

/* Trims spaces from both ends of item in place; returns its start. */
static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = 0;
	return s;
}

/* One "key=value" item; seen[] catches a key given twice. */
static int parse_item(char *item, struct hca_fault_cfg *cfg, bool *seen,
		      char *msg, size_t msglen)
{
	char *eq = strchr(item, '=');
	const struct key *k;
	char *name, *val;

	if (!eq)
		return fail(msg, msglen, "\"%s\" is not key=value", item);
	*eq = 0;
	name = trim(item);
	val = trim(eq + 1);
	k = key_find(name, strlen(name));
	if (!k)
		return fail(msg, msglen, "unknown key \"%s\" (keys: loss, dup, "
			    "reorder, corrupt, delay_us, jitter_us, seed)", name);
	if (seen[k - keys])
		return fail(msg, msglen, "\"%s\" given twice", name);
	seen[k - keys] = true;
	if (!set_value(k, val, cfg))
		return fail(msg, msglen, "bad value \"%s\" for %s: want %s",
			    val, name, kind_hint(k->kind));
	return 0;
}

int hca_fault_parse(const char *spec, struct hca_fault_cfg *cfg,
		    char *msg, size_t msglen)
{
	bool seen[NKEYS] = { false };
	char *copy, *item, *save = NULL;
	int err = 0;

	memset(cfg, 0, sizeof(*cfg));
	if (msg && msglen)
		msg[0] = 0;
	copy = strdup(spec ? spec : "");
	if (!copy)
		return ENOMEM;
	for (item = strtok_r(copy, ",", &save); item && !err;
	     item = strtok_r(NULL, ",", &save))
		if (*trim(item))
			err = parse_item(item, cfg, seen, msg, msglen);
	free(copy);
	if (!err && cfg->loss + cfg->dup + cfg->reorder + cfg->corrupt > 1 + 1e-9)
		err = fail(msg, msglen, "loss + dup + reorder + corrupt exceeds 1");
	return err;
}

/* ---- the generator and the decision ---- */

/* splitmix64: a 64-bit counter run through an invertible mixer. */
static uint64_t next_u64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 bits. */
static double next_unit(uint64_t *state)
{
	return (double)(next_u64(state) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n), n > 0, by multiply-and-shift (bias below 2^-64 * n). */
static uint64_t next_below(uint64_t *state, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)next_u64(state) * n) >> 64);
}

int hca_fault_init(struct hca_fault *f, const struct hca_fault_cfg *cfg)
{
	memset(f, 0, sizeof(*f));
	f->cfg = *cfg;
	f->rng = cfg->seed ? cfg->seed : DEFAULT_SEED;
	return pthread_mutex_init(&f->lock, NULL);
}

void hca_fault_fini(struct hca_fault *f)
{
	pthread_mutex_destroy(&f->lock);
}

int hca_fault_open_env(struct hca_fault **out, char *msg, size_t msglen)
{
	const char *spec = getenv("SOFTIB_FAULT");
	struct hca_fault_cfg cfg;
	int err;

	*out = NULL;
	if (!spec || !*spec)
		return 0;
	err = hca_fault_parse(spec, &cfg, msg, msglen);
	if (err)
		return err;
	*out = malloc(sizeof(**out));
	if (!*out)
		return ENOMEM;
	err = hca_fault_init(*out, &cfg);
	if (err) {
		free(*out);
		*out = NULL;
	}
	return err;
}

void hca_fault_close(struct hca_fault *f)
{
	if (!f)
		return;
	hca_fault_fini(f);
	free(f);
}

static enum hca_fault_action pick(const struct hca_fault_cfg *c, double u)
{
	const double p[] = { c->loss, c->dup, c->reorder, c->corrupt };
	const enum hca_fault_action a[] = { HCA_FAULT_DROP, HCA_FAULT_DUP,
					    HCA_FAULT_HOLD, HCA_FAULT_CORRUPT };
	double acc = 0;

	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
		acc += p[i];
		if (u < acc)
			return a[i];
	}
	return HCA_FAULT_SEND;
}

enum hca_fault_action hca_fault_decide(struct hca_fault *f, size_t len,
				       struct hca_fault_decision *d)
{
	const struct hca_fault_cfg *c = &f->cfg;

	memset(d, 0, sizeof(*d));
	pthread_mutex_lock(&f->lock);
	d->action = pick(c, next_unit(&f->rng));
	if (d->action == HCA_FAULT_CORRUPT && len == 0)
		d->action = HCA_FAULT_SEND;     /* nothing to flip */
	if (d->action == HCA_FAULT_CORRUPT)
		d->bit = (size_t)next_below(&f->rng, (uint64_t)len * 8);
	if (d->action != HCA_FAULT_DROP && (c->delay_us || c->jitter_us)) {
		d->delay_us = c->delay_us;
		if (c->jitter_us)
			d->delay_us += (uint32_t)next_below(&f->rng,
							    (uint64_t)c->jitter_us + 1);
	}
	f->stats.decisions++;
	f->stats.actions[d->action]++;
	f->stats.delayed += d->delay_us != 0;
	pthread_mutex_unlock(&f->lock);
	return d->action;
}

void hca_fault_get_stats(struct hca_fault *f, struct hca_fault_stats *out)
{
	pthread_mutex_lock(&f->lock);
	*out = f->stats;
	pthread_mutex_unlock(&f->lock);
}

const char *hca_fault_action_name(enum hca_fault_action a)
{
	static const char *const names[HCA_FAULT_NACTIONS] = {
		"send", "drop", "dup", "hold", "corrupt",
	};

	return (unsigned)a < HCA_FAULT_NACTIONS ? names[a] : "?";
}
