/*
 * Moving bytes between this process and a registered buffer of any
 * process of the host: the device's DMA engine.
 *
 * In our own address space it is memcpy. Toward another process it is
 * one cross-memory-attach system call (process_vm_writev/readv: a single
 * copy, kernel to kernel page, without the other process running), to a
 * pid that hca_peer_pid vouches for (pidfd-checked, never a reused pid).
 * Where CMA is refused (ptrace policy, seccomp, SOFTIB_NO_CMA=1) the
 * bounce path of mem_bounce.c takes over. Before either: a range that is
 * a shared mapping of a sealed memfd, mapped here too, is a memcpy
 * (mem_map.c: no system call).
 *
 * The caller checked the memory keys of the remote ranges inside a copy
 * section (fence.c) that lasts until we return: the owner's dereg waits
 * for it. The keys come along for the bounce path, whose copy is made by
 * the target on our behalf and checks them again there.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "shm_link.h"
#include "mem_map.h"

#define IOV_CHUNK 1024 /* IOV_MAX: longer lists go in several calls */

static int cma(pid_t pid, bool write, const struct iovec *local, int nlocal,
	       const struct iovec *remote, int nremote)
{
	size_t want = hca_iov_len(local, nlocal);
	ssize_t got;

	if (nlocal > IOV_CHUNK || nremote > IOV_CHUNK)
		return EINVAL; /* SGE lists are bounded far below this */
	got = write ? process_vm_writev(pid, local, (unsigned long)nlocal, remote,
					(unsigned long)nremote, 0)
		    : process_vm_readv(pid, local, (unsigned long)nlocal, remote,
				       (unsigned long)nremote, 0);
	if (got < 0)
		return errno;
	return (size_t)got == want ? 0 : EFAULT;
}

static int mem_move(struct hca_dev *dev, uint16_t slot, uint32_t gen, bool write,
		    const struct iovec *local, int nlocal,
		    const struct iovec *remote, const uint32_t *keys, int nremote)
{
	pid_t pid;
	int rc;

	if (slot == dev->slot && gen == dev->gen) {
		if (write)
			hca_iov_copy(remote, nremote, local, nlocal);
		else
			hca_iov_copy(local, nlocal, remote, nremote);
		return 0;
	}
	switch (hca_peer_check(dev, slot, gen)) {
	case HCA_LIVE_DEAD:
		return ESRCH;
	case HCA_LIVE_UNKNOWN:
		/* not proven dead, but its pid not vouched for either (we
		 * have no descriptor to spare for a pidfd): the target moves
		 * the bytes itself, through its mailbox */
		return hca_bounce_move(dev, slot, gen, write, local, nlocal, remote, keys,
				       nremote);
	default:
		break;
	}
	rc = hca_mem_map_move(dev, slot, gen, write, local, nlocal, remote, keys, nremote);
	if (rc != ENOENT)
		return rc;
	pid = dev->seg->procs[slot].pid;
	if (!dev->no_cma) {
		rc = cma(pid, write, local, nlocal, remote, nremote);
		if (rc != EPERM && rc != ENOSYS)
			return rc;
		dev->no_cma = true; /* refused once: the policy will not change */
	}
	return hca_bounce_move(dev, slot, gen, write, local, nlocal, remote, keys, nremote);
}

int hca_mem_write(struct hca_dev *dev, uint16_t slot, uint32_t gen,
		  const struct iovec *local, int nlocal,
		  const struct iovec *remote, const uint32_t *keys, int nremote)
{
	return mem_move(dev, slot, gen, true, local, nlocal, remote, keys, nremote);
}

int hca_mem_read(struct hca_dev *dev, uint16_t slot, uint32_t gen,
		 const struct iovec *local, int nlocal,
		 const struct iovec *remote, const uint32_t *keys, int nremote)
{
	return mem_move(dev, slot, gen, false, local, nlocal, remote, keys, nremote);
}

/* The link's timer (the progress thread): unmap what the mapping route
 * holds for registrations that have gone. */
void hca_mem_tick(struct hca_dev *dev)
{
	hca_mem_map_sweep(dev);
}
