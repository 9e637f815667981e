/*
 * libFuzzer target over what the UDP link does with a datagram it
 * receives: the packet parser (wire.c), the requester's handling of ACKs,
 * NAKs, READ responses and atomic ACKs (udp_req.c), and the responder's
 * PSN checks, message assembly and execution against memory keys, MR
 * bounds and Q_Keys (udp_resp.c, resp.c). Datagrams go in through
 * hca_link_inject, the same dispatch as datagrams read from the socket.
 *
 * One process and one device with SOFTIB_LINK=udp, so that every
 * connected QP's path is the UDP link. The first call builds:
 *   - RC a<->b, UC a<->b, UD a and b, an RC pair whose receiving side
 *     takes its receives from an SRQ, an XRC initiator and target (a
 *     private domain and an XRC SRQ), and a "lonely" RC requester whose
 *     peer does not exist, so that every answer it ever sees is the
 *     fuzzer's;
 *   - four memory regions, each its own allocation so that AddressSanitizer
 *     catches an overrun of any: full remote access (iova 0x10000), remote
 *     read only (iova 0x20000), local write only (the receive and local
 *     buffers), and full access under a second PD (iova 0x10000 again).
 * The device's progress thread is stopped: the harness reads the UDP
 * socket (our own QPs' answers to each other come back through it), the
 * doorbell and the CQ itself, so a run is one thread.
 *
 * Every input starts from the same state: QPs reset and connected again
 * with fixed PSNs, receives posted, memory filled with a pattern; so an
 * input replays the same way on its own (only the QPs given an ACK
 * timeout read the clock). The input is a sequence of records; see
 * next_record() for the format and the P_* flags for how a packet is
 * steered to a live QP with the PSN, R_Key and ICRC it needs to get
 * past the first checks. Two oracles besides the sanitizers: the
 * remote-read-only region and the second PD's region are never changed,
 * whatever arrives.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hca_int.h"
#include "udp_link.h" /* hca_link_inject, the wire format */
#include "fuzz_packet.h"
#include "fuzz_world.h"

/* ---- draining what the device produced ---- */

static bool socket_pending(void)
{
	int n = 0;

	return ioctl(F.dev->link.fd, FIONREAD, &n) == 0 && n > 0;
}

static int drain_doorbell(void)
{
	struct hca_db_msg m;
	int n = 0;

	while (recv(F.dev->db_fd, &m, sizeof(m), MSG_DONTWAIT) == sizeof(m)) {
		hca_db_dispatch(F.dev, &m);
		n++;
	}
	return n;
}

static void drain_async(void)
{
	char buf[64];

	while (recv(hca_ctx_async_fd(F.ctx), buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

static void trace_wc(const struct ibv_wc *wc, int n)
{
	for (int k = 0; k < n; k++) {
		int q = -1;

		for (int i = 0; i < NQP; i++)
			if (F.qpn[i] == wc[k].qp_num)
				q = i;
		fprintf(stderr, "  wc: qp %d wr_id %#llx status %d opcode %d len %u\n", q,
			(unsigned long long)wc[k].wr_id, wc[k].status,
			wc[k].opcode, wc[k].byte_len);
	}
}

/*
 * Let the device run to quiescence: doorbell messages (flushes, events),
 * our own answers to our own QPs coming back through the socket (polling
 * reads the socket), timers, completions. What one record starts settles
 * in a few rounds (a round reads up to 256 datagrams; every retry count
 * of the world is finite). A forged stream that leaves a requester and a
 * responder disagreeing takes longer: they go back and forth until the
 * requester's 64 go-backs without progress end it (udp_req.c), a few
 * hundred rounds. Two QPs still answering each other after DRAIN_ROUNDS
 * rounds are a livelock, which in a real process would never end:
 * reported as a crash.
 */
#define DRAIN_ROUNDS 4096

static void drain(void)
{
	struct ibv_wc wc[64];

	for (int round = 0; round < DRAIN_ROUNDS; round++) {
		int busy = drain_doorbell(), n = hca_cq_poll(F.cq, 64, wc, NULL);

		if (F.trace && n > 0)
			trace_wc(wc, n);
		busy += n > 0;
		if (!busy && !socket_pending()) {
			drain_async();
			return;
		}
	}
	fprintf(stderr, "fuzz_packet: QPs still exchanging packets after %d rounds "
		"of up to 256 datagrams: a livelock\n", DRAIN_ROUNDS);
	for (int i = 0; i < NQP; i++) {
		struct hca_qp *qp = F.qp[i];

		fprintf(stderr, "  QP %d (%#x): state %d, SQ head %u next %u tail %u, "
			"PSN %#x acked %#x, expected PSN %#x\n", i, F.qpn[i],
			hca_qp_state(qp), qp->sq_head, qp->sq_next, qp->sq_tail, qp->psn,
			qp->acked_psn, qp->epsn);
	}
	abort();
}

static void discard_datagrams(void)
{
	uint8_t buf[64];

	while (recv(F.dev->link.fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
		;
}

/* Back to the state every input starts from. */
static void baseline(void)
{
	struct ibv_wc wc[64];

	discard_datagrams();
	drain_doorbell();
	for (int i = 0; i < NQP; i++) {
		int rc = connect_qp(i);

		if (rc) {
			fprintf(stderr, "fuzz_packet: QP %d: connect step %d failed\n", i, -rc);
			abort();
		}
		forget_private_state(F.qp[i]);
	}
	empty_srq(F.srq);
	empty_srq(F.xsrq);
	while (hca_cq_poll(F.cq, 64, wc, NULL) > 0)
		;
	discard_datagrams();
	drain_doorbell();
	drain_async();
	for (int r = 0; r < NREG; r++)
		memcpy(F.reg[r], F.image[r], reg_def[r].len);
	post_baseline_recvs();
}

/* Regions no remote request may change. */
static void check_untouched(void)
{
	static const int keep[] = { R_RDONLY, R_OTHERPD };

	for (size_t j = 0; j < sizeof(keep) / sizeof(keep[0]); j++) {
		int r = keep[j];

		if (!memcmp(F.reg[r], F.image[r], reg_def[r].len))
			continue;
		for (size_t k = 0; k < reg_def[r].len; k++)
			if (F.reg[r][k] != F.image[r][k]) {
				fprintf(stderr, "fuzz_packet: region %d (%s) changed at byte %zu\n",
					r, r == R_RDONLY ? "remote read only" : "other PD", k);
				abort();
			}
	}
}


static struct hca_qp *our_qp(uint32_t qpn)
{
	for (int i = 0; i < NQP; i++)
		if (F.qpn[i] == qpn)
			return F.qp[i];
	return NULL;
}

/*
 * The PSN a packet for qp should carry to be taken: the responder's
 * expected PSN for a request, the oldest unacknowledged PSN for an
 * answer. The low byte of the PSN the input gave is a signed delta
 * from there, so duplicates and gaps stay reachable.
 */
static void patch_psn(uint8_t *pkt, const struct hca_wire_op_info *oi)
{
	struct hca_qp *qp = our_qp(hca_bth_dqpn(pkt));
	int8_t delta = (int8_t)(hca_bth_psn(pkt) & 0xff);
	uint32_t base;

	if (!qp)
		return;
	base = oi->flags & HCA_WF_RESPONSE ? hca_psn_add(qp->acked_psn, 1) : qp->epsn;
	hca_bth_set_psn(pkt, hca_psn_add(base, delta));
}

static void patch_keys(uint8_t *pkt)
{
	uint8_t *h;

	h = (uint8_t *)hca_wire_ext(pkt, HCA_EXT_RETH);
	if (h)
		hca_reth_set_rkey(h, F.keys[hca_reth_rkey(h) % NKEYS]);
	h = (uint8_t *)hca_wire_ext(pkt, HCA_EXT_ATOMICETH);
	if (h)
		hca_atomiceth_set_rkey(h, F.keys[hca_atomiceth_rkey(h) % NKEYS]);
	h = (uint8_t *)hca_wire_ext(pkt, HCA_EXT_XRCETH);
	if (h)
		hca_xrceth_set_srqn(h, F.srqn[hca_xrceth_srqn(h) % 3]);
}

static void inject(uint8_t ctl, uint8_t sel, const uint8_t *data, size_t len)
{
	static uint8_t pkt[HCA_PKT_MAX + 256];
	const struct hca_wire_op_info *oi;

	memcpy(pkt, data, len);
	if (ctl & P_ALIGN)
		len &= ~(size_t)3;
	if (len >= HCA_BTH_LEN + HCA_ICRC_LEN) {
		if (ctl & P_QPN)
			hca_bth_set_dqpn(pkt, F.qpn[sel % NQP]);
		if (ctl & P_TRANSPORT) {
			struct hca_qp *qp = our_qp(hca_bth_dqpn(pkt));

			if (qp)
				pkt[0] = (uint8_t)(hca_wire_transport(qp->type) | (pkt[0] & 0x1f));
		}
		oi = hca_wire_op(hca_bth_opcode(pkt));
		/* the extension headers are there only if the opcode's are */
		if (oi && len >= (size_t)oi->hdr_len + HCA_ICRC_LEN) {
			if (ctl & P_PSN)
				patch_psn(pkt, oi);
			if (ctl & P_KEYS)
				patch_keys(pkt);
		}
		if (!(ctl & P_RAW_ICRC)) {
			struct hca_ip4udp ip = { .saddr = F.ip, .daddr = F.ip,
						 .sport = F.dev->link.base,
						 .dport = F.dev->link.base };
			uint32_t icrc = hca_wire_icrc(&ip, pkt, len);

			for (int i = 0; i < 4; i++)
				pkt[len - 4 + i] = (uint8_t)(icrc >> (8 * i));
		}
	}
	/* always from our own address: answers must not leave the host */
	if (F.trace) {
		struct hca_link *l = &F.dev->link;
		uint64_t rx = atomic_load(&l->cnt->rx_pkts), other = atomic_load(&l->cnt->unknown_qp);
		int err = hca_wire_parse(pkt, len, NULL, NULL, NULL, NULL);
		const char *what;

		hca_link_inject(F.dev, pkt, len, F.ip);
		what = atomic_load(&l->cnt->rx_pkts) != rx ? "dispatched" :
		       atomic_load(&l->cnt->unknown_qp) != other ? "no such QP" :
		       err ? hca_wire_strerror(err) : "bad ICRC";
		fprintf(stderr, "packet: %zu bytes, opcode %#x to QPN %#x PSN %#x: %s\n",
			len, len ? pkt[0] : 0, len >= HCA_BTH_LEN ? hca_bth_dqpn(pkt) : 0,
			len >= HCA_BTH_LEN ? hca_bth_psn(pkt) : 0, what);
		return;
	}
	hca_link_inject(F.dev, pkt, len, F.ip);
}

/* ---- action records: work the requesters and queues ---- */

static const int requesters[] = { Q_RC_A, Q_UC_A, Q_UD_A, Q_SRQ_A, Q_XRC_INI, Q_LONELY,
				  Q_RC_B };
#define NREQ (int)(sizeof(requesters) / sizeof(requesters[0]))

static const enum ibv_wr_opcode send_ops[] = {
	IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
	IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
};
#define NOPS (int)(sizeof(send_ops) / sizeof(send_ops[0]))

/*
 * a[0] requester, a[1] opcode, a[2..3] length, a[4] remote offset / 8,
 * a[5] rkey choice (bits 0-2), signaled, solicited, two SGEs, inline.
 */
static void act_post_send(const uint8_t *a)
{
	int qi = requesters[a[0] % NREQ];
	enum ibv_wr_opcode op = send_ops[a[1] % NOPS];
	uint32_t len = (a[2] | (uint32_t)a[3] << 8) % 5000;
	uintptr_t base = (uintptr_t)F.reg[R_LOCAL], end = base + reg_def[R_LOCAL].len;
	uint64_t raddr = (a[1] & 0x80 ? reg_def[R_RDONLY].iova : reg_def[R_FULL].iova) +
			 (uint64_t)a[4] * 8;
	struct ibv_sge sge[2] = { { 0, len, F.keys[R_LOCAL] } };
	struct ibv_send_wr wr = { .wr_id = 0x9000 | (uint64_t)qi, .sg_list = sge,
				  .num_sge = 1, .opcode = op }, *bad;

	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		sge[0].length = a[2] & 1 ? a[2] % 16 : 8;
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = F.keys[(a[5] & 7) % NKEYS];
		wr.wr.atomic.compare_add = 0xa5a5a5a5a5a5a5a5ULL ^ a[3];
		wr.wr.atomic.swap = 0x0123456789abcdefULL;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = F.keys[(a[5] & 7) % NKEYS];
	}
	if (a[5] & 0x20 && len > 1) {
		sge[0].length = len / 2;
		sge[1] = (struct ibv_sge){ base + 16384, len - len / 2, F.keys[R_LOCAL] };
		wr.num_sge = 2;
	}
	/* the first SGE ends where the region does: ASan sees any overrun */
	sge[0].addr = end - sge[0].length;
	if (a[5] & 0x08)
		wr.send_flags |= IBV_SEND_SIGNALED;
	if (a[5] & 0x10)
		wr.send_flags |= IBV_SEND_SOLICITED;
	if (a[5] & 0x40 && len <= 64)
		wr.send_flags |= IBV_SEND_INLINE;
	wr.imm_data = htobe32(0xc0de0000u | a[4]);
	if (qi == Q_UD_A) {
		wr.wr.ud.ah = (struct ibv_ah *)&fuzz_ah;
		wr.wr.ud.remote_qpn = F.qpn[a[4] & 1 ? Q_UD_A : Q_UD_B];
		wr.wr.ud.remote_qkey = a[4] & 2 ? QKEY ^ 1 : QKEY;
	}
	if (qi == Q_XRC_INI)
		wr.qp_type.xrc.remote_srqn = F.srqn[a[4] % 3];
	hca_qp_post_send_ah(F.qp[qi], &wr, fuzz_ah_list, &bad);
}

/* a[0] queue (an RQ or an SRQ), a[1] receive shape. */
static void act_post_recv(const uint8_t *a)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge[2];
	unsigned q = a[0] % (NQP + 2);

	recv_wr(a[1], 0x8000 | a[0], &wr, sge);
	if (q == NQP)
		hca_srq_post_recv(F.srq, &wr, &bad);
	else if (q == NQP + 1)
		hca_srq_post_recv(F.xsrq, &wr, &bad);
	else if (qp_has_rq((int)q))
		hca_qp_post_recv(F.qp[q], &wr, &bad);
}

/* a[0] QP, a[1] what: error, drain (SQD), resume (RTS), reset and connect. */
static void act_modify(const uint8_t *a)
{
	int i = a[0] % NQP;
	struct ibv_qp_attr attr = { 0 };

	switch (a[1] & 3) {
	case 0:
		attr.qp_state = IBV_QPS_ERR;
		hca_qp_modify(F.qp[i], &attr, IBV_QP_STATE);
		break;
	case 1:
		attr.qp_state = IBV_QPS_SQD;
		hca_qp_modify(F.qp[i], &attr, IBV_QP_STATE);
		break;
	case 2:
		attr.qp_state = IBV_QPS_RTS;
		hca_qp_modify(F.qp[i], &attr, IBV_QP_STATE);
		break;
	default:
		/* what RESET leaves (see forget_private_state) is kept here */
		connect_qp(i);
		break;
	}
}

/*
 * An inline receive slot as another process might have filled it
 * (hca/cq_inline.c): the record's bytes become the slot's header and
 * payload (niov, len, target ranges and lkeys, data), a completion naming
 * slot `sel` (possibly none, or out of range) goes into the CQ, and the
 * poll copies the payload out — only into our regions with local write
 * access, never past a range (the sanitizers and check_untouched watch).
 * With `steer`, the first range is made to point into the local region
 * with its key, so that inputs reach the copy.
 */
static void inline_slot(uint8_t sel, bool steer, const uint8_t *d, size_t len)
{
	struct hca_inl_pool *p = hca_seg_ptr(F.dev->seg, F.cq->ent->inl_off);
	struct hca_cqe c = { .wr_id = 0x1711, .opcode = IBV_WC_RECV, .inl = sel };
	struct hca_inl_slot *s;
	uint32_t k;

	if (!p || !p->nslots)
		return;
	k = sel ? (sel - 1u) % p->nslots : 0;
	s = hca_inl_slot(p, k);
	if (len > p->stride - sizeof(s->state))
		len = p->stride - sizeof(s->state);
	memcpy((uint8_t *)s + sizeof(s->state), d, len);
	if (steer) {
		s->iov[0].addr = (uintptr_t)F.reg[R_LOCAL] + (s->iov[0].addr & 0x3fff);
		s->iov[0].len &= 0x3fff;
		s->iov[0].lkey = F.keys[R_LOCAL];
	}
	atomic_store_explicit(&s->state, 2 /* READY */, memory_order_release);
	hca_cq_push(F.dev, F.cq->idx, &c, false);
	drain();
	/* a slot no completion named stays READY: give it back */
	atomic_store_explicit(&s->state, 0 /* FREE */, memory_order_release);
}

/*
 * A receive completion with its payload embedded in its CQ slot
 * (hca/core/cq_embed.c) as another process might have written it: the
 * record's bytes become what follows the completion's state word in the
 * slot (len, niov, target ranges and lkeys, data), the push stamps it
 * READY at the slot's position, and the poll copies the payload out —
 * only into our regions with local write access, never past a range or
 * the slot. With `steer`, as for inline_slot.
 */
static void embedded_slot(bool steer, const uint8_t *d, size_t len)
{
	struct hca_cqe_buf b = { .c = { .wr_id = 0x1712, .opcode = IBV_WC_RECV,
					.inl = HCA_INL_EMBED } };
	struct hca_cqe_emb *x = (struct hca_cqe_emb *)b.ext;
	uint32_t body = atomic_load(&F.cq->ring)->stride - 8;
	size_t head = sizeof(b.c) + sizeof(x->state);
	struct hca_claim *cl;

	if (body <= head)
		return; /* slots of one line: nothing is embedded */
	if (len > body - head)
		len = body - head;
	memcpy((uint8_t *)x + sizeof(x->state), d, len);
	if (steer && len >= offsetof(struct hca_cqe_emb, iov) + sizeof(x->iov[0])) {
		x->iov[0].addr = (uintptr_t)F.reg[R_LOCAL] + (x->iov[0].addr & 0x3fff);
		x->iov[0].len &= 0x3fff;
		x->iov[0].lkey = F.keys[R_LOCAL];
	}
	cl = hca_claim_get(F.dev);
	hca_cq_push_body(F.dev, cl, F.cq->idx, &b, (uint32_t)(head + len), false, false);
	hca_claim_put(F.dev, cl);
	drain();
}

/*
 * The input, record after record:
 *   packet: ctl (bit 7 clear: P_* flags), sel, len (16 bits, little
 *           endian; clipped to what is left), then len bytes: one datagram
 *           as it would arrive (BTH .. ICRC)
 *   action: ctl (bits 7-6 = 10; bits 0-1: post send, post receive,
 *           modify QP, run), then 6 argument bytes (zeros past the end of
 *           the input)
 *   inline slot: ctl (bits 7-6 = 11; bit 0: steer; bit 1: embedded in
 *           the completion's CQ slot instead, sel unused), sel (the slot
 *           the completion names, 0: none), len (16 bits, little endian;
 *           clipped), then len bytes: the slot past its state word
 * The device is drained after every record.
 */
static size_t next_record(const uint8_t *d, size_t n)
{
	uint8_t ctl = d[0];

	if ((ctl & 0xc0) == 0xc0) {
		size_t len;

		if (n < 4)
			return n;
		len = d[2] | (size_t)d[3] << 8;
		if (len > n - 4)
			len = n - 4;
		if (ctl & 2)
			embedded_slot(ctl & 1, d + 4, len);
		else
			inline_slot(d[1], ctl & 1, d + 4, len);
		return 4 + len;
	}
	if (ctl & 0x80) {
		uint8_t a[6] = { 0 };
		size_t take = n - 1 < sizeof(a) ? n - 1 : sizeof(a);

		memcpy(a, d + 1, take);
		switch (ctl & 3) {
		case 0:
			act_post_send(a);
			break;
		case 1:
			act_post_recv(a);
			break;
		case 2:
			act_modify(a);
			break;
		default:
			break; /* only the drain below */
		}
		drain();
		return 1 + take;
	}
	if (n < 4)
		return n;
	size_t len = d[2] | (size_t)d[3] << 8;

	if (len > n - 4)
		len = n - 4;
	if (len > HCA_PKT_MAX + 256)
		len = HCA_PKT_MAX + 256;
	inject(ctl, d[1], d + 4, len);
	drain();
	return 4 + len;
}

/*
 * FUZZ_PACKET_SEEDS=dir: write the seed corpus there and exit (how
 * test/fuzz/corpus/ was made), instead of fuzzing.
 */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("FUZZ_PACKET_SEEDS");

	(void)argc;
	(void)argv;
	if (dir)
		exit(fuzz_write_seeds(dir));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;

	if (!ready) {
		fuzz_setup();
		ready = true;
	}
	baseline();
	while (size) {
		size_t used = next_record(data, size);

		data += used;
		size -= used;
	}
	check_untouched();
	return 0;
}
