# shellcheck shell=bash
# What the MPI scripts (test_mpi.sh, bench/mpi_vs.sh) share about Open MPI.
# Source it; it exports:
#   OMPI_ALLOW_RUN_AS_ROOT*        mpirun as root (this machine's tests)
#   OMPI_MCA_btl_base_warn_component_unused=0
#                                  no complaint about unused networks
# and defines
#   ompi_softib_setup              0 if build/lib/openmpi holds our
#                                  mca_btl_softib.so, and then exports
#                                  OMPI_MCA_mca_base_component_path = Open MPI's
#                                  default path, then ours (so that
#                                  --mca btl self,softib finds it)
#   ompi_osc_args BTL              the --mca osc words a BTL list needs for
#                                  one-sided runs (see below): osc rdma
#                                  over softib where the list has it

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_base_warn_component_unused=0

OMPI_SH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

ompi_softib_setup() {
	local comp=$OMPI_SH_ROOT/build/lib/openmpi def
	[ -f "$comp/mca_btl_softib.so" ] || return 1
	# the default, as ompi_info prints it: "dir:dir" in quotes
	def=$(ompi_info --param mca all --level 9 --parsable 2>/dev/null |
		sed -n 's/^mca:mca:base:param:mca_base_component_path:value:"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')
	# only directories that exist (Open MPI refuses the path otherwise:
	# ~/.openmpi/components usually does not)
	local d path=
	local IFS=:
	for d in $def; do
		[ -d "$d" ] && path+=$d:
	done
	export OMPI_MCA_mca_base_component_path=$path$comp
}

# One-sided windows. A list with softib runs Open MPI's osc rdma over our
# BTL (its atomics: docs/mpi.md), and only osc rdma: a window osc rdma
# cannot take fails the run instead of falling back to pt2pt.
# osc_rdma_btls names softib because, beside vader on one host, osc rdma
# would rank vader first (lower latency), and Open MPI 4.1.4's osc rdma
# over vader crashes in MPI_Compare_and_swap to the calling rank itself
# (vader's emulated atomics, open-mpi/ompi#11349). Lists without softib
# get osc sm (one node) or pt2pt (one-sided over ob1's point-to-point):
# over tcp alone no one-sided component takes MPI_Win_create by default.
ompi_osc_args() {
	case $1 in
	*softib*) echo "--mca osc rdma --mca osc_rdma_btls softib" ;;
	*) echo "--mca osc sm,pt2pt" ;;
	esac
}
