"""mpicoll: allreduce built from MPI point-to-point calls — ring, tree, hybrid — measured against MPI's own."""

from . import codecs
from .api import allreduce, choose_algorithm, iallreduce
from .api import algorithms_available as algorithms
from .request import Request, testall, waitall

__version__ = "0.1.0"
__all__ = ["allreduce", "iallreduce", "algorithms", "choose_algorithm", "codecs", "Request",
           "waitall", "testall", "__version__"]
