/*
 * Unit tests of hca/fault.[ch]: the SOFTIB_FAULT parser (every key, the
 * accepted forms, and a refusal with a message for each kind of mistake);
 * decisions over 100k datagrams matching the configured rates with a
 * fixed seed; the same seed giving the same decisions, serially or from
 * four threads; corrupted-bit and delay ranges; and the environment entry.
 */
#include "fault.h"
#include "cu_run.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static struct hca_fault_cfg parse_ok(const char *spec)
{
	struct hca_fault_cfg c;
	char msg[256];

	CU_ASSERT_EQUAL(hca_fault_parse(spec, &c, msg, sizeof(msg)), 0);
	CU_ASSERT_STRING_EQUAL(msg, "");
	return c;
}

static void test_parse_full(void)
{
	struct hca_fault_cfg c = parse_ok("loss=0.1,dup=0.05,reorder=0.05,"
					  "delay_us=200,corrupt=0.01,seed=7");

	CU_ASSERT_DOUBLE_EQUAL(c.loss, 0.1, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(c.dup, 0.05, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(c.reorder, 0.05, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(c.corrupt, 0.01, 1e-12);
	CU_ASSERT_EQUAL(c.delay_us, 200);
	CU_ASSERT_EQUAL(c.jitter_us, 0);
	CU_ASSERT_EQUAL(c.seed, 7);
}

static void test_parse_forms(void)
{
	struct hca_fault_cfg c = parse_ok("");

	CU_ASSERT(c.loss == 0 && c.dup == 0 && c.delay_us == 0 && c.seed == 0);
	c = parse_ok("  ");
	CU_ASSERT(c.loss == 0);
	c = parse_ok("loss=5%");
	CU_ASSERT_DOUBLE_EQUAL(c.loss, 0.05, 1e-12);
	c = parse_ok(" loss = 0.1 , seed=0x10, jitter_us=50,");
	CU_ASSERT_DOUBLE_EQUAL(c.loss, 0.1, 1e-12);
	CU_ASSERT_EQUAL(c.seed, 16);
	CU_ASSERT_EQUAL(c.jitter_us, 50);
	c = parse_ok("loss=1e-3,corrupt=0.5%");
	CU_ASSERT_DOUBLE_EQUAL(c.loss, 0.001, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(c.corrupt, 0.005, 1e-12);
	c = parse_ok("loss=0.25,dup=0.25,reorder=0.25,corrupt=0.25");  /* sum 1 */
	CU_ASSERT_DOUBLE_EQUAL(c.corrupt, 0.25, 1e-12);
	c = parse_ok("seed=18446744073709551615");
	CU_ASSERT_EQUAL(c.seed, UINT64_MAX);
	c = parse_ok("delay_us=10000000");
	CU_ASSERT_EQUAL(c.delay_us, 10000000);
	c = parse_ok(NULL);
	CU_ASSERT(c.loss == 0);
}

struct bad_case {
	const char *spec;
	const char *says;       /* part of the message */
};

static const struct bad_case bad_cases[] = {
	{ "los=0.1", "unknown key \"los\"" },
	{ "=0.1", "unknown key \"\"" },
	{ "loss", "\"loss\" is not key=value" },
	{ "loss=abc", "bad value \"abc\" for loss" },
	{ "loss=", "bad value \"\" for loss" },
	{ "loss=1.5", "bad value \"1.5\" for loss" },
	{ "loss=-0.1", "bad value \"-0.1\" for loss" },
	{ "loss=nan", "bad value \"nan\" for loss" },
	{ "loss=inf", "bad value \"inf\" for loss" },
	{ "loss=0.1x", "bad value \"0.1x\" for loss" },
	{ "loss=150%", "bad value \"150%\" for loss" },
	{ "dup=0.1 0.2", "bad value \"0.1 0.2\" for dup" },
	{ "delay_us=-5", "bad value \"-5\" for delay_us" },
	{ "delay_us=1.5", "bad value \"1.5\" for delay_us" },
	{ "delay_us=20000000", "bad value \"20000000\" for delay_us" },
	{ "jitter_us=x", "bad value \"x\" for jitter_us" },
	{ "seed=-1", "bad value \"-1\" for seed" },
	{ "seed=abc", "bad value \"abc\" for seed" },
	{ "seed=99999999999999999999999", "for seed" },
	{ "loss=0.6,dup=0.5", "exceeds 1" },
	{ "loss=0.1,loss=0.2", "\"loss\" given twice" },
	{ "loss=0.1;dup=0.1", "bad value \"0.1;dup=0.1\" for loss" },
};

static void test_parse_errors(void)
{
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		struct hca_fault_cfg c;
		char msg[256] = "";
		int rc = hca_fault_parse(bad_cases[i].spec, &c, msg, sizeof(msg));

		CU_ASSERT_EQUAL(rc, EINVAL);
		CU_ASSERT_EQUAL(strncmp(msg, "SOFTIB_FAULT: ", 14), 0);
		if (!strstr(msg, bad_cases[i].says)) {
			fprintf(stderr, "\n  \"%s\": got \"%s\"\n",
				bad_cases[i].spec, msg);
			CU_FAIL("message does not say why");
		}
	}
	/* A tiny message buffer truncates, never overflows; NULL is fine. */
	char small[8];
	struct hca_fault_cfg c;

	CU_ASSERT_EQUAL(hca_fault_parse("bogus=1", &c, small, sizeof(small)), EINVAL);
	CU_ASSERT_EQUAL(strlen(small), 7);
	CU_ASSERT_EQUAL(hca_fault_parse("bogus=1", &c, NULL, 0), EINVAL);
}

/* ---- decisions ---- */

#define N 100000

static void run(struct hca_fault *f, size_t len, uint64_t count[HCA_FAULT_NACTIONS])
{
	struct hca_fault_decision d;

	memset(count, 0, sizeof(uint64_t) * HCA_FAULT_NACTIONS);
	for (int i = 0; i < N; i++)
		count[hca_fault_decide(f, len, &d)]++;
}

/*
 * observed within 5 standard deviations of the binomial mean N p, compared
 * squared (no libm): (observed - N p)^2 <= 25 N p (1 - p).
 */
static bool near(uint64_t observed, double p)
{
	double dev = (double)observed - N * p;

	return dev * dev <= 25 * N * p * (1 - p) + 1;
}

static void test_rates(void)
{
	struct hca_fault_cfg c = parse_ok("loss=0.1,dup=0.05,reorder=0.05,"
					  "corrupt=0.01,delay_us=200,seed=7");
	uint64_t n[HCA_FAULT_NACTIONS];
	struct hca_fault_stats st;
	struct hca_fault f;

	hca_fault_init(&f, &c);
	run(&f, 100, n);
	CU_ASSERT(near(n[HCA_FAULT_DROP], 0.1));
	CU_ASSERT(near(n[HCA_FAULT_DUP], 0.05));
	CU_ASSERT(near(n[HCA_FAULT_HOLD], 0.05));
	CU_ASSERT(near(n[HCA_FAULT_CORRUPT], 0.01));
	CU_ASSERT(near(n[HCA_FAULT_SEND], 0.79));
	hca_fault_get_stats(&f, &st);
	CU_ASSERT_EQUAL(st.decisions, N);
	for (int a = 0; a < HCA_FAULT_NACTIONS; a++)
		CU_ASSERT_EQUAL(st.actions[a], n[a]);
	/* Every datagram that goes out is delayed; dropped ones are not. */
	CU_ASSERT_EQUAL(st.delayed, N - n[HCA_FAULT_DROP]);
	fprintf(stderr, "\n  100k decisions, seed 7: send %lu drop %lu dup %lu "
		"hold %lu corrupt %lu\n", (unsigned long)n[0], (unsigned long)n[1],
		(unsigned long)n[2], (unsigned long)n[3], (unsigned long)n[4]);
	hca_fault_fini(&f);
}

static void test_extremes(void)
{
	struct hca_fault_cfg c = parse_ok("");
	uint64_t n[HCA_FAULT_NACTIONS];
	struct hca_fault_decision d;
	struct hca_fault f;

	hca_fault_init(&f, &c);                 /* no faults: always send now */
	run(&f, 64, n);
	CU_ASSERT_EQUAL(n[HCA_FAULT_SEND], N);
	CU_ASSERT_EQUAL(hca_fault_decide(&f, 64, &d), HCA_FAULT_SEND);
	CU_ASSERT_EQUAL(d.delay_us, 0);
	hca_fault_fini(&f);

	c = parse_ok("loss=1");
	hca_fault_init(&f, &c);
	run(&f, 64, n);
	CU_ASSERT_EQUAL(n[HCA_FAULT_DROP], N);
	hca_fault_fini(&f);

	c = parse_ok("corrupt=100%");
	hca_fault_init(&f, &c);
	CU_ASSERT_EQUAL(hca_fault_decide(&f, 0, &d), HCA_FAULT_SEND);  /* nothing to flip */
	run(&f, 64, n);
	CU_ASSERT_EQUAL(n[HCA_FAULT_CORRUPT], N);
	hca_fault_fini(&f);
}

/* Corrupted bits cover the datagram uniformly and never fall outside. */
static void test_corrupt_bits(void)
{
	struct hca_fault_cfg c = parse_ok("corrupt=1,seed=3");
	struct hca_fault_decision d;
	unsigned hits[8] = { 0 };
	struct hca_fault f;
	const size_t len = 100;

	hca_fault_init(&f, &c);
	for (int i = 0; i < 80000; i++) {
		hca_fault_decide(&f, len, &d);
		CU_ASSERT_FATAL(d.bit < len * 8);
		hits[d.bit * 8 / (len * 8)]++;
	}
	for (int k = 0; k < 8; k++)             /* 10000 expected per eighth */
		CU_ASSERT(hits[k] > 9500 && hits[k] < 10500);
	hca_fault_fini(&f);

	uint8_t buf[4] = { 0 };
	hca_fault_flip(buf, 0);
	hca_fault_flip(buf, 31);
	CU_ASSERT(buf[0] == 0x01 && buf[3] == 0x80);
}

static void test_delay_jitter(void)
{
	struct hca_fault_cfg c = parse_ok("delay_us=100,jitter_us=50,loss=0.5");
	struct hca_fault_decision d;
	uint32_t lo = UINT32_MAX, hi = 0;
	struct hca_fault f;

	hca_fault_init(&f, &c);
	for (int i = 0; i < 20000; i++) {
		if (hca_fault_decide(&f, 10, &d) == HCA_FAULT_DROP) {
			CU_ASSERT_EQUAL(d.delay_us, 0);
			continue;
		}
		lo = d.delay_us < lo ? d.delay_us : lo;
		hi = d.delay_us > hi ? d.delay_us : hi;
	}
	CU_ASSERT_EQUAL(lo, 100);               /* both ends are reached */
	CU_ASSERT_EQUAL(hi, 150);
	hca_fault_fini(&f);
}

/* Records the whole decision stream of one instance. */
static void stream(const char *spec, struct hca_fault_decision *out, int n)
{
	struct hca_fault_cfg c = parse_ok(spec);
	struct hca_fault f;

	hca_fault_init(&f, &c);
	for (int i = 0; i < n; i++)
		hca_fault_decide(&f, 200, &out[i]);
	hca_fault_fini(&f);
}

static bool same_stream(const struct hca_fault_decision *a,
			const struct hca_fault_decision *b, int n)
{
	for (int i = 0; i < n; i++)
		if (a[i].action != b[i].action || a[i].bit != b[i].bit ||
		    a[i].delay_us != b[i].delay_us)
			return false;
	return true;
}

static void test_determinism(void)
{
	enum { M = 10000 };
	static struct hca_fault_decision a[M], b[M];
	const char *spec = "loss=0.2,dup=0.1,reorder=0.1,corrupt=0.1,jitter_us=9,seed=42";

	stream(spec, a, M);
	stream(spec, b, M);
	CU_ASSERT(same_stream(a, b, M));
	stream("loss=0.2,dup=0.1,reorder=0.1,corrupt=0.1,jitter_us=9,seed=43", b, M);
	CU_ASSERT(!same_stream(a, b, M));
	/* No seed and seed=0 are the same fixed default: runs reproduce. */
	stream("loss=0.2", a, M);
	stream("loss=0.2,seed=0", b, M);
	CU_ASSERT(same_stream(a, b, M));
}

struct thread_arg {
	struct hca_fault *f;
	int n;
};

static void *decider(void *p)
{
	struct thread_arg *t = p;
	struct hca_fault_decision d;

	for (int i = 0; i < t->n; i++)
		hca_fault_decide(t->f, 100, &d);
	return NULL;
}

/*
 * Four threads share one instance.  With equal-length datagrams each call
 * consumes the same draws, so the totals must equal a serial run's
 * exactly, whatever the interleaving: nothing lost, nothing torn.
 */
static void test_threads(void)
{
	struct hca_fault_cfg c = parse_ok("loss=0.1,dup=0.05,reorder=0.05,"
					  "corrupt=0.01,seed=7");
	uint64_t serial[HCA_FAULT_NACTIONS];
	struct hca_fault_stats st;
	struct thread_arg args[4];
	pthread_t t[4];
	struct hca_fault f;

	hca_fault_init(&f, &c);
	run(&f, 100, serial);
	hca_fault_fini(&f);

	hca_fault_init(&f, &c);
	for (int i = 0; i < 4; i++) {
		args[i] = (struct thread_arg){ &f, N / 4 };
		CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, decider, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	hca_fault_get_stats(&f, &st);
	CU_ASSERT_EQUAL(st.decisions, N);
	for (int a = 0; a < HCA_FAULT_NACTIONS; a++)
		CU_ASSERT_EQUAL(st.actions[a], serial[a]);
	hca_fault_fini(&f);
}

static void test_env(void)
{
	struct hca_fault *f = (void *)1;
	char msg[256];

	unsetenv("SOFTIB_FAULT");
	CU_ASSERT_EQUAL(hca_fault_open_env(&f, msg, sizeof(msg)), 0);
	CU_ASSERT_PTR_NULL(f);
	setenv("SOFTIB_FAULT", "", 1);
	CU_ASSERT_EQUAL(hca_fault_open_env(&f, msg, sizeof(msg)), 0);
	CU_ASSERT_PTR_NULL(f);
	setenv("SOFTIB_FAULT", "loss=2", 1);
	CU_ASSERT_EQUAL(hca_fault_open_env(&f, msg, sizeof(msg)), EINVAL);
	CU_ASSERT_PTR_NULL(f);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, "loss"));
	setenv("SOFTIB_FAULT", "loss=0.5,seed=9", 1);
	CU_ASSERT_EQUAL(hca_fault_open_env(&f, msg, sizeof(msg)), 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	CU_ASSERT_DOUBLE_EQUAL(f->cfg.loss, 0.5, 1e-12);
	CU_ASSERT_EQUAL(f->cfg.seed, 9);
	hca_fault_close(f);
	hca_fault_close(NULL);
	unsetenv("SOFTIB_FAULT");
	CU_ASSERT_STRING_EQUAL(hca_fault_action_name(HCA_FAULT_HOLD), "hold");
	CU_ASSERT_STRING_EQUAL(hca_fault_action_name(HCA_FAULT_NACTIONS), "?");
}

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("hca_fault", NULL, NULL);

	if (!s)
		return -1;
	if (!CU_add_test(s, "parse: every key", test_parse_full) ||
	    !CU_add_test(s, "parse: accepted forms", test_parse_forms) ||
	    !CU_add_test(s, "parse: refusals say why", test_parse_errors) ||
	    !CU_add_test(s, "rates over 100k, seed 7", test_rates) ||
	    !CU_add_test(s, "no faults, all faults", test_extremes) ||
	    !CU_add_test(s, "corrupted bit range", test_corrupt_bits) ||
	    !CU_add_test(s, "delay and jitter", test_delay_jitter) ||
	    !CU_add_test(s, "same seed, same decisions", test_determinism) ||
	    !CU_add_test(s, "threads", test_threads) ||
	    !CU_add_test(s, "SOFTIB_FAULT", test_env))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
