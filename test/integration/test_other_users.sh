#!/bin/bash
# Issue 15 item 8, other users kept out. The test makes a second user on
# the host (removed on exit) and, while build/test/sib_users_victim holds
# an RC QP, CQs on a completion channel and a libsib worker, has it:
#  - open every /dev/shm object of ours (segment, libsib files): refused;
#  - send crafted datagrams to every abstract socket name of ours listed
#    in /proc/net/unix: doorbell messages that would raise QP_FATAL,
#    CQ_ERR (overrun: the QP to error) or flush the QP, channel messages
#    naming every likely CQ, with a forged SCM_CREDENTIALS too;
#  - run the softib tool (with our tag too): nothing of ours in it.
# The victim then finds no event, its QP RTS and traffic flowing; our own
# softib counters show the dropped datagrams (FOREIGN), and every shm
# object of ours is mode 0600.
cd "$(dirname "$0")/../.." || exit 1
. test/integration/lib.sh

prog=$SIB_ROOT/build/test/sib_users_victim
tool=$SIB_ROOT/build/bin/softib
if [ "$(id -u)" -ne 0 ] || ! command -v useradd >/dev/null ||
	! command -v setpriv >/dev/null || [ ! -x /usr/bin/python3 ]; then
	echo "SKIP: needs root, useradd, setpriv and /usr/bin/python3"
	exit 0
fi
if [ ! -x "$prog" ]; then
	fail "$prog is not built"
	summary
	exit
fi

other=sibo$$
tag=${SOFTIB_SEG_TAG:-}oth$$
export SOFTIB_SEG_TAG=$tag SIB_JOB_KEY=oth$$
useradd -M -r -s /usr/sbin/nologin "$other" || { fail "useradd $other"; summary; exit; }
cleanup_user() {
	userdel "$other" 2>/dev/null
	rm -f /dev/shm/softib-*-"$tag"{,.lock} /dev/shm/softib-*-"${tag}sq"{,.lock} \
		/dev/shm/sib-*-0-"$tag"-*
	sib_cleanup
}
trap cleanup_user EXIT
ouid=$(id -u "$other")
ogid=$(id -g "$other")
as_other() { setpriv --reuid="$ouid" --regid="$ogid" --clear-groups "$@"; }

pub=$(mktemp -d /tmp/softib-users.XXXXXX) # the other user reads its script here
chmod 755 "$pub"
trap 'cleanup_user; rm -rf "$pub"' EXIT

# ---- the attacker ----
# It is handed the victim's QPN, CQ indexes (softib cqs) and socket names
# (only the victim's: other softib processes on this host are not to be
# disturbed): an attacker that guessed all it could guess.
cat >"$pub/attack.py" <<'PY'
import glob, socket, struct, sys
victim_uid, qpn, pid, tag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
cqs = [int(x) for x in sys.argv[5].split(",") if x]
names = [l.strip() for l in open(sys.argv[6]) if l.strip()]
res = {"opened": 0, "refused": 0, "names": len(names), "sent": 0, "forged_ok": 0}

# 1. every /dev/shm object of the victim's user and tag
for p in glob.glob("/dev/shm/softib-%d-*-%s" % (victim_uid, tag)) + \
         glob.glob("/dev/shm/sib-*-%d-%s-*" % (victim_uid, tag)):
    try:
        with open(p, "rb") as f:
            f.read(64)
        res["opened"] += 1
        print("opened", p)
    except OSError:
        res["refused"] += 1

# 2. doorbell (16 bytes: kind, event, idx, id; kinds 1 ASYNC_QP, 3 ASYNC_CQ,
# 4 QP_FLUSH, 5 BOUNCE, 6 KICK) and channel (8 bytes: cq idx, handle)
msgs = [struct.pack("<IIII", 1, ev, qpn, qpn) for ev in (1, 2, 3, 4)]
msgs.append(struct.pack("<IIII", 4, 0, qpn, qpn))
for idx in cqs:
    for h in range(1, 65):
        msgs.append(struct.pack("<II", idx, h))           # wake the CQ
        msgs.append(struct.pack("<IIII", 3, 0, idx, h))   # CQ_ERR: overrun
msgs.append(struct.pack("<IIII", 5, 0, 0, 0))
msgs.append(struct.pack("<IIII", 6, 0, 0, 0))

s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.settimeout(0.2)
for n in names:
    if not n.startswith("@softib-%d-" % victim_uid):
        continue
    addr = b"\0" + n[1:].encode()
    full = 0
    for m in msgs:
        try:
            s.sendto(m, addr)
            res["sent"] += 1
            full = 0
        except (socket.timeout, BlockingIOError):
            full += 1            # a queue nobody reads now: next name
            if full == 3:
                break
        except OSError as e:
            print("send:", n, e)
            break
    # the victim's credentials, forged: the kernel must refuse them
    try:
        cred = struct.pack("iII", int(pid), victim_uid, victim_uid)
        s.sendmsg([msgs[0]], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, cred)],
                  0, addr)
        res["forged_ok"] += 1
    except OSError:
        pass
print(" ".join("%s=%d" % kv for kv in res.items()))
PY
chmod 644 "$pub/attack.py"

ready=$SIB_TMP/ready go=$SIB_TMP/go log=$SIB_TMP/victim.log
sib_run 120 "$prog" "$ready" "$go" >"$log" 2>&1 &
vpid=$!
for ((i = 0; i < 300; i++)); do
	[ -s "$ready" ] && break
	sleep 0.1
done
read -r qpn pid <"$ready" 2>/dev/null
check "the victim is ready (qpn ${qpn:-?})" test -n "$qpn"

modes=$(stat -c '%a %n' /dev/shm/softib-0-*"-$tag" /dev/shm/sib-*-0-"$tag"-* 2>/dev/null)
nobj=$(wc -l <<<"$modes")
check "our shm objects: segment, libsib stats and XRC domain file ($nobj)" \
	test "$nobj" -ge 3
bad=$(grep -v '^600 ' <<<"$modes")
check "every shm object of ours is mode 0600 ${bad:+(not: $bad)}" test -z "$bad"

# the victim's abstract names: its sockets' inodes in /proc/net/unix
inodes=" $(for fd in /proc/"${pid:-x}"/fd/*; do readlink "$fd"; done 2>/dev/null |
	sed -n 's/^socket:\[\([0-9]*\)\]$/\1/p' | tr '\n' ' ') "
awk -v want="$inodes" 'index(want, " " $7 " ") && $8 ~ /^@softib-/ { print $8 }' \
	/proc/net/unix | sort -u >"$pub/names"
chmod 644 "$pub/names"
cqs=$("$tool" cqs | awk -v p="${pid:-x}" '$2 == p { printf "%s,", $1 }')
check "the victim's doorbell and channel names ($(paste -sd ' ' "$pub/names"))" \
	test "$(grep -c -- '-db-' "$pub/names")" -eq 1 -a \
	"$(grep -c -- '-ch-' "$pub/names")" -ge 1
out=$(as_other /usr/bin/python3 "$pub/attack.py" 0 "${qpn:-0}" "${pid:-0}" "$tag" \
	"$cqs" "$pub/names" 2>&1)
echo "attacker: $out"
kv() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" <<<"$out"; }
check "the other user opened none of our shm objects ($(kv refused) refused)" \
	test "$(kv opened)" = 0 -a "$(kv refused)" -ge 3
check "its datagrams reached them ($(kv sent) sent)" test "$(kv sent)" -gt 0
check "the kernel refused its forged credentials" test "$(kv forged_ok)" = 0

counters=$("$tool" counters 2>&1)
foreign=$(awk -v p="$pid" 'f && $1 == p { print $NF } /FOREIGN/ { f = 1 }' <<<"$counters")
check "softib counters: the victim dropped foreign datagrams (${foreign:-none})" \
	test "${foreign:-0}" -gt 0

for t in "" "$tag"; do
	seen=$(as_other env SOFTIB_SEG_TAG="$t" "$tool" all 2>&1)
	hex=$(printf '0x%06x' "${qpn:-0}")
	check "softib all as the other user (tag '$t') shows none of our processes or QPs" \
		test -z "$(grep -wE "${pid:-x}|$hex" <<<"$seen")"
done

# A segment file the other user made under our segment's name (its own
# segment, renamed and opened to all): never taken for ours.
sq=${tag}sq
as_other env LD_LIBRARY_PATH="$(sib_lib)" SOFTIB_SEG_TAG="$sq" SOFTIB_UDP_PORT=$((${SOFTIB_UDP_PORT:-4791} + 300)) \
	ibv_devinfo >/dev/null 2>&1
theirs=$(ls /dev/shm/softib-"$ouid"-*-"$sq" 2>/dev/null | head -1)
ours=${theirs/softib-$ouid-/softib-0-}
if [ -n "$theirs" ] && as_other mv "$theirs" "$ours" && as_other chmod 666 "$ours"; then
	rc=0
	sib_run 30 env SOFTIB_SEG_TAG="$sq" ibv_devinfo >/dev/null 2>&1 || rc=$?
	check "a segment file of the other user's under our name is refused (ibv_devinfo exit $rc)" \
		test "$rc" -ne 0 -a "$(stat -c %U "$ours")" = "$other"
	check "... and softib does not show it as ours" \
		grep -q "not this user's segment" <<<"$(SOFTIB_SEG_TAG="$sq" "$tool" status 2>&1)"
	rm -f "$ours"
else
	fail "the other user could not make a segment to squat with"
fi

touch "$go"
rc=0
wait "$vpid" || rc=$?
cat "$log"
check "the victim saw no event, its QP stayed RTS and carries traffic (exit $rc)" \
	grep -q '^victim: ok' "$log"

summary
