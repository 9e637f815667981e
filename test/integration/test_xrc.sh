#!/usr/bin/env bash
# XRC on one host (issue 5), through LD_LIBRARY_PATH=build/lib:
#
#  1. softib's <infiniband/verbs.h> (build/include): an OFED 1.x XRC
#     program compiles unmodified with -Werror and runs; the rdma-core
#     programs of this tree compile with it exactly as without it.
#  2. Debian's unmodified ibv_xsrq_pingpong: one server with -c 3 and three
#     client processes; default options, -e, several sizes, run after run;
#     every side exits 0 and says "success".  Then again with
#     SOFTIB_NO_CMA=1 (the bounce-buffer path).
#  3. Debian's unmodified perftest over XRC (-c XRC): send, write, read and
#     atomic, latency and bandwidth.
#  4. test/programs/xrc_multi: processes that join and leave (one killed)
#     while traffic flows, one XRC domain on one file, each holding one XRC
#     send QP toward the host and reaching every SRQ by number; every byte
#     checked.  While it runs, `softib qps` must show no process holding
#     more than one XRC send QP or receive QP, and `softib xrcds` the one
#     domain of the file, shared by several processes.
#
# xrc_multi also runs under SOFTIB_NO_CMA=1 (the bounce path: a requester
# waiting for a peer's mailbox serves its own).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

secs=60
reps=3
sib_long && secs=900 && reps=25

# ------------------------------------------------------------------ 1
ofed_src=$SIB_TMP/ofed_xrc.c
cat >"$ofed_src" <<'EOF'
/* An OFED 1.x XRC program, as written for OFED's <infiniband/verbs.h>. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static int fail(const char *what)
{
	fprintf(stderr, "ofed_xrc: %s\n", what);
	return 1;
}

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_xrc_domain *dom;
	struct ibv_port_attr port;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_srq_init_attr sia;
	struct ibv_qp_init_attr init_attr;
	struct ibv_qp_attr attr;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad_wr;
	struct ibv_recv_wr rwr, *bad_rwr;
	struct ibv_async_event event;
	struct ibv_wc wc;
	uint32_t rcv_qpn;
	char buf[256];
	int fd, n, i;

	if (argc != 2 || !ctx || ibv_query_port(ctx, 1, &port))
		return fail("device");
	fd = open(argv[1], O_RDONLY | O_CREAT, 0600);
	dom = ibv_open_xrc_domain(ctx, fd, O_CREAT);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!dom || !pd || !cq || !mr)
		return fail("resources");
	memset(&sia, 0, sizeof(sia));
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	srq = ibv_create_xrc_srq(pd, dom, cq, &sia);
	memset(&init_attr, 0, sizeof(init_attr));
	init_attr.xrc_domain = dom;
	if (!srq || ibv_create_xrc_rcv_qp(&init_attr, &rcv_qpn))
		return fail("srq, receive qp");
	init_attr.send_cq = init_attr.recv_cq = cq;
	init_attr.cap.max_send_wr = 4;
	init_attr.cap.max_send_sge = 1;
	init_attr.qp_type = IBV_QPT_XRC;
	qp = ibv_create_qp(pd, &init_attr);
	if (!qp)
		return fail("send qp");

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 1;
	if (ibv_modify_xrc_rcv_qp(dom, rcv_qpn, &attr, IBV_QP_STATE |
				  IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ||
	    ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return fail("init");
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = IBV_MTU_1024;
	attr.ah_attr.dlid = port.lid;
	attr.ah_attr.port_num = 1;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = 1;
	attr.dest_qp_num = qp->qp_num;
	if (ibv_modify_xrc_rcv_qp(dom, rcv_qpn, &attr, IBV_QP_STATE | IBV_QP_AV |
				  IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return fail("receive qp rtr");
	attr.dest_qp_num = rcv_qpn;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
		return fail("send qp rtr");
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		return fail("send qp rts");

	memset(buf, 0, sizeof(buf));
	strcpy(buf + 128, "hello through an OFED XRC SRQ");
	sge.addr = (uintptr_t)buf;
	sge.length = 128;
	sge.lkey = mr->lkey;
	memset(&rwr, 0, sizeof(rwr));
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	if (ibv_post_srq_recv(srq, &rwr, &bad_rwr))
		return fail("post recv");
	sge.addr = (uintptr_t)buf + 128;
	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.xrc_remote_srq_num = srq->xrc_srq_num;
	if (ibv_post_send(qp, &wr, &bad_wr))
		return fail("post send");
	for (n = 0, i = 0; n < 2 && i < 10000000; i++) {
		int got = ibv_poll_cq(cq, 1, &wc);

		if (got < 0 || (got && wc.status != IBV_WC_SUCCESS))
			return fail("completion");
		n += got;
	}
	if (n != 2 || strcmp(buf, "hello through an OFED XRC SRQ"))
		return fail("data");
	/* the first message raised COMM_EST, named by number */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	for (i = 0; i < 100; i++) {
		if (!ibv_get_async_event(ctx, &event))
			break;
		usleep(10000);
	}
	if (i == 100 || !(event.event_type & IBV_XRC_QP_EVENT_FLAG) ||
	    event.element.xrc_qp_num != rcv_qpn)
		return fail("event");
	ibv_ack_async_event(&event);
	memset(&attr, 0, sizeof(attr));
	memset(&init_attr, 0, sizeof(init_attr));
	if (ibv_query_xrc_rcv_qp(dom, rcv_qpn, &attr, IBV_QP_STATE, &init_attr) ||
	    attr.qp_state != IBV_QPS_RTR || init_attr.xrc_domain != dom)
		return fail("query");
	if (ibv_query_xrc_rcv_qp(dom, 0xffffff, &attr, IBV_QP_STATE, NULL) == 0)
		return fail("unknown qpn");
	if (ibv_destroy_qp(qp) || ibv_unreg_xrc_rcv_qp(dom, rcv_qpn) ||
	    ibv_reg_xrc_rcv_qp(dom, rcv_qpn) == 0 || ibv_destroy_srq(srq) ||
	    ibv_close_xrc_domain(dom) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) ||
	    ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		return fail("teardown");
	ibv_free_device_list(list);
	printf("ofed_xrc: ok\n");
	return 0;
}
EOF
ofed_bin=$SIB_TMP/ofed_xrc
if gcc -std=gnu99 -Wall -Wextra -Werror -I build/include -o "$ofed_bin" \
	"$ofed_src" -L "$(sib_lib)" -libverbs 2>"$SIB_TMP/ofed_cc.log"; then
	pass "an OFED 1.x XRC program compiles unmodified (-Wall -Wextra -Werror)"
	if out=$(sib_run "$secs" "$ofed_bin" "$SIB_TMP/ofed.domain" 2>&1) &&
		[ "$out" = "ofed_xrc: ok" ]; then
		pass "the OFED 1.x XRC program runs (legacy calls, xrc_remote_srq_num, events)"
	else
		fail "the OFED 1.x XRC program runs: $out"
	fi
else
	fail "an OFED 1.x XRC program compiles unmodified"
	cat "$SIB_TMP/ofed_cc.log"
fi

# rdma-core programs: the same diagnostics and result with and without it.
ccflags=(-std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter
	-Ihca -Ihca/core -Ihca/engine -Ihca/link -Ihca/link/shm -Ihca/link/udp
	-Iverbs -I. -fsyntax-only)
same=0
differ=()
for f in test/programs/*.c bench/*.c tools/*.c test/unit/test_verbs_control.c \
	test/unit/test_verbs_qp.c; do
	[ -f "$f" ] || continue
	a=$(gcc "${ccflags[@]}" "$f" 2>&1; echo "rc=$?")
	b=$(gcc "${ccflags[@]}" -I build/include "$f" 2>&1; echo "rc=$?")
	if [ "$a" = "$b" ]; then same=$((same + 1)); else differ+=("$f"); fi
done
if [ ${#differ[@]} -eq 0 ] && [ $same -gt 0 ]; then
	pass "$same rdma-core programs compile with -I build/include exactly as without"
else
	fail "rdma-core programs compile unchanged with -I build/include: ${differ[*]}"
fi
if echo '#include <infiniband/verbs.h>
int main(void) { struct ibv_qp_init_attr a = {}; return SOFTIB_LEGACY_XRC + a.sq_sig_all; }' |
	g++ -x c++ -Wall -Wextra -Werror -I build/include -fsyntax-only - 2>"$SIB_TMP/cxx.log"; then
	pass "the header compiles as C++"
else
	fail "the header compiles as C++"
	cat "$SIB_TMP/cxx.log"
fi

# ------------------------------------------------------------------ 2
command -v ibv_xsrq_pingpong >/dev/null ||
	fail "ibv_xsrq_pingpong is installed (package ibverbs-utils)"

# xsrq LABEL ENV -- OPTIONS...: a server with -c 3 and three clients.
xsrq() {
	local label=$1 envv=$2 port spid i rc ok=1 lib
	local -a cpids=() opts
	shift 3
	opts=("$@")
	lib=$(sib_lib)
	port=$(free_port) || {
		fail "$label: no free port"
		return
	}
	env LD_LIBRARY_PATH="$lib" $envv timeout -k 5 "$secs" \
		ibv_xsrq_pingpong -p "$port" -c 3 "${opts[@]}" \
		</dev/null >"$SIB_TMP/xsrq.srv.log" 2>&1 &
	spid=$!
	SIB_PGIDS+=("$spid")
	SIB_PORT=$port sib_wait_listen "$spid"
	for i in 1 2 3; do
		env LD_LIBRARY_PATH="$lib" $envv timeout -k 5 "$secs" \
			ibv_xsrq_pingpong -p "$port" "${opts[@]}" 127.0.0.1 \
			</dev/null >"$SIB_TMP/xsrq.cli$i.log" 2>&1 &
		cpids+=("$!")
		SIB_PGIDS+=("$!")
	done
	for i in "${cpids[@]}" "$spid"; do
		wait "$i"
		rc=$?
		sib_kill_group "$i"
		[ "$rc" = 0 ] || ok=0
	done
	for i in srv cli1 cli2 cli3; do
		grep -q '^success' "$SIB_TMP/xsrq.$i.log" || ok=0
	done
	if [ $ok = 1 ]; then
		pass "$label"
	else
		fail "$label: every side exits 0 and says success"
		for i in srv cli1 cli2 cli3; do
			sib_show_log "$label $i" "$SIB_TMP/xsrq.$i.log"
		done
	fi
}

xsrq_cases=("" "-e" "-s 1" "-s 65536" "-e -s 1048576" "-n 50 -s 8192")
for envv in "" "SOFTIB_NO_CMA=1"; do
	for opts in "${xsrq_cases[@]}"; do
		read -ra o <<<"$opts"
		for ((r = 1; r <= reps; r++)); do
			xsrq "ibv_xsrq_pingpong -c 3 + 3 clients${opts:+ $opts}${envv:+ ($envv)} run $r" \
				"$envv" -- "${o[@]}"
		done
	done
done

# ------------------------------------------------------------------ 3
has_table() {
	awk '/#bytes/ { hdr = 1; next }
	     hdr && /^[ \t]*[0-9]+[ \t]+[0-9]/ { found = 1 }
	     END { exit !found }' "$1"
}

perf() { # BINARY ENV OPTIONS...
	local bin=$1 envv=$2 port label
	shift 2
	label="$bin -c XRC${*:+ $*}${envv:+ ($envv)}"
	command -v "$bin" >/dev/null || {
		fail "$bin is installed (package perftest)"
		return
	}
	port=$(free_port) || {
		fail "$label: no free port"
		return
	}
	if run_pair "${label//[^A-Za-z0-9]/_}" "$secs" \
		env $envv "$bin" -d softib0 -p "$port" -c XRC -F "$@" -- \
		env $envv "$bin" -d softib0 -p "$port" -c XRC -F "$@" 127.0.0.1 &&
		has_table "$SIB_CLIENT_LOG"; then
		pass "$label"
	else
		fail "$label: both sides exit 0, the client prints a table"
	fi
}

for envv in "" "SOFTIB_NO_CMA=1"; do
	for bin in ib_send_lat ib_send_bw ib_write_lat ib_write_bw \
		ib_read_lat ib_read_bw ib_atomic_lat ib_atomic_bw; do
		perf "$bin" "$envv"
	done
done
perf ib_send_bw "" -s 65536
perf ib_write_bw "" --use_old_post_send
perf ib_send_lat "" -e

# ------------------------------------------------------------------ 4
multi=build/test/xrc_multi
[ -x "$multi" ] || fail "$multi is built"

# multi LABEL ENV OPTIONS...: one run, with a snapshot of the host's QPs
# and domains a third of the way in.
multi() {
	local label=$1 envv=$2 file pid rc snap_ok=1 t=3000 pids
	shift 2
	file=$SIB_TMP/xrc_multi.domain
	: >"$file"
	local prev=
	for a in "$@"; do
		[ "$prev" = -t ] && t=$a
		prev=$a
	done
	env LD_LIBRARY_PATH="$(sib_lib)" $envv timeout -k 5 "$secs" \
		"$multi" "$@" "$file" </dev/null >"$SIB_TMP/multi.log" 2>&1 &
	pid=$!
	SIB_PGIDS+=("$pid")
	sleep "$(awk -v t="$t" 'BEGIN { printf "%.2f", t * 0.36 / 1000 }')"
	build/bin/softib qps >"$SIB_TMP/qps.txt" 2>&1
	build/bin/softib xrcds >"$SIB_TMP/xrcds.txt" 2>&1
	wait "$pid"
	rc=$?
	sib_kill_group "$pid"

	# the workers' pids, from their "joins (pid N)" lines
	pids=$(sed -n 's/.*joins (pid \([0-9]*\)).*/\1/p' "$SIB_TMP/multi.log" |
		paste -sd' ')
	if ! awk -v pids=" $pids " '
		$2 ~ /^XRC_(SEND|RECV)$/ && index(pids, " " $4 " ") {
			n[$4 " " $2]++; procs[$4] = 1
		}
		END {
			for (k in n) if (n[k] > 1) { print "more than one: " k; bad = 1 }
			for (p in procs) np++
			if (np < 2) { print "fewer than 2 workers seen"; bad = 1 }
			exit bad
		}' "$SIB_TMP/qps.txt"; then
		snap_ok=0
	fi
	local want
	want="dev $(stat -c %d "$file") ino $(stat -c %i "$file")"
	awk -v w="$want" 'index($0, w) { if ($(NF - 1) >= 2) ok = 1 } END { exit !ok }' \
		"$SIB_TMP/xrcds.txt" || snap_ok=0

	if [ "$rc" = 0 ] && [ $snap_ok = 1 ]; then
		pass "$label: $(tail -n 1 "$SIB_TMP/multi.log")"
	else
		fail "$label (exit $rc, snapshot ok: $snap_ok)"
		sib_show_log "$label" "$SIB_TMP/multi.log"
		sib_show_log "softib qps" "$SIB_TMP/qps.txt"
		sib_show_log "softib xrcds" "$SIB_TMP/xrcds.txt"
	fi
}

multi "xrc_multi: join, leave, kill, 4 at a time" ""
multi "xrc_multi: messages up to 64 KiB" "" -s 65536
multi "xrc_multi: clean leaves only" "" -K
for ((r = 2; r <= reps; r++)); do
	multi "xrc_multi run $r" ""
done
sib_long && multi "xrc_multi: 30 s schedule" "" -t 30000
multi "xrc_multi (SOFTIB_NO_CMA=1)" "SOFTIB_NO_CMA=1"

summary
