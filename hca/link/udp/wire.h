/*
 * The IB transport wire format of the UDP link, as data and accessors.
 *
 * A packet here is what RoCEv2 puts in a UDP datagram: BTH, the extension
 * headers its opcode carries, the payload, 0-3 pad bytes and the 4-byte
 * ICRC.  hca_wire_op() is the table, indexed by the 8-bit BTH opcode, that
 * says which headers a packet carries and where; builders and parsers walk
 * it instead of switching on opcodes.  Fields are read and written through
 * the accessors below on plain byte buffers, big-endian as on the wire, so
 * no packed struct or alignment assumption exists anywhere.
 *
 * Also here: the ICRC (the CRC-32 that RoCEv2 computes over the IP/UDP
 * pseudo-header with its variant fields masked; docs/wire.md says exactly
 * which bytes), and 24-bit PSN arithmetic.
 */
#ifndef HCA_WIRE_H
#define HCA_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hca_limits.h" /* HCA_QPN_MASK */

#define HCA_ROCE_PORT   4791       /* the RoCEv2 UDP destination port */
#define HCA_BTH_LEN     12
#define HCA_ICRC_LEN    4
#define HCA_IP4UDP_LEN  28         /* IPv4 header (no options) + UDP header */
#define HCA_PSN_MASK    0xffffffu

/* Top three bits of the opcode: the transport (IB spec's opcode table). */
enum hca_wire_transport {
	HCA_WT_RC  = 0x00,
	HCA_WT_UC  = 0x20,
	HCA_WT_RD  = 0x40,          /* not implemented: no rows */
	HCA_WT_UD  = 0x60,
	HCA_WT_XRC = 0xa0,
};

/* Low five bits: the operation, the same numbers in every transport. */
enum hca_wire_op {
	HCA_WOP_SEND_FIRST           = 0x00,
	HCA_WOP_SEND_MIDDLE          = 0x01,
	HCA_WOP_SEND_LAST            = 0x02,
	HCA_WOP_SEND_LAST_IMM        = 0x03,
	HCA_WOP_SEND_ONLY            = 0x04,
	HCA_WOP_SEND_ONLY_IMM        = 0x05,
	HCA_WOP_WRITE_FIRST          = 0x06,
	HCA_WOP_WRITE_MIDDLE         = 0x07,
	HCA_WOP_WRITE_LAST           = 0x08,
	HCA_WOP_WRITE_LAST_IMM       = 0x09,
	HCA_WOP_WRITE_ONLY           = 0x0a,
	HCA_WOP_WRITE_ONLY_IMM       = 0x0b,
	HCA_WOP_READ_REQUEST         = 0x0c,
	HCA_WOP_READ_RESPONSE_FIRST  = 0x0d,
	HCA_WOP_READ_RESPONSE_MIDDLE = 0x0e,
	HCA_WOP_READ_RESPONSE_LAST   = 0x0f,
	HCA_WOP_READ_RESPONSE_ONLY   = 0x10,
	HCA_WOP_ACKNOWLEDGE          = 0x11,
	HCA_WOP_ATOMIC_ACKNOWLEDGE   = 0x12,
	HCA_WOP_COMPARE_SWAP         = 0x13,
	HCA_WOP_FETCH_ADD            = 0x14,
};

#define HCA_WIRE_OPCODE(t, op) ((uint8_t)((t) | (op)))

/*
 * Extension headers, in the order they follow BTH when several are present
 * (DETH and XRCETH never meet: one is UD's, the other XRC's).
 */
enum hca_wire_ext {
	HCA_EXT_DETH,               /* Q_Key, source QP: UD */
	HCA_EXT_XRCETH,             /* XRC SRQ number: XRC requests */
	HCA_EXT_RETH,               /* VA, R_Key, DMA length: WRITE, READ */
	HCA_EXT_ATOMICETH,          /* VA, R_Key, swap/add, compare */
	HCA_EXT_AETH,               /* syndrome, MSN: ACKs, READ responses */
	HCA_EXT_ATOMICACKETH,       /* original remote data */
	HCA_EXT_IMMDT,              /* immediate data */
	HCA_EXT_MAX
};

#define HCA_EXT_BIT(e) (1u << (e))

#define HCA_DETH_LEN         8
#define HCA_XRCETH_LEN       4
#define HCA_RETH_LEN         16
#define HCA_ATOMICETH_LEN    28
#define HCA_AETH_LEN         4
#define HCA_ATOMICACKETH_LEN 8
#define HCA_IMMDT_LEN        4

/* Where a packet sits in its message; ONLY is FIRST and LAST at once. */
enum hca_wire_pos {
	HCA_POS_FIRST  = 1,
	HCA_POS_MIDDLE = 2,
	HCA_POS_LAST   = 4,
	HCA_POS_ONLY   = HCA_POS_FIRST | HCA_POS_LAST,
};

enum hca_wire_flags {
	HCA_WF_PAYLOAD  = 1 << 0,   /* may carry payload (and so a pad count) */
	HCA_WF_RESPONSE = 1 << 1,   /* responder to requester (ACK, READ data) */
};

/* One row of the opcode table. */
struct hca_wire_op_info {
	const char *name;           /* "RC_SEND_FIRST", ... */
	uint8_t exts;               /* HCA_EXT_BIT of each header carried */
	uint8_t off[HCA_EXT_MAX];   /* offset from BTH's first byte; 0: absent */
	uint8_t hdr_len;            /* BTH + every extension header */
	uint8_t pos;                /* enum hca_wire_pos */
	uint8_t flags;              /* enum hca_wire_flags */
};

/* The row of an opcode, NULL when softib does not know it. */
const struct hca_wire_op_info *hca_wire_op(uint8_t opcode);

/* ---- byte-order primitives (the wire is big-endian) ---- */

static inline uint32_t hca_get_be16(const uint8_t *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

static inline uint32_t hca_get_be24(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static inline uint32_t hca_get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | hca_get_be24(p + 1);
}

static inline uint64_t hca_get_be64(const uint8_t *p)
{
	return (uint64_t)hca_get_be32(p) << 32 | hca_get_be32(p + 4);
}

static inline void hca_put_be16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void hca_put_be24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16);
	hca_put_be16(p + 1, v);
}

static inline void hca_put_be32(uint8_t *p, uint32_t v)
{
	hca_put_be16(p, v >> 16);
	hca_put_be16(p + 2, v);
}

static inline void hca_put_be64(uint8_t *p, uint64_t v)
{
	hca_put_be32(p, (uint32_t)(v >> 32));
	hca_put_be32(p + 4, (uint32_t)v);
}

/* Sets the bits of *p selected by mask to v (v already shifted in place). */
static inline void hca_put_bits(uint8_t *p, uint8_t mask, uint8_t v)
{
	*p = (uint8_t)((*p & ~mask) | (v & mask));
}

/*
 * ---- BTH (12 bytes) ----
 *  0: OpCode
 *  1: SE(7) M(6) PadCnt(5:4) TVer(3:0)
 *  2: P_Key (16)
 *  4: F/FECN(7) B/BECN(6) reserved(5:0) -- RoCEv2's "resv8a", ICRC-masked
 *  5: DestQP (24)
 *  8: A(7) reserved(6:0)
 *  9: PSN (24)
 */
static inline uint8_t hca_bth_opcode(const uint8_t *b) { return b[0]; }
static inline bool hca_bth_se(const uint8_t *b) { return b[1] >> 7; }
static inline bool hca_bth_mig(const uint8_t *b) { return b[1] >> 6 & 1; }
static inline unsigned hca_bth_padcnt(const uint8_t *b) { return b[1] >> 4 & 3; }
static inline unsigned hca_bth_tver(const uint8_t *b) { return b[1] & 0xf; }
static inline uint16_t hca_bth_pkey(const uint8_t *b) { return (uint16_t)hca_get_be16(b + 2); }
static inline bool hca_bth_fecn(const uint8_t *b) { return b[4] >> 7; }
static inline bool hca_bth_becn(const uint8_t *b) { return b[4] >> 6 & 1; }
static inline uint32_t hca_bth_dqpn(const uint8_t *b) { return hca_get_be24(b + 5); }
static inline bool hca_bth_ackreq(const uint8_t *b) { return b[8] >> 7; }
static inline uint32_t hca_bth_psn(const uint8_t *b) { return hca_get_be24(b + 9); }

static inline void hca_bth_set_opcode(uint8_t *b, uint8_t v) { b[0] = v; }
static inline void hca_bth_set_se(uint8_t *b, bool v) { hca_put_bits(b + 1, 0x80, v ? 0x80 : 0); }
static inline void hca_bth_set_mig(uint8_t *b, bool v) { hca_put_bits(b + 1, 0x40, v ? 0x40 : 0); }
static inline void hca_bth_set_padcnt(uint8_t *b, unsigned v)
{
	hca_put_bits(b + 1, 0x30, (uint8_t)(v << 4));
}
static inline void hca_bth_set_tver(uint8_t *b, unsigned v)
{
	hca_put_bits(b + 1, 0x0f, (uint8_t)v);
}
static inline void hca_bth_set_pkey(uint8_t *b, uint16_t v) { hca_put_be16(b + 2, v); }
static inline void hca_bth_set_fecn(uint8_t *b, bool v) { hca_put_bits(b + 4, 0x80, v ? 0x80 : 0); }
static inline void hca_bth_set_becn(uint8_t *b, bool v) { hca_put_bits(b + 4, 0x40, v ? 0x40 : 0); }
static inline void hca_bth_set_dqpn(uint8_t *b, uint32_t v) { hca_put_be24(b + 5, v); }
static inline void hca_bth_set_ackreq(uint8_t *b, bool v)
{
	hca_put_bits(b + 8, 0x80, v ? 0x80 : 0);
}
static inline void hca_bth_set_psn(uint8_t *b, uint32_t v) { hca_put_be24(b + 9, v); }

/* ---- DETH (8): Q_Key (32), reserved (8), source QP (24) ---- */
static inline uint32_t hca_deth_qkey(const uint8_t *h) { return hca_get_be32(h); }
static inline uint32_t hca_deth_sqpn(const uint8_t *h) { return hca_get_be24(h + 5); }
static inline void hca_deth_set_qkey(uint8_t *h, uint32_t v) { hca_put_be32(h, v); }
static inline void hca_deth_set_sqpn(uint8_t *h, uint32_t v) { h[4] = 0; hca_put_be24(h + 5, v); }

/* ---- XRCETH (4): reserved (8), XRC SRQ number (24) ---- */
static inline uint32_t hca_xrceth_srqn(const uint8_t *h) { return hca_get_be24(h + 1); }
static inline void hca_xrceth_set_srqn(uint8_t *h, uint32_t v) { h[0] = 0; hca_put_be24(h + 1, v); }

/* ---- RETH (16): VA (64), R_Key (32), DMA length (32) ---- */
static inline uint64_t hca_reth_va(const uint8_t *h) { return hca_get_be64(h); }
static inline uint32_t hca_reth_rkey(const uint8_t *h) { return hca_get_be32(h + 8); }
static inline uint32_t hca_reth_dmalen(const uint8_t *h) { return hca_get_be32(h + 12); }
static inline void hca_reth_set_va(uint8_t *h, uint64_t v) { hca_put_be64(h, v); }
static inline void hca_reth_set_rkey(uint8_t *h, uint32_t v) { hca_put_be32(h + 8, v); }
static inline void hca_reth_set_dmalen(uint8_t *h, uint32_t v) { hca_put_be32(h + 12, v); }

/* ---- AtomicETH (28): VA (64), R_Key (32), swap/add (64), compare (64) ---- */
static inline uint64_t hca_atomiceth_va(const uint8_t *h) { return hca_get_be64(h); }
static inline uint32_t hca_atomiceth_rkey(const uint8_t *h) { return hca_get_be32(h + 8); }
static inline uint64_t hca_atomiceth_swap_add(const uint8_t *h) { return hca_get_be64(h + 12); }
static inline uint64_t hca_atomiceth_compare(const uint8_t *h) { return hca_get_be64(h + 20); }
static inline void hca_atomiceth_set_va(uint8_t *h, uint64_t v) { hca_put_be64(h, v); }
static inline void hca_atomiceth_set_rkey(uint8_t *h, uint32_t v) { hca_put_be32(h + 8, v); }
static inline void hca_atomiceth_set_swap_add(uint8_t *h, uint64_t v) { hca_put_be64(h + 12, v); }
static inline void hca_atomiceth_set_compare(uint8_t *h, uint64_t v) { hca_put_be64(h + 20, v); }

/* ---- AETH (4): syndrome (8), MSN (24) ---- */
static inline uint8_t hca_aeth_syndrome(const uint8_t *h) { return h[0]; }
static inline uint32_t hca_aeth_msn(const uint8_t *h) { return hca_get_be24(h + 1); }
static inline void hca_aeth_set_syndrome(uint8_t *h, uint8_t v) { h[0] = v; }
static inline void hca_aeth_set_msn(uint8_t *h, uint32_t v) { hca_put_be24(h + 1, v); }

/* ---- AtomicAckETH (8): original remote data (64) ---- */
static inline uint64_t hca_atomicacketh_orig(const uint8_t *h) { return hca_get_be64(h); }
static inline void hca_atomicacketh_set_orig(uint8_t *h, uint64_t v) { hca_put_be64(h, v); }

/* ---- ImmDt (4): the immediate data, as the 32 bits appear on the wire ---- */
static inline uint32_t hca_immdt_imm(const uint8_t *h) { return hca_get_be32(h); }
static inline void hca_immdt_set_imm(uint8_t *h, uint32_t v) { hca_put_be32(h, v); }

/*
 * The extension header `e` of the packet whose BTH starts at bth, or NULL
 * when its opcode does not carry it (or is unknown).  The caller has
 * checked the packet is at least the opcode's hdr_len long (parse does).
 */
const uint8_t *hca_wire_ext(const uint8_t *bth, enum hca_wire_ext e);

/*
 * ---- AETH syndrome ----
 * Bit 7 reserved; bits 6:5 the kind; bits 4:0 a credit count (ACK), the
 * RNR timer code (RNR NAK) or a NAK code.
 */
enum hca_aeth_kind {
	HCA_AETH_ACK     = 0,
	HCA_AETH_RNR_NAK = 1,
	HCA_AETH_NAK     = 3,
};

enum hca_nak_code {
	HCA_NAK_PSN_SEQ_ERR  = 0,   /* PSN sequence error: go back to MSN's PSN */
	HCA_NAK_INV_REQ      = 1,   /* invalid request */
	HCA_NAK_REM_ACCESS   = 2,   /* remote access error (rkey, bounds) */
	HCA_NAK_REM_OP       = 3,   /* remote operational error */
	HCA_NAK_INV_RD_REQ   = 4,   /* invalid RD request */
};

#define HCA_AETH_CREDIT_INVALID 0x1f   /* ACK: "no credit count given" */

static inline uint8_t hca_aeth_make(enum hca_aeth_kind k, unsigned value)
{
	return (uint8_t)(((unsigned)k & 3) << 5 | (value & 0x1f));
}

static inline enum hca_aeth_kind hca_aeth_kind(uint8_t syndrome)
{
	return (enum hca_aeth_kind)(syndrome >> 5 & 3);
}

static inline unsigned hca_aeth_value(uint8_t syndrome)
{
	return syndrome & 0x1f;
}

/*
 * ---- Whole packets ----
 * The fields of a packet as plain values.  Build reads the fields of the
 * headers the opcode carries and ignores the rest; parse writes those and
 * zeroes the rest.  24-bit fields are masked to 24 bits.
 */
struct hca_wire_hdr {
	uint8_t  opcode;
	bool     se, mig, ackreq;
	bool     fecn, becn;        /* congestion marks; outside the ICRC */
	uint8_t  padcnt;            /* parse output; build derives it */
	uint16_t pkey;
	uint32_t dqpn, psn;
	uint64_t va;                /* RETH or AtomicETH */
	uint32_t rkey;              /* RETH or AtomicETH */
	uint32_t dmalen;            /* RETH */
	uint8_t  syndrome;          /* AETH */
	uint32_t msn;               /* AETH */
	uint64_t swap_add, compare; /* AtomicETH */
	uint64_t orig;              /* AtomicAckETH */
	uint32_t qkey, sqpn;        /* DETH */
	uint32_t xrc_srqn;          /* XRCETH */
	uint32_t imm;               /* ImmDt: ntohl() of the verbs' imm_data */
};

/*
 * The IPv4 and UDP headers around a packet, as far as the ICRC covers them
 * and the pcap writer synthesises them.  Host byte order.  Everything else
 * in those headers is fixed (docs/wire.md): version 4, IHL 5, DF set, no
 * fragment offset, protocol UDP; lengths follow from the packet length.
 */
struct hca_ip4udp {
	uint32_t saddr, daddr;
	uint16_t sport, dport;      /* dport is HCA_ROCE_PORT for RoCEv2 */
	uint16_t ip_id;             /* IPv4 identification: softib sends 0 */
};

/* Why a packet was refused: the link counts drops per reason. */
enum hca_wire_err {
	HCA_WIRE_OK = 0,
	HCA_WIRE_ESHORT,            /* shorter than BTH + ICRC or its headers */
	HCA_WIRE_EVERSION,          /* BTH TVer is not 0 */
	HCA_WIRE_EOPCODE,           /* opcode not in the table */
	HCA_WIRE_ELENGTH,           /* not a multiple of 4, or payload where none goes */
	HCA_WIRE_EPAD,              /* pad count beyond the payload, or not on a last packet */
	HCA_WIRE_EICRC,             /* ICRC mismatch */
	HCA_WIRE_ERR_MAX
};

const char *hca_wire_strerror(int err);

/* Bytes a packet of this opcode with plen payload bytes takes; 0: unknown. */
size_t hca_wire_len(uint8_t opcode, size_t plen);

/*
 * Writes the whole packet (BTH, extension headers, payload, pad, ICRC)
 * into buf.  Returns its length, or 0 when the opcode is unknown, payload
 * is given to an opcode that carries none, a FIRST or MIDDLE payload is
 * not a multiple of 4 (it could not be padded), or cap is too small.
 */
size_t hca_wire_build(uint8_t *buf, size_t cap, const struct hca_ip4udp *ip,
		      const struct hca_wire_hdr *h, const void *payload, size_t len);

/*
 * The same in two steps, for a sender that gathers the payload itself:
 * put_hdrs writes the headers for a payload of plen bytes and returns
 * where the payload goes (0 on the errors of build); once plen bytes are
 * there, seal writes pad and ICRC and returns the packet's length.
 */
size_t hca_wire_put_hdrs(uint8_t *buf, size_t cap, const struct hca_wire_hdr *h,
			 size_t plen);
size_t hca_wire_seal(uint8_t *buf, const struct hca_ip4udp *ip, size_t hdr_len,
		     size_t plen);

/*
 * Checks a received packet and reads its fields.  Returns HCA_WIRE_OK or
 * the first hca_wire_err found, structural checks before the ICRC.  With
 * ip NULL the ICRC is not checked.  On success *h gets the fields and
 * *payload, *plen the payload without its pad; any of the three may be
 * NULL.
 */
int hca_wire_parse(const uint8_t *buf, size_t len, const struct hca_ip4udp *ip,
		   struct hca_wire_hdr *h, const uint8_t **payload, size_t *plen);

/* ---- ICRC ---- */

/*
 * Standard CRC-32 (Ethernet, zlib), chainable: start with crc = 0.  Uses
 * carry-less multiply where the CPU has it (SOFTIB_NO_CLMUL=1 forbids it);
 * hca_crc32_tables is the table method alone, for tests to compare.
 */
uint32_t hca_crc32(uint32_t crc, const void *p, size_t n);
uint32_t hca_crc32_tables(uint32_t crc, const void *p, size_t n);

/*
 * The ICRC of the packet bth[0 .. len) -- len counts the ICRC trailer
 * itself, which is not covered -- sent in the IPv4/UDP headers that ip
 * describes.  The trailer holds this value least significant byte first,
 * as Ethernet's FCS.
 */
uint32_t hca_wire_icrc(const struct hca_ip4udp *ip, const uint8_t *bth, size_t len);

/*
 * The same from real IPv4 (20 bytes, no options) and UDP headers as
 * captured (iphdr points at both, 28 bytes): TOS, TTL, both checksums and
 * BTH byte 4 are masked, so routers' changes to them do not matter.
 */
uint32_t hca_wire_icrc_raw(const uint8_t *iphdr, const uint8_t *bth, size_t len);

/*
 * Writes the IPv4 and UDP headers a packet of len bytes (BTH..ICRC) is
 * sent in: TOS 0, TTL 64, a valid header checksum, UDP checksum 0 (none,
 * which RoCEv2 allows over IPv4).
 */
void hca_ip4udp_write(uint8_t *out, const struct hca_ip4udp *ip, size_t len);

/*
 * ---- PSN arithmetic (24 bits, wrapping) ----
 * Two PSNs compare by the spec's half-window rule: a is after b when
 * (a - b) mod 2^24 lies in (0, 2^23); exactly 2^23 apart counts as before.
 */
static inline uint32_t hca_psn_add(uint32_t psn, int32_t delta)
{
	return (psn + (uint32_t)delta) & HCA_PSN_MASK;
}

/* a - b as a signed distance in [-2^23, 2^23). */
static inline int32_t hca_psn_diff(uint32_t a, uint32_t b)
{
	uint32_t d = (a - b) & HCA_PSN_MASK;

	return d & 0x800000u ? (int32_t)d - 0x1000000 : (int32_t)d;
}

/* <0, 0 or >0 as a is before, equal to or after b. */
static inline int hca_psn_cmp(uint32_t a, uint32_t b)
{
	int32_t d = hca_psn_diff(a, b);

	return (d > 0) - (d < 0);
}

#endif
