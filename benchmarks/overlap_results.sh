#!/usr/bin/env bash
# Reproduce the overlap figures in docs/results.md: bucketed allreduce overlapped with a
# backward pass of real matrix products, in the emulated cluster at 1 Gbit/s (needs root):
# 4 ranks as 2 hosts x 2 and 4 x 1, and 2 x 1 (one rank per core) as the control; each beside
# the reference (--native: the same buckets and policies on MPI_Iallreduce).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ARGS=(--layers 16 --layer-mib 1 --buckets 0.5,1,2,4,16 --policies test,thread,none --reps 7 --native)
out=docs/results; mkdir -p "$out" docs/img; tmp=$(mktemp -d)
for layout in "2 2" "4 1" "2 1"; do
    set -- $layout; name="overlap-emulated-${1}x${2}"
    for ratio in 1.2 2; do
        "$PY" benchmarks/emucluster.py --hosts "$1" --ranks-per-host "$2" --rate 1gbit \
            -- "$PY" -m mpi4py benchmarks/overlap.py "${ARGS[@]}" --compute-ratio "$ratio" \
            --output "$tmp/$name.h5" --plot "docs/img/$name-r$ratio.png" 2>&1 \
            | grep -v '^\[' | tee "$out/$name-r$ratio.txt"
    done
done
