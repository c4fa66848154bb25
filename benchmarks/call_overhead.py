"""What one mpicoll call costs in Python: a single-rank allreduce of 8 bytes, where nothing
travels and what remains is the library's own path.

    python benchmarks/call_overhead.py            # this tree
    PYTHONPATH=OTHER_TREE python benchmarks/call_overhead.py   # another revision's checkout

Prints, per algorithm, the best over 7 repetitions of the mean time of 20,000 calls (the
minimum: noise on a shared machine only adds), and the same for mpi4py's ``MPI_Allreduce``
called directly (``MPI``): what is mpicoll's is the difference.
"""

import time

import numpy as np
from mpi4py import MPI

import mpicoll

x = np.ones(2, np.float32)
y = np.empty_like(x)
calls = {name: (lambda name=name: mpicoll.allreduce(x, y, algorithm=name))
         for name in ("ring", "tree", "rd", "native", "native-blocking", "auto")}
calls["MPI"] = lambda: MPI.COMM_WORLD.Allreduce(x, y)
for name, call in calls.items():
    for _ in range(2000):
        call()
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(20000):
            call()
        best = min(best, (time.perf_counter() - t0) / 20000)
    print(f"{name:>15}: {best * 1e6:.2f} us per call")
