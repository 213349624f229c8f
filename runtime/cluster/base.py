"""ClusterEnvironment: where the processes of a run meet (the rendezvous address and port).

Ranks, world size and the rendezvous (``main_address``, ``main_port``) are decided by the resolver
and arrive in the ``ResolvedConfig`` with their provenance (``rules/rendezvous.toml`` and each
cluster's file in ``rules/clusters/``: the one place that reads the cluster's variables for them).
A cluster environment hands them to the launchers; a config without them is an error naming
``resolver.resolve()``. Only the local environment decides something itself: on one machine, a
free port picked at launch (``main_port = None``, as rule ``main_port.local`` says).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from runtime.errors import RuntimeConfigError

if TYPE_CHECKING:
    from resolver import ResolvedConfig

__all__ = ["ClusterEnvironment", "StoreAddressError"]

#: The flag that names each rendezvous field (and the variable the flag is read from).
_FLAGS = {"main_address": ("master_addr", "MASTER_ADDR"), "main_port": ("master_port", "MASTER_PORT")}


class StoreAddressError(Exception):
    """This rank could not learn where the run's own store listens (:meth:`ClusterEnvironment.store_address`):
    ``detail`` says what happened here, ``fix`` what to do; ``echo``: it only follows another rank's failure."""

    def __init__(self, detail: str, fix: str, *, echo: bool = False) -> None:
        super().__init__(detail)
        self.detail, self.fix, self.echo = detail, fix, echo


class ClusterEnvironment:
    """Rendezvous facts for one kind of cluster; register subclasses by the config's name.

    ``environ`` defaults to ``os.environ``, read when asked for by the checks of how this process was
    started (:meth:`check_started_by_cluster`); the rendezvous comes from the config alone.
    """

    #: The cluster's name in messages.
    title: ClassVar[str] = "this cluster"
    #: How to fix missing rendezvous variables on this cluster.
    variables_hint: ClassVar[str] = "export MASTER_ADDR and MASTER_PORT on every node"
    #: Whether the cluster starts the processes of a run itself (a scheduler, a runner), and restarts
    #: them if it does; not a run on one machine, or machines a user starts by hand.
    starts_processes: ClassVar[bool] = True
    #: Signals the cluster sends the processes it started before it stops them; a rank started so
    #: takes them as pre-emption too, beside ``preemption_signal`` (SLURM's ``SIGTERM``).
    stop_signals: ClassVar[tuple[signal.Signals, ...]] = ()
    #: How to have the cluster restart failed ranks, where it starts the processes (the end of a hint
    #: after "drop max_restarts here and").
    restart_hint: ClassVar[str] = "let that launcher restart them"
    #: Why ``requeue=True`` does nothing here (:meth:`requeue`).
    cannot_requeue: ClassVar[str] = "this is not a SLURM job (SLURM_JOB_ID is unset)"

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

    def store_address(self, rank: int, timeout: float) -> tuple[str, int, str | None]:
        """Where a key-value store that global rank 0 hosts for the run's ranks listens (``resolver check``'s):
        address, port and where that port came from, for messages (``None``: it is :attr:`main_port`).
        :attr:`main_address`/:attr:`main_port`, unless the cluster's own runtime serves there (horovodrun's
        driver); then the ranks agree on another within ``timeout`` seconds, or this raises
        :class:`StoreAddressError`."""
        return self.main_address, self.main_port, None

    def job_to_requeue(self) -> str | None:
        """The job :meth:`requeue` would put back in the queue (``None``: none; then every rank
        says :attr:`cannot_requeue`)."""
        return None

    def requeue(self, job: str) -> tuple[str | None, str, str | None]:
        """Put ``job`` back in the cluster's queue after a pre-emption (called on global rank 0 once
        its checkpoint is written): (the job, "", None) once done, else (None, why not, the fix if known)."""
        return None, f"not requeued: requeue=True, but {self.cannot_requeue}", None

    @property
    def main_address(self) -> str:
        """Host name or IP address of the machine that runs global rank 0: the resolved
        ``config.main_address`` (the flag, MASTER_ADDR or the cluster's rule)."""
        if self.config.main_address:
            return self.config.main_address
        raise self.unresolved("main_address")

    @property
    def main_port(self) -> int:
        """The port rank 0's rendezvous store listens on: the resolved ``config.main_port``."""
        if self.config.main_port:
            return self.config.main_port
        raise self.unresolved("main_port")

    @property
    def main_port_source(self) -> str:
        """Where :attr:`main_port` came from, for messages: the flag, or the variable the resolver read."""
        provenance = self.config.provenance.get("main_port") if self.config.main_port else None
        if provenance is None:
            return "main_port"  # a config built by hand that names it
        if provenance.kind == "flag":
            return "master_port"
        return (provenance.source or "").partition("=")[0] or "main_port"

    def unresolved(self, field: str) -> RuntimeConfigError:
        """The error for a config without the rendezvous ``field`` (``main_address``/``main_port``)."""
        flag, variable = _FLAGS[field]
        provenance = self.config.provenance.get(field)
        if provenance is None:
            return RuntimeConfigError(
                f"this config has no {field}: it was not produced by resolver.resolve(), which decides where the "
                f"processes of a run meet (rules/rendezvous.toml, rules/clusters/: {flag}, {variable} or "
                f"{self.title}'s variables)",
                hint=f"resolve the config with resolver.resolve() where the ranks run, or give it "
                f"{field}=... (attrs.evolve(config, {field}=...))",
            )
        why = f": {provenance.why}" if provenance.why else ""
        return RuntimeConfigError(
            f"this config has no {field}: resolver.resolve() found nothing on {self.title} that names it "
            f"({flag}, {variable} or the cluster's variables; rules/rendezvous.toml, rules/clusters/){why}",
            hint=f"{self.variables_hint}, or pass {flag}",
        )
