#!/bin/bash
# Issue 15 item 5: memory keys fenced against copies in flight.
# build/test/dereg_fence streams operations into a registered region —
# RDMA WRITEs and SENDs from another process, RDMA READs whose data lands
# through the owner's own lkey — and deregisters (or re-registers) the
# region while they flow. As soon as ibv_dereg_mr / ibv_rereg_mr returns,
# the region is filled with a canary, which must never change afterwards,
# while the stream goes on and fails (remote access errors; local
# protection errors for READ). Over cross-memory attach, over the bounce
# path (SOFTIB_NO_CMA=1) and over the UDP link (SOFTIB_LINK=udp), where the
# owner's progress thread is the copier; and with
# the streaming peer killed by SIGKILL just before the dereg, which must
# still return. The long tier runs every combination, ten times the rounds.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

prog=build/test/dereg_fence
rounds=20
sib_long && rounds=200

if [ ! -x "$prog" ]; then
	fail "$prog is not built"
	summary
	exit
fi

# fence LINK OP MODE [ARGS...]
fence() {
	local link=$1 op=$2 mode=$3 log rc=0
	local -a envs=(SOFTIB_NO_CMA=0 SOFTIB_LINK=) args=(-o "$op" -m "$mode" -r "$rounds" -t 10)
	shift 3
	case $link in
	nocma) envs=(SOFTIB_NO_CMA=1 SOFTIB_LINK=) ;;
	# the owner's progress thread receives (-p, no polling owner): its
	# copies race with the dereg; rounds are cheap, the race narrow
	udp) envs=(SOFTIB_NO_CMA=0 SOFTIB_LINK=udp) args=(-o "$op" -m "$mode" -r $((rounds * 2))
		-t 10 -s 262144 -p) ;;
	esac
	log=$SIB_TMP/fence.$link.$op.$mode.$((SIB_PASSES + SIB_FAILS)).log
	sib_run 200 env "${envs[@]}" "$prog" "${args[@]}" "$@" >"$log" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] && grep -q '^PASS ' "$log"; then
		pass "$link: $(grep '^PASS ' "$log" | sed 's/^PASS //')"
	else
		fail "$link $op/$mode $* (exit $rc)"
		tail -n 20 "$log"
	fi
}

if sib_long; then
	for link in cma nocma udp; do
		for op in write send read; do
			for mode in dereg rereg access; do
				fence $link $op $mode
			done
		done
	done
else
	fence cma write dereg
	fence cma write rereg
	fence cma write access
	fence cma send dereg
	fence cma read dereg
	fence nocma write dereg
	fence nocma send rereg
	fence nocma read dereg
	fence udp write dereg
	fence udp send dereg
	fence udp read dereg
	fence udp write access
fi
# a copier that dies inside its copy does not hold the dereg
for link in cma nocma; do
	for ((i = 1; i <= (rounds > 20 ? 10 : 3); i++)); do
		fence $link write dereg -k
	done
done

summary
