#!/bin/bash
# Build build/fuzz/fuzz_packet: the libFuzzer target of test/fuzz/fuzz_packet.c
# linked with the HCA sources (hca/*/*.c, hca/link/*/*.c) compiled by clang for libFuzzer's
# coverage and with AddressSanitizer + UBSan (any UB report is a crash).
# Independent of SConstruct: libFuzzer needs clang, the tree is built with gcc.
#
#   test/fuzz/build.sh          build (only what changed)
#   CLANG=clang-16 test/fuzz/build.sh
#   FUZZ_OUT=build/fuzz-x FUZZ_CFLAGS='-fsanitize-recover=undefined' \
#       test/fuzz/build.sh      another variant, in its own directory
set -euo pipefail
cd "$(dirname "$0")/../.."

cc=${CLANG:-clang}
out=${FUZZ_OUT:-build/fuzz}
obj=$out/obj
mkdir -p "$obj"

if ! command -v "$cc" >/dev/null; then
	echo "fuzz/build.sh: $cc not found (apt-get install clang)" >&2
	exit 2
fi

san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined
     -fno-omit-frame-pointer)
hca_dirs=(hca hca/core hca/engine hca/link hca/link/shm hca/link/udp)
cflags=(-std=gnu11 -D_GNU_SOURCE "${hca_dirs[@]/#/-I}" -Iverbs -I. -g -O1 -Wall -Wextra
	-Wno-unused-parameter -Wno-gnu-variable-sized-type-not-at-end)
# shellcheck disable=SC2206 # FUZZ_CFLAGS is a list of words
extra=(${FUZZ_CFLAGS:-})

# A header change or other flags rebuild everything; a source change, its
# object.
stamp=$obj/flags
flags_now="$cc ${cflags[*]} ${san[*]} ${FUZZ_CFLAGS:-}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$flags_now" ]; then
	rm -f "$obj"/*.o
	echo "$flags_now" >"$stamp"
fi
newest_hdr=$(ls -t hca/*.h hca/*/*.h hca/link/*/*.h test/fuzz/*.h | head -n 1)
srcs=(hca/*/*.c hca/link/*/*.c test/fuzz/fuzz_packet.c test/fuzz/fuzz_world.c
      test/fuzz/fuzz_seeds.c)
compile() { # src obj: a failed compile leaves no object behind
	rm -f "$2"
	"$cc" "${cflags[@]}" "${san[@]}" "${extra[@]}" -fsanitize=fuzzer-no-link \
		-c "$1" -o "$2.tmp" &&
		mv "$2.tmp" "$2"
}
jobs_max=$(nproc)
running=0
failed=0
for src in "${srcs[@]}"; do
	o=$obj/$(basename "$src" .c).o
	if [ -f "$o" ] && [ "$o" -nt "$src" ] && [ "$o" -nt "$newest_hdr" ]; then
		continue
	fi
	if [ "$running" -ge "$jobs_max" ]; then
		wait -n || failed=1
		running=$((running - 1))
	fi
	compile "$src" "$o" &
	running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
	wait -n || failed=1
	running=$((running - 1))
done
if [ "$failed" -ne 0 ]; then
	echo "fuzz/build.sh: compilation failed" >&2
	exit 1
fi

objs=()
for src in "${srcs[@]}"; do
	objs+=("$obj/$(basename "$src" .c).o")
done
"$cc" "${san[@]}" "${extra[@]}" -fsanitize=fuzzer "${objs[@]}" -lpthread \
	-o "$out/fuzz_packet"
echo "fuzz/build.sh: $out/fuzz_packet"
