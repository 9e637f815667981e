#!/bin/bash
# The softib demo: install what is missing, build, show softib0 as Debian's
# unmodified ibv_devinfo sees it through the drop-in library, then run an
# osu-style latency/bandwidth test between two processes on this host, and
# end with MPI: Open MPI's latency and bandwidth through vader (and
# softib's BTL beside it with SOFTIB_MPI_BTL=1: not yet by default), with
# the table and the plots (bench/mpi_vs.sh -q).
# Every run is bounded by a timeout; nothing is left running.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

scripts/deps.sh || exit 1
scons -j2 || { echo "demo.sh: build failed" >&2; exit 1; }

. test/integration/lib.sh # sib_run, free_port, run_pair, cleanup traps

echo
echo "=== LD_LIBRARY_PATH=build/lib ibv_devinfo -v"
sib_run 30 ibv_devinfo -v || { echo "demo.sh: ibv_devinfo failed" >&2; exit 1; }

status=0
# osu NAME SECS SERVER_CMD... -- CLIENT_CMD...: run a pair, show the table
# the client prints (run_pair shows both logs itself if a side fails).
osu() {
	echo
	echo "=== $1"
	if run_pair "$@"; then
		cat "$SIB_CLIENT_LOG"
	else
		status=1
	fi
}

if [ -x build/bin/softib_osu ]; then
	port=$(free_port) || exit 1
	osu "softib_osu: latency, bandwidth, bi-directional bandwidth" 600 \
		build/bin/softib_osu -t all -p "$port" -- \
		build/bin/softib_osu -t all -p "$port" 127.0.0.1
else
	# softib's own benchmark is not built yet: Debian's perftest instead.
	for bin in ib_send_lat ib_send_bw; do
		port=$(free_port) || exit 1
		osu "$bin" 300 "$bin" -a -d softib0 -p "$port" -- \
			"$bin" -a -d softib0 -p "$port" 127.0.0.1
	done
fi

if [ -x build/bin/mpi_osu ] && command -v mpirun >/dev/null; then
	echo
	# softib's BTL joins once it passes test_mpi.sh (SOFTIB_MPI_BTL=1)
	tr=vader
	[ "${SOFTIB_MPI_BTL:-0}" = 1 ] && tr="softib vader"
	echo "=== MPI: bench/mpi_vs.sh -q -b 'lat bw' -T '$tr' -S 1host"
	timeout -k 10 600 bench/mpi_vs.sh -q -b "lat bw" -T "$tr" -S 1host ||
		status=1
fi
exit "$status"
