/*
 * Device, port, GID and P_Key queries: the answers come from the HCA
 * (hca_dev_query_*), which writes exactly the number of bytes it is given,
 * so a caller's struct is never written past its size.
 */
#include <errno.h>
#include <string.h>

#include "verbs_int.h"

/* verbs.h turns ibv_query_port into a macro over the query_port op. */
#undef ibv_query_port

_Static_assert(VB_COMPAT_PORT_ATTR_SIZE == 48,
	       "the IBVERBS_1.1 port attributes are 48 bytes");

static struct hca_dev *dev_of(struct ibv_context *context)
{
	return vb_ctx(context)->dev;
}

int ibv_query_device(struct ibv_context *context,
		     struct ibv_device_attr *device_attr)
{
	if (!context || !device_attr)
		return EINVAL;
	/* orig_attr is the first member of ibv_device_attr_ex */
	return hca_dev_query_device(dev_of(context),
				    (struct ibv_device_attr_ex *)device_attr,
				    sizeof(*device_attr));
}

/*
 * The op behind the inline ibv_query_device_ex(): attr_size is the
 * caller's sizeof, which may be smaller (older headers) or larger (newer
 * ones) than ours; no input option exists yet, so a comp_mask is refused.
 */
int vb_query_device_ex(struct ibv_context *context,
		       const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t attr_size)
{
	if (input && input->comp_mask)
		return EINVAL;
	if (!attr || attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	return hca_dev_query_device(dev_of(context), attr, attr_size);
}

/* The op behind the ibv_query_port() macro. */
int vb_query_port(struct ibv_context *context, uint8_t port_num,
		  struct ibv_port_attr *attr, size_t attr_len)
{
	if (!context || !attr || attr_len < VB_COMPAT_PORT_ATTR_SIZE)
		return EINVAL;
	return hca_dev_query_port(dev_of(context), port_num, attr, attr_len);
}

/*
 * ibv_query_port@IBVERBS_1.1, for binaries built against headers whose
 * struct ibv_port_attr ended at `flags`.
 */
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
		   struct _compat_ibv_port_attr *port_attr)
{
	return vb_query_port(context, port_num,
			     (struct ibv_port_attr *)port_attr,
			     VB_COMPAT_PORT_ATTR_SIZE);
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
		  union ibv_gid *gid)
{
	int rc;

	if (!context || !gid)
		return EINVAL;
	rc = hca_dev_query_gid(dev_of(context), port_num, index, gid);
	if (rc)
		errno = rc;
	return rc;
}

static bool gid_is_zero(const union ibv_gid *gid)
{
	static const union ibv_gid zero;

	return !memcmp(gid, &zero, sizeof(zero));
}

/*
 * One GID entry, laid out at `entry` in entry_size bytes: ours are
 * sizeof(struct ibv_gid_entry); a newer caller's larger entries get zeros
 * in the fields we do not know.  ENODATA for an empty index in the table.
 */
static int gid_entry(struct ibv_context *context, uint32_t port_num,
		     uint32_t index, struct ibv_gid_entry *entry,
		     size_t entry_size)
{
	struct ibv_gid_entry e = {
		.gid_index = index,
		.port_num = port_num,
		.gid_type = IBV_GID_TYPE_IB,
		.ndev_ifindex = 0,
	};
	int rc;

	if (port_num > UINT8_MAX || index > INT32_MAX)
		return EINVAL;
	rc = hca_dev_query_gid(dev_of(context), (uint8_t)port_num, (int)index,
			       &e.gid);
	if (rc)
		return rc;
	if (gid_is_zero(&e.gid))
		return ENODATA;
	memcpy(entry, &e, sizeof(e));
	memset((char *)entry + sizeof(e), 0, entry_size - sizeof(e));
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
		      uint32_t gid_index, struct ibv_gid_entry *entry,
		      uint32_t flags, size_t entry_size)
{
	if (!context || !entry || flags ||
	    entry_size < sizeof(struct ibv_gid_entry))
		return EINVAL;
	return gid_entry(context, port_num, gid_index, entry, entry_size);
}

/*
 * Every valid (non-empty) GID of every port; fails when they do not all fit
 * in max_entries, as ibv_query_gid_table(3) says.
 */
ssize_t _ibv_query_gid_table(struct ibv_context *context,
			     struct ibv_gid_entry *entries, size_t max_entries,
			     uint32_t flags, size_t entry_size)
{
	size_t n = 0;

	if (!context || !entries || !max_entries || flags ||
	    entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	for (uint8_t port = 1; port <= VB_NUM_PORTS; port++) {
		struct ibv_port_attr pa;
		int rc = vb_query_port(context, port, &pa, sizeof(pa));

		if (rc)
			return -rc;
		for (int i = 0; i < pa.gid_tbl_len; i++) {
			struct ibv_gid_entry *e =
				(void *)((char *)entries + n * entry_size);
			struct ibv_gid_entry tmp;

			/* probe into tmp: entries[n] may not exist */
			rc = gid_entry(context, port, (uint32_t)i, &tmp, sizeof(tmp));
			if (rc == ENODATA)
				continue;
			if (rc)
				return -rc;
			if (n == max_entries)
				return -EINVAL;
			memcpy(e, &tmp, sizeof(tmp));
			memset((char *)e + sizeof(tmp), 0, entry_size - sizeof(tmp));
			n++;
		}
	}
	return (ssize_t)n;
}

/*
 * The sysfs GID type of rdma-core's private interface, which ibv_devinfo
 * asks for every index of the table: an InfiniBand port's GIDs are all of
 * the "IB/RoCE v1" kind.
 */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum ibv_gid_type_sysfs *type)
{
	struct ibv_port_attr pa;
	int rc;

	if (!context || !type) {
		errno = EINVAL;
		return -1;
	}
	rc = vb_query_port(context, port_num, &pa, sizeof(pa));
	if (!rc && index >= (unsigned)pa.gid_tbl_len)
		rc = EINVAL;
	if (rc) {
		errno = rc;
		return -1;
	}
	*type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
		   __be16 *pkey)
{
	int rc;

	if (!context || !pkey)
		return EINVAL;
	rc = hca_dev_query_pkey(dev_of(context), port_num, index, pkey);
	if (rc)
		errno = rc;
	return rc;
}

/* The index of `pkey` (network order) in the port's table, or -1. */
int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num,
		       __be16 pkey)
{
	struct ibv_port_attr pa;
	int rc;

	if (!context) {
		errno = EINVAL;
		return -1;
	}
	rc = vb_query_port(context, port_num, &pa, sizeof(pa));
	if (rc) {
		errno = rc;
		return -1;
	}
	for (int i = 0; i < pa.pkey_tbl_len; i++) {
		__be16 p;

		if (ibv_query_pkey(context, port_num, i, &p))
			return -1;
		if (p == pkey)
			return i;
	}
	errno = ENOENT;
	return -1;
}
