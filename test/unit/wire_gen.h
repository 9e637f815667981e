/*
 * wire_gen.h: packets for the wire-format suites (wire_gen.c).
 */
#ifndef WIRE_GEN_H
#define WIRE_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* The IPv4/UDP header every test packet's ICRC covers. */
extern const struct hca_ip4udp test_ip;

/* The generator's state: a test sets it to replay the same sequence. */
extern uint64_t rng_state;
uint64_t rnd(void);
size_t rnd_below(size_t n);

void random_hdr(struct hca_wire_hdr *h, uint8_t opcode);
/* A payload length the opcode accepts: none, or any (aligned if not last). */
size_t random_plen(const struct hca_wire_op_info *r, size_t max);
/* Builds a random valid packet of opcode into a malloc'd exact-size buffer. */
uint8_t *make_packet(uint8_t opcode, size_t *len, struct hca_wire_hdr *h,
		     uint8_t *payload, size_t *plen);
/* Builds an RC SEND ONLY (or opcode) into buf, returns its length. */
size_t simple_packet(uint8_t *buf, size_t cap, uint8_t opcode, size_t plen);

#endif
