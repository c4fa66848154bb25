"""mpicoll: allreduce built from MPI point-to-point calls — ring, tree, hybrid — measured against MPI's own."""

from . import codecs
from .api import Request, allreduce, choose_algorithm, iallreduce
from .api import algorithms_available as algorithms

__version__ = "0.1.0"
__all__ = ["allreduce", "iallreduce", "algorithms", "choose_algorithm", "codecs", "Request", "__version__"]
