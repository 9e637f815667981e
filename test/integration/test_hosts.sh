#!/usr/bin/env bash
# The namespace hosts of test/integration/hosts.sh, as the MPI tests and
# benchmarks use them:
#   - a PMIx program (build/test/pmix_hello: put, commit, fence, get of
#     every peer's value) started by Open MPI's mpirun through our rsh
#     agent on one host, then with 2 ranks on each of 3 hosts: every rank
#     sees every value, and the hosts are told apart by their hostnames;
#   - every rank on every host sees softib0 (build/lib's libibverbs) with
#     its own namespace's GID (IPv4-mapped from its eth0 address);
#   - nothing of the hosts is left after hosts_down.
# Needs root (ip netns, unshare); skipped, not failed, without it.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh
. test/integration/hosts.sh

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
HELLO=build/test/pmix_hello
if ! command -v mpirun >/dev/null || [ ! -x "$HELLO" ]; then
	echo "test_hosts: needs mpirun and $HELLO (scons): skipped"
	exit 0
fi
if ! hosts_up 3; then
	echo "test_hosts: cannot make namespace hosts: skipped"
	exit 0
fi
echo "hosts: ${HOSTS[*]} on $HOSTS_SUBNET (bridge $HOSTS_BRIDGE_IP)"
HOSTS_TIMEOUT=60
export LD_LIBRARY_PATH
LD_LIBRARY_PATH=$(sib_lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=$SIB_TMP/out

# hello NH PPN: pmix_hello on NH hosts, PPN ranks each; checks the lines.
hello() {
	local nh=$1 ppn=$2 n=$(($1 * $2)) rc=0 i h got
	hosts_mpirun "$nh" "$ppn" "$HELLO" >"$out" 2>&1 || rc=$?
	got=$(grep -c ": ok, $n values, $nh hosts$" "$out")
	if [ "$rc" != 0 ] || [ "$got" != "$n" ]; then
		fail "pmix_hello, $ppn ranks on each of $nh hosts (exit $rc, $got/$n ok)"
		cat "$out"
		return
	fi
	for ((i = 0; i < nh; i++)); do
		h=${HOSTS[$i]}
		got=$(grep -c " on $h: ok" "$out")
		if [ "$got" != "$ppn" ]; then
			fail "pmix_hello: $got ranks on $h, want $ppn"
			cat "$out"
			return
		fi
	done
	pass "pmix_hello, $ppn ranks on each of $nh hosts: every value seen, $nh hostnames"
}
hello 1 2
hello 3 2

# softib0 on every rank, with the GID of the rank's own host.
gid_of() { # ::ffff:a.b.c.d as ibv_devinfo prints it
	local a b c d
	IFS=. read -r a b c d <<<"$1"
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d"
}
rc=0
# shellcheck disable=SC2016 # expanded by the ranks' shells
hosts_mpirun 3 2 sh -c 'echo "rank $(hostname) $(ibv_devinfo -d softib0 -v |
	sed -n "s/.*GID\[ *0\]:[[:space:]]*//p")"' >"$out" 2>&1 || rc=$?
bad=0
for h in "${HOSTS[@]}"; do
	want="rank $h $(gid_of "${HOSTS_IP[$h]}")"
	[ "$(grep -cx "$want" "$out")" = 2 ] || bad=1
done
if [ "$rc" = 0 ] && [ "$bad" = 0 ] && [ "$(grep -c ^rank "$out")" = 6 ]; then
	pass "softib0 on 6 ranks of 3 hosts, each with its namespace's GID"
else
	fail "softib0 GIDs (exit $rc)"
	cat "$out"
fi

# Every environment variable named reaches the ranks (-x).
rc=0
# shellcheck disable=SC2016
SOFTIB_HOSTS_PROBE=x42 hosts_mpirun 2 1 sh -c 'echo "probe=$SOFTIB_HOSTS_PROBE"' \
	>"$out" 2>&1 || rc=$?
check "SOFTIB_* reaches the ranks of 2 hosts" \
	test "$rc:$(grep -c '^probe=x42$' "$out")" = 0:2

names=("${HOSTS[@]}")
hosts_down
left=0
for h in "${names[@]}"; do
	ip netns list | grep -qw "$h" && left=1
done
ip link show "$HOSTS_BRIDGE" >/dev/null 2>&1 && left=1
check "hosts_down leaves no namespace, veth or bridge" test "$left" = 0

summary
