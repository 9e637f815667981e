#!/bin/bash
# The whole softib test suite, as CI runs it (.ci/run):
#   1. install missing Debian packages (scripts/deps.sh);
#   2. build the plain tree (build/) and the ASan+UBSan tree (build/asan/);
#   3. run every CUnit program build/asan/test/test_* (sanitized);
#   4. build the ThreadSanitizer tree (build/tsan/) and run every CUnit
#      program there again, with test/tsan.supp (docs/tsan.md): any data
#      race report fails the program (TSan's exit code 66);
#   5. run every test/integration/test_*.sh against the plain build/lib
#      (Debian's uninstrumented binaries cannot load an ASan library);
#   6. print a table of results; exit non-zero if anything failed.
#
#   scripts/test.sh          default tier (well under 20 minutes on 2 cores)
#   scripts/test.sh --long   also the long tier (SOFTIB_LONG=1 for the
#                            integration scripts): million-message runs...
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

unit_timeout=300
integ_timeout=600
case "${1:-}" in
--long)
	export SOFTIB_LONG=1
	unit_timeout=3600
	integ_timeout=7200
	;;
"") ;;
*)
	echo "usage: scripts/test.sh [--long]" >&2
	exit 2
	;;
esac

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# die_after_fork=0: test_verbs_xrc's children open the device (a progress
# thread) after a fork of a process that has one; TSan handles that, but
# by default refuses it.
export TSAN_OPTIONS="suppressions=$PWD/test/tsan.supp:die_after_fork=0:second_deadlock_stack=1:halt_on_error=0"

logdir=$(mktemp -d "${TMPDIR:-/tmp}/softib-suite.XXXXXX")
# what the suite leaves in /dev/shm goes when it ends (each integration
# script also cleans after itself: test/integration/lib.sh)
. scripts/shm_leftovers.sh
sib_shm_snapshot
trap sib_shm_clean EXIT
names=()
results=()
times=()
failed=0

# record NAME STATUS SECONDS
record() {
	names+=("$1")
	times+=("$3")
	if [ "$2" -eq 0 ]; then
		results+=(pass)
	else
		results+=("FAIL ($2)")
		failed=1
	fi
}

# step NAME TIMEOUT CMD...: run one step with its output on the terminal
# and in $logdir/NAME.log.
step() {
	local name=$1 secs=$2 t0=$SECONDS rc
	shift 2
	echo
	echo "=== $name"
	timeout -k 10 "$secs" "$@" </dev/null 2>&1 | tee "$logdir/${name//\//_}.log"
	rc=${PIPESTATUS[0]}
	[ "$rc" -eq 124 ] && echo "=== $name: timed out after ${secs}s"
	record "$name" "$rc" $((SECONDS - t0))
	return "$rc"
}

step deps 1200 scripts/deps.sh || {
	echo "test.sh: cannot install the dependencies" >&2
	exit 1
}
step build 900 scons -j2
step build-asan 900 scons -j2 asan=1

# Unit tests: the full CUnit output goes to the log; the terminal gets the
# summary block, and everything when the program fails.
# run_units TREE LABEL: every build/TREE/test/test_* program.
run_units() {
	local tree=$1 label=$2 t name log t0 rc
	local units=()

	for t in "build/$tree/test/test_"*; do
		[ -f "$t" ] && [ -x "$t" ] && units+=("$t")
	done
	[ ${#units[@]} -gt 0 ] || echo "test.sh: no unit-test programs in build/$tree/test"
	for t in "${units[@]}"; do
		name=$label/$(basename "$t")
		log=$logdir/$label-$(basename "$t").log
		t0=$SECONDS
		echo
		echo "=== $name"
		rc=0
		timeout -k 10 "$unit_timeout" "$t" </dev/null >"$log" 2>&1 || rc=$?
		if [ "$rc" -ne 0 ]; then
			cat "$log"
			[ "$rc" -eq 124 ] && echo "=== $name: timed out after ${unit_timeout}s"
		else
			grep -A4 'Run Summary' "$log" || tail -n 5 "$log"
		fi
		record "$name" "$rc" $((SECONDS - t0))
	done
}

run_units asan unit
step build-tsan 900 scons -j2 tsan=1 && run_units tsan tsan

for s in test/integration/test_*.sh; do
	[ -f "$s" ] || continue
	step "integration/$(basename "$s" .sh)" "$integ_timeout" bash "$s"
done

echo
echo "=== summary${SOFTIB_LONG:+ (long tier)}"
printf '%-44s %-12s %6s\n' test result seconds
for i in "${!names[@]}"; do
	printf '%-44s %-12s %6s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
done
if [ "$failed" -ne 0 ]; then
	echo "FAILED (logs in $logdir)"
	exit 1
fi
rm -rf "$logdir"
echo "all passed"
