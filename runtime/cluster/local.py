"""The local environment: this machine (or machines the user starts by hand, one per node)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from runtime.cluster.base import ClusterEnvironment
from runtime.ports import find_free_port

if TYPE_CHECKING:
    from resolver.config import ResolvedConfig

__all__ = ["LocalEnvironment"]


class LocalEnvironment(ClusterEnvironment):
    """``MASTER_ADDR`` defaults to ``127.0.0.1``; without ``MASTER_PORT`` a free port is picked.

    With ``num_nodes > 1`` the nodes cannot agree on a port they pick themselves, so
    ``MASTER_ADDR`` and ``MASTER_PORT`` must then be set, identically, on every node; the same
    holds for ``MASTER_PORT`` when the ranks were started by hand (no launcher).
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
    def main_address(self) -> str:
        if self.config.main_address:
            return self.config.main_address
        if self.config.num_nodes > 1:
            return self._required("MASTER_ADDR")
        return self.environ.get("MASTER_ADDR", "").strip() or "127.0.0.1"

    @property
    def main_port(self) -> int:
        if self.config.main_port:
            return self.config.main_port
        text = self.environ.get("MASTER_PORT", "").strip()
        if text:
            return self._port(text, "MASTER_PORT")
        if self.config.num_nodes > 1 or self._started_outside:
            return self._port(self._required("MASTER_PORT"), "MASTER_PORT")
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
        return "MASTER_PORT" if self.environ.get("MASTER_PORT", "").strip() else "a free port picked by the runtime"
