/*
 * softib device limits: the one place the device's capacities are stated.
 * The shared segment is sized from these, so query_device reports what the
 * device can really hold, and create verbs reject requests beyond them.
 */
#ifndef HCA_LIMITS_H
#define HCA_LIMITS_H

/* QP numbers are 24 bits (the BTH's destination QP field) */
#define HCA_QPN_MASK       0xffffffu

#define HCA_MAX_PROCS      256      /* process slot table (bitmaps: a multiple of 64) */
#define HCA_PROC_SLOTS     254      /* slots in use: QPN high byte = slot + 1 */
/*
 * QP numbers: QPN = (slot + 1) << 16 | k. A process owns the 65,536 numbers
 * of its slot; the high bytes 0x00 and 0xff are never used, which keeps
 * QPN 0, 1 (SMI, GSI) and 0xffffff (multicast) out (docs/shared-segment.md).
 * The directory is indexed by the whole number, in pages of HCA_QP_PAGE
 * entries allocated from the heap when first used.
 */
#define HCA_QP_PER_PROC    65536    /* QP numbers a process slot owns */
#define HCA_MAX_QP         (1u << 24) /* the QPN space: directory index = QPN */
#define HCA_QPN_K_BITS     16
#define HCA_QP_PAGE_BITS   8
#define HCA_QP_PAGE        (1u << HCA_QP_PAGE_BITS)  /* entries per directory page */
#define HCA_QP_PAGES       (HCA_MAX_QP / HCA_QP_PAGE)
#define HCA_MAX_CQ         16384
#define HCA_MAX_SRQ        4096
#define HCA_SRQ_IDX_BITS   12       /* SRQ number: generation (12) | index (12) */
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
/* UDP link socket buffers (bytes); the receive one SOFTIB_UDP_RCVBUF */
#define HCA_UDP_RCVBUF     (4 << 20)
#define HCA_UDP_SNDBUF     (4 << 20)
/* UDP responder: a message assembly buffer kept between messages (bytes) */
#define HCA_RBUF_KEEP      (1 << 20)
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
