#!/usr/bin/env bash
# Reproduce the core figures in docs/results.md: the bench sweep at 2 and 4 ranks on this
# machine, and at 2 hosts x 2 ranks in the emulated cluster (1 Gbit/s links; needs root).
# Tables go to docs/results/, plots to docs/img/. Usage: bash benchmarks/core_results.sh [local|emulated]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
SWEEP=(-m 8:64M -f 2 -i 10 -x 2 --no-progress)
out=docs/results; mkdir -p "$out" docs/img; tmp=$(mktemp -d)

if [[ "${1:-local}" == local ]]; then
    for np in 2 4; do
        "$MPIEXEC" -n "$np" "$PY" -m mpicoll bench "${SWEEP[@]}" --output "$tmp/local-p$np.h5" | tee "$out/local-p$np.txt"
        "$PY" -m mpicoll plot "$tmp/local-p$np.h5" -o "docs/img/local-p$np.png"
    done
else
    "$PY" benchmarks/emucluster.py --hosts 2 --ranks-per-host 2 --rate 1gbit --json "$out/emulated-2x2.json" \
        -- "$PY" -m mpicoll bench "${SWEEP[@]}" --output "$tmp/emulated-2x2.h5" 2>&1 | tee "$out/emulated-2x2.txt"
    "$PY" -m mpicoll plot "$tmp/emulated-2x2.h5" -o docs/img/emulated-2x2.png
fi
