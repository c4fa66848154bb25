"""How mpi4py's Allreduce reads its buffer arguments, one rank, 8 B: a bare array, [array, type],
an MPI.buffer, an explicit count. Run: python buffer_specs.py (output: buffer_specs.txt)."""
import timeit, numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
a = np.ones(2, np.float32); b = np.empty_like(a)
F = MPI.FLOAT; SUM = MPI.SUM
ma, mb = MPI.buffer(a), MPI.buffer(b)
sa, sb = [a, F], [b, F]
sa2, sb2 = [ma, F], [mb, F]
sa3, sb3 = [a, 2, F], [b, 2, F]
sa4, sb4 = [ma, 2, F], [mb, 2, F]
ar = c.Allreduce
for name, stmt in [("bare", lambda: ar(a, b, SUM)), ("[arr,F]", lambda: ar(sa, sb, SUM)),
                   ("[buf,F]", lambda: ar(sa2, sb2, SUM)), ("[arr,n,F]", lambda: ar(sa3, sb3, SUM)),
                   ("[buf,n,F]", lambda: ar(sa4, sb4, SUM)), ("bufs bare", lambda: ar(ma, mb, SUM))]:
    ts = [min(timeit.repeat(stmt, number=20000, repeat=5)) / 20000 * 1e6 for _ in range(3)]
    print(f"{name:12s} {min(ts):.3f} us")
