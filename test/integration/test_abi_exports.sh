#!/bin/bash
# Does the built libibverbs.so.1 export what Debian's binaries import?
#
# test/integration/data/required-exports.txt lists, one "(VERSION) symbol"
# a line, every symbol that ibverbs-utils, perftest (with the libmlx5 and
# libefa providers it links) and librdmacm.so.1 import from libibverbs.so.1
# on Debian 12.  Each must be a defined symbol of our library carrying that
# exact version, or the dynamic linker refuses to start those programs.
# The soname must be libibverbs.so.1 for them to find the library at all.
#
# Run from the repository root.  SOFTIB_LIB names the library to check
# (default build/lib/libibverbs.so.1).
set -euo pipefail

lib=${SOFTIB_LIB:-build/lib/libibverbs.so.1}
list=test/integration/data/required-exports.txt

# Symbols that rdma-core exports as data objects, not functions: providers
# read verbs_allow_disassociate_destroy as a bool.
data_objects=" verbs_allow_disassociate_destroy "

if [ ! -f "$lib" ]; then
	echo "abi: no library at $lib (build it, or set SOFTIB_LIB)" >&2
	exit 1
fi
if [ ! -f "$list" ]; then
	echo "abi: $list not found (run from the repository root)" >&2
	exit 1
fi

soname=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
soname_ok=1
if [ "$soname" != libibverbs.so.1 ]; then
	echo "abi: soname is '${soname:-none}', expected libibverbs.so.1"
	soname_ok=0
fi

# One "VERSION SYMBOL KIND" line per defined dynamic symbol, KIND being F
# (function) or O (object).  objdump -T prints the version in parentheses
# when it is not the symbol's default one; a binary that asks for that
# version binds to it all the same, so the parentheses are dropped.  The
# flag column is the 7 characters after the 16-digit address.
exports=$(objdump -T "$lib" | awk '
	/^[0-9a-f]+ / && NF >= 6 && $0 !~ /\*UND\*/ {
		flags = substr($0, 18, 7)
		kind = substr(flags, 7, 1)
		ver = $(NF - 1)
		gsub(/[()]/, "", ver)
		print ver, $NF, kind
	}')

total=0
present=0
while read -r ver sym _; do
	[ -n "$ver" ] || continue
	case $ver in "#"*) continue ;; esac
	ver=${ver#(}
	ver=${ver%)}
	total=$((total + 1))
	case $data_objects in
	*" $sym "*) want=O what="data object" ;;
	*) want=F what=function ;;
	esac
	kind=$(awk -v v="$ver" -v s="$sym" \
		'$1 == v && $2 == s { print $3; exit }' <<<"$exports")
	if [ -z "$kind" ]; then
		echo "missing: ($ver) $sym"
	elif [ "$kind" != "$want" ]; then
		echo "missing: ($ver) $sym (exported, but not as a $what)"
	else
		present=$((present + 1))
	fi
done <"$list"

echo "abi: $present/$total required exports present"
[ "$present" -eq "$total" ] && [ "$total" -gt 0 ] && [ "$soname_ok" = 1 ]
