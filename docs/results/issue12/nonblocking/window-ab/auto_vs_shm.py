import time, sys, numpy as np
from mpi4py import MPI
import mpicoll
comm = MPI.COMM_WORLD
n = int(sys.argv[1]) // 4
algs = sys.argv[2].split(",")
a = np.ones(n, np.float32); r = np.empty_like(a)
res = {}
def t_block(alg):
    comm.Barrier(); t = time.perf_counter()
    for _ in range(20): mpicoll.allreduce(a, r, algorithm=alg)
    return (time.perf_counter() - t) / 20
def t_nb(alg):
    comm.Barrier(); t = time.perf_counter()
    for _ in range(20): mpicoll.iallreduce(a, r, algorithm=alg).wait()
    return (time.perf_counter() - t) / 20
def t_nat():
    comm.Barrier(); t = time.perf_counter()
    for _ in range(20): comm.Iallreduce(a, r, MPI.SUM).Wait()
    return (time.perf_counter() - t) / 20
for alg in algs:
    t_block(alg); t_nb(alg)
for rep in range(15):
    res.setdefault("nat-i", []).append(t_nat())
    for alg in algs:
        res.setdefault(alg + "-b", []).append(t_block(alg))
        res.setdefault(alg + "-nb", []).append(t_nb(alg))
if comm.rank == 0:
    for k, v in res.items(): print(f"{k:12s} {np.median(v)*1e6:8.1f} us")
