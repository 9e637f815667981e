/*
 * The shared-memory link's row in the link table (core/link_ops.h): the
 * link between the processes of one host. It sends no packets: the
 * engine runs a WQE against the responder in the requester's own process
 * (sq_progress NULL), and the responder reaches the target's registered
 * buffer through mem_write and mem_read (cross-memory attach, or the bounce path when the
 * kernel refuses it). Its receive side is the bounce requests other
 * processes leave for this one (serve).
 */
#include "shm_link.h"

const struct hca_link_ops hca_shm_link_ops = {
	.name = "shm",
	.open = hca_bounce_attach,
	.serve = hca_bounce_serve,
	.mem_write = hca_mem_write,
	.mem_read = hca_mem_read,
	.tick = hca_mem_tick,
};
