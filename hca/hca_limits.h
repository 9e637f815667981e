/*
 * softib device limits: the one place the device's capacities are stated.
 * The shared segment is sized from these, so query_device reports what the
 * device can really hold, and create verbs reject requests beyond them.
 */
#ifndef HCA_LIMITS_H
#define HCA_LIMITS_H

#define HCA_MAX_PROCS      256      /* process slots in the segment */
#define HCA_QP_PER_PROC    256      /* QP numbers a process slot owns */
#define HCA_MAX_QP         (HCA_MAX_PROCS * HCA_QP_PER_PROC) /* directory entries */
#define HCA_QPN_IDX_BITS   16       /* QPN = generation (8) | slot (8) | k (8) */
#define HCA_MAX_CQ         16384
#define HCA_MAX_SRQ        4096
#define HCA_MAX_MR         65536    /* MR table entries (key index bits: 16) */
#define HCA_MR_IDX_BITS    16
#define HCA_MAX_PD         65536
#define HCA_MAX_AH         65536
#define HCA_MAX_MCAST_GRP  256
#define HCA_MAX_XRCD       1024
#define HCA_MAX_MCAST_ATT  1024     /* total (group, QP) attachments */
#define HCA_MAX_QP_PER_MCG 64

#define HCA_MAX_QP_WR      16384
#define HCA_MAX_SRQ_WR     16384
#define HCA_MAX_CQE        (1 << 20)
#define HCA_MAX_SGE        32
#define HCA_MAX_SRQ_SGE    32
#define HCA_MAX_INLINE     1024
#define HCA_MAX_RD_ATOM    16       /* max_qp_rd_atom / max_qp_init_rd_atom */
#define HCA_MAX_MR_SIZE    (1ULL << 40)
#define HCA_MAX_MSG_SIZE   (1U << 31)  /* 2 GiB, the IB maximum */
#define HCA_NUM_COMP_VEC   1
#define HCA_PKEY_TBL_LEN   1
#define HCA_GID_TBL_LEN    16
#define HCA_DEFAULT_PKEY   0xffff

#define HCA_VENDOR_ID      0x5346   /* not a registered OUI: ours */
#define HCA_VENDOR_PART_ID 0x0001
#define HCA_HW_VER         1
#define HCA_FW_VER_STR     "1.0.0"
#define HCA_BOARD_ID       "SOFTIB_0001"
#define HCA_CORE_CLOCK_KHZ 1000000ULL  /* completion timestamps are ns */

#endif
