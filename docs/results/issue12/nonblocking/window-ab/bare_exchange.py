import time, sys, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD; peer = 1 - comm.rank
n = int(sys.argv[1])
a = np.ones(n//4, np.float32); b = np.empty_like(a); r = np.empty_like(a)
B = MPI.BYTE
sa, sb = [a.view(np.uint8), B], [b.view(np.uint8), B]
def sr():
    comm.Sendrecv(sa, peer, 5, sb, peer, 5); np.add(a, b, out=r)
def ii1():
    reqs = [comm.Irecv(sb, peer, 5), comm.Isend(sa, peer, 5)]
    MPI.Request.Testall(reqs)
    MPI.Request.Waitall(reqs); np.add(a, b, out=r)
def ii0():
    reqs = [comm.Irecv(sb, peer, 5), comm.Isend(sa, peer, 5)]
    MPI.Request.Waitall(reqs); np.add(a, b, out=r)
fs = dict(sr=sr, ii0=ii0, ii1=ii1)
res = {k: [] for k in fs}
for rep in range(31):
    for k, f in fs.items():
        comm.Barrier(); t = time.perf_counter()
        for _ in range(20): f()
        res[k].append((time.perf_counter() - t) / 20)
if comm.rank == 0:
    for k, v in res.items(): print(f"{k:8s} {np.median(v)*1e6:8.1f} us")
