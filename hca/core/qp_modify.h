/*
 * The QP state machine as data: for every (current state, next state) pair
 * and QP type, which ibv_modify_qp attribute bits the transition requires
 * and which it allows.  hca/qp.c consults it before touching a QP; the
 * verbs layer may consult it to fail early.  No QP object is read or
 * written here.
 *
 * Rules a caller must know:
 *   - attr_mask without IBV_QP_STATE is a modify in place: the `next`
 *     argument is then ignored and the check is cur -> cur (as the Linux
 *     kernel does), so it is safe to pass attr->qp_state unconditionally.
 *     In place is legal only where cur -> cur is a transition (INIT, RTS,
 *     SQD, and the no-attribute RESET/ERR ones); RTR or SQE in place fails.
 *   - IBV_QP_STATE is always allowed and is never listed as required: a
 *     state change cannot be expressed without it, by the rule above.
 *   - `cur` must be the QP's real state.  IBV_QP_CUR_STATE is accepted only
 *     where the spec lists it as optional (transitions into RTS from RTR,
 *     RTS, SQD, SQE); whether attr->cur_qp_state matches the real state is
 *     the caller's check, not this table's.
 *   - Any state may go to RESET or ERR with no attribute besides
 *     IBV_QP_STATE, RESET -> ERR included (the IB spec's diagram allows it;
 *     the Linux kernel's table does not).
 *   - SQE -> RTS exists for UC and UD only: the spec's reliable services
 *     never enter SQE, their send errors take the QP to ERR.
 */
#ifndef HCA_QP_MODIFY_H
#define HCA_QP_MODIFY_H

#include <infiniband/verbs.h>

/*
 * 0 if modifying a QP of `type` from `cur` to `next` with `attr_mask` is
 * legal; EINVAL otherwise (also for an unknown type or state).  *bad_mask,
 * if bad_mask is not NULL, receives the offending bits (0 on success):
 * those also set in attr_mask are not allowed for this transition, those
 * not set in attr_mask are required and missing.  An illegal transition
 * reports IBV_QP_STATE.
 */
int hca_qp_modify_check(enum ibv_qp_type type, enum ibv_qp_state cur,
			enum ibv_qp_state next, int attr_mask, int *bad_mask);

/*
 * The table entry itself: the bits required and the bits optionally
 * allowed (neither includes IBV_QP_STATE) for type, cur -> next.
 * 0, or EINVAL if the transition does not exist for that type.
 */
int hca_qp_modify_attrs(enum ibv_qp_type type, enum ibv_qp_state cur,
			enum ibv_qp_state next, int *req, int *opt);

/* "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", or "UNKNOWN". */
const char *hca_qp_state_str(enum ibv_qp_state s);

#endif
