"""Cluster environments. The built-ins are named in :mod:`runtime.catalog`."""

from runtime.cluster.base import ClusterEnvironment
from runtime.cluster.horovod import HorovodEnvironment
from runtime.cluster.kubeflow import KubeflowEnvironment
from runtime.cluster.local import LocalEnvironment
from runtime.cluster.lsf import LSFEnvironment
from runtime.cluster.mpi import MPIEnvironment
from runtime.cluster.slurm import SLURMEnvironment
from runtime.cluster.torchelastic import TorchElasticEnvironment

__all__ = [
    "ClusterEnvironment",
    "HorovodEnvironment",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LocalEnvironment",
    "MPIEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
]
