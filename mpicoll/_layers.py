"""The layers of the library, lowest first: a module imports only from its own layer or below.

Read by ``tests/test_layers.py``, which fails on an import cycle or an import pointing up a
layer, counting every import (module level, inside functions, under ``TYPE_CHECKING``) and the
implicit one of a submodule on its package. Names are modules relative to ``mpicoll``;
``codecs.*`` matches every module of a package. Nothing imports this module.
"""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("_layers", "_version", "_plugins", "_env", "fault", "_array", "_mpi", "cuda_aware", "progress")),
    ("data", ("collective", "ops", "schedule", "local", "timing", "objects", "codecs", "codecs.*")),
    ("plans", ("algorithm", "algorithm.base", "algorithm.registry", "algorithm.ring",
               "algorithm.compressed_ring", "algorithm.tree", "algorithm.recursive_doubling",
               "algorithm.rabenseifner", "algorithm.bruck", "algorithm.binomial",
               "algorithm.hybrid", "algorithm.node_leaders",
               "algorithm.shm")),
    ("model", ("costmodel", "simulate", "tuning", "algorithm.select")),
    ("runtime", ("topology", "transport", "node_window", "check", "watchdog", "trials", "engine",
                 "execution", "inflight", "algorithm.native", "algorithm.native_blocking",
                 "algorithm.sparse_allgather", "algorithm.sparse_regions",
                 "algorithm.sparse_auto", "builtin")),
    ("session", ("context",)),
    ("calls", ("fastpath", "request", "persistent", "api", "blockwise", "rooted", "recovery")),
    ("tools", ("comm", "overlap", "sharded", "bench", "tune", "demo", "h5", "plot", "cli", "__main__")),
    ("package", ("",)),  # mpicoll itself: the public names
)
