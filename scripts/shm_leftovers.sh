# shellcheck shell=bash
# What a test run leaves in /dev/shm, removed when the run ends. Sourced by
# test/integration/lib.sh (each integration script) and scripts/test.sh.
#
#   sib_shm_snapshot   remember what /dev/shm holds and the SOFTIB_SEG_TAG
#                      in effect (call it when the run starts)
#   sib_shm_clean      remove, of this user's files:
#     - sib-stats-<uid>-<tag>-<pid>-<id>[.tmp] (libsib's per-worker
#       counters, transport/stats.c) whose process is gone, whoever made
#       them: only a live worker rewrites or removes its file;
#     - what appeared since the snapshot under the run's tag (a tag that
#       starts with it: scripts add suffixes), unless something still uses
#       it: softib segments softib-<uid>-<netns>-v<layout>[-<tag>] with
#       their .lock (removed under the lock file's exclusive flock, which
#       no process that maps the segment lets go: the library's own rule,
#       hca/core/seg.c), libsib's XRC domain files sib-xrcd-<uid>-<tag>-<job>
#       and Open MPI's vader_segment.* (kept while any process has them
#       open or mapped: fuser).
# Nothing else in /dev/shm is touched. SIB_SHM_KEEP=1 keeps everything
# (to look at a failed run's segment with `softib`).

sib_shm_snapshot() {
	SIB_SHM_TAG=${SOFTIB_SEG_TAG:-}
	SIB_SHM_BEFORE=$'\n'$(ls -A /dev/shm 2>/dev/null)$'\n'
}

# sib_shm_new NAME: true when NAME was not in /dev/shm at the snapshot.
sib_shm_new() {
	case ${SIB_SHM_BEFORE:-} in *$'\n'"$1"$'\n'*) return 1 ;; esac
	return 0
}

# sib_shm_in_use FILE: a process has FILE open or mapped.
sib_shm_in_use() {
	fuser -s "$1" 2>/dev/null
}

# libsib's stats files whose process is gone: <...>-<pid>-<id>[.tmp].
sib_shm_clean_stats() {
	local f name pid
	for f in /dev/shm/sib-stats-"$1"-*; do
		[ -e "$f" ] || continue
		name=${f##*/}
		name=${name%.tmp}
		pid=${name%-*}
		pid=${pid##*-}
		case $pid in '' | *[!0-9]*) continue ;; esac
		[ -d "/proc/$pid" ] && continue
		rm -f -- "$f"
	done
}

# A segment and its lock file, if no process maps the segment.
sib_shm_clean_segment() {
	local seg=$1 lock=$1.lock
	if [ -e "$lock" ]; then
		flock -x -n "$lock" rm -f -- "$seg" "$lock" 2>/dev/null
	elif ! sib_shm_in_use "$seg"; then
		rm -f -- "$seg"
	fi
}

sib_shm_clean() {
	local uid f name tag
	[ "${SIB_SHM_KEEP:-0}" = 1 ] && return 0
	uid=$(id -u)
	sib_shm_clean_stats "$uid"
	[ -n "${SIB_SHM_BEFORE:-}" ] || return 0 # no snapshot: nothing is known new
	for f in /dev/shm/softib-"$uid"-* /dev/shm/sib-xrcd-"$uid"-* \
		/dev/shm/vader_segment.*; do
		[ -e "$f" ] || continue
		name=${f##*/}
		sib_shm_new "$name" || continue
		case $name in
		softib-*.lock)
			# with its segment; alone when a script removed that
			tag=$(cut -d- -f5- <<<"${name%.lock}")
			[ ! -e "${f%.lock}" ] && [[ $tag == "$SIB_SHM_TAG"* ]] &&
				flock -x -n "$f" rm -f -- "$f" 2>/dev/null
			;;
		softib-*)
			# softib-<uid>-<netns>-v<layout>[-<tag>]
			tag=$(cut -d- -f5- <<<"$name")
			[[ $tag == "$SIB_SHM_TAG"* ]] && sib_shm_clean_segment "$f"
			;;
		sib-xrcd-*)
			[[ $name == "sib-xrcd-$uid-$SIB_SHM_TAG"* ]] &&
				! sib_shm_in_use "$f" && rm -f -- "$f"
			;;
		vader_segment.*)
			sib_shm_in_use "$f" || rm -f -- "$f"
			;;
		esac
	done
	return 0
}
