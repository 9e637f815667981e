/*
 * mem.c: the regions a process exposes for one-sided operations
 * (sib_mem_map: a user buffer, or memory libsib allocates as a sealed
 * memfd that the host's other processes map), and their packed keys
 * (sib_rkey_pack / unpack). The operations themselves: rma.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sib_rma.h"

/*
 * Memory that libsib allocates for a region (sib_mem_map with addr NULL):
 * a memfd sealed against shrinking and growing, mapped shared. Another
 * process's HCA on the host may then map the same pages and move a put,
 * get or atomic with memcpy instead of a system call (the mapping route,
 * docs/transport.md "One-sided operations"). SIB_MEM_ALLOC=anon asks
 * for private anonymous memory instead (cross-memory attach), as does a
 * failure of memfd_create. Unlike private memory, the pages stay shared
 * with a child after fork. Also the receive buffers of the SRQ classes
 * (worker.c): a sender on the host then fills them with memcpy.
 */
void *sib_mem_alloc(size_t len, int *fd)
{
	const char *v = getenv("SIB_MEM_ALLOC");
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (len + pg - 1) & ~(pg - 1);
	void *p;
	int f;

	*fd = -1;
	if (!v || strcmp(v, "anon")) {
		f = memfd_create("sib_mem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (f >= 0 && !ftruncate(f, (off_t)n) &&
		    !fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
			p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
			if (p != MAP_FAILED) {
				*fd = f;
				return p;
			}
		}
		if (f >= 0)
			close(f);
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void sib_mem_release(void *addr, size_t len, int fd)
{
	munmap(addr, len);
	if (fd >= 0)
		close(fd);
}

SIB_API sib_status_t sib_mem_map(sib_worker_t *w, void *addr, size_t len,
				 sib_mem_t **out)
{
	return sib_mem_map_flags(w, addr, len, 0, out);
}

/*
 * The region's registration (w locked): its own, which unmapping revokes
 * at once; or, SIB_MEM_CACHED, the registration cache's entry for the
 * range (a hit costs a lookup, and unmapping deregisters nothing). The
 * cached kind is for a transport that exposes each large message's buffer
 * once (an MPI BTL's register_mem / deregister_mem around every
 * rendezvous): a registration and a deregistration per message took
 * nearly as long as the copy below 1 MiB on one host, the deregistration
 * waiting for every copy in flight on the host (hca_fence_wait;
 * docs/mpi.md).
 */
static bool mem_register(sib_worker_t *w, struct sib_mem *m, bool cached, int acc)
{
	if (cached) {
		m->reg = sib_reg_get(w, m->addr, m->len, acc);
		m->mr = m->reg ? m->reg->mr : NULL;
	} else {
		m->mr = ibv_reg_mr(w->pd, m->addr, m->len, acc);
	}
	return m->mr != NULL;
}

SIB_API sib_status_t sib_mem_map_flags(sib_worker_t *w, void *addr, size_t len,
				       unsigned flags, sib_mem_t **out)
{
	struct sib_mem *m;
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
	int err;

	if (out)
		*out = NULL;
	if (!w || !out || !len || (flags & ~SIB_MEM_CACHED) ||
	    ((flags & SIB_MEM_CACHED) && !addr))
		return SIB_ERR_INVALID_PARAM;
	m = calloc(1, sizeof(*m));
	if (!m)
		return SIB_ERR_NO_MEMORY;
	m->fd = -1;
	if (!addr) {
		addr = sib_mem_alloc(len, &m->fd);
		if (!addr) {
			free(m);
			return SIB_ERR_NO_MEMORY;
		}
		m->owned = true;
	}
	m->w = w;
	m->addr = addr;
	m->len = len;
	sib_lock(w);
	if (!mem_register(w, m, flags & SIB_MEM_CACHED, acc)) {
		err = errno;
		sib_unlock(w);
		sib_log("sib_mem_map: registration failed (errno %d)", err);
		if (m->owned)
			sib_mem_release(addr, len, m->fd);
		free(m);
		return err == ENOMEM ? SIB_ERR_NO_MEMORY : SIB_ERR_IO;
	}
	sib_list_add_tail(&w->rma->maps, &m->link);
	w->rma->nmaps++;
	sib_unlock(w);
	*out = m;
	return SIB_OK;
}

void sib_mem_free(struct sib_mem *m)
{
	if (m->reg)
		sib_reg_put(m->w, m->reg);
	else
		ibv_dereg_mr(m->mr);
	if (m->owned)
		sib_mem_release(m->addr, m->len, m->fd);
	sib_list_del(&m->link);
	m->w->rma->nmaps--;
	free(m);
}

SIB_API sib_status_t sib_mem_unmap(sib_mem_t *m)
{
	sib_worker_t *w;

	if (!m)
		return SIB_ERR_INVALID_PARAM;
	w = m->w;
	sib_lock(w);
	sib_mem_free(m);
	sib_unlock(w);
	return SIB_OK;
}

SIB_API void *sib_mem_addr(const sib_mem_t *m)
{
	return m ? m->addr : NULL;
}

SIB_API size_t sib_mem_length(const sib_mem_t *m)
{
	return m ? m->len : 0;
}

SIB_API int sib_mem_fd(const sib_mem_t *m)
{
	return m ? m->fd : -1;
}

SIB_API sib_status_t sib_rkey_pack(sib_mem_t *m, void **blob, size_t *len)
{
	struct sib_rkey_blob *b;

	if (blob)
		*blob = NULL;
	if (!m || !blob || !len)
		return SIB_ERR_INVALID_PARAM;
	b = calloc(1, sizeof(*b));
	if (!b)
		return SIB_ERR_NO_MEMORY;
	b->magic = RKEY_MAGIC;
	b->owner = m->w->id;
	b->host = m->w->ctx->host_key;
	b->addr = (uintptr_t)m->addr;
	b->len = m->len;
	b->rkey = m->mr->rkey;
	*blob = b;
	*len = sizeof(*b);
	return SIB_OK;
}

SIB_API void sib_rkey_buffer_free(void *blob)
{
	free(blob);
}

SIB_API sib_status_t sib_rkey_unpack(sib_ep_t *ep, const void *blob,
				     size_t len, sib_rkey_t **out)
{
	const struct sib_rkey_blob *b = blob;
	struct sib_rkey *k;

	if (out)
		*out = NULL;
	if (!ep || !ep->has_addr || !blob || !out || len != sizeof(*b) ||
	    b->magic != RKEY_MAGIC || b->owner != ep->id ||
	    b->host != ep->addr.host)
		return SIB_ERR_INVALID_PARAM;
	k = calloc(1, sizeof(*k));
	if (!k)
		return SIB_ERR_NO_MEMORY;
	k->ep = ep;
	k->addr = b->addr;
	k->len = b->len;
	k->rkey = b->rkey;
	sib_lock(ep->w);
	sib_list_add_tail(&ep->w->rma->rkeys, &k->link);
	ep->w->rma->nrkeys++;
	sib_unlock(ep->w);
	*out = k;
	return SIB_OK;
}

SIB_API void sib_rkey_destroy(sib_rkey_t *k)
{
	sib_worker_t *w;

	if (!k)
		return;
	w = k->ep->w;
	sib_lock(w);
	sib_list_del(&k->link);
	w->rma->nrkeys--;
	sib_unlock(w);
	free(k);
}
