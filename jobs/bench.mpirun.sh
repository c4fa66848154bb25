#!/bin/bash
# mpicoll benchmark without Slurm. Copy it, then e.g.:
#   NP=8 MPICOLL_BENCH_ARGS="-m 8:64M -i 50 -a ring,tree" ./bench.mpirun.sh
# Environment:
#   NP                    MPI ranks (default 4)
#   MPIEXEC               launcher (default: mpiexec on PATH, e.g. hydra from the mpich wheel;
#                         Open MPI with more ranks than cores: "mpirun --oversubscribe")
#   MPICOLL_BENCH_ARGS    arguments for `mpicoll bench` (see `python -m mpicoll bench --help`)
#   MPICOLL_BENCH_OUTPUT  HDF5 file to write (default: mpicoll-bench-<date-time>.h5 here)
#   PYTHON                python that has mpicoll and mpi4py, e.g. a venv's bin/python
#   MPICOLL_BENCH_CMD     what PYTHON runs (default: -m mpicoll bench)
set -euo pipefail

PYTHON=${PYTHON:-python}
OUT=${MPICOLL_BENCH_OUTPUT:-$PWD/mpicoll-bench-$(date +%Y%m%d-%H%M%S).h5}
read -r -a mpiexec <<< "${MPIEXEC:-mpiexec}"
read -r -a cmd <<< "${MPICOLL_BENCH_CMD:--m mpicoll bench}"
read -r -a args <<< "${MPICOLL_BENCH_ARGS:-}"

"${mpiexec[@]}" -n "${NP:-4}" "$PYTHON" "${cmd[@]}" "${args[@]}" --output "$OUT" || {
    rc=$?
    echo "mpicoll bench failed (exit $rc)" >&2
    exit "$rc"
}
echo "mpicoll bench results: $OUT"
