/*
 * The device as one process sees it: the process's slot in the host's
 * segment, its doorbell socket, its links opened and closed (the watch on
 * its peers is peers.c, its progress thread progress.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hca_int.h"
#include "link_ops.h"
#include "progress.h"

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hca_dev *the_dev;

/* Abstract socket names live in the network namespace: a host. */
static socklen_t db_addr(struct hca_dev *dev, struct sockaddr_un *a, uint16_t slot,
			 uint32_t gen)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1,
			 "softib-%u-%08x-db-%u-%u", (unsigned)getuid(), dev->seg->nonce,
			 slot, gen);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int hca_dev_notify(struct hca_dev *dev, uint16_t slot, uint32_t gen,
		   const void *msg, size_t len)
{
	struct sockaddr_un a;
	socklen_t al = db_addr(dev, &a, slot, gen);

	/* never dropped: a full queue keeps it for the progress thread */
	return hca_wake_post(dev, slot, gen, &a, al, msg, len);
}

/* ---- peers ---- */
/* ---- open / close ---- */

static int dev_attach(struct hca_dev *dev)
{
	struct sockaddr_un a;
	socklen_t al;
	int rc;

	hca_seg_lock(dev->seg);
	rc = hca_proc_attach(dev->seg, &dev->slot, &dev->gen);
	hca_seg_unlock(dev->seg);
	if (rc)
		return rc;
	dev->db_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (dev->db_fd < 0)
		return errno;
	rc = hca_sock_pass_creds(dev->db_fd); /* before the name exists */
	if (rc)
		return rc;
	al = db_addr(dev, &a, dev->slot, dev->gen);
	if (bind(dev->db_fd, (struct sockaddr *)&a, al))
		return errno;
	return 0;
}

static void dev_free(struct hca_dev *dev)
{
	if (dev->progress_started) {
		uint64_t one = 1;
		if (write(dev->stop_fd, &one, sizeof(one)) == sizeof(one))
			pthread_join(dev->progress, NULL);
	}
	for (int s = 0; s < HCA_MAX_PROCS; s++)
		if (dev->peers[s].pidfd >= 0)
			close(dev->peers[s].pidfd);
	/* the links whose open was tried, a failed one included (it may
	 * hold part of what it took) */
	for (int i = 0; i < dev->links_opened; i++)
		if (hca_links[i]->close)
			hca_links[i]->close(dev);
	hca_wake_fini(dev);
	if (dev->seg && dev->gen)
		hca_reclaim_slot(dev->seg, dev->slot, dev->gen);
	if (dev->db_fd >= 0)
		close(dev->db_fd);
	if (dev->epfd >= 0)
		close(dev->epfd);
	if (dev->timer_fd >= 0)
		close(dev->timer_fd);
	if (dev->stop_fd >= 0)
		close(dev->stop_fd);
	if (dev->seg)
		hca_seg_unmap(dev->seg, dev->seg_len, dev->seg_lock_fd);
	if (dev->qp_tab)
		munmap(dev->qp_tab, HCA_MAX_QP * sizeof(*dev->qp_tab));
	if (dev->xrc_local)
		munmap(dev->xrc_local, HCA_MAX_QP * sizeof(*dev->xrc_local));
	free(dev);
}

static void *sparse_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static int tables_map(struct hca_dev *dev)
{
	dev->qp_tab = sparse_map(HCA_MAX_QP * sizeof(*dev->qp_tab));
	dev->xrc_local = sparse_map(HCA_MAX_QP * sizeof(*dev->xrc_local));
	return dev->qp_tab && dev->xrc_local ? 0 : ENOMEM;
}

static struct hca_dev *dev_create(void)
{
	struct hca_dev *dev = calloc(1, sizeof(*dev));
	const char *nc = getenv("SOFTIB_NO_CMA");
	int rc;

	if (!dev)
		return NULL;
	dev->db_fd = dev->epfd = dev->timer_fd = dev->stop_fd = dev->seg_lock_fd = -1;
	dev->wake.timer_fd = -1;
	for (int s = 0; s < HCA_MAX_PROCS; s++)
		dev->peers[s].pidfd = -1;
	hca_test_fail_env();
	rc = hca_mutex_init(&dev->lock);
	if (rc) {
		free(dev);
		errno = rc;
		return NULL;
	}
	rc = hca_mutex_init(&dev->link_watch_lock);
	if (!rc)
		rc = hca_wake_init(dev);
	if (rc)
		goto err;
	/* by QP number: 16 M slots of address space, pages touched where
	 * our QPs are (tables_map) */
	rc = tables_map(dev);
	if (rc)
		goto err;
	dev->pid = getpid();
	dev->no_cma = nc && *nc && strcmp(nc, "0");
	rc = hca_host_net_probe(&dev->net);
	if (rc)
		goto err;
	dev->guid = hca_node_guid(&dev->net, getuid());
	dev->lid = hca_host_lid(&dev->net);
	dev->mtu = hca_mtu_for_ifmtu(dev->net.ifmtu);
	rc = hca_seg_map(&dev->seg, &dev->seg_len, &dev->seg_lock_fd);
	if (rc)
		goto err;
	rc = dev_attach(dev);
	if (rc)
		goto err;
	HCA_LINKS_EACH(l) {
		dev->links_opened++;
		rc = l->open ? l->open(dev) : 0;
		if (rc)
			goto err;
	}
	rc = hca_progress_start(dev);
	if (rc)
		goto err;
	hca_dev_reap(dev); /* nothing of a process dead before us is left */
	return dev;
err:
	dev_free(dev);
	errno = rc;
	return NULL;
}

/*
 * A process that exits with its device open still pays the ACKs it owes
 * (udp_ack.c): the messages they acknowledge were received, and without
 * them the peers would retry into a process that is gone.
 */
__attribute__((destructor)) static void acks_at_exit(void)
{
	struct hca_dev *dev = the_dev;

	if (dev && dev->pid == getpid())
		hca_progress(dev, HCA_PROGRESS_ACKS_ALL | HCA_PROGRESS_WAIT);
}

/*
 * One device per process. A child after fork() does not inherit its
 * parent's slot: it gets a device of its own when it opens one.
 */
struct hca_dev *hca_dev_get(void)
{
	struct hca_dev *dev;

	pthread_mutex_lock(&dev_lock);
	if (the_dev && the_dev->pid != getpid())
		the_dev = NULL; /* the parent's, inherited by fork */
	if (!the_dev)
		the_dev = dev_create();
	if (the_dev)
		the_dev->refcnt++;
	dev = the_dev;
	pthread_mutex_unlock(&dev_lock);
	return dev;
}

void hca_dev_put(struct hca_dev *dev)
{
	pthread_mutex_lock(&dev_lock);
	if (--dev->refcnt == 0) {
		if (the_dev == dev)
			the_dev = NULL;
		dev_free(dev);
	}
	pthread_mutex_unlock(&dev_lock);
}

/* ---- queries ---- */

int hca_dev_query_device(struct hca_dev *dev, struct ibv_device_attr_ex *attr,
			 size_t attr_size)
{
	return hca_fill_device_attr_ex(attr, attr_size, dev->guid);
}

int hca_dev_query_port(struct hca_dev *dev, uint8_t port,
		       struct ibv_port_attr *attr, size_t attr_size)
{
	if (port != 1)
		return EINVAL;
	return hca_fill_port_attr(attr, attr_size, dev->lid, dev->mtu);
}

int hca_dev_query_gid(struct hca_dev *dev, uint8_t port, int index,
		      union ibv_gid *gid)
{
	if (port != 1)
		return EINVAL;
	return hca_gid_entry(&dev->net, dev->guid, index, gid);
}

int hca_dev_query_pkey(struct hca_dev *dev, uint8_t port, int index,
		       uint16_t *pkey)
{
	if (port != 1 || index < 0 || index >= HCA_PKEY_TBL_LEN)
		return EINVAL;
	*pkey = htobe16(HCA_DEFAULT_PKEY);
	return 0;
}

__be64 hca_dev_guid(struct hca_dev *dev)
{
	return dev->guid;
}

/*
 * Every sysfs file is a function of the host's network and the user alone
 * (dev_attr.c), so a read is answered from them without a device: tools
 * and rdma-core programs read these files often, and opening a device
 * costs a slot in the segment, a UDP port and a progress thread.
 */
ssize_t hca_host_sysfs_read(const char *relpath, char *buf, size_t size)
{
	struct hca_host_net net;
	int rc = hca_host_net_probe(&net);

	if (rc) { /* as opening the device would have failed */
		errno = rc;
		return -1;
	}
	return hca_sysfs_read(&net, hca_node_guid(&net, getuid()), relpath, buf, size);
}

__be64 hca_host_guid(void)
{
	struct hca_host_net net;

	if (hca_host_net_probe(&net))
		memset(&net, 0, sizeof(net));
	return hca_node_guid(&net, getuid());
}
