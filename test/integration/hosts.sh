# shellcheck shell=bash
# Hosts made of network namespaces, for tests and benchmarks that need
# several machines (docs/hosts.md). Source it (bash), then:
#
#   hosts_up H              make H hosts (1..3): namespaces with unique
#                           names, each with loopback and an eth0 (a veth
#                           whose other end is on a bridge in the root
#                           namespace), addresses in a private /24 that
#                           exists only there; removed at exit (trap) or
#                           by hosts_down. Returns non-zero if it cannot
#                           (not root, no iproute2): callers skip.
#   HOSTS=(names...)        the hosts, in order; HOSTS_IP[name] their
#                           addresses; HOSTS_SUBNET (a.b.c.0/24);
#                           HOSTS_BRIDGE_IP (the root namespace's side)
#   HOSTS_AGENT             the rsh agent (netns_rsh.sh): absolute path
#   hosts_exec HOST CMD...  run CMD on HOST (its namespace and hostname)
#   hosts_mpirun NH PPN ARGS...
#                           mpirun with PPN ranks on each of the first NH
#                           hosts, launched through the agent, Open MPI's
#                           own traffic (out-of-band and the tcp BTL) kept
#                           on the hosts' subnet, and LD_LIBRARY_PATH,
#                           SOFTIB_* and OMPI_* passed to every rank (-x);
#                           ARGS are mpirun's own arguments, then the
#                           program (e.g. --mca btl self,tcp prog args);
#                           killed after HOSTS_TIMEOUT seconds (default
#                           120: status 124)
#   hosts_down              remove everything hosts_up made (idempotent)
#
# HOSTS_MTU (optional): the veths' and the bridge's MTU (default: the
# kernel's, 1500). At 9000 softib's path MTU is 4096 bytes instead of
# 1024 (docs/udp-link.md); bench/mpi_vs.sh -U sets it.
#
# The names start with mh<pid> (HOSTS_NAME_PREFIX<pid> when that is set:
# a helper whose namespaces must carry its own tag): two scripts (or two
# helpers) running at once never share a host, a bridge or a subnet.

HOSTS=()
declare -gA HOSTS_IP=()
HOSTS_SUBNET=
HOSTS_BRIDGE_IP=
HOSTS_AGENT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/netns_rsh.sh
HOSTS_PREFIX=${HOSTS_NAME_PREFIX:-mh}$$
HOSTS_BRIDGE=${HOSTS_PREFIX}br

# A /24 in 10.81.0.0/16 that no interface of the root namespace is in
# (another run's bridge would be): tried from a pid-derived start.
hosts_pick_subnet() {
	local used k i
	used=$(ip -o -4 addr show 2>/dev/null | awk '{ print $4 }')
	for ((i = 0; i < 250; i++)); do
		k=$((($$ + i) % 250 + 1))
		grep -q "^10\.81\.$k\." <<<"$used" && continue
		echo "10.81.$k"
		return 0
	done
	return 1
}

hosts_down() {
	local h i=0
	for h in "${HOSTS[@]}"; do
		i=$((i + 1))
		# whatever still runs there (an orted a timeout left)
		ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null
		# the pair would go with the namespace, but only once the
		# kernel gets round to it: removed now
		ip link del "${HOSTS_PREFIX}v$i" 2>/dev/null
		ip netns del "$h" 2>/dev/null
	done
	ip link del "$HOSTS_BRIDGE" 2>/dev/null
	HOSTS=()
	HOSTS_IP=()
}

# hosts_up H: see above. On failure everything made so far is removed.
hosts_up() {
	local n=${1:-2} net i h v
	if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null ||
		! command -v unshare >/dev/null; then
		echo "hosts_up: needs root, iproute2 and unshare" >&2
		return 2
	fi
	case $n in [1-3]) ;; *) echo "hosts_up: 1 to 3 hosts" >&2; return 2 ;; esac
	hosts_down
	hosts_trap
	net=$(hosts_pick_subnet) || { echo "hosts_up: no free subnet" >&2; return 1; }
	HOSTS_SUBNET=$net.0/24
	HOSTS_BRIDGE_IP=$net.254
	if ! { ip link add "$HOSTS_BRIDGE" type bridge &&
		ip addr add "$HOSTS_BRIDGE_IP/24" dev "$HOSTS_BRIDGE" &&
		ip link set "$HOSTS_BRIDGE" up; }; then
		hosts_down
		return 1
	fi
	for ((i = 1; i <= n; i++)); do
		h=${HOSTS_PREFIX}n$i v=${HOSTS_PREFIX}v$i
		HOSTS+=("$h")
		HOSTS_IP[$h]=$net.$i
		if ! { ip netns add "$h" &&
			ip link add "$v" type veth peer name "${v}p" &&
			ip link set "$v" master "$HOSTS_BRIDGE" &&
			ip link set "$v" up &&
			ip link set "${v}p" netns "$h" &&
			ip -n "$h" link set "${v}p" name eth0 &&
			ip -n "$h" addr add "$net.$i/24" dev eth0 &&
			ip -n "$h" link set lo up &&
			ip -n "$h" link set eth0 up; }; then
			hosts_down
			return 1
		fi
		if [ -n "${HOSTS_MTU:-}" ] && ! { ip link set "$v" mtu "$HOSTS_MTU" &&
			ip -n "$h" link set eth0 mtu "$HOSTS_MTU"; }; then
			hosts_down
			return 1
		fi
	done
	# the bridge takes its ports' smallest MTU; set for an empty one too
	[ -n "${HOSTS_MTU:-}" ] && ip link set "$HOSTS_BRIDGE" mtu "$HOSTS_MTU"
	hosts_wait_reachable || { hosts_down; return 1; }
}

# The bridge's ports take a moment to forward (no STP here, but the links
# come up asynchronously): wait until every host answers a TCP connect
# to an unused port with a refusal, at most ~5 s each.
hosts_wait_reachable() {
	local h i out
	for h in "${HOSTS[@]}"; do
		for ((i = 0; i < 50; i++)); do
			# (no pipe: the callers' pipefail would count bash's
			# failed connect against grep's match)
			out=$(timeout 1 bash -c \
				"exec 3<>/dev/tcp/${HOSTS_IP[$h]}/9" 2>&1)
			case $out in *refused*) break ;; esac
			sleep 0.1
		done
		[ "$i" -lt 50 ] || { echo "hosts_up: $h unreachable" >&2; return 1; }
	done
}

# Chain hosts_down in front of whatever EXIT trap the script has (lib.sh's
# sib_cleanup), once.
hosts_trap() {
	local prev
	[ -n "${HOSTS_TRAPPED:-}" ] && return
	HOSTS_TRAPPED=1
	prev=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
	# shellcheck disable=SC2064 # expanded now, on purpose
	trap "hosts_down; $prev" EXIT
}

hosts_exec() {
	local h=$1
	shift
	"$HOSTS_AGENT" "$h" "$(printf '%q ' "$@")"
}

# The -x options: every LD_LIBRARY_PATH, SOFTIB_* and OMPI_* variable set.
hosts_env_args() {
	local v
	for v in $(compgen -e); do
		case $v in
		LD_LIBRARY_PATH | SOFTIB_* | OMPI_*) printf -- '-x %s\n' "$v" ;;
		esac
	done
}

hosts_mpirun() {
	local nh=$1 ppn=$2 spec='' i
	shift 2
	if [ "$nh" -gt "${#HOSTS[@]}" ] || [ "$nh" -lt 1 ]; then
		echo "hosts_mpirun: $nh hosts asked, ${#HOSTS[@]} up" >&2
		return 2
	fi
	for ((i = 0; i < nh; i++)); do
		spec+=${spec:+,}${HOSTS[$i]}:$ppn
	done
	# --bind-to none: each namespace host's orted binds as if it had the
	# machine's cores to itself, so local rank 0 of every host went to
	# core 0 — all the hosts' first ranks on one core, each busy-polling
	# while the other waited for a CPU slice (libsib's 8 B ping-pong 150
	# us a half round trip, 8 us unbound; docs/transport.md "Across hosts")
	# shellcheck disable=SC2046 # one word per -x and per name
	timeout -k 5 "${HOSTS_TIMEOUT:-120}" mpirun --mca plm_rsh_agent "$HOSTS_AGENT" \
		--mca plm_rsh_no_tree_spawn 1 --bind-to none \
		--mca oob_tcp_if_include "$HOSTS_SUBNET" \
		--mca btl_tcp_if_include "$HOSTS_SUBNET" \
		--host "$spec" $(hosts_env_args) "$@"
}
