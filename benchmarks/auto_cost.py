"""How long ``auto`` takes to choose on a large layout, the first call of each size class (no
MPI: the cost model alone).

    python benchmarks/auto_cost.py [--ranks 64] [--ranks-per-node 8] [-m 8:64M] [-f 8]

``auto`` predicts every candidate's time at the first call of each size class, on every rank.
For each size: its pick and the seconds that took with its budget (``costmodel.AUTO_EVENTS``:
every rank's schedule on clocks where that is cheap, lockstep beyond), then the pick and seconds
with every rank's schedule run up to the simulator's budget (``costmodel.EVENTS``), caches
cleared before each.
"""

from __future__ import annotations

import argparse
import time

from mpicoll import costmodel, topology, tune
from mpicoll.bench import size_range


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("-m", "--sizes", default="8:64M")
    parser.add_argument("-f", "--factor", type=int, default=8)
    args = parser.parse_args()
    per = args.ranks_per_node
    nodes = topology.blocks(args.ranks, per)
    among = tune.candidates(len(nodes))
    model = tune.model_in_force()
    print(f"# {args.ranks} ranks, {per} per node; candidates {','.join(among)}; {model.source}")
    print(f"{'size(B)':>10} {'auto picks':>13} {'s':>7} {'all ranks':>13} {'s':>7}")
    for nbytes in size_range(args.sizes, args.factor):
        row = f"{nbytes:>10}"
        for budget in (costmodel.AUTO_EVENTS, None):
            costmodel.components.cache_clear()
            costmodel.busiest_link.cache_clear()
            t0 = time.perf_counter()
            pick = min(among, key=lambda name: costmodel.predict(name, nbytes, nodes, model, 4,
                                                                 budget))
            row += f" {pick:>13} {time.perf_counter() - t0:7.2f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
