/*
 * wire_gen.c: packets for the wire-format suites (test_hca_wire.c,
 * test_hca_icrc.c): a private random generator, so that every run builds
 * and mutates the same way, random headers and payload lengths an opcode
 * accepts, and whole packets built with hca_wire_build.
 */
#include <stdlib.h>
#include <string.h>

#include "wire_gen.h"

const struct hca_ip4udp test_ip = {
	.saddr = 0x0a000001, .daddr = 0x0a000002,
	.sport = 49152, .dport = HCA_ROCE_PORT, .ip_id = 0,
};

/* A private generator so every run mutates the same way. */
uint64_t rng_state;

uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

size_t rnd_below(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

void random_hdr(struct hca_wire_hdr *h, uint8_t opcode)
{
	memset(h, 0, sizeof(*h));
	h->opcode = opcode;
	h->se = rnd() & 1;
	h->mig = rnd() & 1;
	h->ackreq = rnd() & 1;
	h->fecn = rnd() & 1;
	h->becn = rnd() & 1;
	h->pkey = (uint16_t)rnd();
	h->dqpn = (uint32_t)rnd() & HCA_QPN_MASK;
	h->psn = (uint32_t)rnd() & HCA_PSN_MASK;
	h->va = rnd();
	h->rkey = (uint32_t)rnd();
	h->dmalen = (uint32_t)rnd();
	h->syndrome = (uint8_t)rnd();
	h->msn = (uint32_t)rnd() & HCA_PSN_MASK;
	h->swap_add = rnd();
	h->compare = rnd();
	h->orig = rnd();
	h->qkey = (uint32_t)rnd();
	h->sqpn = (uint32_t)rnd() & HCA_QPN_MASK;
	h->xrc_srqn = (uint32_t)rnd() & HCA_QPN_MASK;
	h->imm = (uint32_t)rnd();
}

/* A payload length the opcode accepts: none, or any (aligned if not last). */
size_t random_plen(const struct hca_wire_op_info *r, size_t max)
{
	size_t n;

	if (!(r->flags & HCA_WF_PAYLOAD))
		return 0;
	n = rnd_below(max + 1);
	return (r->pos & HCA_POS_LAST) ? n : n & ~(size_t)3;
}

/* Builds a random valid packet of opcode into a malloc'd exact-size buffer. */
uint8_t *make_packet(uint8_t opcode, size_t *len, struct hca_wire_hdr *h,
			    uint8_t *payload, size_t *plen)
{
	const struct hca_wire_op_info *r = hca_wire_op(opcode);
	uint8_t *buf;

	random_hdr(h, opcode);
	*plen = random_plen(r, 300);
	for (size_t i = 0; i < *plen; i++)
		payload[i] = (uint8_t)rnd();
	*len = hca_wire_len(opcode, *plen);
	buf = malloc(*len);
	if (buf && hca_wire_build(buf, *len, &test_ip, h, payload, *plen) != *len) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Builds an RC SEND ONLY (or opcode) into buf, returns its length. */
size_t simple_packet(uint8_t *buf, size_t cap, uint8_t opcode, size_t plen)
{
	static const uint8_t data[64] = "0123456789abcdefghijklmnopqrstuvwxyz";
	struct hca_wire_hdr h = { .opcode = opcode, .pkey = 0xffff,
				  .dqpn = 0x11, .psn = 1, .ackreq = true };

	return hca_wire_build(buf, cap, &test_ip, &h, data, plen);
}
