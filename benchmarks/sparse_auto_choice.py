"""Which path ``sparse-auto`` predicts for top-1% frames, from 2 ranks to many (no MPI).

    python benchmarks/sparse_auto_choice.py [--mib 16] [--ranks 2,4,8,16,64,256,1024]

Every rank's frames are sized as those of a normal float32 array of ``--mib`` MiB (topk,
error feedback's usual codec; ``SparseCodec.kept_nbytes``), cut into p regions, and the two
paths are predicted as ``sparse-auto`` predicts them (``sparse_auto.predict``), on this
machine's links within a node and on the emulated cluster's 1 Gbit/s links across nodes (the
built-in cost model's figures). ``ran``: what sparse-auto would run (regions only where
predicted to take at most ``MARGIN`` of the allgather's time).
"""

from __future__ import annotations

import argparse

import numpy as np

from mpicoll import codecs, costmodel
from mpicoll.algorithm import sparse_auto
from mpicoll.algorithm.sparse_allgather import bounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--ranks", default="2,4,8,16,64,256,1024")
    args = parser.parse_args()
    n = args.mib * 2**20 // 4
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    codec = codecs.get("topk")
    kept, sent = codec.select_kept(x)
    model = costmodel.BUILTIN
    print(f"# {args.mib} MiB float32, topk 1%; predicted ms per call; ran: MARGIN "
          f"{sparse_auto.MARGIN}")
    print(f"{'links':>7} {'ranks':>6} {'allgather':>10} {'regions':>10} {'ran':>17}")
    for level in ("local", "remote"):
        for p in map(int, args.ranks.split(",")):
            whole, regions = codec.kept_nbytes(x, kept, sent, bounds(n, p))
            wholes = np.full(p, whole)
            lengths = np.tile(np.array(regions), (p, 1))
            times = sparse_auto.predict(wholes, lengths, n, model.alpha[level], model.beta[level])
            ran = sparse_auto.choice(times)
            print(f"{level:>7} {p:6d} {times['sparse-allgather'] * 1e3:10.1f} "
                  f"{times['sparse-regions'] * 1e3:10.1f} {ran:>17}")


if __name__ == "__main__":
    main()
