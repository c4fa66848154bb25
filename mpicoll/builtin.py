"""The built-in algorithms, registered in the order listings and ``auto``'s ties use.

A new algorithm is its module, its import and its line here (a plugin registers its own
with :func:`mpicoll.algorithm.register`). The planners are pure (:mod:`mpicoll.algorithm`);
``native``, ``native-blocking`` and the sparse ones run MPI or depend on the data, which is why
the list lives here, above the runtime, and not in the planners' package.
"""

from __future__ import annotations

from .algorithm import register
from .algorithm import ring
from .algorithm import tree
from .algorithm import recursive_doubling
from .algorithm import rabenseifner
from .algorithm import bruck
from .algorithm import binomial
from .algorithm import hybrid
from .algorithm import sparse_auto
from .algorithm import sparse_allgather
from .algorithm import sparse_regions
from .algorithm import shm
from .algorithm import native
from .algorithm import native_blocking

__all__: list[str] = []

register(ring.ALGORITHM)
register(tree.ALGORITHM)
register(recursive_doubling.ALGORITHM)
register(rabenseifner.ALGORITHM)
register(bruck.ALGORITHM)
register(binomial.ALGORITHM)
register(hybrid.ALGORITHM)
register(sparse_auto.ALGORITHM)
register(sparse_allgather.ALGORITHM)
register(sparse_regions.ALGORITHM)
register(shm.ALGORITHM)
register(native.ALGORITHM)
register(native_blocking.ALGORITHM)
