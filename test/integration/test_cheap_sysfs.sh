#!/bin/bash
# Issue 15 item 11, cheap things stay cheap: reading the device's sysfs
# files (ibv_read_sysfs_file, which rdma-core programs call) answers from
# the host's facts without opening a device — no slot in the segment, no
# UDP port bound, no progress thread started. Checked under strace: the
# reads make no clone, bind no socket and open no segment, and their
# answers agree with an opened device's (ibv_devinfo).
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

if ! command -v strace >/dev/null || ! command -v python3 >/dev/null; then
	echo "SKIP: needs strace and python3"
	exit 0
fi

py=$(python3 -c 'import sys; print(sys.executable)') # past pyenv's shim
prog=$SIB_TMP/reads.py
cat >"$prog" <<'PY'
import ctypes
lib = ctypes.CDLL("libibverbs.so.1", use_errno=True)
buf = ctypes.create_string_buffer(256)
d = b"/sys/class/infiniband/softib0"
for f in (b"node_guid", b"node_type", b"fw_ver", b"ports/1/state",
          b"ports/1/lid", b"ports/1/gids/0", b"ports/1/link_layer"):
    n = lib.ibv_read_sysfs_file(d, f, buf, 256)
    print(f.decode(), n, buf.value.decode() if n >= 0 else "")
PY

trace=$SIB_TMP/strace
rc=0
out=$(sib_run 60 strace -f -qq -o "$trace" \
	-e trace=clone,clone3,fork,vfork,bind,openat "$py" "$prog") || rc=$?
check "the sysfs reads exit 0" test "$rc" -eq 0
check "every read answers (length >= 0)" \
	test -z "$(awk '$2 < 0' <<<"$out")"
check "node_guid is read" grep -Eq '^node_guid [0-9]+ [0-9a-f]{4}(:[0-9a-f]{4}){3}$' <<<"$out"
check "ports/1/state reads ACTIVE" grep -q '^ports/1/state .*ACTIVE' <<<"$out"
nclone=$(grep -cE '(^|[0-9] )(clone|clone3|fork|vfork)\(' "$trace")
check "no thread nor process started by the reads (clones: $nclone)" \
	test "$nclone" -eq 0
ninet=$(grep -cE 'bind\(.*AF_INET' "$trace")
check "no UDP port bound by the reads (binds: $ninet)" test "$ninet" -eq 0
nunix=$(grep -cE 'bind\(.*AF_UNIX' "$trace")
check "no doorbell socket bound by the reads (binds: $nunix)" test "$nunix" -eq 0
nseg=$(grep -cE 'openat\(.*/dev/shm/softib-' "$trace")
check "the segment is not opened by the reads (opens: $nseg)" test "$nseg" -eq 0

# the same answers as an opened device gives
info=$(sib_run 30 ibv_devinfo 2>/dev/null)
dguid=$(awk '$1 == "node_guid:" { print $2; exit }' <<<"$info")
sguid=$(awk '$1 == "node_guid" { print $3 }' <<<"$out")
check "node_guid read from sysfs is the device's ($sguid vs $dguid)" \
	test -n "$dguid" -a "$sguid" = "$dguid"
dlid=$(awk '$1 == "port_lid:" { print $2; exit }' <<<"$info")
slid=$(awk '$1 == "ports/1/lid" { print $3 }' <<<"$out")
check "ports/1/lid read from sysfs is the port's ($slid vs $dlid)" \
	test -n "$dlid" -a "$((slid))" = "$dlid"

summary
