#!/bin/bash
# test/fuzz/run.sh [SECONDS]: build the packet fuzzer (build.sh), replay the
# reproducers of test/fuzz/crashes/, then fuzz for SECONDS (600 by default)
# from the seed corpus test/fuzz/corpus/. Exits non-zero on a crash, a leak,
# a UB report, a hang (-timeout), a livelock or memory beyond -rss_limit_mb.
#
# The fuzzer runs in a network namespace of its own when it can make one
# (root, or unprivileged user namespaces): a namespace is a softib host, so
# its shared segment and UDP port are its own and no other softib process
# can meet it; the segment is removed afterwards. Otherwise it runs in the
# host's namespace (a note says so).
#
#   test/fuzz/crashes/    one reproducer per bug found, named after it
#   build/fuzz/corpus/    the growing corpus, kept from run to run
#   build/fuzz/crashes/   what a failing run found: crash-*, leak-*, ...
#   FUZZ_OPTS="-jobs=2 -workers=2" test/fuzz/run.sh 300   extra libFuzzer options
#   test/fuzz/run.sh --seeds   rewrite test/fuzz/corpus/ (FUZZ_PACKET_SEEDS)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

test/fuzz/build.sh || exit 2
bin=build/fuzz/fuzz_packet
seeds=test/fuzz/corpus
regress=test/fuzz/crashes

if [ "${1:-}" = --seeds ]; then
	rm -f "$seeds"/*
	mkdir -p "$seeds"
	FUZZ_PACKET_SEEDS=$seeds "$bin" && ls "$seeds"
	exit
fi
secs=${1:-600}
case "$secs" in
'' | *[!0-9]*)
	echo "usage: test/fuzz/run.sh [SECONDS | --seeds]" >&2
	exit 2
	;;
esac

corpus=build/fuzz/corpus
crashes=build/fuzz/crashes
mkdir -p "$corpus" "$crashes"

# in_netns CMD...: run CMD in a fresh network namespace with lo up, then
# remove the softib segment it made (named after the namespace's inode).
in_netns() {
	unshare -n bash -c '
		ip link set lo up 2>/dev/null ||
			echo "fuzz/run.sh: lo not up: answers over UDP are lost" >&2
		ino=$(stat -L -c %i /proc/self/ns/net)
		trap "rm -f /dev/shm/softib-$(id -u)-$ino-*" EXIT
		trap "kill -TERM \$child 2>/dev/null" TERM INT HUP
		"$@" &
		child=$!
		while :; do
			wait "$child"
			rc=$?
			kill -0 "$child" 2>/dev/null || break
		done
		exit $rc' in_netns "$@"
}
run() {
	if [ -n "$netns" ]; then
		in_netns "$@"
	else
		"$@"
	fi
}
netns=1
if ! unshare -n true 2>/dev/null; then
	netns=
	echo "fuzz/run.sh: cannot make a network namespace: fuzzing in the host's"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

limits=(-timeout=20 -rss_limit_mb=2048)

shopt -s nullglob
failing=()
for f in "$regress"/*; do
	run "$bin" "${limits[@]}" -artifact_prefix="$crashes/replay-" "$f" \
		>"$crashes/replay.log" 2>&1 ||
		failing+=("$f: $(grep -m1 -E '^SUMMARY|^fuzz_packet:' "$crashes/replay.log")")
done
if [ ${#failing[@]} -gt 0 ]; then
	echo "fuzz/run.sh: FAIL: reproducers of $regress/ that still fail:"
	printf '  %s\n' "${failing[@]}"
	exit 1
fi

echo "fuzz/run.sh: fuzzing for ${secs}s (corpus $corpus, seeds $seeds)"
# shellcheck disable=SC2086 # FUZZ_OPTS is a list of options
run "$bin" -max_total_time="$secs" -max_len=8192 "${limits[@]}" \
	-dict=test/fuzz/packet.dict \
	-print_final_stats=1 -artifact_prefix="$crashes/" ${FUZZ_OPTS:-} \
	"$corpus" "$seeds"
rc=$?
if [ "$rc" -ne 0 ]; then
	echo "fuzz/run.sh: FAIL (exit $rc); reproducer(s) in $crashes/:"
	ls -l "$crashes"
	echo "replay one with: $bin FILE"
	exit 1
fi
echo "fuzz/run.sh: clean for ${secs}s"
