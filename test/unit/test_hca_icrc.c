/*
 * Unit tests of the ICRC (hca/wire.c): CRC-32 against its catalogue check
 * value and its fast path against the tables, the ICRC against a vector
 * computed independently, its masked fields and its detection of every
 * flipped bit; and a fuzz of random mutations of valid packets that the
 * parser must refuse with a reason, never crash on (under ASan).
 */
#include "wire.h"
#include "wire_gen.h"
#include "cu_run.h"

#include <stdlib.h>
#include <string.h>

static void test_crc32_check_value(void)
{
	/* The catalogue check value of CRC-32 (as Ethernet and zlib). */
	CU_ASSERT_EQUAL(hca_crc32(0, "123456789", 9), 0xcbf43926u);
	/* Chaining across calls gives the same result as one call. */
	CU_ASSERT_EQUAL(hca_crc32(hca_crc32(0, "12345", 5), "6789", 4), 0xcbf43926u);
	CU_ASSERT_EQUAL(hca_crc32(0, "", 0), 0);
	CU_ASSERT_EQUAL(hca_crc32_tables(0, "123456789", 9), 0xcbf43926u);
}

/*
 * The carry-less-multiply path (taken for 64 bytes and more where the CPU
 * has it) agrees with the table method at every length up to 1 KiB, at
 * every alignment, from arbitrary starting values, and on 9000-byte runs.
 */
static void test_crc32_paths_agree(void)
{
	static uint8_t data[9000 + 16];
	int bad = 0;

	rng_state = 5;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)rnd();
	for (size_t n = 0; n <= 1024; n++) {
		size_t off = n % 16;
		uint32_t seed = (uint32_t)rnd();

		bad += hca_crc32(seed, data + off, n) !=
		       hca_crc32_tables(seed, data + off, n);
	}
	for (int i = 0; i < 200; i++) {
		size_t off = rnd_below(16), n = 9000 - rnd_below(64);

		bad += hca_crc32(i, data + off, n) != hca_crc32_tables(i, data + off, n);
	}
	CU_ASSERT_EQUAL(bad, 0);
}

/*
 * An RC SEND ONLY of "hello" (pad 3), P_Key 0xffff, DestQP 0x11, AckReq,
 * PSN 1, from 10.0.0.1:49152 to 10.0.0.2:4791, IP id 0.  The ICRC was
 * computed outside this code (Python's zlib.crc32 over eight 0xff bytes,
 * the IPv4+UDP headers with TOS, TTL, both checksums set to ones, BTH with
 * byte 4 set to 0xff, the payload and pad) and is stored LSB first.
 */
static void test_icrc_vector(void)
{
	static const uint8_t want[24] = {
		0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11,
		0x80, 0x00, 0x00, 0x01, 'h', 'e', 'l', 'l',
		'o', 0, 0, 0, 0x45, 0x51, 0x6d, 0x61,
	};
	struct hca_wire_hdr h = { .opcode = 0x04, .pkey = 0xffff, .dqpn = 0x11,
				  .psn = 1, .ackreq = true };
	uint8_t buf[64];

	CU_ASSERT_EQUAL(hca_wire_build(buf, sizeof(buf), &test_ip, &h, "hello", 5), 24);
	CU_ASSERT_EQUAL(memcmp(buf, want, sizeof(want)), 0);
	CU_ASSERT_EQUAL(hca_wire_icrc(&test_ip, buf, 24), 0x616d5145u);
}

/* Masked fields may change in flight; everything else is covered. */
static void test_icrc_masking(void)
{
	uint8_t buf[64], ip[HCA_IP4UDP_LEN], m[HCA_IP4UDP_LEN];
	size_t n = simple_packet(buf, sizeof(buf), 0x04, 8);
	uint32_t ref;
	static const int masked[] = { 1, 8, 10, 11, 26, 27 };  /* TOS TTL csum UDP-csum */
	static const int covered[] = { 0, 2, 3, 4, 5, 6, 7, 9, 12, 15, 16, 19,
				       20, 21, 22, 23, 24, 25 };

	hca_ip4udp_write(ip, &test_ip, n);
	ref = hca_wire_icrc_raw(ip, buf, n);
	CU_ASSERT_EQUAL(ref, hca_wire_icrc(&test_ip, buf, n));
	for (size_t i = 0; i < sizeof(masked) / sizeof(masked[0]); i++) {
		memcpy(m, ip, sizeof(m));
		m[masked[i]] ^= 0x5a;
		CU_ASSERT_EQUAL(hca_wire_icrc_raw(m, buf, n), ref);
	}
	for (size_t i = 0; i < sizeof(covered) / sizeof(covered[0]); i++) {
		memcpy(m, ip, sizeof(m));
		m[covered[i]] ^= 0x01;
		CU_ASSERT_NOT_EQUAL(hca_wire_icrc_raw(m, buf, n), ref);
	}
	/* A router decrementing TTL: the packet still parses. */
	memcpy(m, ip, sizeof(m));
	m[8] = 63;
	CU_ASSERT_EQUAL(hca_wire_icrc_raw(m, buf, n), ref);
	/* Congestion marks in BTH byte 4 are outside the ICRC too. */
	hca_bth_set_fecn(buf, true);
	hca_bth_set_becn(buf, true);
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &test_ip, NULL, NULL, NULL), HCA_WIRE_OK);
	/* But the address and ports are inside. */
	struct hca_ip4udp other = test_ip;
	other.sport++;
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &other, NULL, NULL, NULL), HCA_WIRE_EICRC);
	other = test_ip;
	other.daddr ^= 1;
	CU_ASSERT_EQUAL(hca_wire_parse(buf, n, &other, NULL, NULL, NULL), HCA_WIRE_EICRC);
}

/*
 * The ICRC against its definition, by tables alone, at every length the
 * short path (one padded run behind the headers) and the long path take:
 * CRC-32 over eight 0xFF bytes, the masked headers and the packet.
 */
static void test_icrc_definition(void)
{
	uint8_t ip[HCA_IP4UDP_LEN], pkt[720], ref[8 + HCA_IP4UDP_LEN + 720];
	uint32_t r = 12345;

	for (size_t len = HCA_BTH_LEN + HCA_ICRC_LEN; len <= sizeof(pkt); len++) {
		for (size_t i = 0; i < sizeof(ip); i++) {
			r = r * 1103515245u + 12345u;
			ip[i] = (uint8_t)(r >> 16);
		}
		for (size_t i = 0; i < len; i++) {
			r = r * 1103515245u + 12345u;
			pkt[i] = (uint8_t)(r >> 16);
		}
		memset(ref, 0xff, 8);
		memcpy(ref + 8, ip, sizeof(ip));
		memcpy(ref + 8 + sizeof(ip), pkt, len - HCA_ICRC_LEN);
		ref[8 + 1] = ref[8 + 8] = ref[8 + 10] = ref[8 + 11] = 0xff;
		ref[8 + 26] = ref[8 + 27] = ref[8 + HCA_IP4UDP_LEN + 4] = 0xff;
		CU_ASSERT_EQUAL(hca_wire_icrc_raw(ip, pkt, len),
				hca_crc32_tables(0, ref, 8 + sizeof(ip) + len - HCA_ICRC_LEN));
	}
}

/* Any single flipped bit outside BTH byte 4 is caught (CRC-32: always). */
static void test_icrc_every_bit(void)
{
	uint8_t buf[128];
	size_t n = simple_packet(buf, sizeof(buf), 0x0a, 37);

	for (size_t bit = 0; bit < n * 8; bit++) {
		int e;

		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		e = hca_wire_parse(buf, n, &test_ip, NULL, NULL, NULL);
		if (bit / 8 == 4) {
			CU_ASSERT_EQUAL(e, HCA_WIRE_OK);
		} else if (bit / 8 >= 28) {     /* payload, pad, ICRC */
			CU_ASSERT_EQUAL(e, HCA_WIRE_EICRC);
		} else {
			CU_ASSERT_NOT_EQUAL(e, HCA_WIRE_OK);
		}
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
}

/* ---- fuzz ---- */

/* One random damage to a copy of pkt; returns the new buffer (exact size). */
static uint8_t *mutate(const uint8_t *pkt, size_t len, size_t *out_len)
{
	size_t n = len;
	uint8_t *m;

	switch (rnd_below(6)) {
	case 0:                                 /* truncate */
		n = rnd_below(len + 1);
		break;
	case 1:                                 /* extend with junk */
		n = len + 1 + rnd_below(64);
		break;
	case 2:                                 /* pure garbage */
		n = rnd_below(200);
		break;
	}
	m = malloc(n ? n : 1);
	if (!m)
		return NULL;
	for (size_t i = 0; i < n; i++)
		m[i] = i < len ? pkt[i] : (uint8_t)rnd();
	if (n && rnd_below(6) == 2)
		for (size_t i = 0; i < n; i++)
			m[i] = (uint8_t)rnd();
	for (int k = (int)rnd_below(4); n && k >= 0; k--)   /* flip 1-4 bits */
		m[rnd_below(n)] ^= (uint8_t)(1u << rnd_below(8));
	if (n && rnd_below(4) == 0)
		m[0] = (uint8_t)rnd();                      /* any opcode */
	*out_len = n;
	return m;
}

static void test_fuzz_mutations(void)
{
	uint8_t payload[512];
	int accepted = 0, counts[HCA_WIRE_ERR_MAX] = { 0 };

	rng_state = 4;
	for (int it = 0; it < 5000; it++) {
		uint8_t op;
		size_t len, plen, mlen = 0, got;
		struct hca_wire_hdr h, out;
		const uint8_t *pl;
		uint8_t *pkt, *m;
		int e;

		do
			op = (uint8_t)rnd();
		while (!hca_wire_op(op));
		pkt = make_packet(op, &len, &h, payload, &plen);
		m = pkt ? mutate(pkt, len, &mlen) : NULL;
		CU_ASSERT_PTR_NOT_NULL_FATAL(m);
		/* Without the ICRC: structure alone; payload inside the buffer. */
		e = hca_wire_parse(m, mlen, NULL, &out, &pl, &got);
		CU_ASSERT(e >= 0 && e < HCA_WIRE_ERR_MAX);
		if (e == HCA_WIRE_OK) {
			CU_ASSERT(pl >= m && got <= mlen && pl + got <= m + mlen);
		}
		/*
		 * With it: only an undamaged packet gets through -- but BTH
		 * byte 4 (FECN, BECN) is outside the ICRC, as it should be.
		 */
		e = hca_wire_parse(m, mlen, &test_ip, &out, &pl, &got);
		CU_ASSERT(e >= 0 && e < HCA_WIRE_ERR_MAX);
		counts[e]++;
		if (e == HCA_WIRE_OK) {
			accepted++;
			CU_ASSERT(mlen == len && memcmp(m, pkt, 4) == 0 &&
				  memcmp(m + 5, pkt + 5, len - 5) == 0);
		}
		free(m);
		free(pkt);
	}
	/* The mutations reached every reason (sanity of the fuzz itself). */
	for (int e = 1; e < HCA_WIRE_ERR_MAX; e++)
		CU_ASSERT(counts[e] > 0);
	CU_ASSERT(accepted < 500);
}


static int add_suites(void)
{
	CU_pSuite w = CU_add_suite("hca_icrc", NULL, NULL);

	if (!w)
		return -1;
	if (!CU_add_test(w, "CRC-32 check value", test_crc32_check_value) ||
	    !CU_add_test(w, "CRC-32 fast path = tables", test_crc32_paths_agree) ||
	    !CU_add_test(w, "ICRC vector", test_icrc_vector) ||
	    !CU_add_test(w, "ICRC masked fields", test_icrc_masking) ||
	    !CU_add_test(w, "ICRC = its definition, every length", test_icrc_definition) ||
	    !CU_add_test(w, "ICRC catches every bit", test_icrc_every_bit) ||
	    !CU_add_test(w, "fuzz 5000 mutations", test_fuzz_mutations))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
