#!/usr/bin/env bash
# Live peers are never reclaimed (issue 15 item 3): only proof of death —
# ESRCH, an exited pidfd, another start time — reclaims a process; an
# EMFILE from pidfd_open or a /proc file that cannot be opened proves
# nothing.
#
# build/test/nofile_pair: two processes that have lowered RLIMIT_NOFILE
# so that they cannot open one more file descriptor ping-pong RC SENDs
# (64 B and 48 KiB, every byte checked) for 15 s (120 s under
# SOFTIB_LONG=1). Meanwhile a process holds the device open all along
# (build/test/dev_hold), and others open and close it, or are killed with
# it open, one after another: each of these changes the host's membership
# and makes every process check its peers. Passes when the pair's traffic
# never failed, and when every look at `softib procs` (twice a second)
# found the pair and the holder alive with their slots.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

pair=build/test/nofile_pair
hold=build/test/dev_hold
tool=build/bin/softib
secs=15
sib_long && secs=120
export LD_LIBRARY_PATH=$(sib_lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

for t in "$pair" "$hold" "$tool"; do
	if [ ! -x "$t" ]; then
		fail "$t is built"
		summary
		exit
	fi
done

# the holder: alive all along (its stdin is a pipe that stays open)
mkfifo "$SIB_TMP/hold.fifo"
"$hold" -t $((secs + 60)) <"$SIB_TMP/hold.fifo" >"$SIB_TMP/hold.out" 2>&1 &
hold_pid=$!
exec 7>"$SIB_TMP/hold.fifo"
for ((i = 0; i < 100; i++)); do
	grep -qs '^open' "$SIB_TMP/hold.out" && break
	sleep 0.1
done

"$pair" -t "$secs" >"$SIB_TMP/pair.out" 2>&1 &
pair_pid=$!
pids=
for ((i = 0; i < 100; i++)); do
	pids=$(awk '/^pids/ { print $2, $3 }' "$SIB_TMP/pair.out")
	[ -n "$pids" ] && break
	sleep 0.1
done
if [ -z "$pids" ]; then
	fail "nofile_pair starts"
	cat "$SIB_TMP/pair.out"
	summary
	exit
fi

# churn: open and close, or die with the device open
churn() {
	local p
	while kill -0 "$pair_pid" 2>/dev/null; do
		"$hold" -t 0 </dev/null >/dev/null 2>&1
		"$hold" -n -t 30 </dev/null >/dev/null 2>&1 &
		p=$!
		sleep "0.$((RANDOM % 3 + 1))"
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
}
churn &
churn_pid=$!

# look until 2 s before the pair's end: its processes close the device
# and exit at their own pace once their time is up (a process that has
# closed it is rightly no longer listed)
looks=0 missing=0 first_miss= look_end=$((SECONDS + secs - 2))
while kill -0 "$pair_pid" 2>/dev/null && [ "$SECONDS" -lt "$look_end" ]; do
	listing=$("$tool" procs)
	looks=$((looks + 1))
	for p in $pids $hold_pid; do
		if ! awk -v p="$p" '$3 == p && $NF == "live" { f = 1 } END { exit !f }' \
			<<<"$listing"; then
			# the pair (or this process of it) has finished
			{ kill -0 "$pair_pid" && kill -0 "$p"; } 2>/dev/null || break 2
			missing=$((missing + 1))
			[ -z "$first_miss" ] && first_miss="pid $p after $looks looks"
		fi
	done
	sleep 0.5
done
wait "$pair_pid"
rc=$?
wait "$churn_pid" 2>/dev/null
exec 7>&-
wait "$hold_pid" 2>/dev/null

if [ "$rc" = 0 ] && grep -q '^ok' "$SIB_TMP/pair.out"; then
	pass "two processes without a spare file descriptor keep their RC traffic for ${secs} s: $(grep '^ok' "$SIB_TMP/pair.out")"
else
	fail "two processes without a spare file descriptor keep their RC traffic (exit $rc)"
	cat "$SIB_TMP/pair.out"
fi
check "in $looks looks at softib procs, the pair and the holder were always live and in their slots${first_miss:+ (first miss: $first_miss)}" \
	test "$missing" = 0 -a "$looks" -gt 0

summary
