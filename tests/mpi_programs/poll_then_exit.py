"""100 requests driven by test() alone, then exit: every rank must leave (issue 11, finding 2).

``python poll_then_exit.py ALGORITHM``; prints "done" per rank once its requests completed.
"""

import sys

import numpy as np
from mpi4py import MPI

import mpicoll

algorithm = sys.argv[1]
xs = [np.full(100_000, i, np.float32) for i in range(100)]
requests = [mpicoll.iallreduce(x, algorithm=algorithm) for x in xs]
while not all([r.test() for r in requests]):
    pass
size = MPI.COMM_WORLD.Get_size()
assert all(np.all(r.wait() == i * size) for i, r in enumerate(requests))
print("done", MPI.COMM_WORLD.Get_rank(), flush=True)
