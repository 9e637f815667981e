/*
 * softib_counters.c: `softib counters`: per QP, the link packets,
 * retransmissions, NAKs, RNR NAKs and drops by cause; per process, its UDP
 * link's packets and refusals by cause.
 */
#include <stdio.h>

#include "softib.h"


static const struct col cnt_cols[] = {
	{ "QPN", false }, { "TX_PKTS", true }, { "RX_PKTS", true },
	{ "RETRANS", true }, { "NAK_TX", true }, { "NAK_RX", true },
	{ "RNR_TX", true }, { "RNR_RX", true }, { "D_QKEY", true },
	{ "D_PSN", true }, { "D_ACCESS", true }, { "D_NOWQE", true },
	{ "D_STATE", true }, { "D_LEN", true },
};

#define U64(x) ((unsigned long long)atomic_load(&(x)))

static void cnt_row(struct table *t, const struct hca_qp_ent *e, uint32_t qpn)
{
	size_t r = row_add(t);

	cell(t, r, 0, "0x%06x", qpn);
	cell(t, r, 1, "%llu", U64(e->cnt.tx_pkts));
	cell(t, r, 2, "%llu", U64(e->cnt.rx_pkts));
	cell(t, r, 3, "%llu", U64(e->cnt.retrans));
	cell(t, r, 4, "%llu", U64(e->cnt.naks_sent));
	cell(t, r, 5, "%llu", U64(e->cnt.naks_rcvd));
	cell(t, r, 6, "%llu", U64(e->cnt.rnr_sent));
	cell(t, r, 7, "%llu", U64(e->cnt.rnr_rcvd));
	for (int i = 0; i < HCA_DROP_MAX; i++)
		cell(t, r, 8 + i, "%llu", U64(e->cnt.drops[i]));
	if (atomic_load_explicit(&e->qpn, memory_order_acquire) != qpn)
		t->nrow--;
}

static const struct col link_cols[] = {
	{ "PID", true }, { "TX_PKTS", true }, { "RX_PKTS", true }, { "TX_ERR", true },
	{ "SHORT", true }, { "VERSION", true }, { "OPCODE", true }, { "LENGTH", true },
	{ "PAD", true }, { "ICRC", true }, { "NO_QP", true }, { "FOREIGN", true },
};

void show_counters(const struct view *v)
{
	struct table t = TABLE(cnt_cols);
	struct table l = TABLE(link_cols);

	FOR_EACH_QP_ENT(v, e) {
		uint32_t qpn = atomic_load_explicit(&e->qpn, memory_order_acquire);

		if (qpn)
			cnt_row(&t, e, qpn);
	}
	table_print(&t, "no QP on this host");
	for (uint16_t s = 0; s < HCA_MAX_PROCS; s++) {
		const struct hca_proc *p = &v->seg->procs[s];
		size_t r;

		if (atomic_load(&p->state) != HCA_PROC_LIVE)
			continue;
		r = row_add(&l);
		cell(&l, r, 0, "%d", (int)p->pid);
		cell(&l, r, 1, "%llu", U64(p->link.tx_pkts));
		cell(&l, r, 2, "%llu", U64(p->link.rx_pkts));
		cell(&l, r, 3, "%llu", U64(p->link.tx_errors));
		for (int k = 1; k <= 6; k++)
			cell(&l, r, 3 + k, "%llu", U64(p->link.bad[k]));
		cell(&l, r, 10, "%llu", U64(p->link.unknown_qp));
		cell(&l, r, 11, "%llu", U64(p->foreign_dgrams));
	}
	printf("\nUDP link, per process (packets refused by cause; FOREIGN: "
	       "datagrams from other users dropped at its sockets)\n");
	table_print(&l, "no process on this host");
}

