/* The one context of a verbs unit suite (verbs_suite.h). */
#include <stddef.h>

#include "verbs_suite.h"

/* One context for the whole suite. */
struct ibv_device **dev_list;
struct ibv_context *ctx;
struct ibv_device_attr dev_attr;
struct ibv_port_attr port_attr;

int verbs_suite_init(void)
{
	dev_list = ibv_get_device_list(NULL);
	if (!dev_list || !dev_list[0])
		return -1;
	ctx = ibv_open_device(dev_list[0]);
	if (!ctx)
		return -1;
	if (ibv_query_device(ctx, &dev_attr) || ibv_query_port(ctx, 1, &port_attr))
		return -1;
	return 0;
}

int verbs_suite_clean(void)
{
	int rc = ctx ? ibv_close_device(ctx) : 0;

	ibv_free_device_list(dev_list);
	return rc;
}
