#!/usr/bin/env bash
# Debian's unmodified ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and
# ibv_srq_pingpong between two processes on this host, over softib0 (IB link
# layer, LID addressing), through LD_LIBRARY_PATH=build/lib.
#
# Every tool runs with its default options, with -e (sleep on completion
# events) and -c (validate the received buffer); ibv_rc_pingpong also with
# -N (the ibv_wr_* work-request API), -t (completion timestamps) and all of
# them together.  Sizes run from 1 B to 1 MiB, and for UD up to the active
# MTU of the port (ibv_ud_pingpong refuses a larger -s).  The whole matrix
# then runs again with SOFTIB_NO_CMA=1 on both sides: the bounce-buffer
# path that replaces cross-memory attach where the kernel refuses it.
#
# A case passes when both sides exit 0, both print their
# "N bytes in S seconds" summary, neither complains (bad completion status,
# invalid data), and with -t both report their completion clock cycles.
# Each side runs under stdbuf -oL, so that a side killed on a hang still
# leaves what it printed in its log.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

if [ ! -e "$(sib_lib)/libibverbs.so.1" ]; then
	fail "the library is built: $(sib_lib)/libibverbs.so.1"
	summary
	exit
fi

# One row per tool and option set: TOOL|OPTIONS|SIZES.  "ud" in SIZES
# stands for the UD sizes worked out below from the port's active MTU.
# The default tier covers every tool, every option and sizes from 1 B to
# 1 MiB (the path MTU for UD) once; the long tier (SOFTIB_LONG=1) runs the
# whole product of options and sizes, with 50 times the iterations.
big="1 4096 65536 1048576"
ends="1 1048576"
if sib_long; then
	ends=$big
fi
cases=(
	"ibv_rc_pingpong||$big"
	"ibv_rc_pingpong|-e|$ends"
	"ibv_rc_pingpong|-c|$ends"
	"ibv_rc_pingpong|-N|$ends"
	"ibv_rc_pingpong|-t|$ends"
	"ibv_rc_pingpong|-e -c -N -t|$ends"
	"ibv_uc_pingpong||$big"
	"ibv_uc_pingpong|-e|4096"
	"ibv_uc_pingpong|-c|65536"
	"ibv_srq_pingpong||$big"
	"ibv_srq_pingpong|-e|4096"
	"ibv_srq_pingpong|-c|65536"
	"ibv_ud_pingpong||ud"
	"ibv_ud_pingpong|-e|udmax"
	"ibv_ud_pingpong|-c|udmax"
)
# Without CMA (the bounce-buffer path): each tool once, data validated.
nocma_cases=(
	"ibv_rc_pingpong|-c|1 65536"
	"ibv_rc_pingpong|-e -t|4096"
	"ibv_uc_pingpong|-c|4096"
	"ibv_srq_pingpong|-c|65536"
	"ibv_ud_pingpong|-c|udmax"
)
sib_long && nocma_cases=("${cases[@]}")

iters() { # TOOL SIZE
	local n
	if [ "$2" -le 4096 ]; then
		n=2000
	elif [ "$2" -le 65536 ]; then
		n=200
	else
		n=50
	fi
	sib_long && n=$((n * 50))
	[ "$1" = ibv_srq_pingpong ] && n=$(((n + 15) / 16))
	echo "$n"
}
secs=60
sib_long && secs=900

for tool in ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong \
	ibv_srq_pingpong; do
	command -v "$tool" >/dev/null ||
		fail "$tool is installed (package ibverbs-utils)"
done

# The UD payload limit is the port's active MTU (ibv_ud_pingpong checks -s
# against it; the 40-byte GRH area comes on top of it in the receive buffer).
info=$(sib_run 30 ibv_devinfo -d softib0 2>&1)
mtu=$(awk '$1 == "active_mtu:" { print $2; exit }' <<<"$info")
if [[ ! "$mtu" =~ ^(256|512|1024|2048|4096)$ ]]; then
	fail "ibv_devinfo -d softib0 reports an active MTU (got '${mtu}')"
	echo "$info"
	mtu=1024
fi
ud_sizes="1 $((mtu / 2)) $mtu"

# log_has FILE REGEX: an extended regex matches a line of FILE.
log_has() { grep -Eq -- "$2" "$1"; }

# pingpong LABEL TOOL SIZE OPTIONS...: one server/client run, one check.
pingpong() {
	local label=$1 tool=$2 size=$3 port n why=() f log
	shift 3
	port=$(free_port) || {
		fail "$label: no free port"
		return
	}
	n=$(iters "$tool" "$size")
	if ! run_pair "$label" "$secs" \
		"${envs[@]}" stdbuf -oL "$tool" -d softib0 -p "$port" \
		-s "$size" -n "$n" "$@" \
		-- \
		"${envs[@]}" stdbuf -oL "$tool" -d softib0 -p "$port" \
		-s "$size" -n "$n" "$@" 127.0.0.1; then
		fail "$label -n $n: both sides exit 0"
		return
	fi
	for f in server client; do
		log=$SIB_SERVER_LOG
		[ $f = client ] && log=$SIB_CLIENT_LOG
		log_has "$log" "^[1-9][0-9]* bytes in [0-9.]+ seconds" ||
			why+=("$f prints no 'N bytes in S seconds'")
		log_has "$log" "Failed status|invalid data|Couldn't|[Ff]ailed to" &&
			why+=("$f reports an error")
		case " $* " in *" -t "*)
			log_has "$log" "^Max receive completion clock cycles" ||
				why+=("$f prints no completion clock cycles")
			;;
		esac
	done
	if [ ${#why[@]} -eq 0 ]; then
		pass "$label -n $n"
	else
		fail "$label -n $n: $(IFS=';'; echo "${why[*]}")"
		sib_show_log "$label server" "$SIB_SERVER_LOG"
		sib_show_log "$label client" "$SIB_CLIENT_LOG"
	fi
}

# run_matrix TAG: every row of the table at every size.
run_matrix() {
	local tag=$1 row tool opts sizes size
	local -a o
	shift
	for row in "$@"; do
		IFS='|' read -r tool opts sizes <<<"$row"
		[ "$sizes" = ud ] && sizes=$ud_sizes
		[ "$sizes" = udmax ] && sizes=$mtu
		read -ra o <<<"$opts"
		for size in $sizes; do
			pingpong "$tag ${tool#ibv_} ${opts:+$opts }-s $size" \
				"$tool" "$size" "${o[@]}"
		done
	done
}

envs=(env)
run_matrix cma "${cases[@]}"
envs=(env SOFTIB_NO_CMA=1)
run_matrix nocma "${nocma_cases[@]}"

summary
