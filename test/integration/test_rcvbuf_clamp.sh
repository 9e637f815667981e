#!/bin/bash
# Issue 15 item 9: a UDP receive buffer the kernel clamped (SO_RCVBUF
# above net.core.rmem_max) is reported by `softib status`, with the
# setting that lifts it; one granted in full is reported as such.
# A process holds the device open (ibv_rc_pingpong waiting for a client)
# while softib status looks.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

tool=build/bin/softib
max=$(sysctl -n net.core.rmem_max)
tag=${SOFTIB_SEG_TAG:-}rcvbuf$$
trap 'rm -f /dev/shm/softib-*-"$tag"-[12]; sib_cleanup' EXIT

# status_with BYTES N: softib status while a process asked for BYTES
# (in a segment of its own, N)
status_with() {
	local port pid out i
	export SOFTIB_SEG_TAG=$tag-$2
	port=$(free_port) || return 1
	SOFTIB_UDP_RCVBUF=$1 sib_run 30 ibv_rc_pingpong -p "$port" >/dev/null 2>&1 &
	pid=$!
	for ((i = 0; i < 100; i++)); do
		out=$("$tool" status 2>&1)
		grep -q '1 live process' <<<"$out" && break
		sleep 0.1
	done
	echo "$out"
	kill "$pid" 2>/dev/null
	pkill -P "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
}

big=$((max + (1 << 20)))
out=$(status_with "$big" 1)
echo "$out" | grep -A1 'UDP rcvbuf'
check "asked $big B (> rmem_max $max): status says CLAMPED, granted $((max >> 10)) KiB" \
	grep -q "UDP rcvbuf *CLAMPED in 1 of 1 process: $((max >> 10)) KiB granted, $((big >> 10)) KiB asked" <<<"$out"
check "... and names the setting to raise" \
	grep -q "sysctl -w net.core.rmem_max=$big" <<<"$out"

small=$((max > (1 << 20) ? 1 << 20 : max))
out=$(status_with "$small" 2)
echo "$out" | grep 'UDP rcvbuf'
check "asked $small B (<= rmem_max): status says as asked" \
	grep -q 'UDP rcvbuf *as asked in every process' <<<"$out"

summary
