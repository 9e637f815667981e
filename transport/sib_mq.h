/*
 * sib_mq.h: where libsib gets the matching engine from (transport/match.h).
 */
#ifndef SIB_MQ_H
#define SIB_MQ_H
#include "match.h"
#endif
