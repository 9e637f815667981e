/*
 * The one context a verbs unit suite runs on (test_verbs_control.c,
 * test_verbs_qp.c): opened by the suite's init, closed by its clean.
 */
#ifndef VERBS_SUITE_H
#define VERBS_SUITE_H

#include <infiniband/verbs.h>

extern struct ibv_device **dev_list;
extern struct ibv_context *ctx;
extern struct ibv_device_attr dev_attr;
extern struct ibv_port_attr port_attr;

int verbs_suite_init(void);
int verbs_suite_clean(void);

#endif
