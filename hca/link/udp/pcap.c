/*
 * The pcap writer (see pcap.h).  File format: a 24-byte global header
 * (magic 0xa1b2c3d4 in the writer's byte order, so readers learn the
 * order from it; version 2.4; microsecond timestamps; link type 1,
 * Ethernet), then per packet a 16-byte record header (seconds,
 * microseconds, captured length, original length) and the frame.
 */
#include "pcap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PCAP_MAGIC      0xa1b2c3d4u
#define LINKTYPE_ETHER  1
#define ETH_HLEN        14
#define GLOBAL_HDR_LEN  24
#define RECORD_HDR_LEN  16

struct hca_pcap {
	pthread_mutex_t lock;   /* orders this process's records by time */
	int fd;
	uint64_t written, failed;
};

struct global_hdr {
	uint32_t magic;
	uint16_t major, minor;
	int32_t thiszone;
	uint32_t sigfigs, snaplen, linktype;
};

static struct global_hdr our_header(void)
{
	struct global_hdr g = {
		.magic = PCAP_MAGIC, .major = 2, .minor = 4,
		.snaplen = HCA_PCAP_SNAPLEN, .linktype = LINKTYPE_ETHER,
	};
	return g;
}

/* Serialises the header field by field, in host order, with no padding. */
static void global_hdr_bytes(uint8_t *o, const struct global_hdr *g)
{
	memcpy(o, &g->magic, 4);
	memcpy(o + 4, &g->major, 2);
	memcpy(o + 6, &g->minor, 2);
	memcpy(o + 8, &g->thiszone, 4);
	memcpy(o + 12, &g->sigfigs, 4);
	memcpy(o + 16, &g->snaplen, 4);
	memcpy(o + 20, &g->linktype, 4);
}

/*
 * Under an exclusive flock (other processes may be opening the same file
 * now): an empty file gets our header, a non-empty one must have it.
 */
static int ensure_header(int fd)
{
	uint8_t want[GLOBAL_HDR_LEN], have[GLOBAL_HDR_LEN];
	struct global_hdr g = our_header();
	struct stat st;
	int err = 0;

	global_hdr_bytes(want, &g);
	if (flock(fd, LOCK_EX) != 0)
		return errno;
	if (fstat(fd, &st) != 0)
		err = errno;
	else if (st.st_size == 0)
		err = write(fd, want, sizeof(want)) == (ssize_t)sizeof(want) ? 0 : EIO;
	else if (pread(fd, have, sizeof(have), 0) != (ssize_t)sizeof(have) ||
		 memcmp(have, want, sizeof(want)) != 0)
		err = EINVAL;
	flock(fd, LOCK_UN);
	return err;
}

/* path with "%p" replaced by the process id; NULL on ENOMEM. */
static char *expand_path(const char *path)
{
	const char *p = strstr(path, "%p");
	char *out;

	if (!p)
		return strdup(path);
	if (asprintf(&out, "%.*s%d%s", (int)(p - path), path, (int)getpid(),
		     p + 2) < 0)
		return NULL;
	return out;
}

int hca_pcap_open(const char *path, struct hca_pcap **out)
{
	struct hca_pcap *pc = calloc(1, sizeof(*pc));
	char *name = expand_path(path);
	int err;

	if (!pc || !name) {
		err = ENOMEM;
		goto err_free;
	}
	pc->fd = open(name, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (pc->fd < 0) {
		err = errno;
		goto err_free;
	}
	err = ensure_header(pc->fd);
	if (err)
		goto err_close;
	err = pthread_mutex_init(&pc->lock, NULL);
	if (err)
		goto err_close;
	free(name);
	*out = pc;
	return 0;

err_close:
	close(pc->fd);
err_free:
	free(name);
	free(pc);
	return err;
}

int hca_pcap_open_env(struct hca_pcap **out)
{
	const char *path = getenv("SOFTIB_PCAP");

	*out = NULL;
	if (!path || !*path)
		return 0;
	return hca_pcap_open(path, out);
}

/*
 * Locally administered MAC addresses made from the IPv4 addresses, so
 * that a capture's conversations read the same at layer 2 and layer 3.
 */
static void eth_write(uint8_t *o, const struct hca_ip4udp *ip)
{
	o[0] = 0x02;
	o[1] = 0;
	hca_put_be32(o + 2, ip->daddr);
	o[6] = 0x02;
	o[7] = 0;
	hca_put_be32(o + 8, ip->saddr);
	hca_put_be16(o + 12, 0x0800);           /* IPv4 */
}

static void record_hdr(uint8_t *o, uint32_t caplen, uint32_t origlen)
{
	struct timespec ts;
	uint32_t sec, usec;

	clock_gettime(CLOCK_REALTIME, &ts);
	sec = (uint32_t)ts.tv_sec;
	usec = (uint32_t)(ts.tv_nsec / 1000);
	memcpy(o, &sec, 4);
	memcpy(o + 4, &usec, 4);
	memcpy(o + 8, &caplen, 4);
	memcpy(o + 12, &origlen, 4);
}

/*
 * One writev per record: with O_APPEND the kernel places it whole at the
 * end of the file, so records of several processes never interleave.
 */
int hca_pcap_write(struct hca_pcap *pc, const struct hca_ip4udp *ip,
		   const uint8_t *bth, size_t len)
{
	uint8_t rec[RECORD_HDR_LEN], hdrs[ETH_HLEN + HCA_IP4UDP_LEN];
	size_t frame = sizeof(hdrs) + len;
	size_t cap = frame < HCA_PCAP_SNAPLEN ? frame : HCA_PCAP_SNAPLEN;
	struct iovec iov[3] = {
		{ rec, sizeof(rec) }, { hdrs, sizeof(hdrs) },
		{ (void *)bth, cap - sizeof(hdrs) },
	};
	ssize_t n;
	int err;

	eth_write(hdrs, ip);
	hca_ip4udp_write(hdrs + ETH_HLEN, ip, len);
	pthread_mutex_lock(&pc->lock);
	record_hdr(rec, (uint32_t)cap, (uint32_t)frame);
	n = writev(pc->fd, iov, 3);
	err = n == (ssize_t)(sizeof(rec) + cap) ? 0 : n < 0 ? errno : EIO;
	if (err)
		pc->failed++;
	else
		pc->written++;
	pthread_mutex_unlock(&pc->lock);
	return err;
}

void hca_pcap_counts(struct hca_pcap *pc, uint64_t *written, uint64_t *failed)
{
	pthread_mutex_lock(&pc->lock);
	*written = pc->written;
	*failed = pc->failed;
	pthread_mutex_unlock(&pc->lock);
}

void hca_pcap_close(struct hca_pcap *pc)
{
	if (!pc)
		return;
	close(pc->fd);
	pthread_mutex_destroy(&pc->lock);
	free(pc);
}
