#!/usr/bin/env bash
# Debian's unmodified perftest binaries (ib_{send,write,read,atomic}_{lat,bw})
# run server and client on this host over softib0, through
# LD_LIBRARY_PATH=build/lib: RC for all eight, UC and UD where perftest
# offers them, a few rows with other options (events, the classic
# ibv_post_send path, larger messages).  The table runs once as is and once
# with SOFTIB_NO_CMA=1 on both sides (the bounce-buffer path).
#
# A case passes when both sides exit 0 and the client prints a results
# table: a "#bytes" header followed by a row that starts with a number.
# -F keeps perftest from failing on CPU-frequency scaling warnings, which
# say nothing about softib.  Each side runs under stdbuf -oL, so that a side
# killed on a hang still leaves what it printed in its log.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

if [ ! -e "$(sib_lib)/libibverbs.so.1" ]; then
	fail "the library is built: $(sib_lib)/libibverbs.so.1"
	summary
	exit
fi

# One row per run: BINARY|CONNECTION|EXTRA OPTIONS.
cases=(
	"ib_send_lat|RC|"
	"ib_send_bw|RC|"
	"ib_write_lat|RC|"
	"ib_write_bw|RC|"
	"ib_read_lat|RC|"
	"ib_read_bw|RC|"
	"ib_atomic_lat|RC|"
	"ib_atomic_bw|RC|"
	"ib_send_lat|UC|"
	"ib_send_bw|UC|"
	"ib_write_lat|UC|"
	"ib_write_bw|UC|"
	"ib_send_lat|UD|"
	"ib_send_bw|UD|"
	"ib_send_lat|RC|-e"
	"ib_send_bw|RC|-e"
	"ib_send_bw|RC|--use_old_post_send"
	"ib_write_bw|RC|--use_old_post_send"
	"ib_send_lat|RC|-s 4096"
	"ib_write_lat|RC|-s 65536"
	"ib_send_bw|RC|-s 1048576"
	"ib_write_bw|RC|-s 1048576"
	"ib_read_bw|RC|-s 1048576"
)

secs=60
sib_long && secs=900

# Iterations: perftest's own default (1000) in the default tier; far more
# in the long tier, fewer for 1 MiB messages.
iters() { # SIZE-OPTIONS...
	local big=0
	case " $* " in *" -s 1048576 "*) big=1 ;; esac
	if sib_long; then
		[ $big = 1 ] && echo 5000 || echo 100000
	else
		[ $big = 1 ] && echo 200 || echo 1000
	fi
}

for bin in ib_send_lat ib_send_bw ib_write_lat ib_write_bw \
	ib_read_lat ib_read_bw ib_atomic_lat ib_atomic_bw; do
	command -v "$bin" >/dev/null ||
		fail "$bin is installed (package perftest)"
done

# has_table FILE: a "#bytes" header line, then a line starting with
# blanks and a number (the row of results).
has_table() {
	awk '/#bytes/ { hdr = 1; next }
	     hdr && /^[ \t]*[0-9]+[ \t]+[0-9]/ { found = 1 }
	     END { exit !found }' "$1"
}

# perf LABEL BINARY CONNECTION OPTIONS...: one server/client run.
perf() {
	local label=$1 bin=$2 conn=$3 port n
	shift 3
	port=$(free_port) || {
		fail "$label: no free port"
		return
	}
	n=$(iters "$@")
	if ! run_pair "$label" "$secs" \
		"${envs[@]}" stdbuf -oL "$bin" -d softib0 -p "$port" \
		-c "$conn" -n "$n" -F "$@" \
		-- \
		"${envs[@]}" stdbuf -oL "$bin" -d softib0 -p "$port" \
		-c "$conn" -n "$n" -F "$@" 127.0.0.1; then
		fail "$label -n $n: both sides exit 0"
		return
	fi
	if has_table "$SIB_CLIENT_LOG"; then
		pass "$label -n $n"
	else
		fail "$label -n $n: the client prints a results table"
		sib_show_log "$label server" "$SIB_SERVER_LOG"
		sib_show_log "$label client" "$SIB_CLIENT_LOG"
	fi
}

# Without CMA (the bounce-buffer path): one run of each operation in the
# default tier, the whole table in the long tier.
nocma_cases=(
	"ib_send_lat|RC|"
	"ib_write_bw|RC|"
	"ib_read_lat|RC|"
	"ib_atomic_lat|RC|"
	"ib_send_bw|UD|"
)
sib_long && nocma_cases=("${cases[@]}")

# run_table TAG ROWS...
run_table() {
	local tag=$1 row bin conn opts
	local -a o
	shift
	for row in "$@"; do
		IFS='|' read -r bin conn opts <<<"$row"
		read -ra o <<<"$opts"
		perf "$tag $bin -c $conn${opts:+ $opts}" "$bin" "$conn" "${o[@]}"
	done
}

envs=(env)
run_table cma "${cases[@]}"
envs=(env SOFTIB_NO_CMA=1)
run_table nocma "${nocma_cases[@]}"

summary
