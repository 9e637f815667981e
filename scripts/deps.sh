#!/bin/bash
# Install the Debian 12 packages softib needs to build, test and demo.
# Idempotent and quick: asks dpkg first and only runs apt-get when a
# package is missing.  Works as root, or through sudo when available.
set -euo pipefail

PACKAGES="build-essential scons libcunit1-dev libibverbs-dev ibverbs-utils
perftest iproute2 tshark libhwloc-dev libpmix-dev openmpi-bin libopenmpi-dev
procps psmisc clang libclang-rt-14-dev llvm ucx-utils gnuplot-nox linux-perf"

missing=()
for p in $PACKAGES; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
	as_root=()
elif command -v sudo >/dev/null; then
	as_root=(sudo)
else
	echo "deps.sh: missing packages (${missing[*]}) and neither root nor sudo" >&2
	exit 1
fi

echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer no, silently.
echo 'wireshark-common wireshark-common/install-setuid boolean false' |
	"${as_root[@]}" debconf-set-selections
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
	apt-get install -y -q --no-install-recommends "${missing[@]}"
