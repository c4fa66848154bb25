"""Walk a flat array a cache-sized chunk at a time, in whole blocks where the codec has blocks.

Working a chunk at a time keeps every temporary small — a decode_add of 64 MiB never allocates
another 64 MiB — and in cache, which is faster than one pass over the whole array per operation.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["block_rows", "chunks"]

CHUNK_ELEMENTS = 2**16


def block_rows(count: int, block: int) -> Iterator[tuple[slice, slice, int]]:
    """Yield (element slice, block slice, row width) covering ``count`` elements.

    Elements in the element slice reshape to (blocks, width); the last block may be ragged and
    comes alone, with its own width.
    """
    full = count // block
    step = max(1, CHUNK_ELEMENTS // block)
    for first in range(0, full, step):
        last = min(first + step, full)
        yield slice(first * block, last * block), slice(first, last), block
    if count > full * block:
        yield slice(full * block, count), slice(full, full + 1), count - full * block


def chunks(count: int) -> Iterator[slice]:
    """Yield slices covering ``count`` elements, a cache-sized chunk each."""
    for first in range(0, count, CHUNK_ELEMENTS):
        yield slice(first, min(first + CHUNK_ELEMENTS, count))
