"""Communicators kept alive, each used by mpicoll, until MPI runs out (MPICH: 2048 context ids;
mpicoll takes two more per communicator). Prints how it ended per rank, then whether mpicoll
still works once they are freed.

``python many_communicators.py [N]`` (default 800).
"""

import sys

import numpy as np
from mpi4py import MPI

import mpicoll

n = int(sys.argv[1]) if len(sys.argv) > 1 else 800
world = MPI.COMM_WORLD
comms = []
try:
    for _ in range(n):
        comms.append(world.Dup())
        mpicoll.allreduce(np.ones(4), comm=comms[-1])
    ended = f"all {n} fine"
except mpicoll.OutOfCommunicatorsError as error:
    ended = f"OutOfCommunicatorsError after {len(comms)}: {error}"
for comm in comms:
    comm.Free()
fresh = world.Dup()
works = bool(np.all(mpicoll.allreduce(np.ones(4), comm=fresh) == world.Get_size()))
fresh.Free()
sys.stdout.write(f"rank {world.Get_rank()}: {ended}; afterwards {'works' if works else 'WRONG'}\n")
