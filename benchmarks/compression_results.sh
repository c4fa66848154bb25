#!/usr/bin/env bash
# Reproduce the compression figures in docs/results.md: codec throughput on this CPU, and the
# compressed allreduce against native fp32 MPI_Allreduce and against dense fp16, on this machine
# and in the emulated cluster at 1 Gbit/s (2 hosts x 2 ranks, 4 x 1; needs root).
# "train": the training demo's loss with each codec, with and without error feedback.
# Usage: bash benchmarks/compression_results.sh [throughput|local|emulated|train]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
SWEEP=(-m 1M:64M -f 4 -i 7 -x 1 -a auto -c none,fp16,int8,topk,int8+ef --no-progress)
out=docs/results; mkdir -p "$out" docs/img; tmp=$(mktemp -d)

case "${1:-local}" in
train)
    for codec in none int8 int8+ef sign sign+ef topk topk+ef; do
        echo "== -c $codec"
        "$MPIEXEC" -n 4 "$PY" -m mpicoll train --dataset synthetic --layers 1 --hidden 256 \
            --batch 64 --lr 0.1 --steps 300 -c "${codec/none/}"
    done 2>&1 | tee "$out/train-codecs.txt" ;;
throughput)
    "$PY" benchmarks/codec_throughput.py --repeats 7 | tee "$out/codec-throughput.txt" ;;
local)
    "$MPIEXEC" -n 4 "$PY" -m mpicoll bench "${SWEEP[@]}" --output "$tmp/c.h5" | tee "$out/compressed-local-p4.txt"
    "$PY" -m mpicoll plot "$tmp/c.h5" -o docs/img/compressed-local-p4.png ;;
emulated)
    for layout in "2 2" "4 1"; do
        set -- $layout; name="compressed-emulated-${1}x${2}"
        "$PY" benchmarks/emucluster.py --hosts "$1" --ranks-per-host "$2" --rate 1gbit --json "$out/$name.json" \
            -- "$PY" -m mpicoll bench "${SWEEP[@]}" --output "$tmp/$name.h5" 2>&1 | tee "$out/$name.txt"
        "$PY" -m mpicoll plot "$tmp/$name.h5" -o "docs/img/$name.png"
    done ;;
esac
