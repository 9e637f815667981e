/*
 * The mapping route (mem_map.c): moving bytes to and from a registered
 * range of another process of the host by memcpy through a mapping of
 * its memory, when that range is a shared mapping of a sealed memfd.
 */
#ifndef HCA_MEM_MAP_H
#define HCA_MEM_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct hca_dev;

/* In a requester: move the bytes through a mapping if every remote range
 * is in a mappable registration (0, or the error of the copy), ENOENT if
 * not (the caller uses cross-memory attach or the bounce path). */
int hca_mem_map_move(struct hca_dev *dev, uint16_t slot, uint32_t gen, bool write,
		     const struct iovec *local, int nlocal,
		     const struct iovec *remote, const uint32_t *keys, int nremote);

/* Unmap the cached mappings whose registration has gone or whose owner
 * died (called on misses, every few thousand moves and by the progress
 * thread through the link's serve). */
void hca_mem_map_sweep(struct hca_dev *dev);

/* Whether the kernel can tell which file backs another process's range
 * (PROCMAP_QUERY, Linux 6.11): without it every move goes by CMA. */
bool hca_mem_map_available(void);

/* Counters of this process: moves by mapping, mappings made, unmapped. */
struct hca_mem_map_stats {
	uint64_t moves, maps, unmaps, refused;
};
void hca_mem_map_stats(struct hca_mem_map_stats *s);

#endif
