/*
 * Packet capture: every packet the links send, written to a classic
 * libpcap file (LINKTYPE_ETHERNET) inside synthesised Ethernet, IPv4 and
 * UDP headers with destination port 4791, so that tshark and Wireshark
 * decode it as RoCEv2 / InfiniBand with no options.
 *
 * The file named by SOFTIB_PCAP is opened for appending, and each record
 * goes out in one write, so that every process of a run (both sides of a
 * pingpong) can share one capture file: the first opener writes the file
 * header.  "%p" in the name becomes the process id, for a file each.
 * Appends are thread-safe.
 */
#ifndef HCA_PCAP_H
#define HCA_PCAP_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define HCA_PCAP_SNAPLEN 262144u

struct hca_pcap;

/*
 * Opens (creating) path for appending records.  A new or empty file gets
 * the pcap file header; an existing one must start with the header this
 * writer writes (EINVAL otherwise: it never appends to a foreign file).
 * Returns 0 or an errno.
 */
int hca_pcap_open(const char *path, struct hca_pcap **out);

/* hca_pcap_open(SOFTIB_PCAP); 0 with *out NULL when it is unset or empty. */
int hca_pcap_open_env(struct hca_pcap **out);

/*
 * Appends one record: the packet bth[0 .. len) (BTH through ICRC), sent
 * in the IPv4/UDP headers ip describes, timestamped now.  0 or an errno.
 */
int hca_pcap_write(struct hca_pcap *pc, const struct hca_ip4udp *ip,
		   const uint8_t *bth, size_t len);

/* Records written (and failed) so far by this handle. */
void hca_pcap_counts(struct hca_pcap *pc, uint64_t *written, uint64_t *failed);

void hca_pcap_close(struct hca_pcap *pc);

#endif
