"""Allreduce for sparse codecs (topk, threshold): an allgather of frames, then decode them all.

Sparse frames cannot be summed hop by hop as dense ones are (each sum would need re-sparsifying
and lose more), so every rank's frame travels around the ring unchanged, and every rank decodes
all p frames into its result in rank order: the same additions in the same order, the same
bits everywhere. Each rank receives the other p-1 frames, so the cost grows with p; the caller
falls back to a dense ring when that outweighs it.
"""

from __future__ import annotations

from ..schedule import Builder, Decode, Recv, Region, Schedule, Send

NAME = "sparse-allgather"


def allgather_frames(topo, lengths: list[int], count: int) -> Schedule:
    """The schedule for frames of ``lengths[r]`` bytes, rank r's at offset sum(lengths[:r]).

    Built per call: the lengths change from call to call.
    """
    b = Builder()
    slots = [b.wire(n) for n in lengths]
    p, me = topo.size, topo.rank
    right, left = (me + 1) % p, (me - 1) % p
    with b.phase("allgather"):
        for step in range(p - 1):
            b.round([Recv(left, slots[(me - step - 1) % p]), Send(right, slots[(me - step) % p])])
    everything = Region("recv", 0, count)
    with b.phase("decode"):
        b.round(local=[Decode(everything, slot, add=r > 0) for r, slot in enumerate(slots)])
    return b.build(NAME, count)
