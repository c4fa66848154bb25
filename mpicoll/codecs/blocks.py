"""Walk a flat array a cache-sized chunk at a time, in whole blocks where the codec has blocks.

Working a chunk at a time keeps every temporary small — a decode_add of 64 MiB never allocates
another 64 MiB — and in cache, which is faster than one pass over the whole array per operation.
On a device each chunk costs kernel launches instead, so device arrays go in one chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

from .._array import is_device

__all__ = ["block_rows", "chunks", "chunk_elements"]

CHUNK_ELEMENTS = 2**16


def chunk_elements(a) -> int:
    """Elements per chunk for array ``a``: cache-sized on the host, all of it on a device."""
    return max(a.size, 1) if is_device(a) else CHUNK_ELEMENTS


def block_rows(count: int, block: int, chunk: int = CHUNK_ELEMENTS) -> Iterator[tuple[slice, slice, int]]:
    """Yield (element slice, block slice, row width) covering ``count`` elements.

    Elements in the element slice reshape to (blocks, width); the last block may be ragged and
    comes alone, with its own width.
    """
    full = count // block
    step = max(1, chunk // block)
    for first in range(0, full, step):
        last = min(first + step, full)
        yield slice(first * block, last * block), slice(first, last), block
    if count > full * block:
        yield slice(full * block, count), slice(full, full + 1), count - full * block


def chunks(count: int, chunk: int = CHUNK_ELEMENTS) -> Iterator[slice]:
    """Yield slices covering ``count`` elements, ``chunk`` each."""
    for first in range(0, count, chunk):
        yield slice(first, min(first + chunk, count))
