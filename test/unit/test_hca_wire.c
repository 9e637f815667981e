/*
 * Unit tests of hca/wire.[ch]: the opcode table's header sets, offsets
 * and lengths; the exact byte layout of every header; build and parse of
 * every opcode back to the same fields; rejection of short, malformed
 * and corrupted packets with the right reason; and 24-bit PSN
 * arithmetic. The ICRC and the fuzz of random mutations have their own
 * suite, test_hca_icrc.c; the pcap writer, test_hca_pcap.c.
 */
#include "wire.h"
#include "wire_gen.h"
#include "cu_run.h"

#include <stdlib.h>
#include <string.h>

static int count_known(void)
{
	int n = 0;

	for (int op = 0; op < 256; op++)
		n += hca_wire_op((uint8_t)op) != NULL;
	return n;
}

/* ---- the table ---- */

static void test_table_rows(void)
{
	/* RC 21 + UC 12 + UD 2 + XRC 21 */
	CU_ASSERT_EQUAL(count_known(), 56);
	CU_ASSERT_PTR_NULL(hca_wire_op(0x15));  /* reserved in RC */
	CU_ASSERT_PTR_NULL(hca_wire_op(0x2c));  /* UC has no READ */
	CU_ASSERT_PTR_NULL(hca_wire_op(0x40));  /* RD: not implemented */
	CU_ASSERT_PTR_NULL(hca_wire_op(0x60));  /* UD has no SEND_FIRST */
	CU_ASSERT_PTR_NULL(hca_wire_op(0x81));  /* CNP */
	CU_ASSERT_PTR_NULL(hca_wire_op(0xff));
	CU_ASSERT_STRING_EQUAL(hca_wire_op(0x04)->name, "RC_SEND_ONLY");
	CU_ASSERT_STRING_EQUAL(hca_wire_op(0x2b)->name,
			       "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
	CU_ASSERT_STRING_EQUAL(hca_wire_op(0x65)->name,
			       "UD_SEND_ONLY_WITH_IMMEDIATE");
	CU_ASSERT_STRING_EQUAL(hca_wire_op(0xb4)->name, "XRC_FETCH_ADD");
}

static const size_t ext_len[HCA_EXT_MAX] = {
	HCA_DETH_LEN, HCA_XRCETH_LEN, HCA_RETH_LEN, HCA_ATOMICETH_LEN,
	HCA_AETH_LEN, HCA_ATOMICACKETH_LEN, HCA_IMMDT_LEN,
};

/* Every row: headers packed back to back after BTH, in enum order. */
static void test_table_offsets(void)
{
	for (int op = 0; op < 256; op++) {
		const struct hca_wire_op_info *r = hca_wire_op((uint8_t)op);
		size_t at = HCA_BTH_LEN;

		if (!r)
			continue;
		for (int e = 0; e < HCA_EXT_MAX; e++) {
			if (r->exts & HCA_EXT_BIT(e)) {
				CU_ASSERT_EQUAL(r->off[e], at);
				at += ext_len[e];
			} else {
				CU_ASSERT_EQUAL(r->off[e], 0);
			}
		}
		CU_ASSERT_EQUAL(r->hdr_len, at);
	}
}

struct len_case {
	uint8_t opcode;
	size_t hdr_len;
	uint8_t exts;
};

#define B(e) HCA_EXT_BIT(HCA_EXT_##e)

static const struct len_case len_cases[] = {
	{ 0x00, 12, 0 },                        /* RC SEND_FIRST */
	{ 0x01, 12, 0 },                        /* RC SEND_MIDDLE */
	{ 0x03, 16, B(IMMDT) },                 /* RC SEND_LAST_IMM */
	{ 0x05, 16, B(IMMDT) },                 /* RC SEND_ONLY_IMM */
	{ 0x06, 28, B(RETH) },                  /* RC WRITE_FIRST */
	{ 0x07, 12, 0 },                        /* RC WRITE_MIDDLE */
	{ 0x09, 16, B(IMMDT) },                 /* RC WRITE_LAST_IMM */
	{ 0x0a, 28, B(RETH) },                  /* RC WRITE_ONLY */
	{ 0x0b, 32, B(RETH) | B(IMMDT) },       /* RC WRITE_ONLY_IMM */
	{ 0x0c, 28, B(RETH) },                  /* RC READ_REQUEST */
	{ 0x0d, 16, B(AETH) },                  /* RC READ_RESPONSE_FIRST */
	{ 0x0e, 12, 0 },                        /* RC READ_RESPONSE_MIDDLE */
	{ 0x0f, 16, B(AETH) },                  /* RC READ_RESPONSE_LAST */
	{ 0x10, 16, B(AETH) },                  /* RC READ_RESPONSE_ONLY */
	{ 0x11, 16, B(AETH) },                  /* RC ACKNOWLEDGE */
	{ 0x12, 24, B(AETH) | B(ATOMICACKETH) },/* RC ATOMIC_ACKNOWLEDGE */
	{ 0x13, 40, B(ATOMICETH) },             /* RC COMPARE_SWAP */
	{ 0x14, 40, B(ATOMICETH) },             /* RC FETCH_ADD */
	{ 0x24, 12, 0 },                        /* UC SEND_ONLY */
	{ 0x26, 28, B(RETH) },                  /* UC WRITE_FIRST */
	{ 0x64, 20, B(DETH) },                  /* UD SEND_ONLY */
	{ 0x65, 24, B(DETH) | B(IMMDT) },       /* UD SEND_ONLY_IMM */
	{ 0xa0, 16, B(XRCETH) },                /* XRC SEND_FIRST */
	{ 0xa1, 16, B(XRCETH) },                /* XRC SEND_MIDDLE */
	{ 0xa5, 20, B(XRCETH) | B(IMMDT) },     /* XRC SEND_ONLY_IMM */
	{ 0xab, 36, B(XRCETH) | B(RETH) | B(IMMDT) }, /* XRC WRITE_ONLY_IMM */
	{ 0xac, 32, B(XRCETH) | B(RETH) },      /* XRC READ_REQUEST */
	{ 0xad, 16, B(AETH) },                  /* XRC READ_RESPONSE_FIRST */
	{ 0xb1, 16, B(AETH) },                  /* XRC ACKNOWLEDGE */
	{ 0xb2, 24, B(AETH) | B(ATOMICACKETH) },/* XRC ATOMIC_ACKNOWLEDGE */
	{ 0xb3, 44, B(XRCETH) | B(ATOMICETH) }, /* XRC COMPARE_SWAP */
};

static void test_table_lengths(void)
{
	for (size_t i = 0; i < sizeof(len_cases) / sizeof(len_cases[0]); i++) {
		const struct len_case *c = &len_cases[i];
		const struct hca_wire_op_info *r = hca_wire_op(c->opcode);

		CU_ASSERT_PTR_NOT_NULL_FATAL(r);
		CU_ASSERT_EQUAL(r->hdr_len, c->hdr_len);
		CU_ASSERT_EQUAL(r->exts, c->exts);
	}
	CU_ASSERT_EQUAL(hca_wire_len(0x04, 5), 12 + 5 + 3 + 4);
	CU_ASSERT_EQUAL(hca_wire_len(0x13, 0), 40 + 4);
	CU_ASSERT_EQUAL(hca_wire_len(0x15, 0), 0);
}

/* Positions, payload and direction of a few rows, per the spec's table. */
static void test_table_kinds(void)
{
	CU_ASSERT_EQUAL(hca_wire_op(0x00)->pos, HCA_POS_FIRST);
	CU_ASSERT_EQUAL(hca_wire_op(0x01)->pos, HCA_POS_MIDDLE);
	CU_ASSERT_EQUAL(hca_wire_op(0x02)->pos, HCA_POS_LAST);
	CU_ASSERT_EQUAL(hca_wire_op(0x04)->pos, HCA_POS_ONLY);
	CU_ASSERT_EQUAL(hca_wire_op(0x0e)->pos, HCA_POS_MIDDLE);
	CU_ASSERT_EQUAL(hca_wire_op(0x0c)->flags, 0);
	CU_ASSERT_EQUAL(hca_wire_op(0x13)->flags, 0);
	CU_ASSERT_EQUAL(hca_wire_op(0x11)->flags, HCA_WF_RESPONSE);
	CU_ASSERT_EQUAL(hca_wire_op(0x12)->flags, HCA_WF_RESPONSE);
	CU_ASSERT_EQUAL(hca_wire_op(0x0d)->flags, HCA_WF_PAYLOAD | HCA_WF_RESPONSE);
	CU_ASSERT_EQUAL(hca_wire_op(0x64)->flags, HCA_WF_PAYLOAD);
	CU_ASSERT_EQUAL(hca_wire_op(0xa8)->flags, HCA_WF_PAYLOAD);
}

/* ---- header byte layout ---- */

static void test_bth_layout(void)
{
	uint8_t b[HCA_BTH_LEN] = { 0 };
	static const uint8_t want[HCA_BTH_LEN] = {
		0x0a,                   /* opcode */
		0xf0,                   /* SE, M, pad 3, TVer 0 */
		0xab, 0xcd,             /* P_Key */
		0xc0,                   /* FECN, BECN */
		0x12, 0x34, 0x56,       /* DestQP */
		0x80,                   /* AckReq */
		0xfe, 0xdc, 0xba,       /* PSN */
	};

	hca_bth_set_opcode(b, 0x0a);
	hca_bth_set_se(b, true);
	hca_bth_set_mig(b, true);
	hca_bth_set_padcnt(b, 3);
	hca_bth_set_tver(b, 0);
	hca_bth_set_pkey(b, 0xabcd);
	hca_bth_set_fecn(b, true);
	hca_bth_set_becn(b, true);
	hca_bth_set_dqpn(b, 0x123456);
	hca_bth_set_ackreq(b, true);
	hca_bth_set_psn(b, 0xfedcba);
	CU_ASSERT_EQUAL(memcmp(b, want, sizeof(want)), 0);
	CU_ASSERT_EQUAL(hca_bth_padcnt(b), 3);
	CU_ASSERT_EQUAL(hca_bth_pkey(b), 0xabcd);
	CU_ASSERT_EQUAL(hca_bth_dqpn(b), 0x123456);
	CU_ASSERT_EQUAL(hca_bth_psn(b), 0xfedcba);
	CU_ASSERT(hca_bth_se(b) && hca_bth_mig(b) && hca_bth_ackreq(b));
	CU_ASSERT(hca_bth_fecn(b) && hca_bth_becn(b));
	/* Clearing one bit leaves its neighbours alone. */
	hca_bth_set_mig(b, false);
	CU_ASSERT_EQUAL(b[1], 0xb0);
	hca_bth_set_tver(b, 0xf);
	CU_ASSERT_EQUAL(b[1], 0xbf);
	hca_bth_set_padcnt(b, 1);
	CU_ASSERT_EQUAL(b[1], 0x9f);
	hca_bth_set_becn(b, false);
	CU_ASSERT_EQUAL(b[4], 0x80);
}

static void test_ext_layout(void)
{
	uint8_t h[28] = { 0 };
	static const uint8_t reth[16] = {
		1, 2, 3, 4, 5, 6, 7, 8, 0xa1, 0xa2, 0xa3, 0xa4, 0, 0, 0x10, 0,
	};
	static const uint8_t deth[8] = { 0x80, 0, 0, 0x11, 0, 0, 0, 0x42 };
	static const uint8_t aeth[4] = { 0x62, 0x00, 0x01, 0x02 };

	hca_reth_set_va(h, 0x0102030405060708ULL);
	hca_reth_set_rkey(h, 0xa1a2a3a4);
	hca_reth_set_dmalen(h, 4096);
	CU_ASSERT_EQUAL(memcmp(h, reth, 16), 0);

	memset(h, 0xee, sizeof(h));
	hca_deth_set_qkey(h, 0x80000011);
	hca_deth_set_sqpn(h, 0x42);
	CU_ASSERT_EQUAL(memcmp(h, deth, 8), 0);     /* reserved byte zeroed */

	hca_aeth_set_syndrome(h, hca_aeth_make(HCA_AETH_NAK, HCA_NAK_REM_ACCESS));
	hca_aeth_set_msn(h, 0x102);
	CU_ASSERT_EQUAL(memcmp(h, aeth, 4), 0);

	memset(h, 0, sizeof(h));
	hca_atomiceth_set_va(h, 1);
	hca_atomiceth_set_rkey(h, 2);
	hca_atomiceth_set_swap_add(h, 3);
	hca_atomiceth_set_compare(h, 4);
	CU_ASSERT(h[7] == 1 && h[11] == 2 && h[19] == 3 && h[27] == 4);
	CU_ASSERT_EQUAL(hca_atomiceth_compare(h), 4);

	memset(h, 0xee, 4);
	hca_xrceth_set_srqn(h, 0xabcdef);
	CU_ASSERT(h[0] == 0 && h[1] == 0xab && h[3] == 0xef);
}

static void test_aeth_syndrome(void)
{
	uint8_t s = hca_aeth_make(HCA_AETH_ACK, HCA_AETH_CREDIT_INVALID);

	CU_ASSERT_EQUAL(s, 0x1f);
	CU_ASSERT_EQUAL(hca_aeth_kind(s), HCA_AETH_ACK);
	s = hca_aeth_make(HCA_AETH_RNR_NAK, 14);
	CU_ASSERT_EQUAL(s, 0x2e);
	CU_ASSERT_EQUAL(hca_aeth_kind(s), HCA_AETH_RNR_NAK);
	CU_ASSERT_EQUAL(hca_aeth_value(s), 14);
	s = hca_aeth_make(HCA_AETH_NAK, HCA_NAK_PSN_SEQ_ERR);
	CU_ASSERT_EQUAL(s, 0x60);
	CU_ASSERT_EQUAL(hca_aeth_make(HCA_AETH_NAK, HCA_NAK_INV_REQ), 0x61);
	CU_ASSERT_EQUAL(hca_aeth_make(HCA_AETH_NAK, HCA_NAK_REM_OP), 0x63);
	CU_ASSERT_EQUAL(hca_aeth_make(HCA_AETH_NAK, HCA_NAK_INV_RD_REQ), 0x64);
	CU_ASSERT_EQUAL(hca_aeth_kind(0x64), HCA_AETH_NAK);
	CU_ASSERT_EQUAL(hca_aeth_value(0x64), HCA_NAK_INV_RD_REQ);
}

/* ---- build and parse ---- */

/* The fields parse must return: only those of carried headers. */
static struct hca_wire_hdr expected_fields(const struct hca_wire_hdr *in,
					   size_t plen)
{
	const struct hca_wire_op_info *r = hca_wire_op(in->opcode);
	struct hca_wire_hdr e;

	memset(&e, 0, sizeof(e));
	e.opcode = in->opcode;
	e.se = in->se, e.mig = in->mig, e.ackreq = in->ackreq;
	e.fecn = in->fecn, e.becn = in->becn;
	e.padcnt = (uint8_t)(-plen & 3);
	e.pkey = in->pkey, e.dqpn = in->dqpn, e.psn = in->psn;
	if (r->exts & B(DETH))
		e.qkey = in->qkey, e.sqpn = in->sqpn;
	if (r->exts & B(XRCETH))
		e.xrc_srqn = in->xrc_srqn;
	if (r->exts & B(RETH))
		e.va = in->va, e.rkey = in->rkey, e.dmalen = in->dmalen;
	if (r->exts & B(ATOMICETH))
		e.va = in->va, e.rkey = in->rkey, e.swap_add = in->swap_add,
		e.compare = in->compare;
	if (r->exts & B(AETH))
		e.syndrome = in->syndrome, e.msn = in->msn;
	if (r->exts & B(ATOMICACKETH))
		e.orig = in->orig;
	if (r->exts & B(IMMDT))
		e.imm = in->imm;
	return e;
}

static bool same_fields(const struct hca_wire_hdr *a, const struct hca_wire_hdr *b)
{
	return a->opcode == b->opcode && a->se == b->se && a->mig == b->mig &&
	       a->ackreq == b->ackreq && a->fecn == b->fecn && a->becn == b->becn &&
	       a->padcnt == b->padcnt && a->pkey == b->pkey && a->dqpn == b->dqpn &&
	       a->psn == b->psn && a->va == b->va && a->rkey == b->rkey &&
	       a->dmalen == b->dmalen && a->syndrome == b->syndrome &&
	       a->msn == b->msn && a->swap_add == b->swap_add &&
	       a->compare == b->compare && a->orig == b->orig &&
	       a->qkey == b->qkey && a->sqpn == b->sqpn &&
	       a->xrc_srqn == b->xrc_srqn && a->imm == b->imm;
}


static void test_roundtrip_every_opcode(void)
{
	uint8_t payload[512];

	rng_state = 1;
	for (int op = 0; op < 256; op++) {
		if (!hca_wire_op((uint8_t)op))
			continue;
		for (int rep = 0; rep < 50; rep++) {
			struct hca_wire_hdr h, out, want;
			const uint8_t *pl = NULL;
			size_t len, plen, got = 0;
			uint8_t *buf = make_packet((uint8_t)op, &len, &h, payload, &plen);

			CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
			CU_ASSERT_EQUAL(len % 4, 0);
			CU_ASSERT_EQUAL(hca_wire_parse(buf, len, &test_ip, &out, &pl, &got),
					HCA_WIRE_OK);
			want = expected_fields(&h, plen);
			CU_ASSERT(same_fields(&out, &want));
			CU_ASSERT_EQUAL(got, plen);
			CU_ASSERT(pl == buf + hca_wire_op((uint8_t)op)->hdr_len);
			CU_ASSERT(plen == 0 || memcmp(pl, payload, plen) == 0);
			free(buf);
		}
	}
}

/* The two-step build (headers, gathered payload, seal) equals build. */
static void test_two_step_build(void)
{
	uint8_t a[128], b[128];
	struct hca_wire_hdr h;
	size_t la, hl, lb;

	rng_state = 2;
	random_hdr(&h, HCA_WIRE_OPCODE(HCA_WT_RC, HCA_WOP_WRITE_ONLY_IMM));
	la = hca_wire_build(a, sizeof(a), &test_ip, &h, "abcdefg", 7);
	memset(b, 0xcc, sizeof(b));
	hl = hca_wire_put_hdrs(b, sizeof(b), &h, 7);
	CU_ASSERT_EQUAL(hl, 32);
	memcpy(b + hl, "abcdefg", 7);
	lb = hca_wire_seal(b, &test_ip, hl, 7);
	CU_ASSERT_EQUAL(la, 32 + 8 + 4);
	CU_ASSERT_EQUAL(lb, la);
	CU_ASSERT_EQUAL(memcmp(a, b, la), 0);
	CU_ASSERT_EQUAL(b[32 + 7], 0);          /* pad bytes are zero */
}

static void test_build_rejects(void)
{
	uint8_t buf[256];
	struct hca_wire_hdr h = { .opcode = 0x15 };

	CU_ASSERT_EQUAL(hca_wire_build(buf, sizeof(buf), &test_ip, &h, NULL, 0), 0);
	h.opcode = HCA_WIRE_OPCODE(HCA_WT_RC, HCA_WOP_ACKNOWLEDGE);
	CU_ASSERT_EQUAL(hca_wire_build(buf, sizeof(buf), &test_ip, &h, "x", 1), 0);
	CU_ASSERT_EQUAL(hca_wire_build(buf, sizeof(buf), &test_ip, &h, NULL, 0), 20);
	h.opcode = HCA_WIRE_OPCODE(HCA_WT_RC, HCA_WOP_SEND_FIRST);
	CU_ASSERT_EQUAL(hca_wire_build(buf, sizeof(buf), &test_ip, &h, "abcde", 5), 0);
	CU_ASSERT_EQUAL(hca_wire_build(buf, sizeof(buf), &test_ip, &h, "abcd", 4), 20);
	h.opcode = HCA_WIRE_OPCODE(HCA_WT_RC, HCA_WOP_SEND_ONLY);
	CU_ASSERT_EQUAL(hca_wire_build(buf, 23, &test_ip, &h, "abcde", 5), 0);
	CU_ASSERT_EQUAL(hca_wire_build(buf, 24, &test_ip, &h, "abcde", 5), 24);
	CU_ASSERT_EQUAL(hca_wire_build(buf, 24, &test_ip, &h, NULL, 5), 0);
}


/* Re-seals a hand-edited packet so only the edit, not the ICRC, is wrong. */
static void reseal(uint8_t *buf, size_t len)
{
	uint32_t c = hca_wire_icrc(&test_ip, buf, len);

	for (int i = 0; i < 4; i++)
		buf[len - 4 + i] = (uint8_t)(c >> (8 * i));
}

static void test_parse_reasons(void)
{
	uint8_t buf[256];
	struct hca_wire_hdr h;
	size_t n = simple_packet(buf, sizeof(buf), 0x04, 5);

	CU_ASSERT_EQUAL(n, 24);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, &h, NULL, NULL), HCA_WIRE_OK);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, 15, NULL, &h, NULL, NULL), HCA_WIRE_ESHORT);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, 0, NULL, &h, NULL, NULL), HCA_WIRE_ESHORT);

	buf[1] |= 1;                            /* TVer 1 */
	reseal(buf, n);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, &h, NULL, NULL), HCA_WIRE_EVERSION);
	buf[1] &= 0xf0;
	buf[0] = 0x15;                          /* reserved opcode */
	reseal(buf, n);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, &h, NULL, NULL), HCA_WIRE_EOPCODE);
	buf[0] = 0x13;                          /* COMPARE_SWAP needs 44 bytes */
	reseal(buf, n);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, &h, NULL, NULL), HCA_WIRE_ESHORT);
	buf[0] = 0x11;                          /* ACK with payload bytes */
	reseal(buf, n);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, &h, NULL, NULL), HCA_WIRE_ELENGTH);
	buf[0] = 0x00;                          /* SEND_FIRST with a pad count */
	reseal(buf, n);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, &h, NULL, NULL), HCA_WIRE_EPAD);

	n = simple_packet(buf, sizeof(buf), 0x04, 1);       /* pad 3 of 4 */
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n - 1, NULL, &h, NULL, NULL), HCA_WIRE_ELENGTH);
	n = simple_packet(buf, sizeof(buf), 0x04, 0);
	hca_bth_set_padcnt(buf, 1);             /* pad with no payload */
	reseal(buf, n);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, &h, NULL, NULL), HCA_WIRE_EPAD);
	hca_bth_set_padcnt(buf, 0);
	reseal(buf, n);
	buf[n - 1] ^= 0x80;
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, &h, NULL, NULL), HCA_WIRE_EICRC);
	/* Without an address to check against, the ICRC is not looked at. */
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, NULL, &h, NULL, NULL), HCA_WIRE_OK);
}

static void test_strerror(void)
{
	CU_ASSERT_STRING_EQUAL(hca_wire_strerror(HCA_WIRE_OK), "ok");
	CU_ASSERT_STRING_EQUAL(hca_wire_strerror(HCA_WIRE_EICRC), "bad ICRC");
	CU_ASSERT_STRING_EQUAL(hca_wire_strerror(-1), "unknown error");
	for (int e = 0; e < HCA_WIRE_ERR_MAX; e++)
		CU_ASSERT_PTR_NOT_NULL(hca_wire_strerror(e));
}

/* Every truncation of every opcode's packet is refused, with the reason. */
static void test_truncation(void)
{
	uint8_t payload[512];

	rng_state = 3;
	for (int op = 0; op < 256; op++) {
		const struct hca_wire_op_info *r = hca_wire_op((uint8_t)op);
		struct hca_wire_hdr h, out;
		size_t len, plen;
		uint8_t *buf;

		if (!r)
			continue;
		buf = make_packet((uint8_t)op, &len, &h, payload, &plen);
		CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
		for (size_t n = 0; n < len; n++) {
			int e = hca_wire_parse(buf, n, &test_ip, &out, NULL, NULL);

			CU_ASSERT_NOT_EQUAL(e, HCA_WIRE_OK);
			if (n < (size_t)r->hdr_len + HCA_ICRC_LEN) {
				CU_ASSERT_EQUAL(e, HCA_WIRE_ESHORT);
			} else if (n % 4) {
				CU_ASSERT_EQUAL(e, HCA_WIRE_ELENGTH);
			}
		}
		free(buf);
	}
}

/* ---- PSN ---- */

static void test_psn_arith(void)
{
	CU_ASSERT_EQUAL(hca_psn_add(0xffffff, 1), 0);
	CU_ASSERT_EQUAL(hca_psn_add(0xfffffe, 5), 3);
	CU_ASSERT_EQUAL(hca_psn_add(2, -5), 0xfffffd);
	CU_ASSERT_EQUAL(hca_psn_add(0x123456, 0), 0x123456);
	CU_ASSERT_EQUAL(hca_psn_diff(0, 0xffffff), 1);
	CU_ASSERT_EQUAL(hca_psn_diff(0xffffff, 0), -1);
	CU_ASSERT_EQUAL(hca_psn_diff(5, 0xfffffb), 10);
	CU_ASSERT_EQUAL(hca_psn_diff(0x7fffff, 0), 0x7fffff);
	CU_ASSERT_EQUAL(hca_psn_diff(0x800000, 0), -0x800000);
	CU_ASSERT(hca_psn_cmp(0, 0xffffff) > 0);       /* 0 follows 0xffffff */
	CU_ASSERT(hca_psn_cmp(0xffffff, 0) < 0);
	CU_ASSERT(hca_psn_cmp(77, 77) == 0);
	CU_ASSERT(hca_psn_cmp(0x7fffff, 0) > 0);       /* half window - 1 ahead */
	CU_ASSERT(hca_psn_cmp(0x800000, 0) < 0);       /* exactly half: behind */
	CU_ASSERT(hca_psn_cmp(0x800001, 0) < 0);
	CU_ASSERT(hca_psn_cmp(0x100, 0xffff00) > 0);
	/* Upper bits of the arguments are ignored. */
	CU_ASSERT(hca_psn_cmp(0xff000005, 5) == 0);
	/* Walking across the wrap: each PSN is after the previous one. */
	for (uint32_t p = 0xfffff0, i = 0; i < 32; i++, p = hca_psn_add(p, 1))
		CU_ASSERT(hca_psn_cmp(hca_psn_add(p, 1), p) > 0);
}

static int add_suites(void)
{
	CU_pSuite w = CU_add_suite("hca_wire", NULL, NULL);

	if (!w)
		return -1;
	if (!CU_add_test(w, "table rows", test_table_rows) ||
	    !CU_add_test(w, "table offsets", test_table_offsets) ||
	    !CU_add_test(w, "header lengths per opcode", test_table_lengths) ||
	    !CU_add_test(w, "positions and flags", test_table_kinds) ||
	    !CU_add_test(w, "BTH byte layout", test_bth_layout) ||
	    !CU_add_test(w, "extension header layout", test_ext_layout) ||
	    !CU_add_test(w, "AETH syndrome", test_aeth_syndrome) ||
	    !CU_add_test(w, "round trip, every opcode", test_roundtrip_every_opcode) ||
	    !CU_add_test(w, "two-step build", test_two_step_build) ||
	    !CU_add_test(w, "build refusals", test_build_rejects) ||
	    !CU_add_test(w, "parse reasons", test_parse_reasons) ||
	    !CU_add_test(w, "strerror", test_strerror) ||
	    !CU_add_test(w, "every truncation refused", test_truncation) ||
	    !CU_add_test(w, "PSN arithmetic", test_psn_arith))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
