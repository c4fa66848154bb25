#!/usr/bin/env bash
# Claims 2-4 of docs/seed.md on the digits training run (`python -m mpicoll train`), JSON per
# run and a summary table (benchmarks/train_summary.py) in docs/results/issue14/, curves in
# docs/img/. Usage: bash benchmarks/claims_training.sh codecs|buckets|together
#   codecs:   claim 2, 2 ranks here (one per core): every codec with and without error feedback
#   buckets:  claim 3, 2 hosts x 1 rank at 1 Gbit/s (one rank per core): layers per bucket
#   together: claim 4, 4 hosts x 1 rank at 1 Gbit/s: tree + fp32 without overlap against ring
#             + fp16 (and bf16) with bucketed overlap, and int8 / top-1% with error feedback (needs root)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
out=docs/results/issue14/train; mkdir -p "$out" docs/img; abs=$(pwd)/$out
# 8 hidden layers of 384: 9 weight layers, 1.06 M parameters, so buckets of 1..9 layers exist
MODEL=(--dataset digits --layers 8 --hidden 384)

emulated() {  # hosts, then the train options
    local hosts=$1; shift
    # The emulated hosts share this machine's 2 cores: one BLAS thread per rank, not a host's
    # share each (4 ranks x 2 threads on 2 cores: the compute ran far slower). stdin closed: mpiexec
    # would read the list of runs below.
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
        "$PY" benchmarks/emucluster.py --hosts "$hosts" --ranks-per-host 1 --rate 1gbit -- \
        "$PY" -m mpicoll train "${MODEL[@]}" "$@" < /dev/null
}

case "${1:-}" in
codecs)
    runs=()
    for codec in none fp16 int8 int8+ef topk topk+ef threshold threshold+ef; do
        name=codec-${codec/+/-}
        "$MPIEXEC" -bind-to core -n 2 "$PY" -m mpicoll train "${MODEL[@]}" --epochs 15 \
            -c "$([[ $codec == none ]] && echo "" || echo "$codec")" --json "$out/$name.json" \
            > "$out/$name.txt"
        runs+=("$out/$name.json")
    done
    "$PY" benchmarks/train_summary.py "${runs[@]}" --at 50,100 --epoch 3 --plot docs/img/issue14-codecs.png \
        | tee "$out/codecs.txt"
    ;;
buckets)
    # 256 samples per rank and step: the backward pass takes about as long as the transfers
    HEAVY=(--batch 256 --steps 40)
    for policy in test thread; do
        runs=("$out/buckets-none.json")
        [[ -f "$out/buckets-none.json" ]] || emulated 2 "${HEAVY[@]}" --policy none \
            --json "$abs/buckets-none.json" > "$out/buckets-none.txt" 2>&1
        for layers in 1 2 3 4 9; do
            emulated 2 "${HEAVY[@]}" --bucket-layers "$layers" --policy "$policy" \
                --json "$abs/buckets-$policy-$layers.json" > "$out/buckets-$policy-$layers.txt" 2>&1
            runs+=("$out/buckets-$policy-$layers.json")
        done
        "$PY" benchmarks/train_summary.py "${runs[@]}" | tee "$out/buckets-$policy.txt"
    done
    ;;
together)
    # as a small model trains (32 samples per rank and step: compute is 2% of the step), and
    # with 256 per rank, where the backward pass is long enough to hide transfers behind
    for set in light heavy; do
        length=(--epochs 10); [[ $set == heavy ]] && length=(--batch 256 --steps 60)
        emulated 4 "${length[@]}" -a tree --policy none --json "$abs/$set-tree-fp32.json" \
            > "$out/$set-tree-fp32.txt" 2>&1
        runs=("$out/$set-tree-fp32.json")
        while read -r name options; do
            # shellcheck disable=SC2086
            emulated 4 "${length[@]}" $options --json "$abs/$set-$name.json" > "$out/$set-$name.txt" 2>&1
            runs+=("$out/$set-$name.json")
        done <<'EOF'
ring-fp32-none -a ring --policy none
ring-fp32-overlap -a ring --bucket-layers 2 --policy thread
ring-fp16-overlap -a ring -c fp16 --bucket-layers 2 --policy thread
ring-bf16-overlap -a ring -c bf16 --bucket-layers 2 --policy thread
ring-int8ef-overlap -a ring -c int8+ef --bucket-layers 2 --policy thread
topk-ef-overlap -c topk+ef --bucket-layers 2 --policy thread
EOF
        "$PY" benchmarks/train_summary.py "${runs[@]}" --plot "docs/img/issue14-together-$set.png" \
            | tee "$out/together-$set.txt"
    done
    ;;
*)
    echo "usage: $0 codecs|buckets|together" >&2; exit 2
    ;;
esac
