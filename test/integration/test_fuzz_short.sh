#!/usr/bin/env bash
# The libFuzzer target over the UDP link's packet parser, requester and
# responder (test/fuzz/): 30 s in the default tier, 600 s in the long tier.
# A crash, leak, UB report, hang or runaway allocation fails the test; so
# does a reproducer of test/fuzz/crashes/ that still fails. Skipped (with
# a note) where clang or its libFuzzer runtime is missing.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

cc=${CLANG:-clang}
if ! command -v "$cc" >/dev/null; then
	echo "test_fuzz_short: $cc not installed: skipped"
	exit 0
fi
probe=$SIB_TMP/probe
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$probe.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" 2>/dev/null; then
	echo "test_fuzz_short: $cc has no libFuzzer runtime: skipped"
	exit 0
fi

secs=30
sib_long && secs=600
log=$SIB_TMP/fuzz.log
if test/fuzz/run.sh "$secs" >"$log" 2>&1; then
	pass "fuzz_packet clean for ${secs}s: $(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1), $(grep -Eo 'average_exec_per_sec: *[0-9]+' "$log" | tr -s ' ')"
else
	tail -n 80 "$log"
	fail "fuzz_packet for ${secs}s (reproducers in build/fuzz/crashes/)"
fi
summary
