"""How each completion call copes with a persistent collective (run under mpiexec).

    mpiexec -n 2 python benchmarks/persistent_testall.py [--reps 2000]

Starts one ``MPI_Allreduce_init`` request of four int64 again and again and completes it with
``Test``, ``Wait``, ``Waitall``, ``Testall``, ``Waitany`` or ``Testany``; prints, per rank, how
many completions raised an MPI error. MPICH 5.0.2's ``Testall`` raises ``MPI_ERR_IN_STATUS``
each time it completes one (the reason mpicoll's engine completes a fingerprint check posted
as a barrier with ``Test``).
"""

import argparse

import numpy as np
from mpi4py import MPI


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    values = np.zeros(4, np.int64)
    request = comm.Allreduce_init(MPI.IN_PLACE, values, op=MPI.MIN)
    complete = {
        "Test": lambda: request.Test(),
        "Wait": lambda: request.Wait() or True,
        "Waitall": lambda: MPI.Request.Waitall([request]) or True,
        "Testall": lambda: MPI.Request.Testall([request]),
        "Waitany": lambda: MPI.Request.Waitany([request]) is not None,
        "Testany": lambda: MPI.Request.Testany([request])[1],
    }
    errors = {}
    for name, done in complete.items():
        errors[name] = 0
        for _ in range(args.reps):
            request.Start()
            try:
                while not done():
                    pass
            except MPI.Exception:
                errors[name] += 1
                request.Wait()
        comm.Barrier()
    print(f"rank {comm.Get_rank()} ({MPI.Get_library_version().splitlines()[0].strip()}): "
          f"errors in {args.reps} completions: {errors}", flush=True)
    request.Free()
    comm.Free()


if __name__ == "__main__":
    main()
