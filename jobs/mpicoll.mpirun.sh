#!/bin/bash
# mpicoll without Slurm: the benchmark, a tuning run or the training demo under mpiexec/mpirun.
#   NP=8 ./mpicoll.mpirun.sh bench -m 8:64M -i 20
#   ./mpicoll.mpirun.sh tune --model tuning.json
#   ./mpicoll.mpirun.sh train --steps 500
# Environment:
#   NP              MPI ranks (default 4)
#   MPIEXEC         launcher (default: mpiexec on PATH, e.g. hydra from the mpich wheel;
#                   Open MPI with more ranks than cores: "mpirun --oversubscribe")
#   PYTHON          python that has mpicoll and mpi4py (default: python)
#   MPICOLL_OUTPUT  HDF5 file to append to (default: mpicoll-<command>-<date-time>.h5 here)
set -euo pipefail

command=${1:?usage: mpicoll.mpirun.sh bench|tune|train [ARGS...]}
PYTHON=${PYTHON:-python}
OUT=${MPICOLL_OUTPUT:-$PWD/mpicoll-${command}-$(date +%Y%m%d-%H%M%S).h5}
read -r -a mpiexec <<< "${MPIEXEC:-mpiexec}"

"${mpiexec[@]}" -n "${NP:-4}" "$PYTHON" -m mpi4py -m mpicoll "$@" --output "$OUT" || {
    rc=$?
    echo "mpicoll $command failed (exit $rc)" >&2
    exit "$rc"
}
echo "mpicoll $command results: $OUT"
