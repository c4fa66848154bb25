#!/usr/bin/env bash
# Run issue 11's reliability programs against an older revision (default: the issue-10 commit),
# each killed after 20 s: what "before" means in docs/results.md. Usage:
#   bash benchmarks/reliability_before.sh [REV]
set -u
rev=${1:-71ad109}
root=$(cd "$(dirname "$0")/.." && pwd)
old=$(mktemp -d)/old
git -C "$root" worktree add -q --detach "$old" "$rev"
trap 'git -C "$root" worktree remove --force "$old"' EXIT
cp "$root"/tests/mpi_programs/{poll_then_exit,mismatch}.py "$old/tests/mpi_programs/"
cp "$root"/tests/mpi/reliability_cases.py "$root"/tests/mpi/helpers.py "$old/tests/mpi/"
cd "$old"
export PYTHONPATH="$old:$old/tests/mpi" MPIR_CVAR_POLLS_BEFORE_YIELD=1 MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 HYDRA_LAUNCHER=fork
mpiexec=$(dirname "$(command -v python3)")/mpiexec; python=python3
[ -x "$root/.venv/bin/mpiexec" ] && mpiexec=$root/.venv/bin/mpiexec python=$root/.venv/bin/python
for p in 2 3 4; do
  timeout 20 "$mpiexec" -n $p "$python" -m mpi4py -m pytest -q -p no:cacheprovider \
      tests/mpi/reliability_cases.py -k "any_order and ring" >/dev/null 2>&1
  echo "wait on B before A (ring), $p ranks: exit $? (124: hung, killed after 20 s)"
done
for p in 2 3 4; do
  ok=0; for _ in 1 2 3; do timeout 20 "$mpiexec" -n $p "$python" tests/mpi_programs/poll_then_exit.py ring >/dev/null 2>&1 && ok=$((ok + 1)); done
  echo "poll with test() then exit, $p ranks: $ok of 3 runs exited"
done
for c in count dtype algorithm codec-int8-fp16; do
  out=$(timeout 20 "$mpiexec" -n 3 "$python" tests/mpi_programs/mismatch.py $c 2>&1); code=$?
  echo "mismatch $c, 3 ranks: exit $code; ranks raising MismatchError: $(grep -c 'raised MismatchError' <<<"$out"); returning data: $(grep -c 'RETURNED DATA' <<<"$out"); opaque MPI errors: $(grep -c 'MPI_ERROR' <<<"$out")"
done
