#!/bin/bash
# bench/targets.sh's table, read again (-P) from saved outputs of the bench
# scripts (test/integration/data/targets: small fixtures in each script's
# output format): every figure, ratio and verdict comes from those lines,
# a script that failed, was skipped or printed no figure gives "not run"
# with its reason, and the table prints anyway. Also bench/mpi_vs.sh's
# issue-13 target lines, drawn again (-P) from fixture data files. Runs no
# benchmark and asserts no speed: the figures are the fixtures'.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

fx=test/integration/data/targets
out=$(bench/targets.sh -P "$fx" 2>&1)
rc=$?
check "targets.sh -P exits 0" test "$rc" -eq 0
echo "$out" | sed 's/^/    /'
# has PATTERN...: every pattern matches a line of the table
has() {
	local p
	for p in "$@"; do grep -Eq -- "$p" <<<"$out" || return 1; done
}
check "the header prints" has '^issue +what +softib +anchor +figure +ratio +target +verdict'
check "the load at start and end print" \
	has '^load at start: 1.00 1.00 1.00$' '^load at end: 2.00 2.00 2.00$'
check "10: verbs 8 B vs the floor, 0.60/0.30 = 2.00, missed" \
	has '^10 +verbs RC SEND 8 B one-way, host \(us\) +0\.60 +shm floor +0\.30 +2\.00 +<= 1\.5x missed$'
check "10: verbs 8 B vs vader, 0.75, met" \
	has '^10 +verbs RC SEND 8 B one-way, host \(us\) +0\.60 +vader \(MPI\) +0\.80 +0\.75 +<= 1\.0x met$'
check "10: the worst size against one process_vm_writev (4096 B)" \
	has '^10 +verbs RC SEND <= 4 KiB, worst size \(4096 B\) \(us\) +1\.50 .* 1\.40 +1\.07 +< 1\.0x +missed$'
check "10: UDP link rows at MTU 1500 from udp_vs_raw's final table" \
	has '^10 +UDP link 8 B one-way, MTU 1500 \(us\) +6\.00 +raw UDP ping-pong +5\.00 +1\.20 .* met$' \
		'^10 +UDP link 1 MiB bandwidth, MTU 1500 \(MB/s\) +900\.00 .* 1000\.00 +0\.90 .* missed$' \
		'^10 +UDP link 8 B event-driven, 1 CPU, MTU 1500 \(us\) +30\.00 .* 20\.00 +1\.50 +<= 2x +met$' \
		'^10 +UDP link 8 B event-driven, 2 CPUs, MTU 1500 \(us\) +45\.00 .* 15\.00 +3\.00 +<= 2x +missed$'
check "10: MTU 9000 absent from the output: not run, with the file to read" \
	has "^10 +UDP link 8 B one-way, MTU 9000 .* not run: no figure in its output: see $fx/udp_vs_raw.txt$"
check "11: libsib vs UCX tag_lat and message rate" \
	has '^11 +libsib tagged 8 B one-way, host \(us\) +0\.90 +UCX tag_lat \(sm\) +0\.45 +2\.00 .* missed$' \
		'^11 +libsib 8 B message rate, host \(M msg/s\) +6\.00 +UCX tag_bw \(sm\) +5\.00 +1\.20 .* met$'
check "11: a script that failed gives not run with its exit status" \
	has "^11 +libsib tagged 8 B one-way, 2 hosts .* not run: failed \(exit 1\): see $fx/sib_vs_udp.lat.txt$"
check "12: sib_vs_ucx's medians (memfd and malloc rows)" \
	has '^12 +libsib tagged 1 MiB bandwidth, host \(MB/s\) +12000\.00 +UCX tag_bw \(sm\) +10000\.00 +1\.20 .* met$' \
		"^12 +libsib put 8 B, host \(malloc'd region\) \(us\) +0\.90 +UCX ucp_put_lat \(sm\) +0\.20 +4\.50 .* missed$" \
		'^12 +libsib get 8 B, host \(sib_mem_map region\) \(us\) +0\.22 +UCX ucp_get \(sm\) +0\.20 +1\.10 .* met$'
check "12: a figure printed as n/a gives not run" \
	has "^12 +libsib get 8 B, host \(malloc'd region\) .* not run: no figure"
check "12: a skipped script gives not run with the skip's reason" \
	has '^12 +libsib tagged 1 MiB bandwidth, 2 hosts .* not run: needs root \(ip netns\)$'
check "13: mpi_vs's target lines (8 B vs vader, 2 hosts vs raw UDP, worst vs tcp)" \
	has '^13 +MPI 8 B latency, host \(us\) +1\.00 +vader +0\.50 +2\.00 +<= 1\.2x missed$' \
		'^13 +MPI 8 B latency, 2 hosts \(us\) +9\.00 +raw udp +7\.50 +1\.20 .* met$' \
		'^13 +MPI latency, 2 hosts, every size \(worst: 4096 B\) \(us\) +30\.00 +tcp BTL +4000\.00 +0\.01 +< 1\.0x +met$'
check "every row has a verdict (met, missed or not run)" \
	test -z "$(grep -E '^1[0-3] ' <<<"$out" | grep -Ev ' (met|missed)$| not run: ')"
n=$(grep -cE '^1[0-3] ' <<<"$out")
check "29 target rows for issues 10-13 ($n)" test "$n" -eq 29
only=$(bench/targets.sh -P "$fx" -i 12 2>&1)
check "-i 12 prints issue 12's rows only" \
	test "$(grep -cE '^1[0-3] ' <<<"$only")" -eq "$(grep -cE '^12 ' <<<"$only")"
empty=$SIB_TMP/empty
mkdir -p "$empty"
none=$(bench/targets.sh -P "$empty" 2>&1)
check "an empty directory: the table prints, every row not run" \
	test "$(grep -cE '^1[0-3] .* not run: ' <<<"$none")" -eq "$(grep -cE '^1[0-3] ' <<<"$none")"

nr=$SIB_TMP/noroot
cp -r "$fx" "$nr"
echo "needs root (ip netns)" >"$nr/mpi_vs.2hosts.skip"
sed -i '/^target 2hosts /d' "$nr/mpi_vs.txt" # as mpi_vs.sh -S 1host prints
nro=$(bench/targets.sh -P "$nr" -i 13 2>&1)
check "13 without root: the 2-host rows say why, the host rows stay" \
	test "$(grep -cE '^13 .*2 hosts.* not run: needs root \(ip netns\)$' <<<"$nro")" -eq 4 -a \
	"$(grep -cE '^13 .*, host.* (met|missed)$' <<<"$nro")" -eq 4

# bench/mpi_vs.sh -P: the target lines from the data files alone
cp -r test/integration/data/targets_mpi_vs "$SIB_TMP/mv"
mv_out=$(bench/mpi_vs.sh -P -b "lat bw" -o "$SIB_TMP/mv" 2>/dev/null)
mvh() { grep -Eq -- "$1" <<<"$mv_out"; }
check "mpi_vs: 8 B vs vader (1.10/0.60)" \
	mvh '^target 1host lat 8 softib 1\.10 vader 0\.60 ratio 1\.83 <= 1\.2 MISSED$'
check "mpi_vs: 8 B across hosts vs the raw UDP floor" \
	mvh '^target 2hosts lat 8 softib 9\.00 raw_udp 6\.00 ratio 1\.50 <= 1\.5 MET$'
check "mpi_vs: the worst size against tcp (latency: the largest ratio)" \
	mvh '^target 1host lat worst:1024 softib 3\.00 tcp 2\.50 ratio 1\.20 < 1\.0 MISSED$'
check "mpi_vs: the worst size against tcp (bandwidth: the smallest ratio)" \
	mvh '^target 1host bw worst:1048576 softib 900\.00 tcp 1000\.00 ratio 0\.90 > 1\.0 MISSED$'
check "mpi_vs: no line where an anchor has no data (2 hosts, tcp)" \
	test -z "$(grep -E '^target 2hosts .* tcp ' <<<"$mv_out")"
summary
