/*
 * fuzz_seeds.c: the seed corpus of fuzz_packet (test/fuzz/corpus/): valid
 * packets built by hca_wire_build, one file per scenario, each a sequence
 * of the records fuzz_packet.c reads (next_record()): packets steered to
 * a QP with its PSN and keys patched in, post-send actions, inline slots.
 * Written by `FUZZ_PACKET_SEEDS=dir build/fuzz/fuzz_packet`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hca_int.h"
#include "udp_link.h" /* hca_wire_build, the wire format */
#include "fuzz_packet.h"

struct seed {
	uint8_t d[16384];
	size_t n;
};

static void seed_action(struct seed *s, uint8_t kind, uint8_t a0, uint8_t a1, uint16_t len,
			uint8_t a4, uint8_t a5)
{
	uint8_t r[7] = { (uint8_t)(0x80 | kind), a0, a1, (uint8_t)len, (uint8_t)(len >> 8),
			 a4, a5 };

	memcpy(s->d + s->n, r, sizeof(r));
	s->n += sizeof(r);
}

/* One packet record for QP index q: QPN, PSN (delta h->psn) and keys patched. */
static void seed_packet(struct seed *s, int q, const struct hca_wire_hdr *h, size_t plen)
{
	static const struct hca_ip4udp ip = { .saddr = 0x7f000001, .daddr = 0x7f000001,
					      .sport = HCA_ROCE_PORT,
					      .dport = HCA_ROCE_PORT };
	uint8_t payload[4096];
	uint8_t *rec = s->d + s->n;
	size_t len;

	for (size_t i = 0; i < plen; i++)
		payload[i] = (uint8_t)(i * 13 + plen);
	len = hca_wire_build(rec + 4, sizeof(s->d) - s->n - 4, &ip, h, payload, plen);
	if (!len) {
		fprintf(stderr, "fuzz_packet: seed packet 0x%02x not built\n", h->opcode);
		exit(1);
	}
	rec[0] = P_QPN | P_PSN | P_KEYS | P_TRANSPORT | P_ALIGN;
	rec[1] = (uint8_t)q;
	rec[2] = (uint8_t)len;
	rec[3] = (uint8_t)(len >> 8);
	s->n += 4 + len;
}

static int seed_write(const char *dir, const char *name, const struct seed *s)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(s->d, 1, s->n, f) != s->n || fclose(f)) {
		perror(path);
		return 1;
	}
	return 0;
}

int fuzz_write_seeds(const char *dir)
{
	struct seed s;
	struct hca_wire_hdr h;
	int bad = 0;

#define H(tr, wop) (memset(&h, 0, sizeof(h)), h.opcode = HCA_WIRE_OPCODE(tr, wop), \
		    h.ackreq = true, h.pkey = HCA_DEFAULT_PKEY)
#define SEED(name) (bad |= seed_write(dir, name, &s), s.n = 0)
	s.n = 0;

	H(HCA_WT_RC, HCA_WOP_SEND_ONLY);
	seed_packet(&s, Q_RC_B, &h, 64);
	SEED("rc_send_only");

	H(HCA_WT_RC, HCA_WOP_SEND_FIRST);
	seed_packet(&s, Q_RC_B, &h, 1024);
	H(HCA_WT_RC, HCA_WOP_SEND_MIDDLE);
	seed_packet(&s, Q_RC_B, &h, 512);
	H(HCA_WT_RC, HCA_WOP_SEND_LAST_IMM);
	h.imm = 0x12345678;
	seed_packet(&s, Q_RC_B, &h, 255);
	SEED("rc_send_first_middle_last");

	H(HCA_WT_RC, HCA_WOP_WRITE_FIRST);
	h.va = 0x10000;
	h.dmalen = 2560;
	seed_packet(&s, Q_RC_B, &h, 1024);
	H(HCA_WT_RC, HCA_WOP_WRITE_MIDDLE);
	seed_packet(&s, Q_RC_B, &h, 1024);
	H(HCA_WT_RC, HCA_WOP_WRITE_LAST);
	seed_packet(&s, Q_RC_B, &h, 512);
	SEED("rc_write_first_middle_last");

	H(HCA_WT_RC, HCA_WOP_WRITE_ONLY_IMM);
	h.va = 0x10100;
	h.dmalen = 100;
	h.imm = 7;
	seed_packet(&s, Q_SRQ_B, &h, 100);
	SEED("rc_srq_write_only_imm");

	H(HCA_WT_RC, HCA_WOP_READ_REQUEST);
	h.va = 0x10000;
	h.dmalen = 3000;
	seed_packet(&s, Q_RC_B, &h, 0);
	SEED("rc_read_request");

	H(HCA_WT_RC, HCA_WOP_COMPARE_SWAP);
	h.va = 0x10008;
	h.compare = 0;
	h.swap_add = 42;
	seed_packet(&s, Q_RC_B, &h, 0);
	H(HCA_WT_RC, HCA_WOP_FETCH_ADD);
	h.va = 0x10010;
	h.swap_add = 3;
	seed_packet(&s, Q_RC_B, &h, 0);
	h.psn = 0xff; /* delta -1: the same PSN again, its saved result */
	seed_packet(&s, Q_RC_B, &h, 0);
	SEED("rc_atomics");

	/* answers to the lonely requester: post first, then ACK/NAK/data */
	seed_action(&s, 0, SEND_LONELY, OP_SEND, 100, 0, 0x08);
	seed_action(&s, 0, SEND_LONELY, OP_WRITE, 2000, 0, 0x08);
	H(HCA_WT_RC, HCA_WOP_ACKNOWLEDGE);
	h.syndrome = hca_aeth_make(HCA_AETH_ACK, HCA_AETH_CREDIT_INVALID);
	seed_packet(&s, Q_LONELY, &h, 0);
	h.psn = 1;
	seed_packet(&s, Q_LONELY, &h, 0);
	SEED("lonely_ack");

	seed_action(&s, 0, SEND_LONELY, OP_SEND, 100, 0, 0x08);
	seed_action(&s, 0, SEND_LONELY, OP_SEND, 100, 0, 0x08);
	seed_action(&s, 0, SEND_LONELY, OP_SEND, 100, 0, 0x08);
	H(HCA_WT_RC, HCA_WOP_ACKNOWLEDGE);
	h.syndrome = hca_aeth_make(HCA_AETH_NAK, HCA_NAK_PSN_SEQ_ERR);
	seed_packet(&s, Q_LONELY, &h, 0);
	h.syndrome = hca_aeth_make(HCA_AETH_RNR_NAK, 1);
	seed_packet(&s, Q_LONELY, &h, 0);
	h.syndrome = hca_aeth_make(HCA_AETH_NAK, HCA_NAK_REM_ACCESS);
	seed_packet(&s, Q_LONELY, &h, 0);
	SEED("lonely_naks");

	seed_action(&s, 0, SEND_LONELY, OP_READ, 3000, 0, 0x08);
	H(HCA_WT_RC, HCA_WOP_READ_RESPONSE_FIRST);
	h.syndrome = hca_aeth_make(HCA_AETH_ACK, HCA_AETH_CREDIT_INVALID);
	seed_packet(&s, Q_LONELY, &h, 1024);
	h.opcode = HCA_WIRE_OPCODE(HCA_WT_RC, HCA_WOP_READ_RESPONSE_MIDDLE);
	seed_packet(&s, Q_LONELY, &h, 1024);
	h.opcode = HCA_WIRE_OPCODE(HCA_WT_RC, HCA_WOP_READ_RESPONSE_LAST);
	seed_packet(&s, Q_LONELY, &h, 952);
	SEED("lonely_read_response");

	seed_action(&s, 0, SEND_LONELY, OP_FADD, 8, 0, 0x08);
	H(HCA_WT_RC, HCA_WOP_ATOMIC_ACKNOWLEDGE);
	h.syndrome = hca_aeth_make(HCA_AETH_ACK, HCA_AETH_CREDIT_INVALID);
	h.orig = 0x1122334455667788ULL;
	seed_packet(&s, Q_LONELY, &h, 0);
	SEED("lonely_atomic_ack");

	H(HCA_WT_UC, HCA_WOP_SEND_FIRST);
	seed_packet(&s, Q_UC_B, &h, 1024);
	H(HCA_WT_UC, HCA_WOP_SEND_LAST);
	seed_packet(&s, Q_UC_B, &h, 10);
	H(HCA_WT_UC, HCA_WOP_WRITE_ONLY);
	h.va = 0x10200;
	h.dmalen = 32;
	seed_packet(&s, Q_UC_B, &h, 32);
	SEED("uc_send_write");

	H(HCA_WT_UD, HCA_WOP_SEND_ONLY);
	h.qkey = QKEY;
	h.sqpn = 0x123;
	seed_packet(&s, Q_UD_B, &h, 200);
	H(HCA_WT_UD, HCA_WOP_SEND_ONLY_IMM);
	h.qkey = QKEY;
	h.imm = 99;
	seed_packet(&s, Q_UD_B, &h, 0);
	SEED("ud_send_deth");

	H(HCA_WT_XRC, HCA_WOP_SEND_ONLY);
	h.xrc_srqn = 0;
	seed_packet(&s, Q_XRC_TGT, &h, 128);
	H(HCA_WT_XRC, HCA_WOP_WRITE_ONLY);
	h.va = 0x10300;
	h.dmalen = 64;
	seed_packet(&s, Q_XRC_TGT, &h, 64);
	SEED("xrc_send_write");

	/* real traffic between our own QPs, drained through the socket */
	seed_action(&s, 0, SEND_RC_A, OP_SEND_IMM, 1500, 1, 0x08);
	seed_action(&s, 0, SEND_RC_A, OP_WRITE, 3000, 2, 0x28);
	seed_action(&s, 0, SEND_RC_A, OP_READ, 2000, 3, 0x08);
	seed_action(&s, 0, SEND_RC_A, OP_CAS, 8, 4, 0x08);
	seed_action(&s, 0, SEND_UC_A, OP_SEND, 100, 0, 0x08);
	seed_action(&s, 0, SEND_UD_A, OP_SEND, 100, 0, 0x08);
	seed_action(&s, 0, SEND_XRC, OP_SEND, 100, 0, 0x08);
	seed_action(&s, 0, SEND_SRQ_A, OP_SEND, 100, 0, 0x08);
	SEED("loopback_traffic");

	/* inline receive slots: one well formed (steered into the local
	 * region, 64 bytes), one naming no slot, one out of range */
	{
		struct hca_inl_slot sl = { .niov = 1, .len = 64 };
		uint8_t rec[4 + sizeof(sl) - 4 + 64];
		size_t body = sizeof(sl) - sizeof(sl.state);

		sl.iov[0].addr = 128;
		sl.iov[0].len = 64;
		rec[0] = 0xc1;
		rec[1] = 1;
		rec[2] = (uint8_t)(body + 64);
		rec[3] = (uint8_t)((body + 64) >> 8);
		memcpy(rec + 4, (uint8_t *)&sl + sizeof(sl.state), body);
		for (int i = 0; i < 64; i++)
			rec[4 + body + i] = (uint8_t)(i * 7);
		memcpy(s.d + s.n, rec, sizeof(rec));
		s.n += sizeof(rec);
		rec[1] = 0;
		memcpy(s.d + s.n, rec, sizeof(rec));
		s.n += sizeof(rec);
		rec[1] = 200;
		memcpy(s.d + s.n, rec, sizeof(rec));
		s.n += sizeof(rec);
		SEED("inline_slot");
	}
	/* payloads embedded in a completion's CQ slot: one well formed
	 * (steered, 32 bytes), one with more ranges than a WQE has */
	{
		struct {
			uint32_t len, niov;
			struct hca_inl_iov iov[1];
			uint8_t data[32];
		} e = { .len = 32, .niov = 1, .iov = { { .addr = 256, .len = 32 } } };
		uint8_t rec[4 + sizeof(e)];

		for (int i = 0; i < 32; i++)
			e.data[i] = (uint8_t)(i * 5 + 1);
		rec[0] = 0xc3;
		rec[1] = 0;
		rec[2] = (uint8_t)sizeof(e);
		rec[3] = 0;
		memcpy(rec + 4, &e, sizeof(e));
		memcpy(s.d + s.n, rec, sizeof(rec));
		s.n += sizeof(rec);
		e.niov = 40;
		memcpy(rec + 4, &e, sizeof(e));
		memcpy(s.d + s.n, rec, sizeof(rec));
		s.n += sizeof(rec);
		SEED("embedded_slot");
	}
#undef SEED
#undef H
	return bad;
}
