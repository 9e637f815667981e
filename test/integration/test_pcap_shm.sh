#!/usr/bin/env bash
# SOFTIB_PCAP on the shared-memory link: the packets each message stands
# for (RC segmented by the path MTU, UD datagrams) land in the pcap file,
# and tshark decodes them as RoCEv2 without options.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

if ! command -v tshark >/dev/null; then
	echo "test_pcap_shm: tshark not installed: skipped"
	exit 0
fi

for tool in rc ud; do
	pcap=$SIB_TMP/$tool.pcap
	port=$(free_port)
	size=3000
	[ $tool = ud ] && size=1000
	if run_pair "pcap-$tool" 60 \
		env SOFTIB_PCAP="$pcap" ibv_${tool}_pingpong -d softib0 -p "$port" -n 10 -s $size -- \
		env SOFTIB_PCAP="$pcap" ibv_${tool}_pingpong -d softib0 -p "$port" -n 10 -s $size 127.0.0.1; then
		pass "pcap-$tool: pingpong over shared memory"
	else
		fail "pcap-$tool: pingpong over shared memory"
	fi
	decoded=$(sib_tshark -r "$pcap" -V 2>/dev/null)
	want="SEND First"
	[ $tool = ud ] && want="Unreliable Datagram (UD) - SEND only"
	n=$(grep -c "Opcode: " <<<"$decoded")
	if [ "$n" -ge 20 ] && grep -q "$want" <<<"$decoded"; then
		pass "pcap-$tool: $n packets decoded, '$want' among them"
	else
		fail "pcap-$tool: $n packets decoded, '$want' missing"
	fi
done
summary
