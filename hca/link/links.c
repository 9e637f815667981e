/*
 * The wiring of the HCA's layers: the table of links (hca_links, the
 * link interface of core/link_ops.h) and the engine's callbacks that core
 * and the links call upwards through (hca_engine). The one file of hca/
 * that sees every layer; a new link is a folder and a row here.
 */
#include "engine.h"
#include "shm_link.h"
#include "udp_link.h"

const struct hca_link_ops *const hca_links[] = {
	&hca_shm_link_ops,
	&hca_udp_link_ops,
	NULL,
};

const struct hca_link_ops *const hca_link_host = &hca_shm_link_ops;
const struct hca_link_ops *const hca_link_net = &hca_udp_link_ops;

static int engine_deliver(struct hca_dev *dev, struct hca_msg *m)
{
	return hca_resp_execute(dev, m);
}

const struct hca_engine_ops hca_engine = {
	.sq_progress = hca_sq_progress,
	.sq_reap = hca_sq_reap,
	.deliver = engine_deliver,
	.wc_opcode = hca_wc_opcode_of,
};
