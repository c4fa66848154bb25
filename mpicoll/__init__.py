"""mpicoll: MPI collectives built from point-to-point calls (allreduce, allgather, reduce_scatter, bcast, reduce) — ring, trees, hybrid — measured against MPI's own."""

from . import codecs
from ._version import __version__
from .api import algorithms_available as algorithms
from .api import allreduce, allreduce_init, choose_algorithm, iallreduce, reload_environment
from .blockwise import (allgather, allgather_init, iallgather, ireduce_scatter, reduce_scatter,
                        reduce_scatter_init)
from .check import MismatchError
from .comm import Comm
from .context import ConcurrentUseError, OutOfCommunicatorsError
from .fault import ProcessFailedError
from .persistent import PersistentRequest
from .recovery import Steps, recover, shrink
from .rooted import bcast, bcast_init, ibcast, ireduce, reduce, reduce_init
from .request import Request, testall, waitall

__all__ = ["allreduce", "iallreduce", "allreduce_init", "allgather", "iallgather", "allgather_init",
           "reduce_scatter", "ireduce_scatter", "reduce_scatter_init", "bcast", "ibcast",
           "bcast_init", "reduce", "ireduce", "reduce_init", "algorithms",
           "choose_algorithm", "codecs",
           "Request", "PersistentRequest", "waitall", "testall", "MismatchError",
           "ConcurrentUseError", "OutOfCommunicatorsError", "ProcessFailedError", "shrink", "recover", "Steps",
           "Comm",
           "reload_environment",
           "__version__"]
