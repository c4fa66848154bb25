"""mpicoll: allreduce built from MPI point-to-point calls — ring, tree, hybrid — measured against MPI's own."""

from . import codecs
from .api import algorithms_available as algorithms
from .api import allreduce, choose_algorithm, iallreduce
from .check import MismatchError
from .context import ConcurrentUseError
from .request import Request, testall, waitall

__version__ = "0.1.0"
__all__ = ["allreduce", "iallreduce", "algorithms", "choose_algorithm", "codecs", "Request",
           "waitall", "testall", "MismatchError", "ConcurrentUseError", "__version__"]
