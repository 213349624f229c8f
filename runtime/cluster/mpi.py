"""MPI (``mpirun``/``mpiexec``): ranks come from Open MPI's variables, the rendezvous from the config.

The resolver decides where the ranks meet (``rules/clusters/mpi.toml``): ``MASTER_ADDR`` and
``MASTER_PORT`` when mpirun passes them (``-x``), else ``127.0.0.1`` when every rank runs on one
machine and a port derived from the MPI job id. A job that spans machines without ``MASTER_ADDR``
resolves only where mpi4py is installed (``main_address`` None, rule ``main_address.mpi.broadcast``):
rank 0 then tells the others its host name over MPI itself, as PyTorch Lightning does.
"""

from __future__ import annotations

import socket
from typing import Any

from runtime.cluster.base import ClusterEnvironment
from runtime.errors import RuntimeConfigError

__all__ = ["MPIEnvironment"]


class MPIEnvironment(ClusterEnvironment):
    """The resolved rendezvous; across machines without ``MASTER_ADDR``, rank 0's host by MPI broadcast."""

    title = "an MPI job"
    variables_hint = "pass them to every rank, e.g. mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 ..."
    _broadcast_address: str | None = None

    @property
    def main_address(self) -> str:
        if self.config.main_address:  # resolved, with provenance (rules/clusters/mpi.toml)
            return self.config.main_address
        provenance = self.config.provenance.get("main_address")
        # The rules leave it None on purpose only where rank 0 is to broadcast its host (mpi4py).
        if provenance is None or provenance.rule != "main_address.mpi.broadcast":
            raise self.unresolved("main_address")
        if self._broadcast_address is None:
            self._broadcast_address = _rank_zero_host()
        return self._broadcast_address


def _rank_zero_host() -> str:
    """Rank 0's host name, sent to every rank by an MPI broadcast (a collective: all ranks call it)."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise RuntimeConfigError(
            "this MPI job has no rendezvous address: MASTER_ADDR is not set and mpi4py, which would ask "
            "rank 0 for its host, is not installed",
            hint="pass it to every rank, e.g. mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=<port> ..., "
            "or pip install mpi4py",
        ) from None
    comm: Any = MPI.COMM_WORLD
    return str(comm.bcast(socket.gethostname(), root=0))
