/*
 * The device list and the device's identity: one device, softib0, that
 * every process of the user sees; and the sysfs files tools read about it.
 *
 * The struct ibv_device is a constant: the list handed out by
 * ibv_get_device_list() is a fresh array each call, pointing at it, so that
 * a device stays valid after ibv_free_device_list() for whoever opened it,
 * as the man page requires, and nothing here is mutable global state.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs_int.h"

/* verbs.h may turn these into macros; the exported functions are real. */
#undef ibv_get_device_list

static struct ibv_device softib_device = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = VB_DEV_NAME,
	.dev_name = VB_UVERBS_NAME,
	.dev_path = VB_DEV_PATH,
	.ibdev_path = VB_IBDEV_PATH,
};

bool vb_device_is_ours(struct ibv_device *device)
{
	return device == &softib_device;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof(*list));

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = &softib_device;
	if (num_devices)
		*num_devices = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	return device->name;
}

/* The kernel's device index; softib0 is the only one, hence 0. */
int ibv_get_device_index(struct ibv_device *device)
{
	if (!vb_device_is_ours(device))
		return -1;
	return 0;
}

/* Answered without opening the device: listing must stay cheap. */
__be64 ibv_get_device_guid(struct ibv_device *device)
{
	if (!vb_device_is_ours(device)) {
		errno = EINVAL;
		return 0;
	}
	return hca_host_guid();
}

/* ---- sysfs ---- */

const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

/*
 * The path below the device's ibdev_path that `path` names, or NULL when
 * it names something else.
 */
static const char *ibdev_relpath(const char *path)
{
	size_t n = strlen(VB_IBDEV_PATH);

	if (strncmp(path, VB_IBDEV_PATH, n) != 0)
		return NULL;
	if (path[n] != '/' && path[n] != '\0')
		return NULL;
	return path + n;
}

static ssize_t read_real_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t len;

	if (fd < 0)
		return -1;
	len = read(fd, buf, size);
	close(fd);
	return len;
}

/*
 * As rdma-core's: the file's text with its trailing newline removed and a
 * NUL added, its length returned; -1 when the file cannot be read or its
 * text (with the NUL) does not fit, so that no caller goes on with a
 * truncated, unterminated string.
 */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			size_t size)
{
	char path[IBV_SYSFS_PATH_MAX * 2];
	const char *rel;
	ssize_t len;

	if (!dir || !file || !buf || !size) {
		errno = EINVAL;
		return -1;
	}
	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	rel = ibdev_relpath(path);
	len = rel ? hca_host_sysfs_read(rel, buf, size) :
		    read_real_file(path, buf, size);
	if (len < 0)
		return -1;
	if (len > 0) {
		if (buf[len - 1] == '\n')
			buf[--len] = '\0';
		else if ((size_t)len < size)
			buf[len] = '\0';
		else
			return -1;
	}
	return (int)len;
}
