#!/usr/bin/env bash
# One segment per user and host (issue 15 item 7): a segment that is
# unusable — here one whose creator died before it was ready: the right
# name and size, all zeros — is replaced exactly once, however many
# processes find it at the same moment, and nothing is ever unlinked
# while a process maps it. Each part starts 8 processes at once
# (build/test/dev_hold); all 8 must end in the one segment of the name:
# `softib procs` (which maps the segment of the name) lists all 8, and
# every one of them lists as a peer in every other's segment.
#
#  1. the stale segment, 8 openers at once;
#  2. the same, 3 rounds in a row (10 under SOFTIB_LONG=1): the race of
#     the recreators is a matter of timing, so it is given several tries;
#  3. no segment at all, 8 openers at once, 3 rounds: the losers of the
#     race to make it join the winner's (they used to wait 10 s for the
#     exclusive lock the winner's shared lock kept from them, and fail
#     with ETIMEDOUT: the kill storm's two survivors, one run in four).
# The test runs on a segment name of its own (SOFTIB_SEG_TAG gets a
# suffix) and removes it at its end.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

hold=build/test/dev_hold
tool=build/bin/softib
rounds=3
sib_long && rounds=10
export SOFTIB_SEG_TAG=${SOFTIB_SEG_TAG:-t}-seg$$
export LD_LIBRARY_PATH=$(sib_lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for t in "$hold" "$tool"; do
	[ -x "$t" ] || { fail "$t is built"; summary; exit; }
done

name=$("$tool" status | awk '/^segment/ { print $2 }')
case $name in
/softib-*) ;;
*) fail "softib status names the segment"; summary; exit ;;
esac
seg_cleanup() {
	rm -f "/dev/shm$name" "/dev/shm$name.lock"
	sib_cleanup
}
trap seg_cleanup EXIT
# the layout size is in the name (…-v<version>.<size>-<tag>): the header
# rounded up to 4 KiB, then a heap of 2 GiB (the smallest a segment has)
layout=${name##*.}
layout=${layout%%-*}
len=$(((layout + 4095) / 4096 * 4096 + 2147483648))

stale() { # a segment whose creator died before it was ready
	rm -f "/dev/shm$name"
	truncate -s "$len" "/dev/shm$name"
	chmod 600 "/dev/shm$name"
}

HOLDS=()
start_many() { # start_many N TAG [gate]: N processes open the device at once
	local i
	for ((i = 0; i < $1; i++)); do
		if [ -n "${3:-}" ]; then # all wait for the gate file, then go
			(while [ ! -e "$3" ]; do :; done
			 exec "$hold" -n -t 120) </dev/null >"$SIB_TMP/h$i.$2.out" 2>&1 &
		else
			"$hold" -n -t 120 </dev/null >"$SIB_TMP/h$i.$2.out" 2>&1 &
		fi
		HOLDS+=($!)
	done
	[ -n "${3:-}" ] && sleep 0.3 && touch "$3"
	for ((i = 0; i < 300; i++)); do
		[ "$(cat "$SIB_TMP"/h*."$2".out 2>/dev/null | grep -c '^open')" -ge "$1" ] && return 0
		sleep 0.1
	done
	return 1
}
live_listed() { # how many of the pids given are live in the segment of the name
	local listing n=0 p
	listing=$("$tool" procs)
	for p in "$@"; do
		awk -v p="$p" '$3 == p && $NF == "live" { f = 1 } END { exit !f }' \
			<<<"$listing" && n=$((n + 1))
	done
	echo "$n"
}

# ---------------------------------------------------------------- part 1
stale
start_many 8 r0 || fail "8 processes open the device"
n=$(live_listed "${HOLDS[@]}")
check "a stale segment found by 8 openers at once: all 8 in one segment ($n listed)" \
	test "$n" = 8
for p in "${HOLDS[@]}"; do kill "$p" 2>/dev/null; done
for p in "${HOLDS[@]}"; do wait "$p" 2>/dev/null; done
HOLDS=()

# ---------------------------------------------------------------- part 2
ok=0
for ((r = 1; r <= rounds; r++)); do
	stale
	start_many 8 "r$r" || { fail "round $r: 8 processes open the device"; break; }
	n=$(live_listed "${HOLDS[@]}")
	segs=$(ls /dev/shm | grep -c "^${name#/}\$")
	[ "$n" = 8 ] && [ "$segs" = 1 ] && ok=$((ok + 1))
	[ "$n" = 8 ] || echo "round $r: only $n of 8 in the segment of the name"
	for p in "${HOLDS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${HOLDS[@]}"; do wait "$p" 2>/dev/null; done
	HOLDS=()
done
check "$rounds rounds of 8 openers on a stale segment: all in one segment each time ($ok of $rounds)" \
	test "$ok" = "$rounds"

# ---------------------------------------------------------------- part 3
ok=0
for ((r = 1; r <= rounds; r++)); do
	rm -f "/dev/shm$name"
	t0=$(date +%s)
	start_many 8 "a$r" "$SIB_TMP/go$r" || { fail "round $r: 8 processes open an absent segment"; break; }
	dt=$(($(date +%s) - t0))
	n=$(live_listed "${HOLDS[@]}")
	# well under the 10 s lock wait: nobody waited for the winner to exit
	[ "$n" = 8 ] && [ "$dt" -lt 5 ] && ok=$((ok + 1))
	[ "$n" = 8 ] && [ "$dt" -lt 5 ] || echo "round $r: $n of 8 in the segment, $dt s"
	for p in "${HOLDS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${HOLDS[@]}"; do wait "$p" 2>/dev/null; done
	HOLDS=()
done
check "$rounds rounds of 8 openers and no segment: all in one segment at once ($ok of $rounds)" \
	test "$ok" = "$rounds"

summary
