"""What mpicoll.Comm adds to a call, against mpicoll.allreduce and mpi4py's own (one rank).

    python benchmarks/comm_overhead.py

An 8-byte in-place ``Allreduce`` and a Python float's lowercase ``allreduce``, each timed with
``timeit`` after warm-up (best of 5 batches of 2000): the cost of the Python on each path, with
nothing to send.
"""

import timeit

import numpy as np
from mpi4py import MPI

import mpicoll
from mpicoll.bench import library


def main() -> None:
    world = MPI.COMM_WORLD
    comm = mpicoll.Comm(world)
    one = np.ones(1)
    calls = {
        "native comm.Allreduce(IN_PLACE, 8 B)": lambda: world.Allreduce(MPI.IN_PLACE, one),
        "mpicoll.allreduce(x, x)": lambda: mpicoll.allreduce(one, one),
        "mpicoll.Comm.Allreduce(IN_PLACE, 8 B)": lambda: comm.Allreduce(MPI.IN_PLACE, one),
        "native comm.allreduce(float, MAX)": lambda: world.allreduce(1.5, op=MPI.MAX),
        "mpicoll.Comm.allreduce(float, MAX)": lambda: comm.allreduce(1.5, op=MPI.MAX),
    }
    print(f"# {world.Get_size()} rank(s), {library()}; "
          "best of 5 batches of 2000 calls")
    for name, call in calls.items():
        for _ in range(200):
            call()
        seconds = min(timeit.repeat(call, number=2000, repeat=5)) / 2000
        print(f"{name:40s} {seconds * 1e6:6.2f} us")


if __name__ == "__main__":
    main()
