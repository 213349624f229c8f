"""The local environment: this machine (or machines the user starts by hand, one per node)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from runtime._protocol.ports import find_free_port
from runtime.cluster.base import ClusterEnvironment

if TYPE_CHECKING:
    from resolver import ResolvedConfig

__all__ = ["LocalEnvironment"]


class LocalEnvironment(ClusterEnvironment):
    """This machine, or machines the user starts by hand: the config's rendezvous (``127.0.0.1`` on one
    machine, else ``master_addr``/``MASTER_ADDR``, resolved by the rules). On one machine, ``main_port =
    None`` means a free port picked here, once, at launch; with ``num_nodes > 1``, or ranks started by
    hand (no launcher), the nodes cannot agree on a port they pick themselves, so the config must name it.
    """

    title = "a multi-node run started by hand"
    variables_hint = (
        "set MASTER_ADDR (the address of node 0) and MASTER_PORT (a free port on it) to the same "
        "values on every node, and NODE_RANK to each node's index"
    )

    def __init__(self, config: ResolvedConfig, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(config, environ)
        self._picked_port: int | None = None

    @property
    def main_port(self) -> int:
        if self.config.main_port:
            return self.config.main_port
        if self.config.num_nodes > 1 or self._started_outside:
            raise self.unresolved("main_port")
        if self._picked_port is None:
            self._picked_port = find_free_port()
        return self._picked_port

    @property
    def _started_outside(self) -> bool:
        # Ranks started by hand each run this code: none of them may pick a port on its own.
        return self.config.launcher is None and self.config.world_size > 1

    @property
    def main_port_source(self) -> str:
        if self.config.main_port:
            return super().main_port_source
        return "a free port picked by the runtime"
