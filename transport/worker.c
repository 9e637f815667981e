/*
 * worker.c: a worker's verbs objects (device context, PD, the host's XRC
 * domain, one XRC SRQ per size class with its buffers, the CQs and their
 * completion channel, the send bounce slots), its progress loop, and how
 * it sleeps (the completion channel and the async fd behind one epoll fd).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sib_int.h"

#define SEND_SLOTS 128
#define TIMER_MS 20
#define PUBLISH_MS 500
/* Progress reads the clock (for the timers above) once per this many
 * calls: on this VM the vDSO clock_gettime was ~40% of an idle progress
 * call, the largest single cost of a polling loop (perf, docs/mpi.md).
 * A caller that progresses rarely sleeps in sib_worker_wait, which asks
 * for the next check at once. */
#define TIMER_POLLS 16


static struct ibv_context *device_open(const char *name)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *d = NULL;

	for (int i = 0; l && l[i]; i++)
		if (!*name || !strcmp(ibv_get_device_name(l[i]), name)) {
			d = ibv_open_device(l[i]);
			break;
		}
	if (l)
		ibv_free_device_list(l);
	return d;
}

/*
 * Receive buffers go back to their SRQ in batches. Posting one is the
 * receiver's write of the SRQ ring slot that a sender's device last
 * claimed: a cache line from the other core, on the path from a message's
 * arrival to the application's answer (10 % of the samples of libsib's
 * 8 B ping-pong on one host were hca_ring_post_recv). So a taken buffer
 * waits in its class's list, and the list is posted as one chain when the
 * worker finds nothing to do (sib_progress_locked: the application is
 * waiting, not answering), when it holds `batch` buffers, or when the SRQ
 * holds less than three quarters of its depth: a stream that fills a
 * class (osu's window of 64 into the 64 buffers of 32 KiB) gets every
 * buffer back at once, as before, and finds no receiver-not-ready that
 * waiting buffers would cause. `batch` is at most an eighth of the depth.
 */
static void srq_post_pending(sib_worker_t *w, uint32_t cls)
{
	struct sib_srq_class *c = &w->cls[cls];
	struct ibv_recv_wr wr[SIB_REPOST_BATCH], *bad = NULL;
	struct ibv_sge sge[SIB_REPOST_BATCH];
	uint32_t n = c->npend, ok = n;

	for (uint32_t i = 0; i < n; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)c->buf + (size_t)c->pend[i] * c->size,
					   .length = c->size, .lkey = c->mr->lkey };
		wr[i] = (struct ibv_recv_wr){ .wr_id = SIB_WR_RECV | ((uint64_t)cls << 32) | c->pend[i],
					      .sg_list = &sge[i], .num_sge = 1,
					      .next = i + 1 < n ? &wr[i + 1] : NULL };
	}
	if (n && ibv_post_srq_recv(c->srq, wr, &bad)) {
		ok = bad ? (uint32_t)(bad - wr) : 0;
		sib_log("repost of %u buffers to SRQ class %u failed", n - ok, cls);
	}
	c->posted += ok;
	w->repost_pend -= n;
	c->npend = 0;
}

void sib_srq_repost(sib_worker_t *w, uint32_t cls, uint32_t idx)
{
	struct sib_srq_class *c = &w->cls[cls];

	c->pend[c->npend++] = idx;
	w->repost_pend++;
	if (c->npend >= c->batch || c->posted < c->depth - c->depth / 4)
		srq_post_pending(w, cls);
}

void sib_srq_flush(sib_worker_t *w)
{
	for (uint32_t i = 0; i < w->nclasses && w->repost_pend; i++)
		if (w->cls[i].npend)
			srq_post_pending(w, i);
}

static int srq_arm_limit(struct sib_srq_class *c)
{
	struct ibv_srq_attr a = { .srq_limit = c->depth / 4 };

	return ibv_modify_srq(c->srq, &a, IBV_SRQ_LIMIT);
}

static int classes_setup(sib_worker_t *w)
{
	sib_context_t *ctx = w->ctx;

	w->nclasses = ctx->nclasses;
	for (uint32_t i = 0; i < w->nclasses; i++) {
		struct sib_srq_class *c = &w->cls[i];
		size_t len;
		struct ibv_srq_init_attr_ex sa = {
			.attr = { .max_wr = ctx->classes[i].depth, .max_sge = 1 },
			.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
				     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
			.srq_type = IBV_SRQT_XRC, .pd = w->pd, .xrcd = w->xrcd,
			.cq = w->cq,
		};

		c->size = ctx->classes[i].size;
		c->depth = ctx->classes[i].depth;
		c->batch = c->depth / 8 < SIB_REPOST_BATCH ? c->depth / 8 : SIB_REPOST_BATCH;
		len = (size_t)c->size * c->depth;
		/* a sealed memfd: the host's senders copy into it directly
		 * (softib's mapping route), with no system call and no page
		 * pinning per message (docs/transport.md, "Receive buffers") */
		if (!(c->buf = sib_mem_alloc(len, &c->buf_fd)) ||
		    !(c->refs = calloc(c->depth, sizeof(*c->refs))))
			return SIB_ERR_NO_MEMORY;
		c->mr = ibv_reg_mr(w->pd, c->buf, len, IBV_ACCESS_LOCAL_WRITE);
		c->srq = c->mr ? ibv_create_srq_ex(w->dev, &sa) : NULL;
		if (!c->srq || ibv_get_srq_num(c->srq, &c->srqn))
			return SIB_ERR_IO;
		for (uint32_t k = 0; k < c->depth; k++)
			sib_srq_repost(w, i, k);
		srq_post_pending(w, i);
		if (c->posted != c->depth || srq_arm_limit(c))
			return SIB_ERR_IO;
	}
	return SIB_OK;
}

static int slots_setup(sib_worker_t *w)
{
	size_t len;

	w->nslots = SEND_SLOTS;
	w->slot_size = w->cls[w->nclasses - 1].size;
	len = (size_t)w->nslots * w->slot_size;
	w->free_slots = calloc(w->nslots, sizeof(int));
	if (!w->free_slots || posix_memalign((void **)&w->sbuf, 4096, len))
		return SIB_ERR_NO_MEMORY;
	w->smr = ibv_reg_mr(w->pd, w->sbuf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!w->smr)
		return SIB_ERR_IO;
	for (uint32_t i = 0; i < w->nslots; i++)
		w->free_slots[w->nfree++] = (int)(w->nslots - 1 - i);
	return SIB_OK;
}

static int nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int events_setup(sib_worker_t *w)
{
	struct epoll_event ev = { .events = EPOLLIN };

	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0 || nonblock(w->chan->fd) || nonblock(w->dev->async_fd))
		return SIB_ERR_IO;
	ev.data.fd = w->chan->fd;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->chan->fd, &ev))
		return SIB_ERR_IO;
	ev.data.fd = w->dev->async_fd;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->dev->async_fd, &ev))
		return SIB_ERR_IO;
	return SIB_OK;
}

/*
 * The host's XRC domain: every process of the job on this host opens the
 * same file, so every SRQ of the job on the host is in one domain and one
 * XRC receive QP reaches them all.
 *
 * The file goes with the job's last worker on the host: each worker holds
 * a shared flock on it while it lives; one that leaves and gets the lock
 * exclusive (nobody else holds it) unlinks it. An opener locks, then
 * checks that the name still leads to the file it locked: one unlinked
 * between its open and its lock is left for a new one.
 */
static int xrcd_file_open(sib_worker_t *w)
{
	struct stat st, at;

	for (int tries = 0; tries < 100; tries++) {
		int fd = open(w->xrcd_path, O_RDWR | O_CREAT | O_NOFOLLOW |
			      O_CLOEXEC, 0600);

		if (fd < 0)
			return -1;
		/* a file another user made under the name is not ours */
		if (fstat(fd, &st) || st.st_uid != geteuid() ||
		    (st.st_mode & 077) || flock(fd, LOCK_SH)) {
			close(fd);
			return -1;
		}
		if (!stat(w->xrcd_path, &at) && at.st_ino == st.st_ino &&
		    at.st_dev == st.st_dev)
			return fd;
		close(fd);
	}
	return -1;
}

static void xrcd_file_close(sib_worker_t *w)
{
	if (w->xrcd_fd < 0)
		return;
	if (!flock(w->xrcd_fd, LOCK_EX | LOCK_NB))
		unlink(w->xrcd_path);   /* the job's last worker here */
	close(w->xrcd_fd);
	w->xrcd_fd = -1;
}

static int xrcd_open(sib_worker_t *w)
{
	const char *tag = getenv("SOFTIB_SEG_TAG");
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.oflags = O_CREAT,
	};

	snprintf(w->xrcd_path, sizeof(w->xrcd_path), "/dev/shm/sib-xrcd-%u-%s-%s",
		 (unsigned)getuid(), tag ? tag : "", w->ctx->job_key);
	w->xrcd_fd = xrcd_file_open(w);
	if (w->xrcd_fd < 0)
		return SIB_ERR_IO;
	xa.fd = w->xrcd_fd;
	w->xrcd = ibv_open_xrcd(w->dev, &xa);
	return w->xrcd ? SIB_OK : SIB_ERR_IO;
}

static int worker_setup(sib_worker_t *w)
{
	uint32_t rdepth = 0;
	int st;

	w->dev = device_open(w->ctx->device);
	if (!w->dev)
		return SIB_ERR_NO_DEVICE;
	if (ibv_query_port(w->dev, 1, &w->port) ||
	    ibv_query_gid(w->dev, 1, 0, &w->gid))
		return SIB_ERR_IO;
	w->pd = ibv_alloc_pd(w->dev);
	if (!w->pd)
		return SIB_ERR_IO;
	if ((st = xrcd_open(w)))
		return st;
	for (uint32_t i = 0; i < w->ctx->nclasses; i++)
		rdepth += w->ctx->classes[i].depth;
	w->chan = ibv_create_comp_channel(w->dev);
	if (!w->chan)
		return SIB_ERR_IO;
	/* one CQ for the sends and every SRQ: one poll per progress call
	 * (the UD QP's own CQ is looked at rarely: handshakes, pings) */
	w->cq = ibv_create_cq(w->dev, SIB_SCQ_DEPTH + (int)rdepth + 64, NULL,
			      w->chan, 0);
	w->ucq = ibv_create_cq(w->dev, 512, NULL, w->chan, 0);
	if (!w->cq || !w->ucq)
		return SIB_ERR_IO;
	if ((st = classes_setup(w)) || (st = slots_setup(w)))
		return st;
	if (sib_ud_setup(w) || sib_inline_probe(w))
		return SIB_ERR_IO;
	if (sib_rma_init(w))
		return SIB_ERR_NO_MEMORY;
	w->short_lim = sib_short_lim(w);
	return events_setup(w);
}

static void worker_teardown(sib_worker_t *w)
{
	sib_hosts_destroy(w);
	if (w->ud)
		ibv_destroy_qp(w->ud);
	if (w->umr)
		ibv_dereg_mr(w->umr);
	free(w->ubuf);
	for (uint32_t i = 0; i < SIB_MAX_CLASSES; i++) {
		struct sib_srq_class *c = &w->cls[i];

		if (c->srq)
			ibv_destroy_srq(c->srq);
		if (c->mr)
			ibv_dereg_mr(c->mr);
		if (c->buf)
			sib_mem_release(c->buf, (size_t)c->size * c->depth, c->buf_fd);
		free(c->refs);
	}
	if (w->smr)
		ibv_dereg_mr(w->smr);
	free(w->sbuf);
	free(w->free_slots);
	if (w->cq)
		ibv_destroy_cq(w->cq);
	if (w->ucq)
		ibv_destroy_cq(w->ucq);
	if (w->chan)
		ibv_destroy_comp_channel(w->chan);
	if (w->xrcd)
		ibv_close_xrcd(w->xrcd);
	xrcd_file_close(w);
	if (w->pd)
		ibv_dealloc_pd(w->pd);
	if (w->dev)
		ibv_close_device(w->dev);
	if (w->epfd > 0)
		close(w->epfd);
}

/* SIB_PEER_TIMEOUT_MS, else the caller's, else the default (sib.h) */
static uint32_t peer_timeout(const struct sib_worker_params *p)
{
	const char *e = getenv("SIB_PEER_TIMEOUT_MS");
	long v = e ? strtol(e, NULL, 10) : 0;

	if (v > 0 && v <= 86400000)
		return (uint32_t)v;
	if (p && p->peer_timeout_ms)
		return p->peer_timeout_ms;
	return SIB_DEFAULT_PEER_TIMEOUT_MS;
}

SIB_API sib_status_t sib_worker_create(sib_context_t *ctx,
				       const struct sib_worker_params *p,
				       sib_worker_t **out)
{
	sib_worker_t *w;
	pthread_mutexattr_t ma;
	int st;

	if (!ctx || !out || (p && p->id_set && p->id == SIB_ANY_SOURCE))
		return SIB_ERR_INVALID_PARAM;
	*out = NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return SIB_ERR_NO_MEMORY;
	w->ctx = ctx;
	w->xrcd_fd = w->epfd = -1;
	/* a derived id: pid mixed with the host key (unique with odds good
	 * enough for tests; jobs pass ranks) */
	w->id = p && p->id_set ? p->id :
		(uint32_t)(((uint64_t)getpid() * 2654435761u) ^ ctx->host_key ^
			   (ctx->host_key >> 32)) & 0x7fffffffu;
	w->mt = ctx->thread_mode == SIB_THREAD_MULTI;
	w->peer_timeout_ms = peer_timeout(p);
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&w->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_mutex_init(&w->dead_lock, NULL);
	sib_list_init(&w->hosts);
	sib_list_init(&w->eps);
	for (int i = 0; i < SIB_EP_BUCKETS; i++)
		sib_list_init(&w->ep_hash[i]);
	sib_list_init(&w->tqps);
	sib_list_init(&w->ahs);
	sib_list_init(&w->slot_wait);
	sib_list_init(&w->batch_eps);
	w->pgen = 1;   /* an endpoint's tx_gen starts at 0: not this one */
	if (sib_mq_init(&w->mq)) {
		free(w);
		return SIB_ERR_NO_MEMORY;
	}
	w->token_next = (uint32_t)getpid() << 12;
	st = worker_setup(w);
	if (st) {
		sib_log("worker setup failed: %s (errno %d)",
			sib_status_string(st), errno);
		worker_teardown(w);
		sib_mq_fini(&w->mq);
		free(w);
		return st;
	}
	ctx->nworkers++;
	sib_stats_publish(w);
	sib_async_start(w);
	*out = w;
	return SIB_OK;
}

SIB_API sib_status_t sib_worker_destroy(sib_worker_t *w)
{
	if (!w)
		return SIB_ERR_INVALID_PARAM;
	sib_async_stop(w);
	sib_lock(w);
	sib_rndv_fini(w);        /* rendezvous in flight: cancelled */
	sib_requests_destroy(w);
	sib_rma_fini(w);         /* regions, keys, registrations */
	sib_req_cache_fini(w);
	sib_stats_remove(w);
	worker_teardown(w);
	sib_mq_fini(&w->mq);
	w->ctx->nworkers--;
	sib_unlock(w);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->dead_lock);
	free(w);
	return SIB_OK;
}

/* Take every completion now: each arrival gives its SRQ buffer back.
 * Receives are told from sends by their wr_id (SIB_WR_RECV): the opcode
 * of a completion in error is undefined. */
static int cq_drain(sib_worker_t *w)
{
	struct ibv_wc wc[32];
	int n, total = 0;

	while ((n = ibv_poll_cq(w->cq, 32, wc)) > 0) {
		for (int i = 0; i < n; i++)
			if (wc[i].wr_id & SIB_WR_RECV)
				sib_rx(w, &wc[i]);
			else
				sib_host_send_done(w, &wc[i]);
		total += n;
		if (n < 32)
			break;   /* drained: no second poll to find it empty */
	}
	return total;
}

static int ud_drain(sib_worker_t *w)
{
	struct ibv_wc wc[16];
	int n, total = 0;

	while ((n = ibv_poll_cq(w->ucq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++)
			sib_ud_rx(w, &wc[i]);
		total += n;
	}
	return total;
}

static void async_events(sib_worker_t *w)
{
	struct ibv_async_event ev;

	while (!ibv_get_async_event(w->dev, &ev)) {
		if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
			/* the limit disarms itself: count, and re-arm after the
			 * receive path has reposted (buffers go back as soon as
			 * each message is taken, so this only fires when we have
			 * not been progressing or AM handlers hold buffers) */
			w->c.srq_limit_events++;
			w->c.srq_refills += cq_drain(w);
			sib_srq_flush(w);
			for (uint32_t i = 0; i < w->nclasses; i++)
				if (w->cls[i].srq == ev.element.srq)
					srq_arm_limit(&w->cls[i]);
		}
		ibv_ack_async_event(&ev);
	}
}

static void deaths_take(sib_worker_t *w)
{
	uint32_t ids[64], n;

	if (!w->ndead)     /* racy peek; the lock makes the take exact */
		return;
	pthread_mutex_lock(&w->dead_lock);
	n = w->ndead;
	memcpy(ids, w->dead_ids, n * sizeof(ids[0]));
	w->ndead = 0;
	pthread_mutex_unlock(&w->dead_lock);
	for (uint32_t i = 0; i < n; i++) {
		struct sib_ep *ep = sib_ep_find(w, ids[i]);

		if (ep && !ep->failed)
			sib_ep_fail(w, ep, "the launcher reports it ended");
	}
}

/*
 * One poll of the worker's CQ per call; every TIMER_POLLS calls also the
 * UD QP's CQ (a handshake or a ping waits microseconds more: nothing
 * waits on it that a message could) and the clock for the timers.
 */
int sib_progress_locked(sib_worker_t *w)
{
	int total;
	uint64_t now;

	/* batched messages go now; the next send goes alone (batch.c) */
	w->pgen++;
	if (w->nbatch)
		sib_batches_close(w);
	total = cq_drain(w);
	if (!total && w->repost_pend)   /* nothing came: the buffers go back */
		sib_srq_flush(w);
	/* next_timer_ms 0: someone wants the timers now (a slot came free) */
	if (w->next_timer_ms && ++w->timer_polls < TIMER_POLLS)
		return total;
	w->timer_polls = 0;
	total += ud_drain(w);
	now = sib_now_ms();
	if (now >= w->next_timer_ms) {
		w->next_timer_ms = now + TIMER_MS;
		async_events(w);
		deaths_take(w);
		sib_hosts_tails(w);
		sib_hosts_timer(w, now);
		if (now >= w->next_publish_ms) {
			w->next_publish_ms = now + PUBLISH_MS;
			sib_stats_publish(w);
		}
	}
	return total;
}

SIB_API int sib_worker_progress(sib_worker_t *w)
{
	int n;

	if (!w)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(w);
	n = sib_progress_locked(w);
	sib_unlock(w);
	return n;
}

SIB_API sib_status_t sib_worker_fd(sib_worker_t *w, int *fd)
{
	if (!w || !fd)
		return SIB_ERR_INVALID_PARAM;
	*fd = w->epfd;
	return SIB_OK;
}

static void chan_drain(sib_worker_t *w)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	while (!ibv_get_cq_event(w->chan, &cq, &cq_ctx))
		ibv_ack_cq_events(cq, 1);
}

SIB_API sib_status_t sib_worker_arm(sib_worker_t *w)
{
	int n;

	if (!w)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(w);
	chan_drain(w);
	if (ibv_req_notify_cq(w->cq, 0) || ibv_req_notify_cq(w->ucq, 0)) {
		sib_unlock(w);
		return SIB_ERR_IO;
	}
	/* what arrived before the arm raised no event: look once more (the
	 * UD CQ too) */
	w->timer_polls = TIMER_POLLS;
	n = sib_progress_locked(w);
	sib_unlock(w);
	return n > 0 ? SIB_ERR_BUSY : SIB_OK;
}

SIB_API sib_status_t sib_worker_wait(sib_worker_t *w, int timeout_ms)
{
	struct epoll_event ev[2];
	sib_status_t st;
	int n;

	if (!w || timeout_ms < -1)
		return SIB_ERR_INVALID_PARAM;
	st = sib_worker_arm(w);
	if (st == SIB_ERR_BUSY)
		return SIB_OK;
	if (st)
		return st;
	/* timers (handshake retries, liveness) need a tick even when idle */
	if (timeout_ms < 0 || timeout_ms > TIMER_MS * 5)
		timeout_ms = TIMER_MS * 5;
	n = epoll_wait(w->epfd, ev, 2, timeout_ms);
	if (n < 0 && errno != EINTR)
		return SIB_ERR_IO;
	sib_lock(w);
	chan_drain(w);
	w->timer_polls = TIMER_POLLS; /* the next progress reads the clock */
	sib_unlock(w);
	return SIB_OK;
}

SIB_API uint32_t sib_worker_id(const sib_worker_t *w)
{
	return w ? w->id : SIB_ANY_SOURCE;
}

SIB_API sib_status_t sib_worker_get_address(sib_worker_t *w, void **out,
					    size_t *len)
{
	struct sib_addr *a;

	if (!w || !out || !len)
		return SIB_ERR_INVALID_PARAM;
	a = calloc(1, sizeof(*a));
	if (!a)
		return SIB_ERR_NO_MEMORY;
	a->magic = SIB_ADDR_MAGIC;
	a->id = w->id;
	a->pid = (uint32_t)getpid();
	a->package = w->ctx->package;
	a->host = w->ctx->host_key;
	memcpy(a->gid, w->gid.raw, 16);
	a->lid = w->port.lid;
	a->nclasses = (uint16_t)w->nclasses;
	a->ud_qpn = w->ud->qp_num;
	a->job = w->ctx->job_hash;
	for (uint32_t i = 0; i < w->nclasses; i++) {
		a->class_size[i] = w->cls[i].size;
		a->srqn[i] = w->cls[i].srqn;
	}
	*out = a;
	*len = sizeof(*a);
	return SIB_OK;
}

SIB_API void sib_address_free(void *addr)
{
	free(addr);
}
