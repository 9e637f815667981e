#!/bin/bash
# A full /dev/shm gives ENOMEM, not SIGBUS (test/programs/shm_full.c): in
# a mount namespace of its own, a tmpfs of a few MiB is mounted over
# /dev/shm, so that the segment (and its lock file) live there and the
# host's /dev/shm is never filled. shm_full opens the device, fills that
# tmpfs, then registers MRs and creates CQs and QPs until they fail: each
# failure must be ENOMEM, and the process must live on. Needs the right to
# make a mount namespace (root, or unprivileged user namespaces); where it
# is missing the test says so and passes nothing.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

prog=$SIB_ROOT/build/test/shm_full
[ -x "$prog" ] || { fail "build/test/shm_full missing (scons)"; summary; exit; }

# The mount: run as root in the namespace (unshare -r maps us to root
# when we are not); private propagation so nothing leaks to the host.
ns=(unshare -m --propagation private)
[ "$(id -u)" -ne 0 ] && ns=(unshare -r -m --propagation private)
if ! "${ns[@]}" true 2>/dev/null; then
	echo "test_shm_full: cannot make a mount namespace here: not run"
	pass "not run (no mount namespace)"
	summary
	exit
fi

# MiB of the tmpfs: room for the header pages the first objects touch and
# the first QP's rings, so that the segment is made before the filler.
for size in 24; do
	log=$SIB_TMP/shm_full.$size.log
	rc=0
	sib_run 120 "${ns[@]}" sh -c '
		mount -t tmpfs -o size='"$size"'m,mode=1777 softib-shm-full /dev/shm || exit 3
		exec "$0" /dev/shm/filler' "$prog" >"$log" 2>&1 || rc=$?
	sed 's/^/    /' "$log"
	case $rc in
	0) pass "a full ${size} MiB /dev/shm: every failed create verb says ENOMEM, the process lives" ;;
	3) fail "mounting a tmpfs over /dev/shm in the namespace" ;;
	135 | 138) fail "a full ${size} MiB /dev/shm killed shm_full with SIGBUS (exit $rc)" ;;
	*) fail "shm_full on a full ${size} MiB /dev/shm: exit $rc" ;;
	esac
done

summary
