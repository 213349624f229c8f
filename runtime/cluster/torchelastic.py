"""torchrun / TorchElastic: the agent started the processes and exported the rendezvous."""

from __future__ import annotations

from runtime.cluster.base import ClusterEnvironment

__all__ = ["TorchElasticEnvironment"]


class TorchElasticEnvironment(ClusterEnvironment):
    """Reads ``MASTER_ADDR``/``MASTER_PORT`` as torchrun exports them to every worker.

    When torchrun hosts the store itself (``TORCHELASTIC_USE_AGENT_STORE=True``), torch's
    rendezvous connects to it instead of starting one on rank 0.
    """

    title = "torchrun"
    restart_hint = "pass --max-restarts to torchrun"
    variables_hint = "start the script with torchrun, which exports MASTER_ADDR and MASTER_PORT"
