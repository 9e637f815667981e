/*
 * rcache_reuse: the sequences that break naive registration caches, run
 * between two processes over softib with registrations taken from the
 * cache (transport/rcache.c).
 *
 *   rcache_reuse [-o send|write|read] [-s BYTES] [-d DEVICE]
 *
 * The parent (the sender) owns the cache and the buffers; the child (the
 * receiver) has one registered buffer. They connect RC QPs over a
 * socketpair made before the fork. Each transfer moves a buffer of the
 * sender to the receiver — SEND into a posted receive, RDMA WRITE, or
 * RDMA READ by the receiver through the rkey of the cached registration
 * (the rendezvous case) — and the receiver checks every byte against the
 * pattern the sender says it wrote.
 *
 * Each scenario transfers a buffer, releases the memory under it in one
 * way (free of a large block, munmap, mmap MAP_FIXED over it, mremap away,
 * madvise DONTNEED / FREE, glibc's heap trim, sbrk shrink, shmdt), puts
 * new memory with different contents at the same address, and transfers
 * again. It passes when the receiver gets the NEW contents, and — the part
 * that matters on a real HCA, where the old registration would still pin
 * and read the old pages while softib reads memory by address — when the
 * cache's view shows it: the second transfer used a new registration (a
 * new serial) and the invalidation counter moved. With SIB_RCACHE=off the
 * cache registers per use and only the contents are checked.
 *
 * Built with ASan, the two malloc/free scenarios are skipped (ASan's
 * allocator bypasses libc); test_rcache.sh runs the plain build.
 *
 * Prints one line per scenario, the cache's counters, then PASSED; exits
 * non-zero on the first failure.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <malloc.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rcache.h"
#include "tp_common.h"

/* the longest the other side may stay silent on the control socket */
#define PEER_SECS 30

enum op { OP_SEND, OP_WRITE, OP_READ };

static struct {
	enum op op;
	size_t len;
	const char *dev;
} O = {OP_SEND, 4 << 20, NULL};

const char *tp_who = "rcache_reuse";

/* What the sides tell each other on the socketpair. */
struct info {
	uint32_t qpn, psn, rkey;
	uint16_t lid;
	uint8_t gid[16];
	uint64_t addr;
};

struct xfer_req {
	uint64_t addr;  /* READ: the sender's buffer */
	uint64_t len;
	uint32_t rkey;  /* READ: its rkey */
	uint32_t seed;  /* the pattern; 0: the receiver is to exit */
};

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_mr *mr;  /* the receiver's buffer */
	uint8_t *buf;
	size_t buflen;
	struct info peer;
};

static uint8_t pattern(uint32_t seed, size_t i)
{
	return (uint8_t)(seed * 0x9e37u + i * 131u + (i >> 9) + (i >> 17));
}

static void fill(void *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		((uint8_t *)p)[i] = pattern(seed, i);
}

static void open_side(struct side *s, size_t buflen)
{
	struct ibv_device **list;
	int n, i, err;

	list = ibv_get_device_list(&n);
	if (!list || n == 0)
		tp_die("no RDMA device (is build/lib the libibverbs in use?)");
	for (i = 0; O.dev && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), O.dev))
			break;
	if (i == n)
		tp_die("no device %s", O.dev);
	s->ctx = ibv_open_device(list[O.dev ? i : 0]);
	if (!s->ctx)
		tp_die("ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	if ((err = ibv_query_port(s->ctx, 1, &s->port)))
		tp_die("ibv_query_port: %s", strerror(err));
	if ((err = ibv_query_gid(s->ctx, 1, 0, &s->gid)))
		tp_die("ibv_query_gid: %s", strerror(err));
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = s->pd ? ibv_create_cq(s->ctx, 64, NULL, NULL, 0) : NULL;
	if (!s->cq)
		tp_die("ibv_alloc_pd/create_cq: %s", strerror(errno));
	if (buflen) {
		s->buflen = buflen;
		s->buf = mmap(NULL, buflen, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (s->buf == MAP_FAILED)
			tp_die("mmap: %s", strerror(errno));
		s->mr = ibv_reg_mr(s->pd, s->buf, buflen,
				   IBV_ACCESS_LOCAL_WRITE |
					   IBV_ACCESS_REMOTE_WRITE);
		if (!s->mr)
			tp_die("ibv_reg_mr: %s", strerror(errno));
	}
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16,
			.max_send_sge = 1, .max_recv_sge = 1}};

	s->qp = ibv_create_qp(s->pd, &ia);
	if (!s->qp)
		tp_die("ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						   IBV_ACCESS_REMOTE_READ};

	if ((err = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				 IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		tp_die("ibv_modify_qp to INIT: %s", strerror(err));
}

static void connect_side(struct side *s, int fd, uint32_t psn)
{
	struct info me = {.qpn = s->qp->qp_num, .lid = s->port.lid,
			  .psn = psn, .rkey = s->mr ? s->mr->rkey : 0,
			  .addr = (uintptr_t)s->buf};
	struct ibv_qp_attr a;
	int err;

	memcpy(me.gid, s->gid.raw, 16);
	tp_xfer(fd, &me, sizeof(me), true, PEER_SECS);
	tp_xfer(fd, &s->peer, sizeof(s->peer), false, PEER_SECS);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = s->port.active_mtu;
	a.dest_qp_num = s->peer.qpn;
	a.rq_psn = s->peer.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = s->peer.lid;
	a.ah_attr.port_num = 1;
	if (s->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, s->peer.gid, 16);
		a.ah_attr.grh.hop_limit = 1;
	}
	if ((err = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV |
				 IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				 IBV_QP_MIN_RNR_TIMER)))
		tp_die("ibv_modify_qp to RTR: %s", strerror(err));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 17; /* 0.5 s: a loaded 2-core machine, UDP */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	if ((err = ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		tp_die("ibv_modify_qp to RTS: %s", strerror(err));
}

static void wait_wc(struct side *s, const char *what)
{
	struct ibv_wc wc;
	int spins = 0;

	for (;;) {
		int n = ibv_poll_cq(s->cq, 1, &wc);

		if (n < 0)
			tp_die("ibv_poll_cq: %d", n);
		if (n == 1)
			break;
		if (++spins % 1024 == 0)
			usleep(50);
		if (spins > 200000000)
			tp_die("%s: no completion", what);
	}
	if (wc.status != IBV_WC_SUCCESS)
		tp_die("%s: completion %s", what, ibv_wc_status_str(wc.status));
}

static void post(struct side *s, enum ibv_wr_opcode opc, void *laddr,
		 uint32_t lkey, size_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)laddr, .length = len,
			      .lkey = lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
				 .opcode = opc,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	int err = ibv_post_send(s->qp, &wr, &bad);

	if (err)
		tp_die("ibv_post_send: %s", strerror(err));
}

/* ---- the receiver ---- */

static void receiver(int fd)
{
	struct side s = {0};
	struct xfer_req rq;

	tp_who = "rcache_reuse receiver";
	open_side(&s, 2 * O.len);
	connect_side(&s, fd, 0x2222);
	for (;;) {
		tp_xfer(fd, &rq, sizeof(rq), false, PEER_SECS);
		if (rq.seed == 0)
			break;
		if (rq.len > s.buflen)
			tp_die("transfer of %llu bytes", (unsigned long long)rq.len);
		if (O.op == OP_SEND) {
			struct ibv_sge sge = {.addr = (uintptr_t)s.buf,
					      .length = rq.len,
					      .lkey = s.mr->lkey};
			struct ibv_recv_wr wr = {.sg_list = &sge,
						 .num_sge = 1},
					   *bad;

			if (ibv_post_recv(s.qp, &wr, &bad))
				tp_die("ibv_post_recv");
			tp_xfer(fd, &rq.seed, sizeof(rq.seed), true, PEER_SECS); /* posted */
			wait_wc(&s, "receive");
		} else if (O.op == OP_READ) {
			post(&s, IBV_WR_RDMA_READ, s.buf, s.mr->lkey, rq.len,
			     rq.addr, rq.rkey);
			wait_wc(&s, "RDMA READ");
		} else {
			/* WRITE: the sender waited for its completion. */
		}
		int64_t bad_at = -1;

		for (size_t i = 0; i < rq.len; i++) {
			if (s.buf[i] != pattern(rq.seed, i)) {
				bad_at = (int64_t)i;
				break;
			}
		}
		memset(s.buf, 0, rq.len); /* nothing left for the next one */
		tp_xfer(fd, &bad_at, sizeof(bad_at), true, PEER_SECS);
	}
	exit(0);
}

/* ---- the sender ---- */

static struct side S;
static struct sib_rcache *C;
static bool caching;
static int sock;
static uint32_t next_seed = 1;

struct used {
	uint64_t serial;
	uint32_t lkey, rkey;
};

/* Fills [p, p + len) with a fresh pattern and moves it to the receiver
 * through a registration of the cache; dies unless every byte arrived. */
static struct used transfer(const char *scen, void *p, size_t len)
{
	uint32_t seed = next_seed++;
	struct xfer_req rq = {.addr = (uintptr_t)p, .len = len, .seed = seed};
	struct ibv_mr *mr;
	struct sib_rcache_entry *e;
	int64_t bad_at;

	fill(p, len, seed);
	e = sib_rcache_get(C, p, len, IBV_ACCESS_LOCAL_WRITE |
			   IBV_ACCESS_REMOTE_READ, &mr);
	if (!e)
		tp_die("%s: sib_rcache_get: %s", scen, strerror(errno));
	rq.rkey = mr->rkey;
	if (O.op == OP_SEND) {
		tp_xfer(sock, &rq, sizeof(rq), true, PEER_SECS);
		tp_xfer(sock, &seed, sizeof(seed), false, PEER_SECS); /* receive posted */
		post(&S, IBV_WR_SEND, p, mr->lkey, len, 0, 0);
		wait_wc(&S, "SEND");
	} else if (O.op == OP_WRITE) {
		post(&S, IBV_WR_RDMA_WRITE, p, mr->lkey, len, S.peer.addr,
		     S.peer.rkey);
		wait_wc(&S, "RDMA WRITE");
		tp_xfer(sock, &rq, sizeof(rq), true, PEER_SECS);
	} else {
		tp_xfer(sock, &rq, sizeof(rq), true, PEER_SECS);
	}
	tp_xfer(sock, &bad_at, sizeof(bad_at), false, PEER_SECS);
	struct used u = {sib_rcache_entry_serial(e), mr->lkey, mr->rkey};

	sib_rcache_put(C, e);
	if (bad_at >= 0)
		tp_die("FAIL %s: the receiver saw wrong data at offset %lld of "
		    "%zu (stale registration?)", scen, (long long)bad_at, len);
	return u;
}

static uint64_t invalidations(void)
{
	struct sib_rcache_stats st;

	sib_rcache_stats(C, &st);
	return st.invalidations;
}

/* The checks after "release, new memory at the same place, transfer". */
static void verdict(const char *scen, uintptr_t a, uintptr_t b,
		    struct used u1, struct used u2, uint64_t inv0)
{
	uint64_t inv = invalidations() - inv0;

	if (a != b)
		tp_die("FAIL %s: the new memory is at %#lx, not at %#lx as the "
		    "scenario needs", scen, (unsigned long)b, (unsigned long)a);
	if (caching && u1.serial == u2.serial)
		tp_die("FAIL %s: the second transfer used the old registration "
		    "(serial %llu): stale on a real HCA", scen,
		    (unsigned long long)u1.serial);
	if (caching && inv == 0)
		tp_die("FAIL %s: the cache saw no invalidation", scen);
	printf("%-26s ok: new contents delivered, same address, registration "
	       "%llu -> %llu, lkey %#x -> %#x, rkey %#x -> %#x, "
	       "invalidations +%llu\n", scen, (unsigned long long)u1.serial,
	       (unsigned long long)u2.serial, u1.lkey, u2.lkey, u1.rkey,
	       u2.rkey, (unsigned long long)inv);
}

static void *map_at(void *at, size_t len)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1,
		       0);

	if (p == MAP_FAILED)
		tp_die("mmap: %s", strerror(errno));
	return p;
}

/* A cached buffer sent twice unchanged in place: one registration. */
static void scen_hit(size_t len)
{
	char *p = map_at(NULL, len);
	struct used u1 = transfer("hit", p, len);
	struct used u2 = transfer("hit", p, len);

	if (caching && u1.serial != u2.serial)
		tp_die("FAIL hit: the same buffer was registered twice");
	printf("%-26s ok: registration %llu used twice\n", "hit (same buffer)",
	       (unsigned long long)u2.serial);
	munmap(p, len);
}

/* glibc serves a large block with mmap and free() unmaps it (from inside
 * libc, no PLT): malloc of the same size then lands at the same place. */
static __attribute__((unused)) void scen_free_malloc(size_t len)
{
	char *a = malloc(len);

	if (!a)
		tp_die("malloc");
	struct used u1 = transfer("free + malloc", a, len);
	uint64_t inv0 = invalidations();

	uintptr_t old = (uintptr_t)a;

	free(a);
	char *b = malloc(len);

	if (!b)
		tp_die("malloc");
	verdict("free + malloc", old, (uintptr_t)b, u1,
		transfer("free + malloc", b, len), inv0);
	free(b);
}

static void scen_munmap_mmap_fixed(size_t len)
{
	char *a = map_at(NULL, len);
	struct used u1 = transfer("munmap + mmap MAP_FIXED", a, len);
	uint64_t inv0 = invalidations();

	munmap(a, len);
	char *b = map_at(a, len);

	verdict("munmap + mmap MAP_FIXED", (uintptr_t)a, (uintptr_t)b, u1,
		transfer("munmap + mmap MAP_FIXED", b, len), inv0);
	munmap(b, len);
}

/* MAP_FIXED over a live mapping replaces it without any munmap. */
static void scen_mmap_fixed_over(size_t len)
{
	char *a = map_at(NULL, len);
	struct used u1 = transfer("mmap MAP_FIXED over", a, len);
	uint64_t inv0 = invalidations();
	char *b = map_at(a, len);

	verdict("mmap MAP_FIXED over", (uintptr_t)a, (uintptr_t)b, u1,
		transfer("mmap MAP_FIXED over", b, len), inv0);
	munmap(b, len);
}

/* mremap moves the pages elsewhere; new pages are mapped where they were.
 * The moved pages keep their old contents at the new place. */
static void scen_mremap(size_t len)
{
	char *a = map_at(NULL, len);
	char *dst = map_at(NULL, len);
	struct used u1 = transfer("mremap away", a, len);
	uint64_t inv0 = invalidations();
	char *moved = mremap(a, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst);

	if (moved != dst)
		tp_die("mremap: %s", strerror(errno));
	char *b = map_at(a, len);

	verdict("mremap away + mmap", (uintptr_t)a, (uintptr_t)b, u1,
		transfer("mremap away + mmap", b, len), inv0);
	transfer("mremap: the moved pages", moved, len);
	munmap(b, len);
	munmap(moved, len);
}

/* madvise DONTNEED / FREE: the range stays mapped but its pages go; the
 * next write gets new ones. */
static void scen_madvise(size_t len, int advice, const char *scen)
{
	char *a = map_at(NULL, len);
	struct used u1 = transfer(scen, a, len);
	uint64_t inv0 = invalidations();

	if (madvise(a, len, advice))
		tp_die("madvise: %s", strerror(errno));
	verdict(scen, (uintptr_t)a, (uintptr_t)a, u1, transfer(scen, a, len),
		inv0);
	munmap(a, len);
}

/* A block of the main heap freed at its top: glibc trims the heap with
 * sbrk (a negative increment, brk inside libc); malloc gets it back. */
static __attribute__((unused)) void scen_heap_trim(size_t len)
{
	mallopt(M_MMAP_THRESHOLD, 32 << 20); /* from the heap this time */
	mallopt(M_TRIM_THRESHOLD, 64 << 10);
	mallopt(M_TOP_PAD, 0);
	/* The block must stay the top of the heap: the small allocations
	 * made meanwhile (the cache's entries, the library's MR handles)
	 * are served from a free chunk kept below it, held apart from the
	 * top by a guard block. */
	char *pool = malloc(256 << 10), *guard = malloc(64);

	free(pool);
	char *a = malloc(len);

	if (!a)
		tp_die("malloc");
	struct used u1 = transfer("free + malloc (heap trim)", a, len);
	uint64_t inv0 = invalidations();
	void *brk0 = sbrk(0);

	uintptr_t old = (uintptr_t)a;

	free(a);
	/* glibc trims when the block was the top of the heap and the top
	 * exceeds M_TRIM_THRESHOLD; when some allocation ended up above it
	 * after all, malloc_trim returns the free pages in the middle of
	 * the heap with madvise(MADV_DONTNEED) instead: pages gone either
	 * way, through calls made inside libc. */
	const char *how = "brk shrink";

	if (sbrk(0) == brk0) {
		malloc_trim(0);
		how = sbrk(0) == brk0 ? "malloc_trim: madvise" :
					"malloc_trim: brk shrink";
	}
	char name[64], *b = malloc(len);

	if (!b)
		tp_die("malloc");
	snprintf(name, sizeof(name), "free + malloc (heap, %s)", how);
	verdict(name, old, (uintptr_t)b, u1, transfer(name, b, len), inv0);
	free(b);
	free(guard);
	mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

/* The break where the test left it: malloc moved nothing meanwhile. */
static bool break_still_ours(uintptr_t want)
{
	return (uintptr_t)sbrk(0) == want;
}

/*
 * sbrk by hand: the heap shrinks below a cached buffer, then grows back.
 * While the test moves the break itself, malloc must not: what malloc
 * placed above the block would be cut off by the shrink, and the regrown
 * pages come back zeroed under live chunks (2 runs in about 330 crashed
 * in calloc, malloc's top 4 MiB above the break). The small allocations
 * of the transfers (the cache's entries, the library's MR handles) are
 * served from free space kept below the block, with trimming off; when
 * malloc grew the heap all the same (1 run in 63), the block is left
 * where it is, never shrunk under malloc, and the scenario runs again on
 * a new one. false: it could not run.
 */
static bool scen_sbrk_once(size_t len)
{
	char *pool = malloc(1000 << 10);

	free(pool);
	uintptr_t cur = (uintptr_t)sbrk(0);
	size_t pad = (4096 - cur % 4096) % 4096;

	if (sbrk(pad + len) == (void *)-1)
		tp_die("sbrk: %s", strerror(errno));
	char *a = (char *)(cur + pad);
	struct used u1 = transfer("sbrk shrink + grow", a, len);
	uint64_t inv0 = invalidations();

	if (!break_still_ours(cur + pad + len))
		return false;
	if (sbrk(-(intptr_t)len) == (void *)-1 || sbrk(len) == (void *)-1)
		tp_die("sbrk: %s", strerror(errno));
	verdict("sbrk shrink + grow", (uintptr_t)a, (uintptr_t)a, u1,
		transfer("sbrk shrink + grow", a, len), inv0);
	if (break_still_ours(cur + pad + len))
		sbrk(-(intptr_t)(pad + len));
	return true;
}

static void scen_sbrk(size_t len)
{
	int tries = 0;

	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	while (!scen_sbrk_once(len))
		if (++tries == 5)
			tp_die("FAIL: sbrk shrink + grow: malloc moved the "
			       "break in each of %d tries", tries);
	if (tries)
		printf("sbrk shrink + grow: malloc moved the break, %d "
		       "block%s left in place\n", tries, tries > 1 ? "s" : "");
	mallopt(M_TRIM_THRESHOLD, 64 << 10);
}

static void scen_shm(size_t len)
{
	int id1 = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
	int id2 = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);

	if (id1 < 0 || id2 < 0)
		tp_die("shmget: %s", strerror(errno));
	char *a = shmat(id1, NULL, 0);

	shmctl(id1, IPC_RMID, NULL);
	if (a == (void *)-1)
		tp_die("shmat: %s", strerror(errno));
	struct used u1 = transfer("shmdt + shmat", a, len);
	uint64_t inv0 = invalidations();

	shmdt(a);
	char *b = shmat(id2, a, 0);

	shmctl(id2, IPC_RMID, NULL);
	if (b == (void *)-1)
		tp_die("shmat at %p: %s", a, strerror(errno));
	verdict("shmdt + shmat", (uintptr_t)a, (uintptr_t)b, u1,
		transfer("shmdt + shmat", b, len), inv0);
	shmdt(b);
}

static void usage(void)
{
	fprintf(stderr, "usage: rcache_reuse [-o send|write|read] "
			"[-s BYTES] [-d DEVICE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int sv[2], c, status;
	pid_t pid;

	while ((c = getopt(argc, argv, "o:s:d:")) != -1) {
		switch (c) {
		case 'o':
			if (!strcmp(optarg, "send"))
				O.op = OP_SEND;
			else if (!strcmp(optarg, "write"))
				O.op = OP_WRITE;
			else if (!strcmp(optarg, "read"))
				O.op = OP_READ;
			else
				usage();
			break;
		case 's':
			O.len = strtoull(optarg, NULL, 0);
			if (O.len < 4096 || O.len % 4096)
				tp_die("-s: a multiple of 4096, please");
			break;
		case 'd': O.dev = optarg; break;
		default: usage();
		}
	}
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		tp_die("socketpair: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		tp_die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		receiver(sv[1]);
	}
	close(sv[1]);
	sock = sv[0];
	tp_who = "rcache_reuse sender";
	/* Large blocks always from mmap (glibc's threshold would otherwise
	 * rise to the size of the first block freed). */
	mallopt(M_MMAP_THRESHOLD, 1 << 20);
	open_side(&S, 0);
	connect_side(&S, sock, 0x1111);
	C = sib_rcache_create(S.pd, NULL);
	if (!C)
		tp_die("sib_rcache_create: %s", strerror(errno));
	caching = strncmp(sib_rcache_describe(C), "caching", 7) == 0;
	printf("rcache: %s; %s of %zu bytes\n", sib_rcache_describe(C),
	       O.op == OP_SEND ? "SEND" : O.op == OP_WRITE ? "RDMA WRITE" :
							      "RDMA READ",
	       O.len);
	fflush(stdout);

	scen_hit(O.len);
#ifndef __SANITIZE_ADDRESS__
	scen_free_malloc(O.len);
#endif
	scen_munmap_mmap_fixed(O.len);
	scen_mmap_fixed_over(O.len);
	scen_mremap(O.len);
	scen_madvise(O.len, MADV_DONTNEED, "madvise DONTNEED");
	scen_madvise(O.len, MADV_FREE, "madvise FREE");
#ifndef __SANITIZE_ADDRESS__
	scen_heap_trim(O.len);
#else
	/* ASan's allocator maps and unmaps with raw system calls and keeps
	 * freed blocks in quarantine: malloc/free say nothing there. */
	printf("free + malloc, heap trim: skipped (ASan's allocator)\n");
#endif
	scen_sbrk(O.len);
	scen_shm(O.len);

	struct xfer_req end = {0};

	tp_xfer(sock, &end, sizeof(end), true, PEER_SECS);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		tp_die("the receiver failed");
	struct sib_rcache_stats st;

	sib_rcache_stats(C, &st);
	printf("counters: hits %llu misses %llu invalidations %llu "
	       "evictions %llu merges %llu uncached %llu in_use %llu, "
	       "miss %.1f us mean, %.1f us max\n",
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.invalidations,
	       (unsigned long long)st.evictions,
	       (unsigned long long)st.merges,
	       (unsigned long long)st.uncached,
	       (unsigned long long)st.in_use,
	       st.misses ? st.miss_ns / 1e3 / st.misses : 0.0,
	       st.miss_ns_max / 1e3);
	if (st.in_use)
		tp_die("FAIL: %llu entries still in use",
		    (unsigned long long)st.in_use);
	if (sib_rcache_destroy(C))
		tp_die("sib_rcache_destroy");
	printf("PASSED\n");
	return 0;
}
