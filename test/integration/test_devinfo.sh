#!/bin/bash
# Debian's unmodified ibv_devices and ibv_devinfo list softib0 through the
# drop-in library, with every field they print sane.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

err=$SIB_TMP/stderr

# ibv_devices prints "    <name padded to 16>\t<16 hex digits>" per device.
rc=0
devs=$(sib_run 30 ibv_devices 2>"$err") || rc=$?
check "ibv_devices exits 0" test "$rc" -eq 0
check "ibv_devices prints nothing on stderr" test ! -s "$err"
check "ibv_devices lists softib0 with a 16-hex-digit node GUID" \
	grep -Eq '^ +softib0 *'$'\t''[0-9a-f]{16}$' <<<"$devs"
guid=$(awk '$1 == "softib0" { print $2 }' <<<"$devs")

rc=0
info=$(sib_run 30 ibv_devinfo -v 2>"$err") || rc=$?
check "ibv_devinfo -v exits 0" test "$rc" -eq 0
check "ibv_devinfo -v prints nothing on stderr" test ! -s "$err"
if [ "$rc" -ne 0 ] || [ -s "$err" ]; then
	cat "$err"
fi

# has REGEX DESCRIPTION: an extended regex matches a line of ibv_devinfo -v.
has() { check "ibv_devinfo -v: $2" grep -Eq "$1" <<<"$info"; }
S='[[:space:]]+'
has "^hca_id:${S}softib0\$" "hca_id softib0"
has "^${S}transport:${S}InfiniBand \\(0\\)\$" "transport InfiniBand (0)"
has "^${S}fw_ver:${S}[^[:space:]]+" "fw_ver present"
has "^${S}node_guid:${S}[0-9a-f]{4}(:[0-9a-f]{4}){3}\$" "node_guid"
has "^${S}phys_port_cnt:${S}[1-9]" "at least one port"
has "^${S}port:${S}1\$" "port 1"
has "^${S}state:${S}PORT_ACTIVE \\(4\\)\$" "state PORT_ACTIVE (4)"
has "^${S}active_mtu:${S}(256|512|1024|2048|4096) \\([1-5]\\)\$" \
	"active_mtu is an IB MTU"
has "^${S}link_layer:${S}InfiniBand\$" "link_layer InfiniBand"
has "^${S}phys_state:${S}LINK_UP \\(5\\)\$" "phys_state LINK_UP (5)"
# the QP number space (issue 10): 65,536 QPs per process
has "^${S}max_qp:${S}65536\$" "max_qp 65536 (per process)"
has "^${S}max_res_rd_atom:${S}1048576\$" "max_res_rd_atom 16 x max_qp"
has "^${S}GID\\[ *0\\]:${S}[0-9a-f]{4}(:[0-9a-f]{4}){7}" "GID[0] present"

lid=$(awk '$1 == "port_lid:" { print $2; exit }' <<<"$info")
check "ibv_devinfo -v: port_lid is non-zero (got '${lid}')" \
	test "${lid:-0}" -gt 0 2>/dev/null
dguid=$(awk '$1 == "node_guid:" { gsub(":", "", $2); print $2; exit }' \
	<<<"$info")
check "ibv_devices and ibv_devinfo agree on the node GUID" \
	test -n "$guid" -a "$guid" = "$dguid"
check "ibv_devinfo -v prints no invalid or unknown value nor error" \
	test -z "$(grep -Ei 'invalid|unknown|error|fail' <<<"$info")"

rc=0
sib_run 30 ibv_devinfo -d softib0 >/dev/null 2>&1 || rc=$?
check "ibv_devinfo -d softib0 exits 0" test "$rc" -eq 0
rc=0
sib_run 30 ibv_devinfo -d nosuch >/dev/null 2>&1 || rc=$?
check "ibv_devinfo -d nosuch exits non-zero (got $rc)" \
	test "$rc" -ne 0 -a "$rc" -ne 124 -a "$rc" -ne 137

summary
