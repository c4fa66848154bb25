#!/usr/bin/env bash
# The GPU check, for a lent GPU machine: the GPU tests, then a short GPU benchmark
# (ranks sharing the GPU, device against host buffers, codec throughput). About 3-5 minutes;
# every step has its own timeout so the whole stays under 8. Outputs go to $OUT (default
# ./gpu-check-out): gpu_check.log, gpu-tests.xml, transport-tests.xml, allreduce.json,
# codec_throughput.json. Any test failure, skipped GPU test or wrong result fails the script.
#
# Needs CuPy, mpi4py, h5py and numpy. Without an MPI library it installs the mpich wheel (and
# pytest when missing) from ./.whl if present (pip download mpich pytest -d .whl), else PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
PY="${PYTHON:-python3}"
RANKS="${RANKS:-4}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HYDRA_LAUNCHER=fork
export PATH="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

fail() { echo "gpu_check: FAILED: $*"; exit 1; }

pip_install() {  # from ./.whl when carried, else the index; system Pythons may need the flag
  local source=()
  [ -d .whl ] && source=(--no-index --find-links .whl)
  "$PY" -m pip install -q ${source[@]+"${source[@]}"} "$@" \
    || "$PY" -m pip install -q --break-system-packages ${source[@]+"${source[@]}"} "$@"
}

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
if ! "$PY" -c "from mpi4py import MPI" 2>/dev/null; then
  echo "no MPI library for mpi4py: installing the mpich wheel"
  pip_install mpich || fail "could not install mpich"
fi
"$PY" -c "import pytest" 2>/dev/null || pip_install pytest || fail "could not install pytest"
"$PY" - <<'PY' || fail "environment"
import cupy, h5py, mpi4py, numpy, pytest
from mpi4py import MPI
from mpicoll import cuda_aware
print("cupy", cupy.__version__, "| numpy", numpy.__version__, "| mpi4py", mpi4py.__version__,
      "| h5py", h5py.__version__, "| pytest", pytest.__version__)
print("MPI:", MPI.Get_library_version().splitlines()[0].strip())
print("GPUs:", cupy.cuda.runtime.getDeviceCount(), "| CUDA-aware MPI:", cuda_aware.detect())
PY
command -v mpiexec >/dev/null || fail "no mpiexec on PATH"

echo "== GPU tests (tests/test_gpu.py: codecs, kernels, differential cases on 1, 2, 4 ranks)"
timeout 300 "$PY" -m pytest -q -p no:cacheprovider -rs -m gpu tests/test_gpu.py \
  --junitxml "$OUT/gpu-tests.xml" || fail "GPU tests"
"$PY" - "$OUT/gpu-tests.xml" <<'PY' || fail "GPU tests were skipped or none ran"
import sys, xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot().find("testsuite")
tests, skipped = int(suite.get("tests")), int(suite.get("skipped"))
print(f"GPU tests: {tests} run, {skipped} skipped")
sys.exit(tests == 0 or skipped > 0)
PY

echo "== transport tests (staged and direct code with NumPy standing in, real MPI)"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_transport.py \
  --junitxml "$OUT/transport-tests.xml" || fail "transport tests"

echo "== benchmark: $RANKS ranks sharing the GPU"
timeout 240 mpiexec -n "$RANKS" "$PY" -m mpi4py benchmarks/gpu_bench.py --out "$OUT" \
  || fail "benchmark"
echo "gpu_check: OK"
