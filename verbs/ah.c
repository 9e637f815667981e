/*
 * Address handles.  An AH is pure data: its contents go down with each UD
 * work request (vb_post_send_ud) and the HCA copies them at post time, so
 * destroying an AH never disturbs a send in flight.  The HCA
 * does not count AHs against their PD; struct vb_pd does, so that
 * ibv_dealloc_pd() refuses a PD that still has some.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_int.h"

/* Lists up to this many WRs long take no allocation. */
#define AH_LIST_STACK 32

/*
 * Post a UD QP's list, each WR's address handle contents handed down
 * (the HCA never reaches back up for them).
 */
int vb_post_send_ud(struct hca_qp *h, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	const struct hca_ah *stack[AH_LIST_STACK], **ahs = stack;
	size_t n = 0, i = 0;
	int rc;

	stack[0] = NULL; /* an empty list reads nothing, but says so */
	for (struct ibv_send_wr *w = wr; w; w = w->next)
		n++;
	if (n > AH_LIST_STACK) {
		ahs = malloc(n * sizeof(*ahs));
		if (!ahs) {
			*bad = wr;
			return ENOMEM;
		}
	}
	for (struct ibv_send_wr *w = wr; w; w = w->next)
		ahs[i++] = w->wr.ud.ah ? &vb_container_of(w->wr.ud.ah, struct vb_ah, ah)->h :
					 NULL;
	rc = hca_qp_post_send_ah(h, wr, ahs, bad);
	if (ahs != stack)
		free(ahs);
	return rc;
}

static int gid_tbl_len(struct ibv_context *context, uint8_t port_num)
{
	struct ibv_port_attr pa;

	if (vb_query_port(context, port_num, &pa, sizeof(pa)))
		return 0;
	return pa.gid_tbl_len;
}

/* A destination is a LID, or a GID through a source GID of ours. */
static int ah_attr_check(struct ibv_context *context,
			 const struct ibv_ah_attr *a)
{
	if (a->port_num < 1 || a->port_num > VB_NUM_PORTS)
		return EINVAL;
	if (a->is_global)
		return a->grh.sgid_index < gid_tbl_len(context, a->port_num) ?
			       0 : EINVAL;
	return a->dlid ? 0 : EINVAL;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct vb_ah *ah;
	int rc;

	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	rc = ah_attr_check(pd->context, attr);
	if (rc) {
		errno = rc;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	ah->h = (struct hca_ah){
		.dlid = attr->dlid,
		.sl = attr->sl,
		.is_global = attr->is_global,
		.port_num = attr->port_num,
		.static_rate = attr->static_rate,
		.src_path_bits = attr->src_path_bits,
		.dgid = attr->grh.dgid,
		.sgid_index = attr->grh.sgid_index,
		.hop_limit = attr->grh.hop_limit,
		.traffic_class = attr->grh.traffic_class,
		.flow_label = attr->grh.flow_label,
		.pd_id = hca_pd_id(vb_pd(pd)->h),
	};
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = 0;
	atomic_fetch_add(&vb_pd(pd)->ahs, 1);
	return &ah->ah;
}

int ibv_destroy_ah(struct ibv_ah *ibah)
{
	if (!ibah)
		return EINVAL;
	atomic_fetch_sub(&vb_pd(ibah->pd)->ahs, 1);
	free(vb_container_of(ibah, struct vb_ah, ah));
	return 0;
}

/*
 * Which of our GIDs a packet was sent to: the source GID of the reply.  A
 * multicast destination is none of ours; the reply then leaves from GID 0.
 */
static int sgid_index_of(struct ibv_context *context, uint8_t port_num,
			 const union ibv_gid *dgid)
{
	int len = gid_tbl_len(context, port_num);

	if (dgid->raw[0] == 0xff)
		return 0;
	for (int i = 0; i < len; i++) {
		union ibv_gid g;

		if (!ibv_query_gid(context, port_num, i, &g) &&
		    !memcmp(&g, dgid, sizeof(g)))
			return i;
	}
	return -1;
}

/*
 * The reply's address is the request's, reversed: the sender's LID becomes
 * the destination, and with a GRH its source GID the destination GID, the
 * GID it was sent to our source GID (IB spec, "Address handles from
 * received messages").
 */
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
			struct ibv_wc *wc, struct ibv_grh *grh,
			struct ibv_ah_attr *ah_attr)
{
	if (!context || !wc || !ah_attr || port_num < 1 ||
	    port_num > VB_NUM_PORTS || ((wc->wc_flags & IBV_WC_GRH) && !grh)) {
		errno = EINVAL;
		return -1;
	}
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (wc->wc_flags & IBV_WC_GRH) {
		uint32_t vtf = be32toh(grh->version_tclass_flow);
		int sgid = sgid_index_of(context, port_num, &grh->dgid);

		if (sgid < 0) {
			errno = ENOENT;
			return -1;
		}
		ah_attr->is_global = 1;
		ah_attr->grh.dgid = grh->sgid;
		ah_attr->grh.sgid_index = (uint8_t)sgid;
		ah_attr->grh.flow_label = vtf & 0xfffff;
		ah_attr->grh.traffic_class = (vtf >> 20) & 0xff;
		ah_attr->grh.hop_limit = 0xff;
	}
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
				     struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}

/*
 * Resolving a GID to an Ethernet MAC and VLAN is for RoCE ports; softib's
 * port is InfiniBand, so there is nothing to resolve.
 */
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
				struct ibv_ah_attr *attr,
				uint8_t eth_mac[ETHERNET_LL_SIZE],
				uint16_t *vid)
{
	return EOPNOTSUPP;
}
