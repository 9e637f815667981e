# shellcheck shell=bash
# Helpers for the integration scripts: source it from the repo root, as
#     . test/integration/lib.sh
# Every script runs Debian's unmodified binaries against the plain build of
# the library (build/lib): an ASan-built library cannot be loaded by them.
#
#   sib_lib                 absolute path of build/lib
#   sib_run SECS CMD...     run CMD with LD_LIBRARY_PATH=build/lib, killed
#                           after SECS; returns CMD's status (124: timed out)
#   free_port               print a TCP port that nothing uses on this host
#   run_pair NAME SECS SERVER_CMD... -- CLIENT_CMD...
#                           server in the background, client once the server
#                           listens, both bounded by SECS; 0 if both exit 0
#   pass / fail MSG, check MSG CMD..., summary, sib_long   (see below)
# On exit it kills what run_pair left and removes what the script left in
# /dev/shm: its tags' segments, XRC domain files and Open MPI segments
# that no process uses any more, and libsib stats files of dead processes
# (scripts/shm_leftovers.sh; SIB_SHM_KEEP=1 keeps them).

SIB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SIB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/softib-test.XXXXXX")
SIB_PASSES=0
SIB_FAILS=0
SIB_PGIDS=()        # process groups of run_pair sides still running
SIB_PORTS_GIVEN=" " # ports free_port already handed out in this script
. "$SIB_ROOT/scripts/shm_leftovers.sh"
sib_shm_snapshot

sib_lib() { echo "$SIB_ROOT/build/lib"; }

# True when the long tier was asked for (scripts/test.sh --long).
# sib_tshark ARGS...: tshark, told that softib's UDP ports are RoCEv2 when
# SOFTIB_UDP_PORT moved them off 4791 (a process uses base + its slot).
sib_tshark() {
	local base=${SOFTIB_UDP_PORT:-}
	if [ -n "$base" ] && [ "$base" != 4791 ]; then
		tshark -d "udp.port==$base-$((base + 255)),infiniband" "$@"
	else
		tshark "$@"
	fi
}

sib_long() { [ "${SOFTIB_LONG:-0}" = 1 ]; }

sib_run() {
	local secs=$1 lib
	lib=$(sib_lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	shift
	LD_LIBRARY_PATH=$lib timeout -k 5 "$secs" "$@" </dev/null
}

# A random port in 20000..59999 that no socket on the host uses (ss), that
# refuses a connection on 127.0.0.1, and that this script has not yet used.
free_port() {
	local used port i
	used=" $(ss -Htan 2>/dev/null | awk '{ sub(/.*:/, "", $4); print $4 }' |
		tr '\n' ' ') "
	for ((i = 0; i < 500; i++)); do
		port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		case "$used$SIB_PORTS_GIVEN" in *" $port "*) continue ;; esac
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			continue
		fi
		SIB_PORTS_GIVEN+="$port "
		echo "$port"
		return 0
	done
	echo "free_port: no free port found" >&2
	return 1
}

# Wait (up to ~10 s) until a process of group $1 listens on a TCP port, or on
# port $SIB_PORT if that is set.  Returns 1 if the group is gone first.
sib_wait_listen() {
	local pg=$1 i pids
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pg" 2>/dev/null || return 1
		if [ -n "${SIB_PORT:-}" ]; then
			[ -n "$(ss -Hltn "sport = :$SIB_PORT" 2>/dev/null)" ] &&
				return 0
		else
			pids=$(pgrep -g "$pg" | paste -sd '|')
			[ -n "$pids" ] && ss -Hltnp 2>/dev/null |
				grep -Eq "pid=($pids)," && return 0
		fi
		sleep 0.1
	done
	return 0 # never saw it listen: let the client try anyway
}

# Kill process group $1 (a side of run_pair) and forget it.
sib_kill_group() {
	local pg=$1 i
	kill -KILL -- "-$pg" 2>/dev/null
	for i in "${!SIB_PGIDS[@]}"; do
		[ "${SIB_PGIDS[$i]}" = "$pg" ] && unset "SIB_PGIDS[$i]"
	done
}

sib_show_log() {
	echo "----- $1 (last 200 lines) -----"
	tail -n 200 "$2"
}

# run_pair NAME SECS SERVER_CMD... -- CLIENT_CMD...
# Each side runs under `timeout`, which puts it in its own process group, so
# that a hang is ended with everything it forked.  If the client fails, the
# server gets 3 s to notice before it is killed.  Logs: $SIB_SERVER_LOG and
# $SIB_CLIENT_LOG (stdout and stderr), kept until the script exits; both are
# printed if either side fails.  Extra variables for both sides can be given
# with `env VAR=value cmd ...`.
run_pair() {
	local name=${1//[^A-Za-z0-9_.-]/_} secs=$2 spid cpid='' src=0 crc=0 i lib
	lib=$(sib_lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	local -a srv=() cli=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		srv+=("$1")
		shift
	done
	if [ $# -eq 0 ] || [ ${#srv[@]} -eq 0 ]; then
		echo "run_pair: usage: NAME SECS SERVER_CMD... -- CLIENT_CMD..." >&2
		return 2
	fi
	shift
	cli=("$@")
	SIB_SERVER_LOG=$SIB_TMP/$name.server.log
	SIB_CLIENT_LOG=$SIB_TMP/$name.client.log

	# Plain commands (not a function) in the background, so that $! is
	# timeout's own pid, which is also its process group.
	LD_LIBRARY_PATH=$lib timeout -k 5 "$secs" "${srv[@]}" \
		</dev/null >"$SIB_SERVER_LOG" 2>&1 &
	spid=$!
	SIB_PGIDS+=("$spid")
	: >"$SIB_CLIENT_LOG"
	if sib_wait_listen "$spid"; then
		LD_LIBRARY_PATH=$lib timeout -k 5 "$secs" "${cli[@]}" \
			</dev/null >"$SIB_CLIENT_LOG" 2>&1 &
		cpid=$!
		SIB_PGIDS+=("$cpid")
		wait "$cpid" 2>/dev/null || crc=$?
	else
		crc="not started (the server exited first)"
	fi
	if [ "$crc" != 0 ]; then
		for ((i = 0; i < 30; i++)); do
			kill -0 "$spid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL -- "-$spid" 2>/dev/null
	fi
	wait "$spid" 2>/dev/null || src=$?
	sib_kill_group "$spid" # anything they forked and left behind
	[ -n "$cpid" ] && sib_kill_group "$cpid"

	[ "$src" = 0 ] && [ "$crc" = 0 ] && return 0
	echo "run_pair $name: server exit $src, client exit $crc"
	case " $src $crc " in *" 124 "* | *" 137 "*)
		echo "(124 or 137: killed after ${secs}s, or by run_pair)" ;;
	esac
	sib_show_log "$name server: ${srv[*]}" "$SIB_SERVER_LOG"
	sib_show_log "$name client: ${cli[*]}" "$SIB_CLIENT_LOG"
	return 1
}

# Counting checks.  End a script with `summary` as its last command: it
# prints the counts and returns non-zero if any check failed or none ran.
pass() {
	SIB_PASSES=$((SIB_PASSES + 1))
	echo "ok   - $*"
}

fail() {
	SIB_FAILS=$((SIB_FAILS + 1))
	echo "FAIL - $*"
}

check() { # check MSG CMD...: pass if CMD succeeds
	local msg=$1
	shift
	if "$@"; then pass "$msg"; else fail "$msg"; fi
}

summary() {
	echo "$(basename "$0"): $SIB_PASSES passed, $SIB_FAILS failed"
	[ "$SIB_FAILS" -eq 0 ] && [ "$SIB_PASSES" -gt 0 ]
}

sib_cleanup() {
	local pg
	for pg in "${SIB_PGIDS[@]}"; do
		kill -KILL -- "-$pg" 2>/dev/null
		wait "$pg" 2>/dev/null
	done
	sib_shm_clean
	rm -rf "$SIB_TMP"
}
trap sib_cleanup EXIT
trap 'exit 130' INT TERM
