/*
 * stats.c: the runtime's counters.  sib_worker_query gives them to the
 * program (tests assert on them); the diagnostics file gives them to
 * `softib sib`: a text file per worker,
 * /dev/shm/sib-stats-<uid>-<SOFTIB_SEG_TAG>-<pid>-<id>,
 * rewritten (to a temporary name, then renamed: a reader never sees half)
 * at most every 500 ms from progress and on sib_worker_publish, removed
 * by sib_worker_destroy, or, for a process killed first, by the next
 * process's first worker (stats_sweep).
 * Format: one record per line, "kind key=value ...".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sib_int.h"

static const char *const state_names[] = {
	[SIB_CONN_IDLE] = "idle", [SIB_CONN_WAIT_REP] = "handshake",
	[SIB_CONN_UP] = "up", [SIB_CONN_DRAIN] = "draining",
};

static uint32_t hosts_sent_to(const sib_worker_t *w)
{
	uint32_t n = 0;

	for (sib_link_t *e = w->hosts.next; e != &w->hosts; e = e->next)
		n += SIB_CONTAINER(e, struct sib_host, link)->ever_sent;
	return n;
}

SIB_API sib_status_t sib_worker_query(sib_worker_t *w, struct sib_worker_attr *a)
{
	if (!w || !a)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(w);
	memset(a, 0, sizeof(*a));
	a->short_max = sib_short_max(w);
	a->eager_max = sib_eager_max(w);
	a->nclasses = w->nclasses;
	for (uint32_t i = 0; i < w->nclasses; i++) {
		a->classes[i] = (struct sib_class_param){ w->cls[i].size,
							  w->cls[i].depth };
		a->srq_posted[i] = w->cls[i].posted;
		a->srq_waiting[i] = w->cls[i].npend;
	}
	a->id = w->id;
	a->progress_mode = w->ctx->progress_mode;
	a->thread_mode = w->ctx->thread_mode;
	a->send_qps = w->send_qps;
	a->send_qps_max = w->c.send_qps_max;
	a->recv_qps = w->c.recv_qps;
	a->hosts_sent_to = hosts_sent_to(w);
	for (sib_link_t *e = w->eps.next; e != &w->eps; e = e->next) {
		struct sib_ep *ep = SIB_CONTAINER(e, struct sib_ep, link);

		a->eps += ep->has_addr;
		a->eps_failed += ep->failed;
	}
	memcpy(a->tx_msgs, w->c.tx_msgs, sizeof(a->tx_msgs));
	memcpy(a->tx_bytes, w->c.tx_bytes, sizeof(a->tx_bytes));
	memcpy(a->rx_msgs, w->c.rx_msgs, sizeof(a->rx_msgs));
	memcpy(a->rx_bytes, w->c.rx_bytes, sizeof(a->rx_bytes));
	a->unexpected = w->c.unexpected;
	a->unexpected_now = sib_mq_unexpected_count(&w->mq);
	a->posted_now = sib_mq_posted_count(&w->mq);
	a->srq_limit_events = w->c.srq_limit_events;
	a->srq_refills = w->c.srq_refills;
	a->reconnects = w->c.reconnects;
	a->handshakes = w->c.handshakes;
	a->resent = w->c.resent;
	a->unsignaled = w->c.unsignaled;
	a->tail_nops = w->c.tail_nops;
	a->tx_batches = w->c.tx_batches;
	a->tx_batched = w->c.tx_batched;
	a->rx_batches = w->c.rx_batches;
	sib_rma_query(w, a);
	sib_unlock(w);
	return SIB_OK;
}

static void write_stats(sib_worker_t *w, FILE *f)
{
	sib_context_t *c = w->ctx;

	fprintf(f, "worker id=%u pid=%d host=%016llx package=%d job=%s "
		"progress=%s threads=%s send_qps=%u send_qps_max=%u recv_qps=%u "
		"hosts_sent_to=%u short_max=%zu eager_max=%zu\n",
		w->id, (int)getpid(), (unsigned long long)c->host_key, c->package,
		c->job_key, c->progress_mode ? "blocking" : "poll",
		c->thread_mode ? "multi" : "single", w->send_qps,
		w->c.send_qps_max, w->c.recv_qps, hosts_sent_to(w),
		sib_short_max(w), sib_eager_max(w));
	for (uint32_t i = 0; i < w->nclasses; i++)
		fprintf(f, "srq class=%u size=%u depth=%u srqn=%u posted=%u held=%u\n",
			i, w->cls[i].size, w->cls[i].depth, w->cls[i].srqn,
			w->cls[i].posted, w->cls[i].held);
	for (sib_link_t *e = w->hosts.next; e != &w->hosts; e = e->next) {
		struct sib_host *h = SIB_CONTAINER(e, struct sib_host, link);

		fprintf(f, "conn host=%016llx local=%d state=%s send_qpn=%u "
			"inflight=%u reconnects=%llu\n",
			(unsigned long long)h->key, h->local, state_names[h->state],
			h->sqp ? h->sqp->qp_num : 0, h->inflight,
			(unsigned long long)h->reconnects);
	}
	for (sib_link_t *e = w->tqps.next; e != &w->tqps; e = e->next) {
		struct sib_tqp *t = SIB_CONTAINER(e, struct sib_tqp, link);

		fprintf(f, "rqp recv_qpn=%u for=%u from_host=%016llx send_qpn=%u\n",
			t->recv_qpn, t->from_id, (unsigned long long)t->host,
			t->send_qpn);
	}
	for (sib_link_t *e = w->eps.next; e != &w->eps; e = e->next) {
		struct sib_ep *ep = SIB_CONTAINER(e, struct sib_ep, link);
		bool same_host = ep->has_addr && ep->addr.host == c->host_key;

		fprintf(f, "ep id=%u addr=%d locality=%s failed=%d tx=%llu "
			"tx_done=%llu rx_seq=%u\n", ep->id, ep->has_addr,
			!ep->has_addr ? "unknown" : !same_host ? "remote" :
			(c->package >= 0 && ep->addr.package == c->package) ?
			"same-package" : "same-host", ep->failed,
			(unsigned long long)ep->tx_issued,
			(unsigned long long)ep->tx_done, ep->rx_seq);
	}
	for (int i = 0; i < SIB_PROTO_MAX; i++)
		fprintf(f, "proto name=%s tx_msgs=%llu tx_bytes=%llu rx_msgs=%llu "
			"rx_bytes=%llu\n", sib_protos[i].name,
			(unsigned long long)w->c.tx_msgs[i],
			(unsigned long long)w->c.tx_bytes[i],
			(unsigned long long)w->c.rx_msgs[i],
			(unsigned long long)w->c.rx_bytes[i]);
	fprintf(f, "counters unexpected=%llu unexpected_now=%zu posted_now=%zu "
		"srq_limit_events=%llu reconnects=%llu handshakes=%llu resent=%llu "
		"dup_dropped=%llu seq_gaps=%llu unsignaled=%llu tail_nops=%llu\n",
		(unsigned long long)w->c.unexpected,
		sib_mq_unexpected_count(&w->mq), sib_mq_posted_count(&w->mq),
		(unsigned long long)w->c.srq_limit_events,
		(unsigned long long)w->c.reconnects,
		(unsigned long long)w->c.handshakes,
		(unsigned long long)w->c.resent,
		(unsigned long long)w->c.dup_dropped,
		(unsigned long long)w->c.seq_gaps,
		(unsigned long long)w->c.unsignaled,
		(unsigned long long)w->c.tail_nops);
}

/*
 * The temporary file, new and ours alone (0600, whatever the umask lets
 * through is narrower): its counters describe this user's traffic. Never
 * a file someone else made under the name in world-writable /dev/shm
 * (O_EXCL, O_NOFOLLOW); a stale one of ours (a crash between open and
 * rename) is removed once.
 */
static FILE *stats_tmp_open(const char *tmp)
{
	int fd = -1;

	for (int i = 0; i < 2 && fd < 0; i++) {
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && (errno != EEXIST || unlink(tmp)))
			break;
	}
	if (fd < 0)
		return NULL;
	FILE *f = fdopen(fd, "w");

	if (!f)
		close(fd);
	return f;
}

/*
 * A killed process leaves its file: the first worker of each process
 * removes this user's files (of any tag) whose pid is gone. A pid that
 * came back to another process keeps its file; a live worker's file is
 * rewritten within 500 ms anyway.
 */
static void stats_sweep(void)
{
	char prefix[64], path[300];
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t n;

	if (!d)
		return;
	n = (size_t)snprintf(prefix, sizeof(prefix), "sib-stats-%u-",
			     (unsigned)getuid());
	while ((e = readdir(d))) {
		const char *dash, *p;
		long pid;

		if (strncmp(e->d_name, prefix, n))
			continue;
		/* <tag>-<pid>-<id>: the pid is the field before the last */
		dash = strrchr(e->d_name + n, '-');
		if (!dash)
			continue;
		for (p = dash; p > e->d_name + n && p[-1] != '-'; p--)
			;
		pid = strtol(p, NULL, 10);
		if (pid <= 0 || p == e->d_name + n ||
		    !(kill((pid_t)pid, 0) && errno == ESRCH))
			continue;   /* alive, or not ours to judge */
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		unlink(path);
	}
	closedir(d);
}

static pthread_once_t sweep_once = PTHREAD_ONCE_INIT;

void sib_stats_publish(sib_worker_t *w)
{
	char tmp[300];
	FILE *f;

	if (!w->stats_path[0]) {
		pthread_once(&sweep_once, stats_sweep);
		/* named after the softib segment too (SOFTIB_SEG_TAG): the
		 * tool shows the workers of the segment it looks at */
		const char *tag = getenv("SOFTIB_SEG_TAG");

		snprintf(w->stats_path, sizeof(w->stats_path),
			 "/dev/shm/sib-stats-%u-%s-%d-%u", (unsigned)getuid(),
			 tag ? tag : "", (int)getpid(), w->id);
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", w->stats_path);
	f = stats_tmp_open(tmp);
	if (!f)
		return;
	write_stats(w, f);
	if (fclose(f) == 0)
		rename(tmp, w->stats_path);
}

void sib_stats_remove(sib_worker_t *w)
{
	if (w->stats_path[0])
		unlink(w->stats_path);
}

SIB_API sib_status_t sib_worker_publish(sib_worker_t *w)
{
	if (!w)
		return SIB_ERR_INVALID_PARAM;
	sib_lock(w);
	sib_stats_publish(w);
	sib_unlock(w);
	return SIB_OK;
}
