/*
 * The wire format (see wire.h): the opcode table, packet build and parse
 * driven by it, the IPv4/UDP headers a packet travels in, and the ICRC.
 *
 * The table is one row per BTH opcode.  Rows are written once per family
 * of operations (sends, RDMA writes, reads/atomics/acks) and instantiated
 * per transport, because the IB spec numbers the operations identically
 * in RC, UC, UD and XRC and only the headers a transport adds differ
 * (DETH for UD, XRCETH on XRC requests).  Header offsets are computed at
 * compile time from the set of headers a row carries.
 */
#include "wire.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the opcode table ---- */

#define EXT_LEN(k)                                                  \
	((k) == HCA_EXT_DETH ? HCA_DETH_LEN :                       \
	 (k) == HCA_EXT_XRCETH ? HCA_XRCETH_LEN :                   \
	 (k) == HCA_EXT_RETH ? HCA_RETH_LEN :                       \
	 (k) == HCA_EXT_ATOMICETH ? HCA_ATOMICETH_LEN :             \
	 (k) == HCA_EXT_AETH ? HCA_AETH_LEN :                       \
	 (k) == HCA_EXT_ATOMICACKETH ? HCA_ATOMICACKETH_LEN :       \
	 HCA_IMMDT_LEN)

/* Length of header j if the row (mask m) carries it and it precedes k. */
#define LEN_BEFORE(m, j, k) (((j) < (k) && ((m) >> (j) & 1)) ? EXT_LEN(j) : 0)

/* Where header k would start: BTH plus every carried header before it. */
#define START(m, k)                                                 \
	(HCA_BTH_LEN + LEN_BEFORE(m, 0, k) + LEN_BEFORE(m, 1, k) +   \
	 LEN_BEFORE(m, 2, k) + LEN_BEFORE(m, 3, k) +                 \
	 LEN_BEFORE(m, 4, k) + LEN_BEFORE(m, 5, k) + LEN_BEFORE(m, 6, k))

#define OFF(m, k) (((m) >> (k) & 1) ? START(m, k) : 0)

#define ROW(nm, m, p, f)                                            \
	{ .name = nm, .exts = (m),                                  \
	  .off = { OFF(m, 0), OFF(m, 1), OFF(m, 2), OFF(m, 3),       \
		   OFF(m, 4), OFF(m, 5), OFF(m, 6) },                \
	  .hdr_len = START(m, HCA_EXT_MAX), .pos = (p), .flags = (f) }

#define X(e)   HCA_EXT_BIT(HCA_EXT_##e)
#define FIRST  HCA_POS_FIRST
#define MIDDLE HCA_POS_MIDDLE
#define LAST   HCA_POS_LAST
#define ONLY   HCA_POS_ONLY
#define PL     HCA_WF_PAYLOAD
#define RSP    HCA_WF_RESPONSE
#define AT(t, op) [(t) | HCA_WOP_##op]

/* SEND of transport T (prefix t); x: headers every request carries. */
#define SEND_ROWS(T, t, x)                                                      \
	AT(t, SEND_FIRST) = ROW(T "_SEND_FIRST", x, FIRST, PL),                 \
	AT(t, SEND_MIDDLE) = ROW(T "_SEND_MIDDLE", x, MIDDLE, PL),              \
	AT(t, SEND_LAST) = ROW(T "_SEND_LAST", x, LAST, PL),                    \
	AT(t, SEND_LAST_IMM) = ROW(T "_SEND_LAST_WITH_IMMEDIATE",               \
				   (x) | X(IMMDT), LAST, PL),                   \
	AT(t, SEND_ONLY) = ROW(T "_SEND_ONLY", x, ONLY, PL),                    \
	AT(t, SEND_ONLY_IMM) = ROW(T "_SEND_ONLY_WITH_IMMEDIATE",               \
				   (x) | X(IMMDT), ONLY, PL)

/* RDMA WRITE: the RETH rides on the first packet only. */
#define WRITE_ROWS(T, t, x)                                                     \
	AT(t, WRITE_FIRST) = ROW(T "_RDMA_WRITE_FIRST", (x) | X(RETH), FIRST, PL), \
	AT(t, WRITE_MIDDLE) = ROW(T "_RDMA_WRITE_MIDDLE", x, MIDDLE, PL),       \
	AT(t, WRITE_LAST) = ROW(T "_RDMA_WRITE_LAST", x, LAST, PL),             \
	AT(t, WRITE_LAST_IMM) = ROW(T "_RDMA_WRITE_LAST_WITH_IMMEDIATE",        \
				    (x) | X(IMMDT), LAST, PL),                  \
	AT(t, WRITE_ONLY) = ROW(T "_RDMA_WRITE_ONLY", (x) | X(RETH), ONLY, PL), \
	AT(t, WRITE_ONLY_IMM) = ROW(T "_RDMA_WRITE_ONLY_WITH_IMMEDIATE",        \
				    (x) | X(RETH) | X(IMMDT), ONLY, PL)

/*
 * Reliable-only operations.  Responses never carry XRCETH: the requester
 * knows its own QP, so x goes on requests only.  The middle READ response
 * carries no AETH, which is why it alone has no MSN.
 */
#define RELIABLE_ROWS(T, t, x)                                                  \
	AT(t, READ_REQUEST) = ROW(T "_RDMA_READ_REQUEST", (x) | X(RETH), ONLY, 0), \
	AT(t, READ_RESPONSE_FIRST) = ROW(T "_RDMA_READ_RESPONSE_FIRST",         \
					 X(AETH), FIRST, PL | RSP),             \
	AT(t, READ_RESPONSE_MIDDLE) = ROW(T "_RDMA_READ_RESPONSE_MIDDLE",       \
					  0, MIDDLE, PL | RSP),                 \
	AT(t, READ_RESPONSE_LAST) = ROW(T "_RDMA_READ_RESPONSE_LAST",           \
					X(AETH), LAST, PL | RSP),               \
	AT(t, READ_RESPONSE_ONLY) = ROW(T "_RDMA_READ_RESPONSE_ONLY",           \
					X(AETH), ONLY, PL | RSP),               \
	AT(t, ACKNOWLEDGE) = ROW(T "_ACKNOWLEDGE", X(AETH), ONLY, RSP),         \
	AT(t, ATOMIC_ACKNOWLEDGE) = ROW(T "_ATOMIC_ACKNOWLEDGE",                \
					X(AETH) | X(ATOMICACKETH), ONLY, RSP),  \
	AT(t, COMPARE_SWAP) = ROW(T "_COMPARE_SWAP", (x) | X(ATOMICETH), ONLY, 0), \
	AT(t, FETCH_ADD) = ROW(T "_FETCH_ADD", (x) | X(ATOMICETH), ONLY, 0)

static const struct hca_wire_op_info op_table[256] = {
	SEND_ROWS("RC", HCA_WT_RC, 0),
	WRITE_ROWS("RC", HCA_WT_RC, 0),
	RELIABLE_ROWS("RC", HCA_WT_RC, 0),
	SEND_ROWS("UC", HCA_WT_UC, 0),
	WRITE_ROWS("UC", HCA_WT_UC, 0),
	AT(HCA_WT_UD, SEND_ONLY) = ROW("UD_SEND_ONLY", X(DETH), ONLY, PL),
	AT(HCA_WT_UD, SEND_ONLY_IMM) = ROW("UD_SEND_ONLY_WITH_IMMEDIATE",
					   X(DETH) | X(IMMDT), ONLY, PL),
	SEND_ROWS("XRC", HCA_WT_XRC, X(XRCETH)),
	WRITE_ROWS("XRC", HCA_WT_XRC, X(XRCETH)),
	RELIABLE_ROWS("XRC", HCA_WT_XRC, X(XRCETH)),
};

const struct hca_wire_op_info *hca_wire_op(uint8_t opcode)
{
	const struct hca_wire_op_info *r = &op_table[opcode];

	return r->name ? r : NULL;
}

const uint8_t *hca_wire_ext(const uint8_t *bth, enum hca_wire_ext e)
{
	const struct hca_wire_op_info *r = hca_wire_op(hca_bth_opcode(bth));

	if (!r || (unsigned)e >= HCA_EXT_MAX || !(r->exts & HCA_EXT_BIT(e)))
		return NULL;
	return bth + r->off[e];
}

static const char *const err_names[HCA_WIRE_ERR_MAX] = {
	[HCA_WIRE_OK] = "ok",
	[HCA_WIRE_ESHORT] = "too short",
	[HCA_WIRE_EVERSION] = "bad transport version",
	[HCA_WIRE_EOPCODE] = "unknown opcode",
	[HCA_WIRE_ELENGTH] = "bad length",
	[HCA_WIRE_EPAD] = "bad pad count",
	[HCA_WIRE_EICRC] = "bad ICRC",
};

const char *hca_wire_strerror(int err)
{
	if (err < 0 || err >= HCA_WIRE_ERR_MAX)
		return "unknown error";
	return err_names[err];
}

/* ---- CRC-32 ---- */

/*
 * Reflected CRC-32 (polynomial 0x04C11DB7; bit i of a byte is the
 * coefficient of a higher power than bit i + 1).  Two ways to run it: a
 * table method, eight bytes per step through eight derived tables, for
 * short runs and CPUs without carry-less multiply; and folding with
 * PCLMULQDQ for long runs.  The UDP link checks every byte it receives,
 * and at ~0.7 GB/s the table method alone would cap its bandwidth.
 */
static uint32_t crc_tab[8][256];     /* [k][b]: byte b, then k zero bytes */
static uint32_t icrc_seed;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool use_clmul;

static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* Raw state update by tables: no inversion in or out. */
static uint32_t crc_update_tab(uint32_t c, const uint8_t *p, size_t n)
{
	for (; n >= 8; p += 8, n -= 8) {
		uint32_t lo = c ^ get_le32(p), hi = get_le32(p + 4);

		c = crc_tab[7][lo & 0xff] ^ crc_tab[6][lo >> 8 & 0xff] ^
		    crc_tab[5][lo >> 16 & 0xff] ^ crc_tab[4][lo >> 24] ^
		    crc_tab[3][hi & 0xff] ^ crc_tab[2][hi >> 8 & 0xff] ^
		    crc_tab[1][hi >> 16 & 0xff] ^ crc_tab[0][hi >> 24];
	}
	while (n--)
		c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xff];
	return c;
}

#if defined(__x86_64__)
#include <immintrin.h>

/*
 * Folding.  A 16-byte block loaded little-endian holds its first bit in
 * bit 0, and that bit is the block's x^127 coefficient; so the low 64-bit
 * lane is the high half H and the high lane the low half L of
 * A = H x^64 + L.  Moving A forward over d more bits keeps it the same
 * modulo P if it becomes H (x^(d+64) mod P) + L (x^d mod P): two 64x64
 * carry-less products, whose sum has under 96 bits.  In this bit order a
 * carry-less product comes out multiplied by x once more, so the constants
 * are x^(d+63) and x^(d-1) mod P.  Four accumulators 64 bytes apart hide
 * the multiplier's latency; they are folded into one at the end, and its
 * 16 bytes plus the tail finish through the tables, which is the same
 * remainder since A is congruent to the prefix it replaced.
 */
static uint64_t k128[2], k512[2];    /* {x^(d+63), x^(d-1)} mod P as lanes */

/* x^n mod P, then bit-reversed into a lane (x^63 in bit 0). */
static uint64_t xpow_lane(unsigned n)
{
	uint64_t r = 1, lane = 0;

	while (n--) {
		r <<= 1;
		if (r >> 32)
			r ^= 0x104c11db7ULL;
	}
	for (int d = 0; d < 32; d++)
		if (r >> d & 1)
			lane |= 1ULL << (63 - d);
	return lane;
}

__attribute__((target("pclmul,sse2")))
static inline __m128i fold(__m128i a, __m128i k, __m128i next)
{
	__m128i h = _mm_clmulepi64_si128(a, k, 0x00);
	__m128i l = _mm_clmulepi64_si128(a, k, 0x11);

	return _mm_xor_si128(_mm_xor_si128(h, l), next);
}

/* n >= 16; one accumulator below 64 bytes. */
__attribute__((target("pclmul,sse2")))
static uint32_t crc_update_clmul(uint32_t c, const uint8_t *p, size_t n)
{
	const __m128i *v = (const __m128i *)(const void *)p;
	__m128i k4 = _mm_set_epi64x((long long)k512[1], (long long)k512[0]);
	__m128i k1 = _mm_set_epi64x((long long)k128[1], (long long)k128[0]);
	__m128i x0 = _mm_xor_si128(_mm_loadu_si128(v), _mm_cvtsi32_si128((int)c));
	uint8_t last[16];

	if (n >= 64) {
		__m128i x1 = _mm_loadu_si128(v + 1), x2 = _mm_loadu_si128(v + 2);
		__m128i x3 = _mm_loadu_si128(v + 3);

		for (v += 4, n -= 64; n >= 64; v += 4, n -= 64) {
			x0 = fold(x0, k4, _mm_loadu_si128(v));
			x1 = fold(x1, k4, _mm_loadu_si128(v + 1));
			x2 = fold(x2, k4, _mm_loadu_si128(v + 2));
			x3 = fold(x3, k4, _mm_loadu_si128(v + 3));
		}
		x0 = fold(fold(fold(x0, k1, x1), k1, x2), k1, x3);
	} else {
		v++;
		n -= 16;
	}
	for (; n >= 16; v++, n -= 16)
		x0 = fold(x0, k1, _mm_loadu_si128(v));
	_mm_storeu_si128((__m128i *)(void *)last, x0);
	c = crc_update_tab(0, last, sizeof(last));
	return crc_update_tab(c, (const uint8_t *)v, n);
}

static void clmul_init(void)
{
	__builtin_cpu_init();
	use_clmul = __builtin_cpu_supports("pclmul") && !getenv("SOFTIB_NO_CLMUL");
	k128[0] = xpow_lane(128 + 63);
	k128[1] = xpow_lane(128 - 1);
	k512[0] = xpow_lane(512 + 63);
	k512[1] = xpow_lane(512 - 1);
}
#else
static uint32_t crc_update_clmul(uint32_t c, const uint8_t *p, size_t n)
{
	return crc_update_tab(c, p, n);
}

static void clmul_init(void)
{
}
#endif

/* Raw state update: no inversion in or out. */
static uint32_t crc_update(uint32_t c, const uint8_t *p, size_t n)
{
	if (use_clmul && n >= 32)
		return crc_update_clmul(c, p, n);
	return crc_update_tab(c, p, n);
}

static void crc_init(void)
{
	static const uint8_t lrh_ones[8] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;

		for (int i = 0; i < 8; i++)
			c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
		crc_tab[0][b] = c;
	}
	for (int k = 1; k < 8; k++)
		for (int b = 0; b < 256; b++)
			crc_tab[k][b] = (crc_tab[k - 1][b] >> 8) ^
					crc_tab[0][crc_tab[k - 1][b] & 0xff];
	clmul_init();
	/*
	 * The ICRC starts as if a 64-bit field of ones (InfiniBand's LRH,
	 * which RoCEv2 does not have) preceded the IP header.
	 */
	icrc_seed = crc_update_tab(0xffffffffu, lrh_ones, sizeof(lrh_ones));
}

uint32_t hca_crc32_tables(uint32_t crc, const void *p, size_t n)
{
	pthread_once(&crc_once, crc_init);
	return ~crc_update_tab(~crc, p, n);
}

uint32_t hca_crc32(uint32_t crc, const void *p, size_t n)
{
	pthread_once(&crc_once, crc_init);
	return ~crc_update(~crc, p, n);
}

/* ---- IPv4/UDP headers and the ICRC ---- */

#define HCA_ICRC_SHORT 256 /* packets copied whole for their ICRC */

/*
 * The header's 16-bit ones' complement sum, 32 bits at a time: the sum
 * of the words in memory order folds to the same 16 bits, byte-swapped
 * on a little-endian machine (RFC 1071's byte-order independence).
 */
static uint16_t ip_checksum(const uint8_t *h, size_t n)
{
	uint64_t sum = 0;
	uint32_t w;
	uint16_t r;

	for (size_t i = 0; i + 3 < n; i += 4) {
		memcpy(&w, h + i, 4);
		sum += w;
	}
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	r = (uint16_t)~sum;
	memcpy(&w, &(const uint8_t[4]){ (uint8_t)r, (uint8_t)(r >> 8) }, 4);
	return hca_get_be16((const uint8_t *)&w);
}

void hca_ip4udp_write(uint8_t *o, const struct hca_ip4udp *ip, size_t len)
{
	o[0] = 0x45;                            /* IPv4, 5-word header */
	o[1] = 0;                               /* TOS: DSCP 0, not ECT */
	hca_put_be16(o + 2, (uint32_t)(HCA_IP4UDP_LEN + len));
	hca_put_be16(o + 4, ip->ip_id);
	hca_put_be16(o + 6, 0x4000);            /* DF: the link never fragments */
	o[8] = 64;                              /* TTL */
	o[9] = 17;                              /* UDP */
	hca_put_be16(o + 10, 0);
	hca_put_be32(o + 12, ip->saddr);
	hca_put_be32(o + 16, ip->daddr);
	hca_put_be16(o + 10, ip_checksum(o, 20));
	hca_put_be16(o + 20, ip->sport);
	hca_put_be16(o + 22, ip->dport);
	hca_put_be16(o + 24, (uint32_t)(8 + len));
	hca_put_be16(o + 26, 0);                /* no UDP checksum */
}

/*
 * The headers as the ICRC sees them, written straight from ip: the
 * fields it masks come out as ones, and the IPv4 checksum (masked) is
 * never computed.
 */
static void ip4udp_masked(uint8_t *o, const struct hca_ip4udp *ip, size_t len)
{
	o[0] = 0x45;
	o[1] = 0xff;                            /* TOS */
	hca_put_be16(o + 2, (uint32_t)(HCA_IP4UDP_LEN + len));
	hca_put_be16(o + 4, ip->ip_id);
	hca_put_be16(o + 6, 0x4000);
	o[8] = 0xff;                            /* TTL */
	o[9] = 17;
	o[10] = o[11] = 0xff;                   /* IPv4 header checksum */
	hca_put_be32(o + 12, ip->saddr);
	hca_put_be32(o + 16, ip->daddr);
	hca_put_be16(o + 20, ip->sport);
	hca_put_be16(o + 22, ip->dport);
	hca_put_be16(o + 24, (uint32_t)(8 + len));
	o[26] = o[27] = 0xff;                   /* UDP checksum */
}

/*
 * The ICRC of a packet whose headers are iphdr (as sent), or, iphdr
 * NULL, those ip describes. A short packet is copied whole behind the
 * masked headers, as one run: the run starts with zeros up to a multiple
 * of 16 bytes and the seed XORed into its first four bytes of data (from
 * a zero state zeros leave it zero, and XORing the state into the next
 * four bytes is what an update does first), so the carry-less path takes
 * it from 32 bytes with no tail to finish byte by byte. Before, the
 * headers alone (40 bytes) and the bytes after went through the tables,
 * at a third of the instructions per byte.
 */
static uint32_t icrc(const uint8_t *iphdr, const struct hca_ip4udp *ip, const uint8_t *bth,
		     size_t len)
{
	uint8_t buf[16 + HCA_IP4UDP_LEN + HCA_ICRC_SHORT], *ps;
	size_t body = len - HCA_ICRC_LEN, head = HCA_BTH_LEN, pad = 0;
	uint32_t c, seed;

	if (len < HCA_BTH_LEN + HCA_ICRC_LEN)
		return 0;
	pthread_once(&crc_once, crc_init);
	if (body <= HCA_ICRC_SHORT) {
		head = body;
		pad = -(HCA_IP4UDP_LEN + head) & 15;
		memset(buf, 0, 16);
	}
	ps = buf + pad;
	if (iphdr) {
		memcpy(ps, iphdr, HCA_IP4UDP_LEN);
		ps[1] = 0xff;                   /* TOS */
		ps[8] = 0xff;                   /* TTL */
		ps[10] = ps[11] = 0xff;         /* IPv4 header checksum */
		ps[26] = ps[27] = 0xff;         /* UDP checksum */
	} else {
		ip4udp_masked(ps, ip, len);
	}
	memcpy(ps + HCA_IP4UDP_LEN, bth, head);
	ps[HCA_IP4UDP_LEN + 4] = 0xff;          /* BTH F, B, reserved */
	if (head < body) {
		c = crc_update(icrc_seed, ps, HCA_IP4UDP_LEN + head);
		return ~crc_update(c, bth + head, body - head);
	}
	seed = get_le32(ps) ^ icrc_seed;
	for (int i = 0; i < 4; i++)
		ps[i] = (uint8_t)(seed >> (8 * i));
	return ~crc_update(0, buf, pad + HCA_IP4UDP_LEN + head);
}

/*
 * RoCEv2's invariant CRC: CRC-32 over eight 0xFF bytes, the IPv4 and UDP
 * headers, then the packet up to the ICRC, with the fields that may change
 * in flight set to ones: IPv4 TOS (DSCP/ECN), TTL and header checksum, the
 * UDP checksum, and BTH byte 4 (FECN, BECN and reserved bits).
 */
uint32_t hca_wire_icrc_raw(const uint8_t *iphdr, const uint8_t *bth, size_t len)
{
	return icrc(iphdr, NULL, bth, len);
}

uint32_t hca_wire_icrc(const struct hca_ip4udp *ip, const uint8_t *bth, size_t len)
{
	return icrc(NULL, ip, bth, len);
}

/* ---- build ---- */

static unsigned pad_of(size_t plen)
{
	return (unsigned)(-plen & 3);
}

size_t hca_wire_len(uint8_t opcode, size_t plen)
{
	const struct hca_wire_op_info *r = hca_wire_op(opcode);

	if (!r)
		return 0;
	return r->hdr_len + plen + pad_of(plen) + HCA_ICRC_LEN;
}

static void put_bth(uint8_t *b, const struct hca_wire_hdr *h, unsigned pad)
{
	memset(b, 0, HCA_BTH_LEN);
	hca_bth_set_opcode(b, h->opcode);
	hca_bth_set_se(b, h->se);
	hca_bth_set_mig(b, h->mig);
	hca_bth_set_padcnt(b, pad);
	hca_bth_set_pkey(b, h->pkey);
	hca_bth_set_fecn(b, h->fecn);
	hca_bth_set_becn(b, h->becn);
	hca_bth_set_dqpn(b, h->dqpn & HCA_QPN_MASK);
	hca_bth_set_ackreq(b, h->ackreq);
	hca_bth_set_psn(b, h->psn & HCA_PSN_MASK);
}

/* Writes extension header e at p from *h: one case per header kind. */
static void put_ext(uint8_t *p, enum hca_wire_ext e, const struct hca_wire_hdr *h)
{
	switch (e) {
	case HCA_EXT_DETH:
		hca_deth_set_qkey(p, h->qkey);
		hca_deth_set_sqpn(p, h->sqpn & HCA_QPN_MASK);
		break;
	case HCA_EXT_XRCETH:
		hca_xrceth_set_srqn(p, h->xrc_srqn & HCA_QPN_MASK);
		break;
	case HCA_EXT_RETH:
		hca_reth_set_va(p, h->va);
		hca_reth_set_rkey(p, h->rkey);
		hca_reth_set_dmalen(p, h->dmalen);
		break;
	case HCA_EXT_ATOMICETH:
		hca_atomiceth_set_va(p, h->va);
		hca_atomiceth_set_rkey(p, h->rkey);
		hca_atomiceth_set_swap_add(p, h->swap_add);
		hca_atomiceth_set_compare(p, h->compare);
		break;
	case HCA_EXT_AETH:
		hca_aeth_set_syndrome(p, h->syndrome);
		hca_aeth_set_msn(p, h->msn & HCA_PSN_MASK);
		break;
	case HCA_EXT_ATOMICACKETH:
		hca_atomicacketh_set_orig(p, h->orig);
		break;
	case HCA_EXT_IMMDT:
		hca_immdt_set_imm(p, h->imm);
		break;
	case HCA_EXT_MAX:
		break;
	}
}

/* Reads extension header e at p into *h: the mirror of put_ext. */
static void get_ext(const uint8_t *p, enum hca_wire_ext e, struct hca_wire_hdr *h)
{
	switch (e) {
	case HCA_EXT_DETH:
		h->qkey = hca_deth_qkey(p);
		h->sqpn = hca_deth_sqpn(p);
		break;
	case HCA_EXT_XRCETH:
		h->xrc_srqn = hca_xrceth_srqn(p);
		break;
	case HCA_EXT_RETH:
		h->va = hca_reth_va(p);
		h->rkey = hca_reth_rkey(p);
		h->dmalen = hca_reth_dmalen(p);
		break;
	case HCA_EXT_ATOMICETH:
		h->va = hca_atomiceth_va(p);
		h->rkey = hca_atomiceth_rkey(p);
		h->swap_add = hca_atomiceth_swap_add(p);
		h->compare = hca_atomiceth_compare(p);
		break;
	case HCA_EXT_AETH:
		h->syndrome = hca_aeth_syndrome(p);
		h->msn = hca_aeth_msn(p);
		break;
	case HCA_EXT_ATOMICACKETH:
		h->orig = hca_atomicacketh_orig(p);
		break;
	case HCA_EXT_IMMDT:
		h->imm = hca_immdt_imm(p);
		break;
	case HCA_EXT_MAX:
		break;
	}
}

/*
 * Payload only where the opcode carries one; a FIRST or MIDDLE packet
 * carries a whole number of MTUs' worth, so it never needs padding (the
 * spec allows a pad count only on the last packet of a message).
 */
static bool payload_fits(const struct hca_wire_op_info *r, size_t plen)
{
	if (!(r->flags & HCA_WF_PAYLOAD))
		return plen == 0;
	return (r->pos & HCA_POS_LAST) || pad_of(plen) == 0;
}

size_t hca_wire_put_hdrs(uint8_t *buf, size_t cap, const struct hca_wire_hdr *h,
			 size_t plen)
{
	const struct hca_wire_op_info *r = hca_wire_op(h->opcode);

	if (!r || !payload_fits(r, plen) || cap < hca_wire_len(h->opcode, plen))
		return 0;
	put_bth(buf, h, pad_of(plen));
	for (int e = 0; e < HCA_EXT_MAX; e++)
		if (r->exts & HCA_EXT_BIT(e))
			put_ext(buf + r->off[e], (enum hca_wire_ext)e, h);
	return r->hdr_len;
}

size_t hca_wire_seal(uint8_t *buf, const struct hca_ip4udp *ip, size_t hdr_len,
		     size_t plen)
{
	size_t end = hdr_len + plen, pad = pad_of(plen);
	size_t len = end + pad + HCA_ICRC_LEN;
	uint32_t icrc;

	memset(buf + end, 0, pad);
	icrc = hca_wire_icrc(ip, buf, len);
	for (int i = 0; i < 4; i++)             /* least significant byte first */
		buf[end + pad + i] = (uint8_t)(icrc >> (8 * i));
	return len;
}

size_t hca_wire_build(uint8_t *buf, size_t cap, const struct hca_ip4udp *ip,
		      const struct hca_wire_hdr *h, const void *payload, size_t len)
{
	size_t hl = (payload || !len) ? hca_wire_put_hdrs(buf, cap, h, len) : 0;

	if (!hl)
		return 0;
	if (len)
		memcpy(buf + hl, payload, len);
	return hca_wire_seal(buf, ip, hl, len);
}

/* ---- parse ---- */

/* The structural checks, cheapest first; *raw gets payload + pad length. */
static int check_shape(const uint8_t *buf, size_t len,
		       const struct hca_wire_op_info **rp, size_t *raw)
{
	const struct hca_wire_op_info *r;
	unsigned pad;

	if (len < HCA_BTH_LEN + HCA_ICRC_LEN)
		return HCA_WIRE_ESHORT;
	if (hca_bth_tver(buf) != 0)
		return HCA_WIRE_EVERSION;
	r = hca_wire_op(hca_bth_opcode(buf));
	if (!r)
		return HCA_WIRE_EOPCODE;
	if (len < (size_t)r->hdr_len + HCA_ICRC_LEN)
		return HCA_WIRE_ESHORT;
	*raw = len - r->hdr_len - HCA_ICRC_LEN;
	if ((len & 3) || (*raw && !(r->flags & HCA_WF_PAYLOAD)))
		return HCA_WIRE_ELENGTH;
	pad = hca_bth_padcnt(buf);
	if (pad > *raw || (pad && !(r->pos & HCA_POS_LAST)))
		return HCA_WIRE_EPAD;
	*rp = r;
	return HCA_WIRE_OK;
}

static void read_fields(const uint8_t *buf, const struct hca_wire_op_info *r,
			struct hca_wire_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->opcode = hca_bth_opcode(buf);
	h->se = hca_bth_se(buf);
	h->mig = hca_bth_mig(buf);
	h->padcnt = (uint8_t)hca_bth_padcnt(buf);
	h->pkey = hca_bth_pkey(buf);
	h->fecn = hca_bth_fecn(buf);
	h->becn = hca_bth_becn(buf);
	h->dqpn = hca_bth_dqpn(buf);
	h->ackreq = hca_bth_ackreq(buf);
	h->psn = hca_bth_psn(buf);
	for (int e = 0; e < HCA_EXT_MAX; e++)
		if (r->exts & HCA_EXT_BIT(e))
			get_ext(buf + r->off[e], (enum hca_wire_ext)e, h);
}

int hca_wire_parse(const uint8_t *buf, size_t len, const struct hca_ip4udp *ip,
		   struct hca_wire_hdr *h, const uint8_t **payload, size_t *plen)
{
	const struct hca_wire_op_info *r = NULL;
	size_t raw = 0;
	int err = check_shape(buf, len, &r, &raw);

	if (err)
		return err;
	if (ip && hca_wire_icrc(ip, buf, len) != get_le32(buf + len - HCA_ICRC_LEN))
		return HCA_WIRE_EICRC;
	if (h)
		read_fields(buf, r, h);
	if (payload)
		*payload = buf + r->hdr_len;
	if (plen)
		*plen = raw - hca_bth_padcnt(buf);
	return HCA_WIRE_OK;
}
