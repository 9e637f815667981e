/*
 * Unit tests of the UDP link's deferred ACKs (hca/link/udp/udp_ack.c) on
 * hand-made QPs, no sockets (link fd -1: an ACK that goes is taken off
 * its QP and dropped at the send): which ACK another QP's packet carries
 * to a host (hca_udp_ack_take_host: an XRC receive QP's, due by age or
 * asked, never one for another host, never the sender's own, never while
 * rx_lock is held elsewhere), and when a flush sends an XRC receive QP's
 * ACK alone (asked: after 20 us; not asked: after 75 us) against an RC
 * QP's (asked: at once; not asked: 50 us).
 *
 * The "not yet" checks hold only if the test is not descheduled between
 * making an ACK a given age and the check: an attempt that took longer
 * than the margin (SLACK_NS) is void and runs again (a loaded machine).
 */
#include "udp_link.h"
#include "wire.h"
#include "cu_run.h"

#include <stdlib.h>
#include <string.h>

#define HOST_A 0x0a510001u
#define HOST_B 0x0a510002u

#define SLACK_NS 15000ULL
#define TRIES 50

static struct hca_dev dev;
static uint64_t attempt_ns;   /* when this attempt began */
static bool void_attempt;     /* it was too slow to judge "not yet" */

/* A check that the ACK is not yet due: void if the attempt was slow. */
#define NOT_YET(expr)                                                  \
	do {                                                           \
		bool r_ = (expr);                                      \
		if (hca_now_ns() - attempt_ns > SLACK_NS)              \
			void_attempt = true;                           \
		else                                                   \
			CU_ASSERT_FALSE(r_);                           \
	} while (0)

/* Run body until one attempt is quick enough to judge. */
static void run_timed(void (*body)(void))
{
	for (int i = 0; i < TRIES; i++) {
		void_attempt = false;
		attempt_ns = hca_now_ns();
		body();
		if (!void_attempt)
			return;
	}
	CU_FAIL("every attempt was descheduled past the margin");
}
static struct hca_qp_ent ents[3];
static struct ibv_qp_attr attrs[3];
static struct hca_qp qps[3];

/* qps[0]: our XRC send QP to host A; qps[1]: an XRC receive QP (TGT)
 * whose requester is on host A; qps[2]: an RC QP to host A */
static int setup(void)
{
	memset(&dev, 0, sizeof(dev));
	dev.link.fd = -1;
	if (pthread_mutex_init(&dev.link.rx_lock, NULL))
		return -1;
	for (int i = 0; i < 3; i++) {
		memset(&qps[i], 0, sizeof(qps[i]));
		qps[i].dev = &dev;
		qps[i].ent = &ents[i];
		qps[i].attr = &attrs[i];
		qps[i].udp_daddr = HOST_A;
		attrs[i].dest_qp_num = 0x100 + (uint32_t)i;
	}
	qps[0].type = IBV_QPT_XRC_SEND;
	qps[1].type = IBV_QPT_XRC_RECV;
	qps[2].type = IBV_QPT_RC;
	return 0;
}

static int teardown(void)
{
	pthread_mutex_destroy(&dev.link.rx_lock);
	return 0;
}

/* A clean slate: nothing owed anywhere. */
static void reset(void)
{
	for (int i = 0; i < 3; i++) {
		atomic_store(&qps[i].ack_owed, 0);
		qps[i].ack_listed = false;
		qps[i].msn = 0;
	}
	atomic_store(&dev.link.nowed, 0);
	atomic_store(&dev.link.acks_asked, false);
	atomic_store(&dev.link.ride_from_ns, 0);
	atomic_store(&dev.sleeper_ns, 0);
}

/* Make QP i's owed ACK look owed for `us` microseconds already. */
static void age(int i, uint64_t us)
{
	atomic_store(&qps[i].ack_seen_ns, hca_now_ns() - us * 1000);
	/* the link's hint of when an owed ACK may ride next was taken from
	 * the clock when it was owed: time made to pass here passes the
	 * hint too (0: look now) */
	atomic_store(&dev.link.ride_from_ns, 0);
}

static bool owes(int i)
{
	return atomic_load(&qps[i].ack_owed) != 0;
}

static void test_ride_unasked_by_age_body(void)
{
	struct hca_wire_hdr h;

	reset();
	qps[1].msn = 7;
	hca_udp_ack_owe(&qps[1], HOST_A, 1234, false);
	/* just owed: it waits to cover the messages that follow */
	NOT_YET(hca_udp_ack_take_host(&qps[0], HOST_A, &h));
	if (void_attempt)
		return;
	CU_ASSERT_TRUE(owes(1));
	age(1, 41);
	memset(&h, 0, sizeof(h));
	CU_ASSERT_TRUE(hca_udp_ack_take_host(&qps[0], HOST_A, &h));
	CU_ASSERT_FALSE(owes(1));
	/* the receive QP's own ACK: its PSN, MSN and requester */
	CU_ASSERT_EQUAL(h.psn, 1234);
	CU_ASSERT_EQUAL(h.msn, 7);
	CU_ASSERT_EQUAL(h.dqpn, 0x101);
	CU_ASSERT_EQUAL(h.pkey, HCA_DEFAULT_PKEY);
	CU_ASSERT_EQUAL(h.opcode, hca_wire_transport(IBV_QPT_XRC_RECV) | HCA_WOP_ACKNOWLEDGE);
	/* taken once */
	CU_ASSERT_FALSE(hca_udp_ack_take_host(&qps[0], HOST_A, &h));
}

static void test_ride_asked_at_once_body(void)
{
	struct hca_wire_hdr h;

	reset();
	hca_udp_ack_owe(&qps[1], HOST_A, 55, true);
	CU_ASSERT_TRUE(hca_udp_ack_take_host(&qps[0], HOST_A, &h));
	CU_ASSERT_EQUAL(h.psn, 55);
	CU_ASSERT_FALSE(owes(1));
}

static void test_ride_not_elsewhere_body(void)
{
	struct hca_wire_hdr h;

	reset();
	hca_udp_ack_owe(&qps[1], HOST_A, 9, true);
	/* a packet to another host carries none of host A's ACKs */
	CU_ASSERT_FALSE(hca_udp_ack_take_host(&qps[0], HOST_B, &h));
	/* nor does a packet while another thread receives (rx_lock taken:
	 * the holder flushes the list itself) */
	pthread_mutex_lock(&dev.link.rx_lock);
	CU_ASSERT_FALSE(hca_udp_ack_take_host(&qps[0], HOST_A, &h));
	pthread_mutex_unlock(&dev.link.rx_lock);
	CU_ASSERT_TRUE(owes(1));
	/* the sender's own ACK is its own path's (send_one), not this one */
	reset();
	hca_udp_ack_owe(&qps[2], HOST_A, 3, true);
	CU_ASSERT_FALSE(hca_udp_ack_take_host(&qps[2], HOST_A, &h));
	CU_ASSERT_TRUE(hca_udp_ack_take_host(&qps[0], HOST_A, &h));
	CU_ASSERT_EQUAL(h.dqpn, 0x102);
}

static void test_flush_asked_body(void)
{
	reset();
	hca_udp_ack_owe(&qps[1], HOST_A, 1, true);
	hca_udp_ack_owe(&qps[2], HOST_A, 2, true);
	/* an empty poll: the RC QP's goes, the receive QP's waits a ride */
	hca_link_acks_flush(&dev, false, HCA_ACKS_ASKED);
	CU_ASSERT_FALSE(owes(2));
	NOT_YET(!owes(1));
	hca_link_acks_flush(&dev, false, HCA_ACKS_SWEEP);
	NOT_YET(!owes(1));
	if (void_attempt)
		return;
	age(1, 21);
	hca_link_acks_flush(&dev, false, HCA_ACKS_ASKED);
	CU_ASSERT_FALSE(owes(1));
	CU_ASSERT_EQUAL(atomic_load(&dev.link.nowed), 0);
}

static void test_flush_unasked_body(void)
{
	reset();
	hca_udp_ack_owe(&qps[1], HOST_A, 1, false);
	hca_udp_ack_owe(&qps[2], HOST_A, 2, false);
	attempt_ns = hca_now_ns();
	age(1, 55);
	age(2, 55);
	/* an empty poll sends no unasked ACK (of any age) */
	hca_link_acks_flush(&dev, false, HCA_ACKS_ASKED);
	CU_ASSERT_TRUE(owes(1));
	CU_ASSERT_TRUE(owes(2));
	/* the sweep: the RC QP's after 50 us, the receive QP's after 75 */
	hca_link_acks_flush(&dev, false, HCA_ACKS_SWEEP);
	CU_ASSERT_FALSE(owes(2));
	NOT_YET(!owes(1));
	if (void_attempt)
		return;
	age(1, 76);
	hca_link_acks_flush(&dev, false, HCA_ACKS_SWEEP);
	CU_ASSERT_FALSE(owes(1));
}

static void test_flush_all_body(void)
{
	reset();
	hca_udp_ack_owe(&qps[1], HOST_A, 1, false);
	hca_udp_ack_owe(&qps[2], HOST_A, 2, true);
	/* the progress thread, a sleeper, a QP going away: everything */
	hca_link_acks_flush(&dev, true, HCA_ACKS_ALL);
	CU_ASSERT_FALSE(owes(1));
	CU_ASSERT_FALSE(owes(2));
	CU_ASSERT_EQUAL(atomic_load(&dev.link.nowed), 0);
}

static void test_ride_unasked_by_age(void) { run_timed(test_ride_unasked_by_age_body); }
static void test_ride_asked_at_once(void) { run_timed(test_ride_asked_at_once_body); }
static void test_ride_not_elsewhere(void) { run_timed(test_ride_not_elsewhere_body); }
static void test_flush_asked(void) { run_timed(test_flush_asked_body); }
static void test_flush_unasked(void) { run_timed(test_flush_unasked_body); }
static void test_flush_all(void) { run_timed(test_flush_all_body); }

static int add_suites(void)
{
	CU_pSuite s = CU_add_suite("udp_ack", setup, teardown);

	if (!s ||
	    !CU_add_test(s, "an unasked ACK of an XRC receive QP rides after 40 us",
			 test_ride_unasked_by_age) ||
	    !CU_add_test(s, "an asked one rides at once", test_ride_asked_at_once) ||
	    !CU_add_test(s, "not to another host, not under rx_lock, not the sender's",
			 test_ride_not_elsewhere) ||
	    !CU_add_test(s, "asked: RC at once, XRC receive QP after 20 us",
			 test_flush_asked) ||
	    !CU_add_test(s, "unasked: RC after 50 us, XRC receive QP after 75 us",
			 test_flush_unasked) ||
	    !CU_add_test(s, "a flush of all sends every one", test_flush_all))
		return -1;
	return 0;
}

CU_RUN_MAIN(add_suites)
