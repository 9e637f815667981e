/*
 * CUnit suite for hca/qp_modify.c, the modify-QP table.  The expected
 * required/optional masks are written out here again, from ibv_modify_qp(3)
 * and the spec's table, rather than read back from the library, so that a
 * wrong cell in the table shows up as a failure.  Every legal transition of
 * every type is checked with exactly its required mask, with each required
 * bit removed, with each optional bit added and with each other bit added;
 * every pair of states not listed must be refused.
 */
#include <stdio.h>
#include <string.h>

#include "cu_run.h"
#include "qp_modify.h"

#define S	IBV_QP_STATE
#define NSTATES	(IBV_QPS_ERR + 1)

/* Attribute groups of the expectations below (test-local names). */
#define E_INIT_CONN	(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define E_INIT_UD	(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
#define E_RTR_UC	(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | \
			 IBV_QP_RQ_PSN)
#define E_RTR_RC	(E_RTR_UC | IBV_QP_MAX_DEST_RD_ATOMIC | \
			 IBV_QP_MIN_RNR_TIMER)
#define E_RTR_OPT	(IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | \
			 IBV_QP_PKEY_INDEX)
#define E_RTS_RC	(IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | \
			 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT)
#define E_RUN_UC	(IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | \
			 IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE)
#define E_RUN_RC	(E_RUN_UC | IBV_QP_MIN_RNR_TIMER)
#define E_RUN_UD	(IBV_QP_CUR_STATE | IBV_QP_QKEY)
#define E_SQD_UC	(IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | \
			 IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE)
#define E_SQD_RC	(E_SQD_UC | IBV_QP_PORT | IBV_QP_TIMEOUT | \
			 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | \
			 IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | \
			 IBV_QP_MIN_RNR_TIMER)
#define E_SQD_XSEND	(E_SQD_UC | IBV_QP_PORT | IBV_QP_TIMEOUT | \
			 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | \
			 IBV_QP_MAX_QP_RD_ATOMIC)
#define E_SQD_XRECV	(E_SQD_UC | IBV_QP_PORT | IBV_QP_TIMEOUT | \
			 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)

struct tcase {
	enum ibv_qp_type type;
	enum ibv_qp_state cur, next;
	int req, opt;
};

#define C(t, c, n, r, o) { IBV_QPT_##t, IBV_QPS_##c, IBV_QPS_##n, r, o }

/* Every legal transition except the ->RESET / ->ERR ones, which the tests
 * generate for every state and type. */
static const struct tcase cases[] = {
	C(RC, RESET, INIT, E_INIT_CONN, 0),
	C(RC, INIT, INIT, 0, E_INIT_CONN),
	C(RC, INIT, RTR, E_RTR_RC, E_RTR_OPT),
	C(RC, RTR, RTS, E_RTS_RC, E_RUN_RC),
	C(RC, RTS, RTS, 0, E_RUN_RC),
	C(RC, RTS, SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
	C(RC, SQD, RTS, 0, E_RUN_RC),
	C(RC, SQD, SQD, 0, E_SQD_RC),

	C(UC, RESET, INIT, E_INIT_CONN, 0),
	C(UC, INIT, INIT, 0, E_INIT_CONN),
	C(UC, INIT, RTR, E_RTR_UC, E_RTR_OPT),
	C(UC, RTR, RTS, IBV_QP_SQ_PSN, E_RUN_UC),
	C(UC, RTS, RTS, 0, E_RUN_UC),
	C(UC, RTS, SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
	C(UC, SQD, RTS, 0, E_RUN_UC),
	C(UC, SQD, SQD, 0, E_SQD_UC),
	C(UC, SQE, RTS, 0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS),

	C(UD, RESET, INIT, E_INIT_UD, 0),
	C(UD, INIT, INIT, 0, E_INIT_UD),
	C(UD, INIT, RTR, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
	C(UD, RTR, RTS, IBV_QP_SQ_PSN, E_RUN_UD),
	C(UD, RTS, RTS, 0, E_RUN_UD),
	C(UD, RTS, SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
	C(UD, SQD, RTS, 0, E_RUN_UD),
	C(UD, SQD, SQD, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
	C(UD, SQE, RTS, 0, E_RUN_UD),

	C(XRC_SEND, RESET, INIT, E_INIT_CONN, 0),
	C(XRC_SEND, INIT, INIT, 0, E_INIT_CONN),
	C(XRC_SEND, INIT, RTR, E_RTR_UC, E_RTR_OPT),
	C(XRC_SEND, RTR, RTS, E_RTS_RC, E_RUN_UC),
	C(XRC_SEND, RTS, RTS, 0, E_RUN_UC),
	C(XRC_SEND, RTS, SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
	C(XRC_SEND, SQD, RTS, 0, E_RUN_UC),
	C(XRC_SEND, SQD, SQD, 0, E_SQD_XSEND),

	C(XRC_RECV, RESET, INIT, E_INIT_CONN, 0),
	C(XRC_RECV, INIT, INIT, 0, E_INIT_CONN),
	C(XRC_RECV, INIT, RTR, E_RTR_RC, E_RTR_OPT),
	C(XRC_RECV, RTR, RTS, IBV_QP_SQ_PSN | IBV_QP_TIMEOUT, E_RUN_RC),
	C(XRC_RECV, RTS, RTS, 0, E_RUN_RC),
	C(XRC_RECV, RTS, SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
	C(XRC_RECV, SQD, RTS, 0, E_RUN_RC),
	C(XRC_RECV, SQD, SQD, 0, E_SQD_XRECV),

	C(RAW_PACKET, RESET, INIT, IBV_QP_PORT, 0),
	C(RAW_PACKET, INIT, INIT, 0, 0),
	C(RAW_PACKET, INIT, RTR, 0, 0),
	C(RAW_PACKET, RTR, RTS, 0, IBV_QP_RATE_LIMIT),
	C(RAW_PACKET, RTS, RTS, 0, IBV_QP_RATE_LIMIT),
	C(RAW_PACKET, RTS, SQD, 0, 0),
	C(RAW_PACKET, SQD, RTS, 0, 0),
	C(RAW_PACKET, SQD, SQD, 0, 0),
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

static const enum ibv_qp_type types[] = {
	IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
	IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV, IBV_QPT_RAW_PACKET,
};

#define NTYPES (sizeof(types) / sizeof(types[0]))

/* Highest bit tried as a stray attribute; 31 would be the int sign bit. */
#define TOP_BIT 30

static const char *type_str(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC:	 return "RC";
	case IBV_QPT_UC:	 return "UC";
	case IBV_QPT_UD:	 return "UD";
	case IBV_QPT_XRC_SEND:	 return "XRC_SEND";
	case IBV_QPT_XRC_RECV:	 return "XRC_RECV";
	case IBV_QPT_RAW_PACKET: return "RAW_PACKET";
	default:		 return "?";
	}
}

/* Check one call; on mismatch say which, since asserts run in loops. */
static void expect_at(int line, enum ibv_qp_type t, enum ibv_qp_state cur,
		      enum ibv_qp_state next, int mask, int want_rc,
		      int want_bad)
{
	int bad = -1;
	int rc = hca_qp_modify_check(t, cur, next, mask, &bad);
	int ok = rc == want_rc && bad == want_bad;

	if (!ok)
		fprintf(stderr, "\n  line %d: %s %s->%s mask %#x: rc %d bad %#x,"
			" want rc %d bad %#x\n", line, type_str(t),
			hca_qp_state_str(cur), hca_qp_state_str(next), mask,
			rc, bad, want_rc, want_bad);
	CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, line,
				"hca_qp_modify_check as expected", __FILE__,
				"", CU_FALSE);
}

#define EXPECT(t, c, n, m, rc, bad) expect_at(__LINE__, t, c, n, m, rc, bad)
#define EXPECT_OK(t, c, n, m)	   EXPECT(t, c, n, m, 0, 0)

static int is_listed(enum ibv_qp_type t, enum ibv_qp_state cur,
		     enum ibv_qp_state next)
{
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
		return 1;
	for (size_t i = 0; i < NCASES; i++)
		if (cases[i].type == t && cases[i].cur == cur &&
		    cases[i].next == next)
			return 1;
	return 0;
}

static void test_required_only(void)
{
	for (size_t i = 0; i < NCASES; i++) {
		const struct tcase *c = &cases[i];

		EXPECT_OK(c->type, c->cur, c->next, S | c->req);
	}
}

static void test_required_bit_removed(void)
{
	for (size_t i = 0; i < NCASES; i++) {
		const struct tcase *c = &cases[i];

		for (int b = 0; b <= TOP_BIT; b++) {
			int bit = 1 << b;

			if (!(c->req & bit))
				continue;
			EXPECT(c->type, c->cur, c->next, (S | c->req) & ~bit,
			       EINVAL, bit);
		}
	}
}

static void test_optional_allowed(void)
{
	for (size_t i = 0; i < NCASES; i++) {
		const struct tcase *c = &cases[i];

		EXPECT_OK(c->type, c->cur, c->next, S | c->req | c->opt);
		for (int b = 0; b <= TOP_BIT; b++)
			if (c->opt & (1 << b))
				EXPECT_OK(c->type, c->cur, c->next,
					  S | c->req | (1 << b));
	}
}

static void test_forbidden_bit_added(void)
{
	for (size_t i = 0; i < NCASES; i++) {
		const struct tcase *c = &cases[i];
		int allowed = S | c->req | c->opt;

		for (int b = 0; b <= TOP_BIT; b++) {
			int bit = 1 << b;

			if (allowed & bit)
				continue;
			EXPECT(c->type, c->cur, c->next, S | c->req | bit,
			       EINVAL, bit);
		}
	}
}

/* The examples the spec discussions name most often, spelled out. */
static void test_forbidden_examples(void)
{
	/* No path before RTR. */
	EXPECT(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT,
	       S | E_INIT_CONN | IBV_QP_PATH_MTU, EINVAL, IBV_QP_PATH_MTU);
	/* Q_Key belongs to datagram QPs only. */
	EXPECT(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT,
	       S | E_INIT_CONN | IBV_QP_QKEY, EINVAL, IBV_QP_QKEY);
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S | IBV_QP_QKEY,
	       EINVAL, IBV_QP_QKEY);
	/* A UD QP has no fixed destination, and no remote access rights. */
	EXPECT(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, S | IBV_QP_AV,
	       EINVAL, IBV_QP_AV);
	EXPECT(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT,
	       S | E_INIT_UD | IBV_QP_ACCESS_FLAGS, EINVAL,
	       IBV_QP_ACCESS_FLAGS);
	/* UC has no RDMA READ/atomic responder nor retries. */
	EXPECT(IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR,
	       S | E_RTR_UC | IBV_QP_MAX_DEST_RD_ATOMIC, EINVAL,
	       IBV_QP_MAX_DEST_RD_ATOMIC);
	EXPECT(IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS,
	       S | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT, EINVAL,
	       IBV_QP_RETRY_CNT);
	/* Rate limiting is a raw packet QP's only. */
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S | IBV_QP_RATE_LIMIT,
	       EINVAL, IBV_QP_RATE_LIMIT);
	EXPECT(IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS,
	       S | IBV_QP_SQ_PSN | IBV_QP_RATE_LIMIT, EINVAL,
	       IBV_QP_RATE_LIMIT);
	EXPECT_OK(IBV_QPT_RAW_PACKET, IBV_QPS_RTS, IBV_QPS_RTS,
		  S | IBV_QP_RATE_LIMIT);
	/* Queue sizes are never modified. */
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S | IBV_QP_CAP,
	       EINVAL, IBV_QP_CAP);
	/* Several strays are all reported, missing bits beside them. */
	EXPECT(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT,
	       S | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV, EINVAL,
	       IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PKEY_INDEX |
	       IBV_QP_ACCESS_FLAGS);
}

/* Every pair of states that is not a transition is refused, for every
 * type, whatever the attributes. */
static void test_illegal_transitions(void)
{
	for (size_t t = 0; t < NTYPES; t++)
		for (int c = 0; c < NSTATES; c++)
			for (int n = 0; n < NSTATES; n++) {
				if (is_listed(types[t], c, n))
					continue;
				EXPECT(types[t], c, n, S, EINVAL, S);
				EXPECT(types[t], c, n, ~0 & 0x3ffffff,
				       EINVAL, S);
			}
}

static void test_illegal_examples(void)
{
	EXPECT(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RTR, S | E_RTR_RC,
	       EINVAL, S);
	EXPECT(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTS, S | E_RTS_RC,
	       EINVAL, S);
	EXPECT(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_RTS, S | IBV_QP_SQ_PSN,
	       EINVAL, S);
	EXPECT(IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_INIT, S, EINVAL, S);
	EXPECT(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_SQD, S, EINVAL, S);
	EXPECT(IBV_QPT_RC, IBV_QPS_ERR, IBV_QPS_RTS, S, EINVAL, S);
	EXPECT(IBV_QPT_UD, IBV_QPS_ERR, IBV_QPS_INIT, S, EINVAL, S);
	EXPECT(IBV_QPT_XRC_SEND, IBV_QPS_SQD, IBV_QPS_RTR, S, EINVAL, S);
	/* RTS->SQE happens to a QP, it is not something one asks for. */
	for (size_t t = 0; t < NTYPES; t++)
		EXPECT(types[t], IBV_QPS_RTS, IBV_QPS_SQE, S, EINVAL, S);
	/* Reliable services never sit in SQE, so never leave it to RTS. */
	EXPECT(IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_RTS, S, EINVAL, S);
	EXPECT(IBV_QPT_XRC_SEND, IBV_QPS_SQE, IBV_QPS_RTS, S, EINVAL, S);
	EXPECT(IBV_QPT_XRC_RECV, IBV_QPS_SQE, IBV_QPS_RTS, S, EINVAL, S);
	EXPECT_OK(IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RTS, S);
	EXPECT_OK(IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_RTS, S);
}

/* Any state -> RESET and -> ERR, given nothing but the state. */
static void test_any_to_reset_or_err(void)
{
	static const enum ibv_qp_state to[] = { IBV_QPS_RESET, IBV_QPS_ERR };

	for (size_t t = 0; t < NTYPES; t++)
		for (int c = 0; c < NSTATES; c++)
			for (int k = 0; k < 2; k++) {
				EXPECT_OK(types[t], c, to[k], S);
				EXPECT(types[t], c, to[k], S | IBV_QP_PORT,
				       EINVAL, IBV_QP_PORT);
				EXPECT(types[t], c, to[k],
				       S | IBV_QP_CUR_STATE, EINVAL,
				       IBV_QP_CUR_STATE);
			}
}

/* Without IBV_QP_STATE the QP keeps its state: `next` is ignored. */
static void test_modify_in_place(void)
{
	/* RTS->RTS rules apply even though `next` says ERR. */
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_ERR, IBV_QP_ACCESS_FLAGS);
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_ERR, IBV_QP_QKEY, EINVAL,
	       IBV_QP_QKEY);
	/* ...and RESET->INIT's required bits do not make INIT happen. */
	EXPECT(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, E_INIT_CONN, EINVAL,
	       E_INIT_CONN);
	EXPECT_OK(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_QKEY);
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_RESET, IBV_QP_TIMEOUT);
	/* An empty mask changes nothing, where staying put is legal. */
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RESET, 0);
	EXPECT_OK(IBV_QPT_UD, IBV_QPS_ERR, IBV_QPS_RTS, 0);
	EXPECT_OK(IBV_QPT_UC, IBV_QPS_RTS, IBV_QPS_INIT, 0);
	/* RTR and SQE have no self transition: state must be given. */
	EXPECT(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, 0, EINVAL, S);
	EXPECT(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, E_RTS_RC, EINVAL, S);
	EXPECT(IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RTS, 0, EINVAL, S);
	/* With IBV_QP_STATE, `next` counts. */
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S);
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_ERR, S);
}

/* IBV_QP_CUR_STATE: only on the transitions into RTS from a state past
 * RTR, where the spec lists it. */
static void test_cur_state(void)
{
	int cs = IBV_QP_CUR_STATE;

	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, S | cs | E_RTS_RC);
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S | cs);
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_RTS, S | cs);
	EXPECT_OK(IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RTS, S | cs);
	EXPECT_OK(IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_RTS, S | cs);
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, cs);
	EXPECT(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, S | cs | E_INIT_CONN,
	       EINVAL, cs);
	EXPECT(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, S | cs, EINVAL, cs);
	EXPECT(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, S | cs | E_RTR_RC,
	       EINVAL, cs);
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_SQD, S | cs, EINVAL, cs);
	EXPECT(IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_SQD, S | cs, EINVAL, cs);
	EXPECT(IBV_QPT_RAW_PACKET, IBV_QPS_RTS, IBV_QPS_RTS, S | cs, EINVAL,
	       cs);
}

static void test_bad_arguments(void)
{
	int bad = 0;

	EXPECT(IBV_QPT_DRIVER, IBV_QPS_RESET, IBV_QPS_INIT, S, EINVAL, S);
	EXPECT((enum ibv_qp_type)0, IBV_QPS_RESET, IBV_QPS_ERR, S, EINVAL, S);
	EXPECT(IBV_QPT_RC, IBV_QPS_UNKNOWN, IBV_QPS_RESET, S, EINVAL, S);
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_UNKNOWN, S, EINVAL, S);
	EXPECT(IBV_QPT_RC, (enum ibv_qp_state)-1, IBV_QPS_ERR, S, EINVAL, S);
	/* Bits verbs.h reserves or does not define are strays too. */
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S | (1 << 21), EINVAL,
	       1 << 21);
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S | (1 << 26), EINVAL,
	       1 << 26);
	EXPECT(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S | (int)(1u << 31),
	       EINVAL, (int)(1u << 31));
	/* bad_mask may be NULL; it is zeroed on success. */
	CU_ASSERT_EQUAL(hca_qp_modify_check(IBV_QPT_RC, IBV_QPS_RESET,
					    IBV_QPS_RTR, S, NULL), EINVAL);
	CU_ASSERT_EQUAL(hca_qp_modify_check(IBV_QPT_RC, IBV_QPS_RESET,
					    IBV_QPS_INIT, S | E_INIT_CONN,
					    NULL), 0);
	bad = 1234;
	CU_ASSERT_EQUAL(hca_qp_modify_check(IBV_QPT_UD, IBV_QPS_RTS,
					    IBV_QPS_RTS, S, &bad), 0);
	CU_ASSERT_EQUAL(bad, 0);
}

/* hca_qp_modify_attrs gives the same cells the checks above rely on. */
static void test_attrs_lookup(void)
{
	int req, opt;

	for (size_t i = 0; i < NCASES; i++) {
		const struct tcase *c = &cases[i];

		req = opt = -1;
		CU_ASSERT_EQUAL(hca_qp_modify_attrs(c->type, c->cur, c->next,
						    &req, &opt), 0);
		CU_ASSERT_EQUAL(req, c->req);
		CU_ASSERT_EQUAL(opt, c->opt);
	}
	CU_ASSERT_EQUAL(hca_qp_modify_attrs(IBV_QPT_RC, IBV_QPS_RTS,
					    IBV_QPS_ERR, &req, &opt), 0);
	CU_ASSERT_EQUAL(req | opt, 0);
	CU_ASSERT_EQUAL(hca_qp_modify_attrs(IBV_QPT_RC, IBV_QPS_RESET,
					    IBV_QPS_RTR, &req, &opt), EINVAL);
	CU_ASSERT_EQUAL(hca_qp_modify_attrs(IBV_QPT_RC, IBV_QPS_SQE,
					    IBV_QPS_RTS, &req, &opt), EINVAL);
}

/* The man page's connection sequence, step by step, for each type. */
static void test_bring_up_sequences(void)
{
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT,
		  S | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR,
		  S | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
		  IBV_QP_MIN_RNR_TIMER);
	EXPECT_OK(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS,
		  S | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT);
	EXPECT_OK(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT,
		  S | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	EXPECT_OK(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, S);
	EXPECT_OK(IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS, S | IBV_QP_SQ_PSN);
	EXPECT_OK(IBV_QPT_RAW_PACKET, IBV_QPS_RESET, IBV_QPS_INIT,
		  S | IBV_QP_PORT);
	EXPECT_OK(IBV_QPT_RAW_PACKET, IBV_QPS_INIT, IBV_QPS_RTR, S);
	EXPECT_OK(IBV_QPT_RAW_PACKET, IBV_QPS_RTR, IBV_QPS_RTS, S);
}

static void test_state_str(void)
{
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str(IBV_QPS_RESET), "RESET");
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str(IBV_QPS_INIT), "INIT");
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str(IBV_QPS_RTR), "RTR");
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str(IBV_QPS_RTS), "RTS");
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str(IBV_QPS_SQD), "SQD");
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str(IBV_QPS_SQE), "SQE");
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str(IBV_QPS_ERR), "ERR");
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str(IBV_QPS_UNKNOWN), "UNKNOWN");
	CU_ASSERT_STRING_EQUAL(hca_qp_state_str((enum ibv_qp_state)-1),
			       "UNKNOWN");
}

static int add_suites(void)
{
	static const struct {
		const char *name;
		CU_TestFunc fn;
	} tests[] = {
		{ "legal transitions, required mask only", test_required_only },
		{ "each required bit removed", test_required_bit_removed },
		{ "optional bits allowed", test_optional_allowed },
		{ "any other bit refused", test_forbidden_bit_added },
		{ "named forbidden bits", test_forbidden_examples },
		{ "every unlisted transition refused", test_illegal_transitions },
		{ "named illegal transitions", test_illegal_examples },
		{ "any state -> RESET / ERR", test_any_to_reset_or_err },
		{ "modify in place without IBV_QP_STATE", test_modify_in_place },
		{ "IBV_QP_CUR_STATE", test_cur_state },
		{ "bad arguments and stray bits", test_bad_arguments },
		{ "hca_qp_modify_attrs lookup", test_attrs_lookup },
		{ "man page bring-up sequences", test_bring_up_sequences },
		{ "state names", test_state_str },
	};
	CU_pSuite s = CU_add_suite("hca_qp_modify", NULL, NULL);

	if (!s)
		return -1;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (!CU_add_test(s, tests[i].name, tests[i].fn))
			return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
