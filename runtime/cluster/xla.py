"""The XLA cluster environment: ranks come from torch_xla's runtime, which finds its peers itself."""

from __future__ import annotations

import torch_xla.runtime as xr

from runtime.cluster.base import ClusterEnvironment
from runtime.errors import RuntimeConfigError

__all__ = ["XLAEnvironment"]


class XLAEnvironment(ClusterEnvironment):
    """The processes torch_xla's launcher (or a TPU pod's runtime) started, one per device.

    Ranks are read from the runtime inside a replica: asking starts the runtime, so do not ask
    in the process that is about to launch replicas. PJRT does its own rendezvous: there is no
    ``MASTER_ADDR``/``MASTER_PORT`` to read.
    """

    title = "XLA"

    def world_size(self) -> int:
        """How many replicas the runtime runs."""
        return int(xr.world_size())

    def global_rank(self) -> int:
        """This replica's ordinal among all replicas."""
        return int(xr.global_ordinal())

    def local_rank(self) -> int:
        """This replica's ordinal on this host."""
        return int(xr.local_ordinal())

    def node_rank(self) -> int:
        """This host's index."""
        return int(xr.host_index())

    @property
    def main_address(self) -> str:
        raise _no_rendezvous()

    @property
    def main_port(self) -> int:
        raise _no_rendezvous()


def _no_rendezvous() -> RuntimeConfigError:
    return RuntimeConfigError(
        "the XLA cluster environment has no rendezvous address or port: torch_xla's PJRT runtime "
        "connects its replicas itself",
        hint="use the xla strategy and launcher, which do not need one",
    )
