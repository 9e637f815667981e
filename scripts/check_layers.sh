#!/bin/bash
# The layering of hca/ (hca/README.md), checked: every #include line of
# every file of hca/, transport/ and mpi_glue/ is resolved the way the
# compiler resolves it (the including file's folder, then the include path
# of SConstruct) and judged by the folder of the file it finds:
#
#   hca/hca.h      includes nothing of hca/
#   hca/core/      core only
#   hca/engine/    core, engine
#   hca/link/X/    core, engine, link/X (one link never includes another)
#   hca/link/*.c   anything in hca/ (the wiring: the link table)
#   hca/           never verbs/, transport/ or mpi_glue/
#   transport/, mpi_glue/: never anything of hca/ (public headers only)
#
# Exceptions are listed, with their reason, in scripts/layers.allow
# ("<file> <included name>  # why"); an exception that no longer occurs
# is reported, so the list only shrinks.
#
# With --objects DIR (build/obj/hca of a built tree) the calls are checked
# too: which folder's objects use symbols defined in which folder, by the
# same rules; the link table and the engine's callbacks (defined by
# hca/link/links.c) are the interface, usable from every layer.
#
#   scripts/check_layers.sh [--root DIR] [--objects DIR]
# Exit 0: clean; 1: a violation (each printed); 2: usage.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
objects=
while [ $# -gt 0 ]; do
	case $1 in
	--root) root=$2; shift 2 ;;
	--objects) objects=$2; shift 2 ;;
	*) echo "usage: $0 [--root DIR] [--objects DIR]" >&2; exit 2 ;;
	esac
done
root=$(cd "$root" && pwd) || exit 2
cd "$root" || exit 2

# The include path, as SConstruct sets it (hca_dirs), and transport's.
incpath=(hca hca/core hca/engine hca/link hca/link/shm hca/link/udp verbs . transport include)
allow_file=scripts/layers.allow
bad=0
used_allow=()

layer_of() { # path -> its layer, in $layer (no subshell: hundreds of calls)
	local rest
	case $1 in
	hca/core/*) layer=core ;;
	hca/engine/*) layer=engine ;;
	hca/link/*/*) rest=${1#hca/link/}; layer=link/${rest%%/*} ;;
	hca/link/*) layer=link ;;
	hca/*) layer=hca ;;
	verbs/*) layer=verbs ;;
	transport/*) layer=transport ;;
	mpi_glue/*) layer=mpi_glue ;;
	*) layer=other ;;
	esac
}

allowed() { # from-layer to-layer -> 0 if allowed
	local from=$1 to=$2
	case $to in
	verbs | transport | mpi_glue) return 1 ;;
	other) return 0 ;;
	esac
	case $from in
	hca) [ "$to" = hca ] ;;
	core) [ "$to" = hca ] || [ "$to" = core ] ;;
	engine) [ "$to" = hca ] || [ "$to" = core ] || [ "$to" = engine ] ;;
	link) return 0 ;;
	link/*) [ "$to" = hca ] || [ "$to" = core ] || [ "$to" = engine ] ||
		[ "$to" = "$from" ] ;;
	*) return 0 ;;
	esac
}

is_allowed_exception() { # file name
	[ -f "$allow_file" ] || return 1
	if grep -Eq "^$1[[:space:]]+$2([[:space:]]|$)" "$allow_file"; then
		used_allow+=("$1 $2")
		return 0
	fi
	return 1
}

resolve() { # including-file name quote|angle -> $path (empty: a system header)
	local f=$1 name=$2 kind=$3 d
	path=
	if [ "$kind" = quote ] && [ -f "${f%/*}/$name" ]; then
		path=${f%/*}/$name
		return
	fi
	for d in "${incpath[@]}"; do
		if [ -f "$d/$name" ]; then
			path=$d/$name
			path=${path#./}
			return
		fi
	done
}

check_include() { # file line
	local f=$1 line=$2 from name kind to
	layer_of "$f"
	from=$layer
	if [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
		name=${BASH_REMATCH[1]} kind=quote
	elif [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<([^\>]+)\> ]]; then
		name=${BASH_REMATCH[1]} kind=angle
	else
		return
	fi
	resolve "$f" "$name" "$kind"
	[ -n "$path" ] || return # a system header
	layer_of "$path"
	to=$layer
	case $from in
	transport | mpi_glue)
		case $to in hca | core | engine | link*) ;; *) return ;; esac ;;
	*)
		allowed "$from" "$to" && return ;;
	esac
	is_allowed_exception "$f" "$name" && return
	echo "check_layers: $f ($from) includes \"$name\" = $path ($to): not allowed"
	bad=1
}

# every #include line, "file:line", read by one grep
while IFS= read -r hit; do
	check_include "${hit%%:*}" "${hit#*:}"
done < <(find hca transport mpi_glue -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null |
	sort | xargs grep -H '^[[:space:]]*#[[:space:]]*include')

# exceptions that are no longer needed
if [ -f "$allow_file" ]; then
	while read -r file name _; do
		case $file in '' | '#'*) continue ;; esac
		found=0
		for u in "${used_allow[@]+"${used_allow[@]}"}"; do
			[ "$u" = "$file $name" ] && found=1
		done
		if [ $found = 0 ]; then
			echo "check_layers: $allow_file: \"$file $name\" no longer occurs: remove it"
			bad=1
		fi
	done <"$allow_file"
fi

# ---- calls: which folder's objects use which folder's symbols ----
if [ -n "$objects" ]; then
	if [ ! -d "$objects" ]; then
		echo "check_layers: no objects in $objects" >&2
		exit 2
	fi
	defs=$(mktemp) undefs=$(mktemp)
	trap 'rm -f "$defs" "$undefs"' EXIT
	# the objects of today's sources only (a moved file leaves its old
	# one), read by two nm calls ("object: ... symbol" lines)
	mapfile -t objs < <(cd "$objects" && find . -name '*.o' | sed 's|^\./||' | sort |
		while read -r o; do [ -f "$root/hca/${o%.o}.c" ] && echo "$o"; done)
	if [ ${#objs[@]} -gt 0 ]; then
		(cd "$objects" && nm -A -g --defined-only "${objs[@]}") |
			awk '{ f = $1; sub(/:.*/, "", f); print $NF, "hca/" f }' >"$defs"
		(cd "$objects" && nm -A -u "${objs[@]}") |
			awk '{ f = $1; sub(/:.*/, "", f); print "hca/" f, $NF }' >"$undefs"
	fi
	# file-of-use symbol file-of-definition, across folders
	while read -r user sym definer; do
		layer_of "$user"
		from=$layer
		layer_of "$definer"
		to=$layer
		[ "$from" = "$to" ] && continue
		# the interface: the link table and the engine's callbacks
		case $sym in hca_links | hca_link_host | hca_link_net | hca_engine) continue ;; esac
		allowed "$from" "$to" && continue
		echo "check_layers: ${user%.o}.c ($from) calls $sym of ${definer%.o}.c ($to): not allowed"
		bad=1
	done < <(awk 'NR == FNR { def[$1] = $2; next } ($2 in def) { print $1, $2, def[$2] }' \
		"$defs" "$undefs")
fi

if [ $bad = 0 ]; then
	echo "check_layers: clean"
fi
exit $bad
