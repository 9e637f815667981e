/* integrity: options, error reporting, the socketpair channel and the verbs
 * setup both sides share. */
#include "integrity.h"

/* ---- options and shared parameters ---- */

struct params P;
const char *tp_who = "integrity"; /* prefix of messages (tp_common.h) */
static int errors_shown;

/* A data error: counted by the caller, shown up to MAX_ERR_SHOW times. */
void report(const char *fmt, ...)
{
	va_list ap;

	if (errors_shown++ >= MAX_ERR_SHOW) {
		if (errors_shown == MAX_ERR_SHOW + 1)
			fprintf(stderr, "%s: (further errors not shown)\n",
				tp_who);
		return;
	}
	fprintf(stderr, "%s: ERROR: ", tp_who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- socketpair records ---- */

/* False if the peer is gone. */
bool chan_try_send(struct chan *ch, const struct rec *r, size_t n)
{
	const uint8_t *p = (const uint8_t *)r;
	size_t left = n * sizeof(*r);

	while (left) {
		ssize_t w = write(ch->fd, p, left);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		left -= (size_t)w;
	}
	return true;
}

void chan_send(struct chan *ch, const struct rec *r, size_t n)
{
	if (!chan_try_send(ch, r, n))
		tp_die("write to the socketpair: %s (the peer is gone)",
		    strerror(errno));
}

/* One record: 1; none within wait_ms: 0; the peer is gone: -1. */
int chan_recv(struct chan *ch, struct rec *r, int wait_ms)
{
	for (;;) {
		if (ch->len >= sizeof(*r)) {
			memcpy(r, ch->buf, sizeof(*r));
			ch->len -= sizeof(*r);
			memmove(ch->buf, ch->buf + sizeof(*r), ch->len);
			return 1;
		}
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		int pr = poll(&pfd, 1, wait_ms);

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return 0;
		ssize_t got = read(ch->fd, ch->buf + ch->len,
				   sizeof(ch->buf) - ch->len);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			return -1;
		ch->len += (size_t)got;
	}
}

void chan_expect(struct chan *ch, struct rec *r, uint32_t tag)
{
	int got = chan_recv(ch, r, STALL_SECS * 1000);

	if (got < 0)
		tp_die("the peer closed the socketpair during setup");
	if (got == 0)
		tp_die("no word from the peer for %d s during setup",
		    STALL_SECS);
	if (r->tag != tag)
		tp_die("setup: record %u where %u was expected", r->tag, tag);
}

/* ---- verbs setup shared by both sides ---- */

struct ibv_context *open_dev(struct port *pt)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	int n, i, err;

	list = ibv_get_device_list(&n);
	if (!list)
		tp_die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), P.dev))
			break;
	if (i == n)
		tp_die("no device %s (is build/lib the libibverbs in use?)",
		    P.dev);
	ctx = ibv_open_device(list[i]);
	if (!ctx)
		tp_die("ibv_open_device %s: %s", P.dev, strerror(errno));
	ibv_free_device_list(list);
	if ((err = ibv_query_port(ctx, 1, &pt->attr)))
		tp_die("ibv_query_port: %s", strerror(err));
	if ((err = ibv_query_gid(ctx, 1, 0, &pt->gid)))
		tp_die("ibv_query_gid: %s", strerror(err));
	return ctx;
}

void *alloc_mem(size_t n)
{
	void *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);

	if (!p)
		tp_die("out of memory (%zu bytes)", n);
	return p;
}

struct ibv_mr *reg(struct ibv_pd *pd, void *p, size_t n, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, p, n, access);

	if (!mr)
		tp_die("ibv_reg_mr of %zu bytes: %s", n, strerror(errno));
	return mr;
}

struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, int type,
			      uint32_t sq, uint32_t rq, uint32_t *inl)
{
	static const enum ibv_qp_type qpt[] = { IBV_QPT_RC, IBV_QPT_UC,
						IBV_QPT_UD };
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = qpt[type],
		.cap = { .max_send_wr = sq, .max_recv_wr = rq,
			 .max_send_sge = MAX_SGE, .max_recv_sge = MAX_SGE,
			 .max_inline_data = 256 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT, err;

	if (!qp)
		tp_die("ibv_create_qp (%s): %s", type_names[type],
		    strerror(errno));
	*inl = ia.cap.max_inline_data;
	if (type == Q_UD) {
		a.qkey = QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
				    IBV_ACCESS_REMOTE_WRITE;
		if (type == Q_RC)
			a.qp_access_flags |= IBV_ACCESS_REMOTE_READ |
					     IBV_ACCESS_REMOTE_ATOMIC;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if ((err = ibv_modify_qp(qp, &a, mask)))
		tp_die("ibv_modify_qp %s to INIT: %s", type_names[type],
		    strerror(err));
	return qp;
}

void fill_ah(struct ibv_ah_attr *ah, uint16_t lid, const uint8_t *gid,
		    bool eth)
{
	memset(ah, 0, sizeof(*ah));
	ah->dlid = lid;
	ah->port_num = 1;
	if (eth) {
		ah->is_global = 1;
		memcpy(ah->grh.dgid.raw, gid, 16);
		ah->grh.hop_limit = 1;
	}
}

/* INIT -> RTR -> RTS.  PSNs derive from the sender id, so both ends know
 * them without saying. */
void connect_qp(struct ibv_qp *qp, int type, uint32_t dqpn,
		       uint16_t dlid, const uint8_t *dgid, bool eth,
		       enum ibv_mtu mtu, uint32_t rq_psn, uint32_t sq_psn)
{
	struct ibv_qp_attr a;
	int mask, err;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (type != Q_UD) {
		a.path_mtu = mtu;
		a.dest_qp_num = dqpn;
		a.rq_psn = rq_psn;
		fill_ah(&a.ah_attr, dlid, dgid, eth);
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
	}
	if (type == Q_RC) {
		a.max_dest_rd_atomic = 16;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if ((err = ibv_modify_qp(qp, &a, mask)))
		tp_die("ibv_modify_qp %s to RTR: %s", type_names[type],
		    strerror(err));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == Q_RC) {
		a.timeout = P.timeout;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 16;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if ((err = ibv_modify_qp(qp, &a, mask)))
		tp_die("ibv_modify_qp %s to RTS: %s", type_names[type],
		    strerror(err));
}

uint32_t psn_of(uint32_t sid, int dir)
{
	return (uint32_t)mix64(P.seed ^ sid ^ ((uint64_t)dir << 40)) &
	       0xffffff;
}

/* QPs per client, and their indexes: local li = ti * qps + q; global
 * gi = client * per_client + li. */
int per_client(void)
{
	return P.ntypes * P.qps;
}

uint32_t ops_of(int gi)
{
	uint64_t nq = (uint64_t)P.procs * per_client();

	return (uint32_t)(P.messages / nq + ((uint64_t)gi < P.messages % nq));
}

uint64_t priv_init(int gi)
{
	return mix64(P.seed ^ 0xa70a70 ^ (uint64_t)gi);
}
