#!/bin/bash
# What a test script leaves in /dev/shm goes when it ends (lib.sh's
# cleanup, scripts/shm_leftovers.sh), and only that: a child script that
# sources lib.sh makes files as a run would, then exits; checked after:
#   - libsib stats files of a dead process: removed (any tag); of a live
#     one: kept;
#   - a softib segment of the script's tag made during the run: removed
#     with its lock file, unless a process holds the lock (maps it); a
#     lock file whose segment the script removed itself: removed;
#   - an XRC domain file of the script's tag: removed, unless open;
#   - files of another tag, and what was there before the run: kept.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

uid=$(id -u)
base=${SOFTIB_SEG_TAG:-}lft$$
other=zz$$other
true &
dead=$!
wait "$dead"
seg() { echo "/dev/shm/softib-$uid-1-v0.0-$1"; }
before=$(seg "${base}old")
: >"$before" # there before the run: kept
made=()

# The holder keeps a shared lock on one segment's lock file, as a process
# that maps a segment does; it ends when its stdin closes.
held=$(seg "${base}held")
exec 7> >(flock -s "$held.lock" -c 'cat >/dev/null')
for ((i = 0; i < 50; i++)); do # until the holder has its lock
	[ -e "$held.lock" ] && ! flock -n -x "$held.lock" true && break
	sleep 0.1
done

SOFTIB_SEG_TAG=$base bash -c '
	. test/integration/lib.sh
	uid=$(id -u)
	: >"/dev/shm/softib-$uid-1-v0.0-${SOFTIB_SEG_TAG}y.lock" # its segment gone
	for t in "$SOFTIB_SEG_TAG" "${SOFTIB_SEG_TAG}x" "$0"; do
		: >"/dev/shm/softib-$uid-1-v0.0-$t"
		: >"/dev/shm/softib-$uid-1-v0.0-$t.lock"
	done
	: >"'"$held"'"
	: >"/dev/shm/sib-stats-$uid-$SOFTIB_SEG_TAG-'"$dead"'-7"
	: >"/dev/shm/sib-stats-$uid-$SOFTIB_SEG_TAG-'"$dead"'-8.tmp"
	: >"/dev/shm/sib-stats-$uid-$SOFTIB_SEG_TAG-'"$$"'-1" # the parent: lives
	: >"/dev/shm/sib-xrcd-$uid-$SOFTIB_SEG_TAG-job"
	: >"/dev/shm/sib-xrcd-$uid-$SOFTIB_SEG_TAG-open"
	exec 8<"/dev/shm/sib-xrcd-$uid-$SOFTIB_SEG_TAG-open"
	sleep 300 <&8 >/dev/null 2>&1 &
	echo $! >"'"$SIB_TMP"'/sleeper"
	exit 0' "$other"
sleeper=$(cat "$SIB_TMP/sleeper")

gone() { [ ! -e "$1" ]; }
there() { [ -e "$1" ]; }
check "a segment of the run's tag: removed" gone "$(seg "$base")"
check "... its lock file too" gone "$(seg "$base").lock"
check "... and of a tag it made from it: removed" gone "$(seg "${base}x")"
check "... with its lock file" gone "$(seg "${base}x").lock"
check "a lock file whose segment is gone: removed" gone "$(seg "${base}y").lock"
check "a segment whose lock a process holds: kept" there "$held"
check "a segment of another tag: kept" there "$(seg "$other")"
check "a segment there before the run: kept" there "$before"
check "stats of a dead process: removed" gone "/dev/shm/sib-stats-$uid-$base-$dead-7"
check "... and its temporary file" gone "/dev/shm/sib-stats-$uid-$base-$dead-8.tmp"
check "stats of a live process: kept" there "/dev/shm/sib-stats-$uid-$base-$$-1"
check "an XRC domain file of the run: removed" gone "/dev/shm/sib-xrcd-$uid-$base-job"
check "an XRC domain file a process has open: kept" there "/dev/shm/sib-xrcd-$uid-$base-open"

exec 7>&-
kill "$sleeper" 2>/dev/null
rm -f "$before" "$held" "$held.lock" "$(seg "$other")" "$(seg "$other").lock" \
	/dev/shm/sib-stats-"$uid"-"$base"-* /dev/shm/sib-xrcd-"$uid"-"$base"-*
summary
