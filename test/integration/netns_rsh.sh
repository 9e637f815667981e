#!/bin/sh
# The "remote shell" of the namespace hosts (test/integration/hosts.sh):
# Open MPI's launcher calls it as it would call ssh,
#
#     netns_rsh.sh HOST COMMAND...
#
# and COMMAND (the words joined by spaces, read by a shell: ssh's rule)
# runs in network namespace HOST, in a UTS namespace of its own whose
# hostname is HOST. Without that hostname every namespace would answer
# with the machine's name, and Open MPI (and anything else that keys on
# the hostname) would take all the hosts for one.
#
# Environment variables pass through (ip netns exec keeps them), as
# ssh's SendEnv would; mpirun's -x still names what the ranks get.
if [ $# -lt 2 ]; then
	echo "usage: netns_rsh.sh HOST COMMAND..." >&2
	exit 255 # ssh's status for "could not connect"
fi
host=$1
shift
case $host in
*[!A-Za-z0-9_-]* | '')
	echo "netns_rsh: bad host name '$host'" >&2
	exit 255
	;;
esac
# shellcheck disable=SC2016 # $0 and $1 belong to the inner shell
exec ip netns exec "$host" unshare --uts \
	sh -c 'hostname "$0" || exit 255; eval "$1"' "$host" "$*"
