/*
 * sib_mq.h: where libsib gets the matching engine from.  Until the engine
 * (transport/match.h, branch `match`) is on main this names the private
 * stand-in; at that merge the stand-in goes and this includes match.h.
 */
#ifndef SIB_MQ_H
#define SIB_MQ_H
#include "match_standin.h"
#endif
