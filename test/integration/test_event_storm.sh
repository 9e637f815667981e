#!/bin/bash
# Issue 15 item 1, the event storm: several processes, each with dozens of
# CQs armed on a few completion channels (far more CQs per channel than a
# channel's socket queues datagrams), exchange bursts of SENDs in lock-step
# rounds and learn of every completion through their channels only; a
# lost wake-up leaves a round unfinished and the waiter reports STUCK
# after 10 s (build/test/event_storm). Default tier: about a minute in
# all — the storm itself, the same with the first 300 wake-up sends forced
# to fail (SOFTIB_TEST_FAIL=send:300: the retries must deliver them), and
# the bounce path (SOFTIB_NO_CMA=1, 64 KiB messages: its requests are
# doorbells). Long tier (SOFTIB_LONG=1): the storm for an hour.
# STORM_SECS overrides the first storm's length (default tier only).
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

prog=build/test/event_storm
if [ ! -x "$prog" ]; then
	fail "$prog is not built"
	summary
	exit
fi

secs=${STORM_SECS:-45} fail_secs=6 bounce_secs=6
if sib_long; then
	secs=3600 fail_secs=60 bounce_secs=300
fi

# storm DESC SECS ARGS... (environment with env VAR=... before ARGS)
storm() {
	local desc=$1 t=$2 log rc=0
	shift 2
	log=$SIB_TMP/storm.$SIB_PASSES.$SIB_FAILS.log
	sib_run $((t + 40)) "$@" -t "$t" >"$log" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] && grep -q 'event_storm: PASS' "$log"; then
		pass "$desc: $(awk '/ rounds, / { n++; r = $(NF - 9); e += $(NF - 7);
			if ($(NF - 1) > w) w = $(NF - 1) }
			END { printf "%d processes, %d rounds, %d events, longest wait %.3f s",
			      n, r, e, w }' "$log")"
	else
		fail "$desc (exit $rc)"
		cat "$log"
	fi
}

storm "event storm: 4 processes x 36 CQs on 1-2 channels, bursts of 8 per CQ" \
	"$secs" "$prog" -p 4 -q 12 -c 2 -b 8
storm "event storm, the first 300 wake-up sends failing (retried)" \
	"$fail_secs" env SOFTIB_TEST_FAIL=send:300 "$prog" -p 4 -q 12 -c 2 -b 8
storm "event storm over the bounce path (SOFTIB_NO_CMA=1, 64 KiB)" \
	"$bounce_secs" env SOFTIB_NO_CMA=1 "$prog" -p 4 -q 4 -c 2 -b 2 -m 65536

summary
