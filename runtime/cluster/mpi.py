"""MPI (``mpirun``/``mpiexec``): ranks come from OpenMPI's variables, the rendezvous from the user."""

from __future__ import annotations

from runtime.cluster.base import ClusterEnvironment
from runtime.registry import register_cluster_environment

__all__ = ["MPIEnvironment"]


@register_cluster_environment("mpi")
class MPIEnvironment(ClusterEnvironment):
    """MPI does not export a TCP rendezvous; pass ``MASTER_ADDR``/``MASTER_PORT`` through mpirun."""

    title = "an MPI job"
    variables_hint = "pass them to every rank, e.g. mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 ..."
