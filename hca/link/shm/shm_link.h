/*
 * The shared-memory link's interface (hca/link/shm/): moving bytes to and
 * from another process of the host (cross-memory attach, mem.c, or the
 * bounce path, mem_bounce.c).
 */
#ifndef HCA_SHM_LINK_H
#define HCA_SHM_LINK_H

#include "hca_int.h"
#include "link_ops.h"

/* shm_ops.c: the link's row in hca_links */
extern const struct hca_link_ops hca_shm_link_ops;

/* mem.c: moving bytes between this process and a buffer of another;
 * keys[i] is the memory key remote[i] was checked against (fence.c) */
int hca_mem_write(struct hca_dev *dev, uint16_t slot, uint32_t gen,
		  const struct iovec *local, int nlocal,
		  const struct iovec *remote, const uint32_t *keys, int nremote);
int hca_mem_read(struct hca_dev *dev, uint16_t slot, uint32_t gen,
		 const struct iovec *local, int nlocal,
		 const struct iovec *remote, const uint32_t *keys, int nremote);

/* mem.c: the link's timer (mem_map.c's sweep) */
void hca_mem_tick(struct hca_dev *dev);

/* mem.c, mem_bounce.c */
void hca_bounce_serve(struct hca_dev *dev);
int hca_bounce_attach(struct hca_dev *dev);
uint64_t hca_bounce_bytes(void);
int hca_bounce_move(struct hca_dev *dev, uint16_t slot, uint32_t gen, bool write,
		    const struct iovec *local, int nlocal,
		    const struct iovec *remote, const uint32_t *keys, int nremote);

#endif
