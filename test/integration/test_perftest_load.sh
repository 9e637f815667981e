#!/bin/bash
# Debian's unmodified perftest binaries load against the drop-in library:
# every symbol and symbol version they (and the provider libraries they link,
# libmlx5 and libefa) import resolves.  LD_BIND_NOW makes the loader resolve
# all of them at start-up instead of at first call.  `-h` may exit non-zero;
# only the loader's complaints count.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

lib=$(sib_lib)/libibverbs.so.1
check "the library exists: $lib" test -e "$lib"

for bin in ib_send_lat ib_send_bw ib_write_lat ib_write_bw \
	ib_read_lat ib_read_bw ib_atomic_lat ib_atomic_bw; do
	path=$(command -v "$bin")
	if [ -z "$path" ]; then
		fail "$bin is installed (package perftest)"
		continue
	fi
	# ldd asks the loader which libibverbs it would map: ours, not Debian's.
	check "$bin maps build/lib/libibverbs.so.1" grep -Fq "=> $lib " \
		<<<"$(LD_LIBRARY_PATH=$(sib_lib) ldd "$path" 2>&1)"
	out=$(LD_BIND_NOW=1 sib_run 30 "$bin" -h 2>&1)
	bad=$(grep -E "symbol lookup error|undefined symbol|version \`[^']*' not found|no version information|cannot open shared object" <<<"$out")
	check "$bin -h loads without missing symbols or versions" test -z "$bad"
	[ -z "$bad" ] || echo "$bad"
done

summary
