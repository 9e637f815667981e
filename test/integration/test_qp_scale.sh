#!/bin/bash
# The QP number space at scale (issue 10), with build/test/qp_scale:
#  - one process creates as many RC QPs as max_qp says (65,536), the next
#    one is refused with ENOMEM, every number is distinct and 24-bit, the
#    last 64 created move a SEND each, and the numbers freed last do not
#    come back first;
#  - two processes connect 10,000 RC QPs each to each other and exchange
#    a message on every one, every byte checked;
# over the host link (cross-memory attach, and the bounce path with
# SOFTIB_NO_CMA=1) and over the UDP link (SOFTIB_LINK=udp). Over UDP the
# default tier runs 2,000 connected QPs per process (10,000 take ~15 s
# there: docs/udp-link.md); SOFTIB_LONG=1 runs the full 10,000 over UDP
# and the many-QPs case over every link.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

prog=build/test/qp_scale
if [ ! -x "$prog" ]; then
	fail "$prog is not built"
	summary
	exit
fi

# run DESC SECS ENV... -- ARGS...: pass if qp_scale says PASS
run() {
	local desc=$1 secs=$2 log rc=0 envs=()
	shift 2
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	log=$SIB_TMP/qp_scale.$((++SIB_RUNS)).log
	sib_run "$secs" env "${envs[@]}" "$prog" "$@" >"$log" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] && grep -q '^qp_scale: PASS$' "$log"; then
		pass "$desc: $(grep -E 'created in|messages each way' "$log" | head -1)"
	else
		fail "$desc (exit $rc)"
		cat "$log"
	fi
}
SIB_RUNS=0

run "65,536 RC QPs in one process, the 65,537th ENOMEM, traffic on the last (cma)" 120 \
	SOFTIB_NO_CMA=0 -- many
run "10,000 connected RC QPs per process, a message on each (cma)" 120 \
	SOFTIB_NO_CMA=0 -- pair -n 10000
run "10,000 connected RC QPs per process, a message on each (nocma)" 120 \
	SOFTIB_NO_CMA=1 -- pair -n 10000
if sib_long; then
	run "65,536 RC QPs in one process (nocma)" 120 SOFTIB_NO_CMA=1 -- many
	run "65,536 RC QPs in one process, traffic on the last (udp)" 120 \
		SOFTIB_LINK=udp -- many
	run "10,000 connected RC QPs per process, a message on each (udp)" 300 \
		SOFTIB_LINK=udp -- pair -n 10000 -w 256
else
	run "2,000 connected RC QPs per process, a message on each (udp)" 120 \
		SOFTIB_LINK=udp -- pair -n 2000 -w 256
fi

summary
