#!/bin/bash
# The layering of hca/ holds (scripts/check_layers.sh, hca/README.md), and
# the check itself catches what it is for: on a copy of the tree with one
# wrong include added (core -> a link, engine -> verbs/, one link -> the
# other, transport/ -> hca/), a stale exception, or a wrong call, it fails
# and names the file.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

out=$SIB_TMP/out

# the tree as it is: includes, and the calls of the plain build's objects
objs=
[ -d build/obj/hca ] && objs=build/obj/hca
rc=0
scripts/check_layers.sh ${objs:+--objects "$objs"} >"$out" 2>&1 || rc=$?
check "check_layers passes on the tree${objs:+ (includes and calls)}" test "$rc" -eq 0
[ "$rc" -eq 0 ] || cat "$out"

# A copy of what the check reads, for the broken variants.
copy() {
	rm -rf "$SIB_TMP/tree"
	mkdir -p "$SIB_TMP/tree/scripts"
	cp -r hca verbs transport mpi_glue include "$SIB_TMP/tree/"
	cp scripts/check_layers.sh scripts/layers.allow "$SIB_TMP/tree/scripts/"
}

# broken FILE LINE MSG: the check must fail on the copy with LINE added at
# the top of FILE, and name FILE in its verdict.
broken() {
	local file=$1 line=$2 msg=$3 rc=0
	copy
	{ echo "$line"; cat "$SIB_TMP/tree/$file"; } >"$SIB_TMP/x" &&
		mv "$SIB_TMP/x" "$SIB_TMP/tree/$file"
	"$SIB_TMP/tree/scripts/check_layers.sh" >"$out" 2>&1 || rc=$?
	check "check_layers fails on $msg" test "$rc" -eq 1
	check "... and names $file" grep -q "^check_layers: $file " "$out"
}

broken hca/core/cq.c '#include "udp_link.h"' "core including the UDP link"
broken hca/core/seg.h '#include "engine.h"' "a core header including the engine"
broken hca/engine/req.c '#include "verbs_int.h"' "the engine including verbs/"
broken hca/link/shm/mem.c '#include "wire.h"' "one link including the other"
broken hca/hca.h '#include "hca_int.h"' "the public header including core"
broken transport/async.c '#include "hca.h"' "transport/ including hca/"
broken mpi_glue/btl_softib_component.c '#include <seg.h>' "mpi_glue/ including hca/ (angle brackets)"

# an exception that no longer occurs is reported: the list only shrinks
copy
echo "hca/core/cq.c ring.h  # stale" >>"$SIB_TMP/tree/scripts/layers.allow"
rc=0
"$SIB_TMP/tree/scripts/check_layers.sh" >"$out" 2>&1 || rc=$?
check "check_layers fails on a stale exception" test "$rc" -eq 1
check "... and names it" grep -q 'hca/core/cq.c ring.h" no longer occurs' "$out"

# the call check: a core object that calls into a link
if [ -n "$objs" ] && command -v gcc >/dev/null; then
	copy
	rm -rf "$SIB_TMP/objs"
	cp -r "$objs" "$SIB_TMP/objs"
	cat >"$SIB_TMP/tree/hca/core/zz_bad.c" <<'EOF'
void hca_link_rx(void *dev, _Bool wait);
void zz_bad(void *dev) { hca_link_rx(dev, 0); }
EOF
	gcc -c "$SIB_TMP/tree/hca/core/zz_bad.c" -o "$SIB_TMP/objs/core/zz_bad.o"
	rc=0
	"$SIB_TMP/tree/scripts/check_layers.sh" --objects "$SIB_TMP/objs" >"$out" 2>&1 || rc=$?
	check "check_layers fails on a core object calling the UDP link" test "$rc" -eq 1
	check "... and names the call" grep -q 'hca/core/zz_bad.c (core) calls hca_link_rx' "$out"
fi

summary
