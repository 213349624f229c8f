"""Kubeflow's PyTorchJob: the operator exports the rendezvous variables to every pod."""

from __future__ import annotations

from runtime.cluster.base import ClusterEnvironment

__all__ = ["KubeflowEnvironment"]


class KubeflowEnvironment(ClusterEnvironment):
    """``MASTER_ADDR``/``MASTER_PORT`` as the PyTorchJob operator sets them."""

    title = "Kubeflow"
    variables_hint = "run the job as a Kubeflow PyTorchJob, whose operator sets MASTER_ADDR and MASTER_PORT"
