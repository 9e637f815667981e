/*
 * host.c: connections, O(hosts).  A worker holds one XRC send QP per host
 * it sends to (its own host included); each message names the receiving
 * process's SRQ, so one send QP reaches every process of that host.
 *
 * The far end of a send QP is an XRC receive QP in the far host's domain:
 *  - on my own host I make it myself (the domain is shared, and on the
 *    host link the responder runs in the sender's process);
 *  - on another host, the process I first send to makes it when my UD
 *    handshake request (REQ) reaches it, connects it to my send QP, and
 *    answers with its number (REP).  Lost datagrams are asked again.
 *
 * Failures: a send QP that errs flushes every WR on it.  The WR that
 * failed names its receiver; if that process is dead (pid gone on this
 * host; SRQ unknown, or no answer to the handshake, on another) its
 * endpoint fails, and everything flushed for the others is sent again, in
 * order, on a new send QP.  Receivers drop duplicates by sequence number.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sib_int.h"

#define HS_RETRY_MS 200
#define HOST_WINDOW 256        /* WRs in flight per send QP */
#define PING_MS 300

static const int mask_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS;

/* ---------------- send QPs ---------------- */

struct sib_host *sib_host_get(sib_worker_t *w, const struct sib_addr *a)
{
	struct sib_host *h;

	for (sib_link_t *e = w->hosts.next; e != &w->hosts; e = e->next) {
		h = SIB_CONTAINER(e, struct sib_host, link);
		if (h->key == a->host)
			return h;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->key = a->host;
	h->local = a->host == w->ctx->host_key;
	sib_list_init(&h->sent);
	sib_list_init(&h->pending);
	sib_list_init(&h->retry);
	sib_list_add_tail(&w->hosts, &h->link);
	return h;
}

static struct ibv_qp *send_qp_create(sib_worker_t *w)
{
	struct ibv_qp_init_attr_ex sa = {
		.send_cq = w->cq, .qp_type = IBV_QPT_XRC_SEND,
		.cap = { .max_send_wr = HOST_WINDOW, .max_send_sge = 1,
			 .max_inline_data = SIB_HDR + w->ctx->short_max },
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = w->pd,
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	struct ibv_qp *qp = ibv_create_qp_ex(w->dev, &sa);

	if (!qp && w->ctx->short_max) {   /* the device inlines less: say so */
		sa.cap.max_inline_data = 0;
		qp = ibv_create_qp_ex(w->dev, &sa);
	}
	if (!qp)
		return NULL;
	w->max_inline = sa.cap.max_inline_data;
	if (ibv_modify_qp(qp, &a, mask_init)) {
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

/*
 * The send QPs' ACK timeout (4.096 us * 2^t, retry_cnt 7: 8 periods before
 * IBV_WC_RETRY_EXC_ERR): the largest whose 8 periods fit in the peer
 * timeout (10 s: t = 18, 1.07 s a period).  A lost packet does not wait
 * for it (the device resends after a few measured round trips); only a
 * receiver that answers nothing does: a software HCA's receiver is a
 * process, and one starved of CPU on a loaded host answered nothing for
 * the 0.54 s of timeout 14 now and then, which broke the QP (and resent
 * requests whose first try may have been executed).
 */
static uint8_t send_qp_timeout(const sib_worker_t *w)
{
	uint64_t budget_ns = (uint64_t)w->peer_timeout_ms * 1000000ULL;

	for (uint8_t t = 24; t > 14; t--)
		if ((4096ULL << t) * 8 <= budget_ns)
			return t;
	return 14;
}

static int send_qp_connect(sib_worker_t *w, struct ibv_qp *qp, uint32_t dqpn,
			   uint32_t psn, const uint8_t gid[16], uint16_t lid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR,
				 .path_mtu = w->port.active_mtu,
				 .dest_qp_num = dqpn, .rq_psn = psn };

	sib_av_fill(w, &a.ah_attr, gid, lid);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
		return -1;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = psn,
				  .timeout = send_qp_timeout(w), .retry_cnt = 7,
				  .rnr_retry = 7,
				  .max_rd_atomic = (uint8_t)sib_rd_atomic(w) };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
			     IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* An XRC receive QP in my host's domain, connected to send QP sqpn. */
static struct ibv_qp *recv_qp_create(sib_worker_t *w, uint32_t sqpn,
				     uint32_t psn, const uint8_t gid[16],
				     uint16_t lid)
{
	struct ibv_qp_init_attr_ex ta = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = w->xrcd,
	};
	/* RDMA and atomics from the sender (rendezvous, RMA): the rkey and
	 * the named SRQ's owner decide what memory, per process */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_ATOMIC };
	struct ibv_qp *qp = ibv_create_qp_ex(w->dev, &ta);

	if (!qp)
		return NULL;
	if (ibv_modify_qp(qp, &a, mask_init))
		goto err;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR,
				  .path_mtu = w->port.active_mtu,
				  .dest_qp_num = sqpn, .rq_psn = psn,
				  .max_dest_rd_atomic = (uint8_t)sib_rd_atomic(w),
				  .min_rnr_timer = 1 };
	sib_av_fill(w, &a.ah_attr, gid, lid);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		goto err;
	w->c.recv_qps++;
	return qp;
err:
	ibv_destroy_qp(qp);
	return NULL;
}

static void host_drop_qps(sib_worker_t *w, struct sib_host *h)
{
	if (h->sqp && !ibv_destroy_qp(h->sqp))
		w->send_qps--;
	if (h->tqp && !ibv_destroy_qp(h->tqp))
		w->c.recv_qps--;
	h->sqp = h->tqp = NULL;
}

static void hs_request(sib_worker_t *w, struct sib_host *h)
{
	struct sib_hs m = { .type = SIB_HS_REQ, .to_id = h->hs_ep->id,
			    .send_qpn = h->sqp->qp_num, .psn = h->psn,
			    .token = h->token };

	h->hs_tries++;
	h->hs_next_ms = sib_now_ms() + HS_RETRY_MS;
	w->c.handshakes++;
	sib_ud_send(w, h->hs_ep->addr.gid, h->hs_ep->addr.lid,
		    h->hs_ep->addr.ud_qpn, &m);
}

/* Pick the partner of a handshake: the receiver of the oldest request. */
static struct sib_ep *hs_partner(struct sib_host *h)
{
	for (sib_link_t *e = h->pending.next; e != &h->pending; e = e->next) {
		struct sib_request *r = SIB_CONTAINER(e, struct sib_request, qlink);

		if (!r->ep->failed)
			return r->ep;
	}
	return NULL;
}

static void host_kick(sib_worker_t *w, struct sib_host *h);

/*
 * A starting PSN per connection, different across connections and
 * incarnations (the spec asks for it: a stale packet of an old QP must
 * not fall inside a new one's window): the worker's counter mixed with
 * the clock and the pid, without touching the application's rand() state.
 */
static uint32_t psn_pick(sib_worker_t *w)
{
	uint64_t x = ((uint64_t)getpid() << 32) ^ sib_now_ms() ^
		     ((uint64_t)++w->token_next * 0x9e3779b97f4a7c15ULL);

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 32;
	return (uint32_t)(x & 0xffffff);
}

static void host_connect(sib_worker_t *w, struct sib_host *h)
{
	struct sib_ep *ep = hs_partner(h);

	if (!ep)
		return;
	h->sqp = send_qp_create(w);
	if (!h->sqp) {
		sib_log("XRC send QP creation failed (errno %d)", errno);
		return;   /* the timer tries again */
	}
	w->send_qps++;
	if (w->send_qps > w->c.send_qps_max)
		w->c.send_qps_max = w->send_qps;
	h->psn = psn_pick(w);
	if (h->local) {
		h->tqp = recv_qp_create(w, h->sqp->qp_num, h->psn, w->gid.raw,
					w->port.lid);
		if (!h->tqp || send_qp_connect(w, h->sqp, h->tqp->qp_num, h->psn,
					       w->gid.raw, w->port.lid)) {
			host_drop_qps(w, h);
			return;
		}
		h->state = SIB_CONN_UP;
		host_kick(w, h);
		return;
	}
	h->hs_ep = ep;
	h->hs_tries = 0;
	h->hs_start_ms = sib_now_ms();
	h->token = ++w->token_next;
	h->state = SIB_CONN_WAIT_REP;
	hs_request(w, h);
}

/* Post what waits, in order, while the QP and the send CQ have room (one
 * CQE per WR: every send is signalled). */
static void host_kick(sib_worker_t *w, struct sib_host *h)
{
	if (h->state == SIB_CONN_IDLE && !sib_list_empty(&h->pending)) {
		host_connect(w, h);
		return;
	}
	while (h->state == SIB_CONN_UP && !sib_list_empty(&h->pending) &&
	       h->inflight < HOST_WINDOW && w->inflight < SIB_SCQ_DEPTH) {
		struct sib_request *r = SIB_CONTAINER(h->pending.next,
						      struct sib_request, qlink);
		int rc;

		if (r->ep->failed) {
			if (w->in_cm) /* a completion: the application's */
				break;
			sib_list_del(&r->qlink);
			sib_send_finished(w, r, SIB_ERR_PEER_FAILED);
			continue;
		}
		rc = sib_protos[r->proto].post(w, h, r);
		if (rc)
			break;   /* no bounce slot (EAGAIN) or QP full: later */
		sib_list_del(&r->qlink);
		sib_list_add_tail(&h->sent, &r->qlink);
		r->posted = true;
		h->inflight++;
		w->inflight++;
		h->ever_sent = true;
	}
}

void sib_host_submit(sib_worker_t *w, struct sib_host *h, struct sib_request *r)
{
	sib_list_add_tail(&h->pending, &r->qlink);
	host_kick(w, h);
}

/* Every WR of a failed QP has come back: a new QP, and send again. */
static void host_recover(sib_worker_t *w, struct sib_host *h)
{
	host_drop_qps(w, h);
	h->state = SIB_CONN_IDLE;
	/*
	 * The flushed requests go first, in their order: one splice, not a
	 * loop moving them one by one. GCC 12.2 at -O2 miscompiled that
	 * loop once LTO inlined this function into cq_drain's (worker.c):
	 * loop invariant motion took the load of h->retry.prev out of it, as
	 * if the loop's stores through the nodes could not reach the head,
	 * which then moved one request for ever (the loop alone is correct C).
	 */
	sib_list_splice_head(&h->pending, &h->retry);
	h->reconnects++;
	w->c.reconnects++;
	host_kick(w, h);
}

static bool pid_dead(const struct sib_ep *ep)
{
	return kill((pid_t)ep->addr.pid, 0) && errno == ESRCH;
}

/*
 * The unsignalled sends posted before r (h->sent is in posting order, one
 * QP): a send queue completes in order, and a WR in error ends only after
 * every earlier one has ended, each earlier one that failed with a
 * completion of its own (errors are always reported). So an unsignalled
 * send still ahead of r, at any completion of r, was delivered. A
 * signalled one ahead keeps waiting for its own completion (whatever the
 * order the HCA completes READs and atomics in, theirs is theirs).
 */
static void host_ahead_done(sib_worker_t *w, struct sib_host *h,
			    struct sib_request *r)
{
	sib_link_t *e, *n;

	for (e = h->sent.next; e != &r->qlink && e != &h->sent; e = n) {
		struct sib_request *p = SIB_CONTAINER(e, struct sib_request, qlink);

		n = e->next;
		if (!p->unsig)
			continue;
		sib_list_del(&p->qlink);
		h->inflight--;
		w->inflight--;
		sib_send_finished(w, p, SIB_OK);
	}
}

/*
 * A send broke its QP (not a flush): is its receiver gone?  An SRQ the far
 * domain does not know is a process that left.  On this host the pid
 * answers at once.  On another host a broken send proves nothing by
 * itself: its receiver may only have been starved of CPU past the retry
 * timer (2 cores, many busy-polling ranks); the send goes again over a new
 * connection until it has been undeliverable for the peer timeout.
 */
static const char *send_broke_fatal(sib_worker_t *w, struct sib_host *h,
				    struct sib_request *r, enum ibv_wc_status st)
{
	uint64_t now;

	if (st == IBV_WC_REM_INV_REQ_ERR)
		return "its receive queue is gone";
	if (h->local) {
		if (pid_dead(r->ep))
			return "its process is gone";
		return ++r->resends > 3 ? "4 times, its process alive" : NULL;
	}
	now = sib_now_ms();
	r->resends++;
	if (!r->broken_ms)
		r->broken_ms = now;
	return now - r->broken_ms < w->peer_timeout_ms ? NULL :
	       "undeliverable for the peer timeout";
}

void sib_host_send_done(sib_worker_t *w, struct ibv_wc *wc)
{
	struct sib_request *r = (struct sib_request *)(uintptr_t)wc->wr_id;
	struct sib_host *h = r->ep->host;

	host_ahead_done(w, h, r);
	sib_list_del(&r->qlink);
	h->inflight--;
	w->inflight--;
	if (wc->status == IBV_WC_SUCCESS) {
		sib_send_finished(w, r, SIB_OK);
		host_kick(w, h);
		return;
	}
	h->state = SIB_CONN_DRAIN;
	if (sib_rdma_access_error(w, r, wc->status) ||
	    sib_rdma_outcome_lost(w, r, wc->status)) {
		/* an RDMA or atomic refused by the target, or an atomic that
		 * must not go twice (rma.c completed it): the QP is recovered
		 * below */
	} else if (wc->status != IBV_WC_WR_FLUSH_ERR) {
		const char *fatal = send_broke_fatal(w, h, r, wc->status);

		if (getenv("SIB_DEBUG"))
			sib_log("send to %u: %s, %s", r->ep->id,
				ibv_wc_status_str(wc->status),
				fatal ? "peer failed" : "sent again");
		if (fatal) {
			struct sib_ep *ep = r->ep;   /* r may be freed below */
			char why[128];

			snprintf(why, sizeof(why), "a send ended %s (%d tries): %s",
				 ibv_wc_status_str(wc->status), r->resends, fatal);
			sib_send_finished(w, r, SIB_ERR_PEER_FAILED);
			sib_ep_fail(w, ep, why);
		} else {
			sib_list_add_tail(&h->retry, &r->qlink);
		}
	} else if (r->ep->failed) {
		sib_send_finished(w, r, SIB_ERR_PEER_FAILED);
	} else if (sib_rndv_fin_void(r)) {
		/* a rendezvous FIN_W sent behind WRITEs that failed */
		sib_send_finished(w, r, SIB_ERR_CANCELED);
	} else {
		w->c.resent++;
		sib_list_add_tail(&h->retry, &r->qlink);
	}
	if (!h->inflight)
		host_recover(w, h);
}

/*
 * Unsignalled sends sit in h->sent until a signalled WR behind them
 * completes. When nothing follows (the last sends before a flush, or
 * before the application goes quiet), a NOP does: a signalled header-only
 * SEND to the tail's endpoint, in its sequence, which the receiver drops.
 * Its request belongs to the library (freed: released at completion).
 */
void sib_host_close_tail(sib_worker_t *w, struct sib_host *h)
{
	struct sib_hdr hdr = { .type = SIB_MSG_NOP, .proto = SIB_PROTO_SHORT };
	struct sib_request *r, *tail;
	struct sib_ep *ep;

	if (!h->unsig || h->state != SIB_CONN_UP || sib_list_empty(&h->sent))
		return;
	tail = SIB_CONTAINER(h->sent.prev, struct sib_request, qlink);
	ep = tail->ep;
	if (ep->failed || !(r = sib_req_new(w, SIB_REQ_SEND, NULL)))
		return;   /* a failure flushes the tail; no memory: next tick */
	r->ep = ep;
	r->proto = SIB_PROTO_SHORT;
	r->cls = 0;
	r->wire_len = SIB_HDR;
	r->data = r->inl;
	r->freed = true;
	hdr.src = w->id;
	hdr.seq = ep->tx_seq++;
	memcpy(r->data, &hdr, SIB_HDR);
	ep->tx_issued++;
	w->c.tail_nops++;
	h->unsig = 0;   /* whether posted now or queued: it is signalled */
	sib_host_submit(w, h, r);
}

/* Does someone wait on an unsignalled send of the tail: a lazy-callback
 * request its caller still holds? (A send that completed when posted, or
 * one freed, is nobody's business but the library's.) */
static bool tail_wanted(struct sib_host *h)
{
	for (sib_link_t *e = h->sent.prev; e != &h->sent; e = e->prev) {
		struct sib_request *p = SIB_CONTAINER(e, struct sib_request, qlink);

		if (!p->unsig)
			return false;
		if (!p->early && !p->freed)
			return true;
	}
	return false;
}

/*
 * The timer's look (every TIMER_MS): a tail that someone waits on and no
 * post has followed since the last look is closed, so a lazy callback
 * whose request is held runs within two ticks. A tail nobody waits on
 * stays (its requests go with a later completion or the worker): a NOP
 * after the last message to a process that then exits would fail, and
 * declare that peer failed for nothing (test_mpi's spawn children).
 */
void sib_hosts_tails(sib_worker_t *w)
{
	for (sib_link_t *e = w->hosts.next; e != &w->hosts; e = e->next) {
		struct sib_host *h = SIB_CONTAINER(e, struct sib_host, link);

		if (h->unsig && h->tail_posts == h->tail_seen && tail_wanted(h))
			sib_host_close_tail(w, h);
		h->tail_seen = h->tail_posts;
	}
}

/* ---------------- the handshake, receiving side ---------------- */

static void hs_on_req(sib_worker_t *w, const struct sib_hs *m)
{
	struct sib_tqp *t = NULL;
	struct sib_hs rep = { .type = SIB_HS_REP, .to_id = m->from_id,
			      .send_qpn = m->send_qpn, .token = m->token };

	for (sib_link_t *e = w->tqps.next; e != &w->tqps; e = e->next) {
		struct sib_tqp *x = SIB_CONTAINER(e, struct sib_tqp, link);

		if (x->host == m->from_host && x->send_qpn == m->send_qpn) {
			if (x->psn == m->psn) {
				t = x;   /* a request asked again: same answer */
				break;
			}
			/* the sender's QP number came back on a new QP (its old
			 * one failed, e.g. a remote access error, which also
			 * put this receive QP in error): a new receive QP */
			ibv_destroy_qp(x->qp);
			w->c.recv_qps--;
			sib_list_del(&x->link);
			free(x);
			break;
		}
	}
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return;
		t->qp = recv_qp_create(w, m->send_qpn, m->psn, m->gid, m->lid);
		if (!t->qp) {
			sib_log("XRC receive QP for %u failed (errno %d)",
				m->from_id, errno);
			free(t);
			return;
		}
		t->host = m->from_host;
		t->send_qpn = m->send_qpn;
		t->from_id = m->from_id;
		t->psn = m->psn;
		t->recv_qpn = t->qp->qp_num;
		sib_list_add_tail(&w->tqps, &t->link);
	}
	rep.recv_qpn = t->recv_qpn;
	sib_ud_send(w, m->gid, m->lid, m->ud_qpn, &rep);
}

static void hs_on_rep(sib_worker_t *w, const struct sib_hs *m)
{
	for (sib_link_t *e = w->hosts.next; e != &w->hosts; e = e->next) {
		struct sib_host *h = SIB_CONTAINER(e, struct sib_host, link);

		if (h->state != SIB_CONN_WAIT_REP || h->token != m->token ||
		    !h->sqp || h->sqp->qp_num != m->send_qpn)
			continue;
		if (send_qp_connect(w, h->sqp, m->recv_qpn, h->psn, m->gid, m->lid)) {
			sib_log("XRC send QP connect failed (errno %d)", errno);
			return;   /* asked again by the timer */
		}
		h->state = SIB_CONN_UP;
		h->hs_ep = NULL;
		host_kick(w, h);
		return;
	}
}

void sib_ud_rx(sib_worker_t *w, struct ibv_wc *wc)
{
	struct sib_hs m;
	uint8_t *p;

	if (wc->wr_id == UINT64_MAX)   /* a send of ours */
		return;
	p = sib_ud_buf(w, wc->wr_id);
	if (wc->status == IBV_WC_SUCCESS && wc->byte_len >= sizeof(m) + 40) {
		memcpy(&m, p + 40, sizeof(m));   /* after the GRH room */
		if (m.magic == SIB_HS_MAGIC && m.to_id == w->id) {
			if (m.type == SIB_HS_REQ)
				hs_on_req(w, &m);
			else if (m.type == SIB_HS_REP)
				hs_on_rep(w, &m);
			else if (m.type == SIB_HS_PING) {
				struct sib_hs pong = { .type = SIB_HS_PONG,
						       .to_id = m.from_id };
				sib_ud_send(w, m.gid, m.lid, m.ud_qpn, &pong);
			} else if (m.type == SIB_HS_PONG) {
				struct sib_ep *ep = sib_ep_find(w, m.from_id);

				if (ep)
					ep->ping_missed = 0;
			}
		}
	}
	sib_ud_post_recv(w, (uint32_t)wc->wr_id);
}

/* ---------------- timers: handshake retries, liveness ---------------- */

static void hs_timer(sib_worker_t *w, struct sib_host *h, uint64_t now)
{
	if ((h->state == SIB_CONN_IDLE || h->state == SIB_CONN_UP) &&
	    !sib_list_empty(&h->pending)) {
		host_kick(w, h);
		return;
	}
	if (h->state != SIB_CONN_WAIT_REP || now < h->hs_next_ms)
		return;
	if (h->hs_ep->failed || now - h->hs_start_ms >= w->peer_timeout_ms) {
		/* no answer: that process is gone; try through another */
		if (!h->hs_ep->failed)
			sib_ep_fail(w, h->hs_ep, "a connection request "
				    "unanswered for the peer timeout");
		host_drop_qps(w, h);
		h->state = SIB_CONN_IDLE;
		host_kick(w, h);
		return;
	}
	hs_request(w, h);
}

/*
 * Is a peer still there?  On my host, kill(pid, 0) answers at once and
 * costs one system call: every known peer is checked.  On another host a
 * UD ping, only toward peers I wait for (a receive naming them, or
 * wildcard receives while they have talked to me): pings unanswered for
 * the peer timeout (10 s by default), and the peer has failed.  A process
 * starved of CPU for a second or two answers late, not never: a shorter
 * timeout failed live peers of 6 busy-polling ranks on 2 cores.  Under
 * PMIx, its events say a death sooner.
 */
static void liveness(sib_worker_t *w, struct sib_ep *ep, uint64_t now)
{
	struct sib_hs ping = { .type = SIB_HS_PING };

	if (!ep->has_addr || ep->failed || now < ep->ping_next_ms)
		return;
	ep->ping_next_ms = now + PING_MS;
	if (ep->addr.host == w->ctx->host_key) {
		if (pid_dead(ep))
			sib_ep_fail(w, ep, "its process is gone");
		return;
	}
	if (!ep->rx_named && !ep->rndv_wait &&
	    !(w->rx_wild && (ep->rx_seq || ep->tx_issued))) {
		ep->ping_missed = 0;
		return;
	}
	if (++ep->ping_missed > (int)(w->peer_timeout_ms / PING_MS)) {
		sib_ep_fail(w, ep, "pings unanswered for the peer timeout");
		return;
	}
	ping.to_id = ep->id;
	sib_ud_send(w, ep->addr.gid, ep->addr.lid, ep->addr.ud_qpn, &ping);
}

/*
 * The connection thread's share (async.c), while the application is away:
 * handshake messages answered and taken, held messages posted, late
 * requests asked again. A handshake out of tries, and failed peers, wait
 * for the application's timer: they complete requests.
 */
void sib_hosts_cm(sib_worker_t *w)
{
	struct ibv_wc wc[16];
	uint64_t now = sib_now_ms();
	int n;

	while ((n = ibv_poll_cq(w->ucq, 16, wc)) > 0)
		for (int i = 0; i < n; i++)
			sib_ud_rx(w, &wc[i]);
	for (sib_link_t *e = w->hosts.next; e != &w->hosts; e = e->next) {
		struct sib_host *h = SIB_CONTAINER(e, struct sib_host, link);

		if ((h->state == SIB_CONN_IDLE || h->state == SIB_CONN_UP) &&
		    !sib_list_empty(&h->pending))
			host_kick(w, h);
		else if (h->state == SIB_CONN_WAIT_REP && now >= h->hs_next_ms &&
			 !h->hs_ep->failed &&
			 now - h->hs_start_ms < w->peer_timeout_ms)
			hs_request(w, h);
	}
}

void sib_hosts_timer(sib_worker_t *w, uint64_t now)
{
	sib_link_t *e, *n;

	for (e = w->hosts.next; e != &w->hosts; e = n) {
		n = e->next;
		hs_timer(w, SIB_CONTAINER(e, struct sib_host, link), now);
	}
	for (e = w->eps.next; e != &w->eps; e = n) {
		n = e->next;
		liveness(w, SIB_CONTAINER(e, struct sib_ep, link), now);
	}
}

int sib_tqps_count(sib_worker_t *w)
{
	int n = 0;

	for (sib_link_t *e = w->tqps.next; e != &w->tqps; e = e->next)
		n++;
	return n;
}

void sib_hosts_destroy(sib_worker_t *w)
{
	while (!sib_list_empty(&w->hosts)) {
		struct sib_host *h = SIB_CONTAINER(w->hosts.next, struct sib_host, link);

		host_drop_qps(w, h);
		sib_list_del(&h->link);
		free(h);
	}
	while (!sib_list_empty(&w->tqps)) {
		struct sib_tqp *t = SIB_CONTAINER(w->tqps.next, struct sib_tqp, link);

		ibv_destroy_qp(t->qp);
		sib_list_del(&t->link);
		free(t);
	}
	sib_ud_ahs_destroy(w);
}

/* How much the device inlines: a send QP made and dropped at setup. */
int sib_inline_probe(sib_worker_t *w)
{
	struct ibv_qp *qp = send_qp_create(w);

	if (!qp)
		return -1;
	ibv_destroy_qp(qp);
	return 0;
}
