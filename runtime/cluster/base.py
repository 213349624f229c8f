"""ClusterEnvironment: where the processes of a run meet (the rendezvous address and port).

Ranks, world size and the rendezvous (``main_address``, ``main_port``) are decided by the resolver
and arrive in the ``ResolvedConfig`` with their provenance (``rules/rendezvous.toml`` and each
cluster's file in ``rules/clusters/``). A cluster environment hands them to the launchers; only a
config built by hand without them (or a single machine's ``main_port = None``: a free port picked
at launch) falls back to ``MASTER_ADDR`` and ``MASTER_PORT`` as the cluster (or the user) exported
them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from resolver.functions import InvalidInput, port_from_job_id  # the rules' functions: one formula each
from runtime.errors import RuntimeConfigError

if TYPE_CHECKING:
    from resolver.config import ResolvedConfig

__all__ = ["ClusterEnvironment", "port_from_job_id"]


class ClusterEnvironment:
    """Rendezvous facts for one kind of cluster; register subclasses by the config's name.

    ``environ`` defaults to ``os.environ``, read when a property is asked for (launchers set
    ``MASTER_ADDR``/``MASTER_PORT`` for the ranks they start).
    """

    #: The cluster's name in messages.
    title: ClassVar[str] = "this cluster"
    #: How to fix missing rendezvous variables on this cluster.
    variables_hint: ClassVar[str] = "export MASTER_ADDR and MASTER_PORT on every node"
    #: A job id every node sees alike; without MASTER_PORT, the port is derived from it.
    job_id_variable: ClassVar[str | None] = None
    #: How the port is derived from the job id: the function the cluster's rule in
    #: ``rules/clusters/NAME.toml`` calls, so that the runtime and the resolver agree.
    job_id_port: ClassVar[staticmethod[[str], int]] = staticmethod(port_from_job_id)

    def __init__(self, config: ResolvedConfig, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self._environ = environ

    @property
    def environ(self) -> Mapping[str, str]:
        return os.environ if self._environ is None else self._environ

    def check_started_by_cluster(self) -> None:
        """Raise :class:`RuntimeConfigError` where this process cannot be one of the ranks the
        cluster started; a no-op unless a cluster can tell. Called before a rank of a run whose
        cluster starts the processes (``launcher=None``) joins the rendezvous, so that a process
        no launcher started fails at once instead of waiting for peers that never come."""

    @property
    def main_address(self) -> str:
        """Host name or IP address of the machine that runs global rank 0: the resolved
        ``config.main_address`` (flag, MASTER_ADDR or the cluster's rule), else MASTER_ADDR."""
        if getattr(self.config, "main_address", None):
            return str(self.config.main_address)
        return self._required("MASTER_ADDR")

    @property
    def main_port(self) -> int:
        """The port rank 0's rendezvous store listens on: the resolved ``config.main_port``, else
        MASTER_PORT, else one from the job id."""
        if getattr(self.config, "main_port", None):
            return int(self.config.main_port)  # type: ignore[arg-type]
        if self.main_port_source == "MASTER_PORT":
            return self._port(self._required("MASTER_PORT"), "MASTER_PORT")
        source = self.main_port_source
        try:
            return self.job_id_port(self.environ[source])
        except InvalidInput as exc:
            raise RuntimeConfigError(f"{exc.message}\n  hint: {exc.hint}") from None

    @property
    def main_port_source(self) -> str:
        """Where :attr:`main_port` came from, for messages (a variable name, or the flag)."""
        provenance = self.config.provenance.get("main_port") if getattr(self.config, "main_port", None) else None
        if provenance is not None and provenance.kind == "flag":
            return "master_port"
        if self.environ.get("MASTER_PORT", "").strip() or self.job_id_variable is None:
            return "MASTER_PORT"
        return self.job_id_variable if self.environ.get(self.job_id_variable, "").strip() else "MASTER_PORT"

    def _required(self, name: str) -> str:
        value = self.environ.get(name, "").strip()
        if not value:
            raise RuntimeConfigError(
                f"{name} is not set, so the processes of this run cannot find rank 0 on {self.title}\n"
                f"  hint: {self.variables_hint}"
            )
        return value

    @staticmethod
    def _port(text: str, source: str) -> int:
        try:
            port = int(text)
        except ValueError:
            port = -1
        if not 0 < port < 65536:
            raise RuntimeConfigError(f"{source}={text!r} is not a TCP port (1-65535)")
        return port
