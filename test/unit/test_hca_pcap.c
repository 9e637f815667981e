/*
 * Unit tests of hca/pcap.[ch]: a capture read back byte by byte (file
 * header, record lengths, the synthesised Ethernet/IPv4/UDP headers with a
 * valid IPv4 checksum, the packet and its ICRC checked from the captured
 * headers); four threads and a second opener appending to one file;
 * SOFTIB_PCAP and its "%p"; refusal of a foreign file; and, when tshark is
 * installed, tshark -V decoding the capture as InfiniBand.
 */
#include "pcap.h"
#include "cu_run.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct hca_ip4udp test_ip = {
	.saddr = 0x0a000001, .daddr = 0x0a000002,
	.sport = 49152, .dport = HCA_ROCE_PORT, .ip_id = 0,
};

/* An RC packet of opcode with plen bytes of payload; returns its length. */
static size_t simple_packet(uint8_t *buf, size_t cap, uint8_t opcode, size_t plen)
{
	static const uint8_t data[64] = "0123456789abcdefghijklmnopqrstuvwxyz";
	struct hca_wire_hdr h = { .opcode = opcode, .pkey = 0xffff,
				  .dqpn = 0x11, .psn = 1, .ackreq = true };

	return hca_wire_build(buf, cap, &test_ip, &h, data, plen);
}

static char tmpdir[64];

static int pcap_suite_init(void)
{
	strcpy(tmpdir, "/tmp/test_hca_pcap.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int pcap_suite_clean(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0) {
		rewind(f);
		b = malloc((size_t)n + 1);
		if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
			free(b);
			b = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return b;
}

static uint32_t u32_at(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);               /* the writer's (our) byte order */
	return v;
}

/*
 * Walks the records after the header; checks each frame's Ethernet, IPv4
 * (checksum included) and UDP headers and that its ICRC verifies from the
 * captured headers.  Returns the number of records, -1 on a bad one.
 */
static int walk_records(const uint8_t *f, size_t len)
{
	size_t at = 24;
	int n = 0;

	while (at < len) {
		uint32_t cap, orig;
		const uint8_t *fr, *ip;
		uint32_t sum = 0;

		if (len - at < 16)
			return -1;
		cap = u32_at(f + at + 8);
		orig = u32_at(f + at + 12);
		fr = f + at + 16;
		ip = fr + 14;
		if (cap != orig || cap < 14 + 28 + 16 || len - at - 16 < cap)
			return -1;
		for (int i = 0; i < 20; i += 2)
			sum += hca_get_be16(ip + i);
		while (sum >> 16)
			sum = (sum & 0xffff) + (sum >> 16);
		if (hca_get_be16(fr + 12) != 0x0800 || ip[0] != 0x45 || ip[9] != 17 ||
		    sum != 0xffff || hca_get_be16(ip + 2) != cap - 14 ||
		    hca_get_be16(ip + 22) != HCA_ROCE_PORT ||
		    hca_get_be16(ip + 24) != cap - 14 - 20 ||
		    hca_get_be16(ip + 26) != 0)
			return -1;
		if (hca_wire_icrc_raw(ip, ip + 28, cap - 42) !=
		    (uint32_t)(ip[cap - 42 + 24] | ip[cap - 42 + 25] << 8 |
			       ip[cap - 42 + 26] << 16 | (uint32_t)ip[cap - 42 + 27] << 24))
			return -1;
		at += 16 + cap;
		n++;
	}
	return n;
}

static void check_global_header(const uint8_t *f, size_t len)
{
	CU_ASSERT_FATAL(len >= 24);
	CU_ASSERT_EQUAL(u32_at(f), 0xa1b2c3d4u);
	CU_ASSERT(f[4] + (f[5] << 8) == 2 || f[5] + (f[4] << 8) == 2);
	CU_ASSERT_EQUAL(u32_at(f + 16), HCA_PCAP_SNAPLEN);
	CU_ASSERT_EQUAL(u32_at(f + 20), 1);     /* LINKTYPE_ETHERNET */
}

static void test_pcap_readback(void)
{
	char path[128];
	struct hca_pcap *pc;
	uint8_t buf[128], *f;
	size_t n, flen = 0, sizes[3];
	uint64_t w, fl;

	snprintf(path, sizeof(path), "%s/readback.pcap", tmpdir);
	CU_ASSERT_EQUAL_FATAL(hca_pcap_open(path, &pc), 0);
	for (int i = 0; i < 3; i++) {
		n = simple_packet(buf, sizeof(buf), 0x04, (size_t)i * 7);
		sizes[i] = n;
		CU_ASSERT_EQUAL(hca_pcap_write(pc, &test_ip, buf, n), 0);
	}
	hca_pcap_counts(pc, &w, &fl);
	CU_ASSERT(w == 3 && fl == 0);
	hca_pcap_close(pc);
	f = read_file(path, &flen);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	check_global_header(f, flen);
	CU_ASSERT_EQUAL(walk_records(f, flen), 3);
	CU_ASSERT_EQUAL(flen, 24 + 3 * (16 + 42) + sizes[0] + sizes[1] + sizes[2]);
	/* The last record's frame ends with the packet as built. */
	CU_ASSERT_EQUAL(memcmp(f + flen - sizes[2], buf, sizes[2]), 0);
	free(f);
}

struct writer_arg {
	struct hca_pcap *pc;
	int id;
};

static void *writer(void *p)
{
	struct writer_arg *a = p;
	uint8_t buf[128];

	for (int i = 0; i < 200; i++) {
		size_t n = simple_packet(buf, sizeof(buf), 0x04, (size_t)(a->id + i) % 40);

		if (hca_pcap_write(a->pc, &test_ip, buf, n) != 0)
			return (void *)1;
	}
	return NULL;
}

/* Four threads on one handle, then a second opener appending to the file. */
static void test_pcap_threads_and_append(void)
{
	char path[128];
	struct hca_pcap *pc, *pc2;
	pthread_t t[4];
	struct writer_arg a[4];
	uint8_t buf[64], *f;
	size_t flen = 0;
	void *ret;

	snprintf(path, sizeof(path), "%s/threads.pcap", tmpdir);
	CU_ASSERT_EQUAL_FATAL(hca_pcap_open(path, &pc), 0);
	CU_ASSERT_EQUAL_FATAL(hca_pcap_open(path, &pc2), 0);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct writer_arg){ pc, i };
		CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, writer, &a[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], &ret);
		CU_ASSERT_PTR_NULL(ret);
	}
	CU_ASSERT_EQUAL(hca_pcap_write(pc2, &test_ip, buf,
				       simple_packet(buf, sizeof(buf), 0x11, 0)), 0);
	hca_pcap_close(pc);
	hca_pcap_close(pc2);
	f = read_file(path, &flen);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	check_global_header(f, flen);
	CU_ASSERT_EQUAL(walk_records(f, flen), 801);
	free(f);
}

static void test_pcap_env_and_errors(void)
{
	char path[128];
	struct hca_pcap *pc = (void *)1;
	FILE *fp;
	struct stat st;

	unsetenv("SOFTIB_PCAP");
	CU_ASSERT_EQUAL(hca_pcap_open_env(&pc), 0);
	CU_ASSERT_PTR_NULL(pc);
	snprintf(path, sizeof(path), "%s/env-%%p.pcap", tmpdir);
	setenv("SOFTIB_PCAP", path, 1);
	CU_ASSERT_EQUAL(hca_pcap_open_env(&pc), 0);
	CU_ASSERT_PTR_NOT_NULL(pc);
	hca_pcap_close(pc);
	unsetenv("SOFTIB_PCAP");
	snprintf(path, sizeof(path), "%s/env-%d.pcap", tmpdir, (int)getpid());
	CU_ASSERT_EQUAL(stat(path, &st), 0);    /* "%p" became the pid */
	CU_ASSERT_EQUAL(st.st_size, 24);

	/* Never appends to a file that is not one of ours. */
	snprintf(path, sizeof(path), "%s/foreign.txt", tmpdir);
	fp = fopen(path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
	fputs("not a capture, but long enough to hold a header\n", fp);
	fclose(fp);
	CU_ASSERT_EQUAL(hca_pcap_open(path, &pc), EINVAL);
	snprintf(path, sizeof(path), "%s/no/such/dir.pcap", tmpdir);
	CU_ASSERT_EQUAL(hca_pcap_open(path, &pc), ENOENT);
}

/* Reads all of a command's standard output into a malloc'd string. */
static char *run_capture(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	size_t cap = 1 << 16, n = 0, got;
	char *out = malloc(cap);

	if (!p || !out) {
		if (p)
			pclose(p);
		free(out);
		return NULL;
	}
	while ((got = fread(out + n, 1, cap - n - 1, p)) > 0) {
		n += got;
		if (cap - n < 2) {
			char *bigger = realloc(out, cap * 2);

			if (!bigger)
				break;
			out = bigger;
			cap *= 2;
		}
	}
	out[n] = 0;
	pclose(p);
	return out;
}

struct tshark_pkt {
	uint8_t opcode;
	size_t plen;
	const char *name;       /* what tshark -V prints for the opcode */
};

static const struct tshark_pkt tshark_pkts[] = {
	{ 0x04, 32, "Reliable Connection (RC) - SEND Only (4)" },
	{ 0x06, 1024, "Reliable Connection (RC) - RDMA WRITE First (6)" },
	{ 0x0c, 0, "Reliable Connection (RC) - RDMA READ Request (12)" },
	{ 0x11, 0, "Reliable Connection (RC) - Acknowledge (17)" },
	{ 0x13, 0, "Reliable Connection (RC) - CmpSwap (19)" },
	{ 0x12, 0, "Reliable Connection (RC) - ATOMIC Acknowledge (18)" },
	{ 0x25, 33, "Unreliable Connection (UC) - SEND Only with Immediate (37)" },
	{ 0x64, 40, "Unreliable Datagram (UD) - SEND only (100)" },
};

/*
 * tshark decodes the capture as InfiniBand: opcode names, QPN, PSN and the
 * extension headers.  Its RPC-over-RDMA heuristic mistakes short SEND
 * payloads for broken RPC messages, hence --disable-heuristic.
 */
static void test_pcap_tshark(void)
{
	const size_t np = sizeof(tshark_pkts) / sizeof(tshark_pkts[0]);
	char path[128], cmd[512], want[128];
	static uint8_t data[1024], buf[1200];
	struct hca_pcap *pc;
	char *out;

	if (system("command -v tshark >/dev/null 2>&1") != 0) {
		fprintf(stderr, "\n  tshark not installed: skipped\n");
		return;
	}
	snprintf(path, sizeof(path), "%s/tshark.pcap", tmpdir);
	CU_ASSERT_EQUAL_FATAL(hca_pcap_open(path, &pc), 0);
	for (size_t i = 0; i < np; i++) {
		struct hca_wire_hdr h = {
			.opcode = tshark_pkts[i].opcode, .pkey = 0xffff,
			.dqpn = 0x123456, .psn = 0xfffffe + (uint32_t)i,
			.va = 0x7f0000001000, .rkey = 0xabcd, .dmalen = 4096,
			.syndrome = 0x1f, .msn = 7, .qkey = 0x11111111,
			.sqpn = 0x42, .imm = 0xdeadbeef, .orig = 99,
		};
		size_t n;

		h.psn &= HCA_PSN_MASK;
		n = hca_wire_build(buf, sizeof(buf), &test_ip, &h, data,
				   tshark_pkts[i].plen);
		CU_ASSERT_FATAL(n > 0);
		CU_ASSERT_EQUAL(hca_pcap_write(pc, &test_ip, buf, n), 0);
	}
	hca_pcap_close(pc);
	snprintf(cmd, sizeof(cmd), "tshark -r '%s' -V --disable-heuristic "
		 "rpcrdma_infiniband 2>/dev/null", path);
	out = run_capture(cmd);
	CU_ASSERT_PTR_NOT_NULL_FATAL(out);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "InfiniBand"));
	CU_ASSERT_PTR_NULL(strstr(out, "Malformed"));
	for (size_t i = 0; i < np; i++) {
		CU_ASSERT_PTR_NOT_NULL(strstr(out, tshark_pkts[i].name));
		snprintf(want, sizeof(want), "Packet Sequence Number: %u",
			 (unsigned)((0xfffffe + i) & HCA_PSN_MASK));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	}
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "Destination Queue Pair: 0x123456"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "Virtual Address: 0x00007f0000001000"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "Source Queue Pair: 0x00000042"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "Message Sequence Number: 7"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "Original Remote Data: 99"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "Invariant CRC"));
	free(out);
}

static int add_suites(void)
{
	CU_pSuite p = CU_add_suite("hca_pcap", pcap_suite_init, pcap_suite_clean);

	if (!p)
		return -1;
	if (!CU_add_test(p, "read back", test_pcap_readback) ||
	    !CU_add_test(p, "threads and append", test_pcap_threads_and_append) ||
	    !CU_add_test(p, "env and errors", test_pcap_env_and_errors) ||
	    !CU_add_test(p, "tshark decodes it", test_pcap_tshark))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
