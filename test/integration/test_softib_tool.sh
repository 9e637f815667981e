#!/bin/bash
# The softib tool (tools/):
#   - `softib counters` with 64 QPs alive: every column of the per-QP
#     table (the last, D_LEN, included) on every row, and no overrun of the
#     table's rows (the ASan build of the tool, where there is one). Its
#     table once had one column fewer than its header array: the last
#     column's cells ran past the rows, out of the buffer when the rows
#     filled it (64 QPs);
#   - `softib status` names the segments of other softib builds (another
#     layout in the name), not lock files nor this build's segments of
#     other tags (it once listed them all as "another softib build").
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

export SOFTIB_SEG_TAG=${SOFTIB_SEG_TAG:-}ctr$$
tool=$SIB_ROOT/build/asan/bin/softib
[ -x "$tool" ] || tool=$SIB_ROOT/build/bin/softib
[ -x "$tool" ] || { fail "build/bin/softib missing (scons)"; summary; exit; }
nqp=64

# ibv_srq_pingpong's server makes its QPs, then waits for a client that
# never comes; it is killed at the end (sib_cleanup).
port=$(free_port) || { fail "no free port"; summary; exit; }
LD_LIBRARY_PATH=$(sib_lib) timeout -k 5 60 ibv_srq_pingpong -p "$port" -q "$nqp" \
	</dev/null >"$SIB_TMP/server.log" 2>&1 &
SIB_PGIDS+=("$!")
n=0
for ((i = 0; i < 100; i++)); do
	n=$("$tool" qps 2>/dev/null | grep -c '^0x')
	[ "$n" -ge "$nqp" ] && break
	sleep 0.1
done
check "the server's $nqp QPs are up ($n seen)" test "$n" -ge "$nqp"

out=$SIB_TMP/counters
rc=0
"$tool" counters >"$out" 2>&1 || rc=$?
check "softib counters exits 0 ($(basename "$(dirname "$(dirname "$tool")")")/bin/softib)" \
	test "$rc" -eq 0
no_report() { ! grep -q 'Sanitizer' "$out"; }
check "... without a sanitizer report" no_report
check "... its per-QP header ends with D_LEN" grep -q 'D_STATE *D_LEN$' "$out"
rows=$(awk '/^QPN/ { f = 1; next } f && /^0x/ && NF == 14 { n++ } /^$/ { f = 0 } END { print n + 0 }' "$out")
check "... $nqp QP rows of 14 columns ($rows)" test "$rows" -ge "$nqp"
[ "$SIB_FAILS" -eq 0 ] || head -n 20 "$out"

# Fake segment files beside ours: another layout (two tags), this layout
# under another tag; ours and its lock are there already.
ours=$("$tool" status | awk '$1 == "segment" { print $2 }')
layout=$(cut -d- -f4 <<<"$ours")
pre=/dev/shm$(cut -d- -f1-3 <<<"$ours")
fakes=("$pre-v0.1-$SOFTIB_SEG_TAG" "$pre-v0.1" "$pre-$layout-${SOFTIB_SEG_TAG}zz"
       "$pre-$layout-${SOFTIB_SEG_TAG}zz.lock")
for f in "${fakes[@]}"; do : >"$f"; done
"$tool" status >"$out" 2>&1
rm -f "${fakes[@]}"
listed() { grep -q "^other segment   ${1#/dev/shm} (another softib build" "$out"; }
unlisted() { ! grep -q "^other segment   ${1#/dev/shm}\b" "$out"; }
check "softib status: another layout's segment listed as another build" listed "$pre-v0.1"
check "... also under a tag" listed "$pre-v0.1-$SOFTIB_SEG_TAG"
check "... not this build's segment of another tag" unlisted "$pre-$layout-${SOFTIB_SEG_TAG}zz"
no_lock() { ! grep -q '^other segment.*\.lock' "$out"; }
check "... nor a lock file" no_lock
[ "$SIB_FAILS" -eq 0 ] || cat "$out"

summary
