"""Launcher: how the processes of a run are created (seed 002: one strategy, several launchers).

``launch(fn, *args, **kwargs)`` calls ``fn(*args, **kwargs)`` once in every local rank process,
with that rank's identity in its environment (see :mod:`runtime._protocol.rank_environment`), and returns
the result of this node's first rank (global rank 0 on node 0) in the calling process. A rank
that raises makes ``launch`` raise :class:`~runtime.errors.RankFailedError` with that rank's
traceback; ranks still running past ``timeout`` seconds are stopped and
:class:`~runtime.errors.LaunchTimeoutError` names them. No process outlives a launch.

Inside a process that a launcher (or ``resolver run``) already started, ``launch`` runs ``fn``
directly as that rank: this is how a script re-run by the subprocess launcher reaches its work.
"""

from __future__ import annotations

import contextlib
import gc
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from runtime._protocol.ports import listen_on_rendezvous_port
from runtime._protocol.rank_environment import launched_config
from runtime._protocol.restarts import check_max_restarts, restart_variables, run_attempts
from runtime._protocol.spawned_rank import check_not_reimported
from runtime.errors import RuntimeConfigError
from runtime.preemption import forwarding, launching_signals, raise_if_preempted

if TYPE_CHECKING:
    from resolver import ResolvedConfig
    from runtime.cluster.base import ClusterEnvironment
    from runtime.launchers.rank_output import RankOutput

__all__ = ["Launcher"]

R = TypeVar("R")


class Launcher(ABC):
    """Creates the local rank processes of a run. Register subclasses with :func:`runtime.register_launcher`."""

    #: The :mod:`multiprocessing` start method of the rank processes, where one is used.
    start_method: ClassVar[str | None] = None
    #: Whether :meth:`_launch` can run again after a failed attempt (``max_restarts``), giving its ranks
    #: :meth:`restart_variables`.
    supports_restarts: ClassVar[bool] = False
    #: How ``resolver check`` runs the ranks of a config that names this launcher: ``"processes"``, it
    #: starts this node's ranks as processes of its own, as this launcher would; ``"replicas"``, it
    #: runs inside the ranks this launcher starts (their engine numbers them: torch_xla's); ``None``,
    #: the ranks come from outside (``horovodrun``): run the check under it.
    check_ranks: ClassVar[Literal["processes", "replicas"] | None] = None
    #: Whether the function :meth:`launch` is given runs in this process only, as this node's first rank
    #: (the other ranks reach their launch themselves: the subprocess launcher re-runs the script); a
    #: strategy's launch then hands that rank the launching strategy itself.
    runs_first_rank_here: ClassVar[bool] = False

    def __init__(
        self,
        config: ResolvedConfig,
        cluster_environment: ClusterEnvironment,
        *,
        timeout: float | None = None,
        rank_output: RankOutput | None = None,
        max_restarts: int = 0,
        on_cpu: bool = False,
    ) -> None:
        self.config = config
        self.cluster_environment = cluster_environment
        self.timeout = timeout
        #: How the output of the rank processes is shown (``None``: as it is); launchers that can, apply it.
        self.rank_output = rank_output
        #: How many times every local rank is started again after a rank fails
        #: (:mod:`runtime._protocol.restarts`).
        self.max_restarts = max_restarts
        #: The attempt being launched (0 first).
        self.attempt = 0
        #: Whether the ranks compute on the CPU cores (their number is then bounded by them): the
        #: accelerator's :attr:`~runtime.accelerators.base.Accelerator.computes_on_cpu`.
        self.on_cpu = on_cpu

    def launch(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` in every local rank; return this node's first rank's result."""
        check_not_reimported()  # a spawned rank importing a script whose launch is not under `if __name__ ...`
        if launched_config() is not None:
            # Already a rank (a re-run script, a `resolver run` rank): nothing to start. A strategy's
            # launch enters its rank itself (with the worker's checks); a launcher called directly runs fn.
            return fn(*args, **kwargs)
        with forwarding(launching_signals(self.config.strategy_options)):
            return raise_if_preempted(self._launch_attempts(fn, *args, **kwargs))  # type: ignore[no-any-return]

    def _launch_attempts(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """The launch, once, or again after a failed attempt up to ``max_restarts`` times."""
        if not self.max_restarts:
            return self._launch(fn, *args, **kwargs)
        check_max_restarts(self.max_restarts, num_nodes=self.config.num_nodes, started_by=None)
        if not self.supports_restarts:
            raise RuntimeConfigError(
                f"max_restarts={self.max_restarts}: the {self.config.launcher!r} launcher does not restart ranks",
                hint="drop max_restarts, or use strategy 'ddp', 'ddp_spawn' or 'ddp_fork' (or their fsdp/deepspeed "
                "forms), whose launchers do",
            )

        def attempt(number: int) -> R:
            self.attempt = number
            if number:
                # The failed attempt's objects (this process's process group and its store, held by the
                # traceback's frames) go now, not at some later collection: the new rendezvous reuses the port.
                gc.collect()
            return self._launch(fn, *args, **kwargs)

        try:
            # A pre-empted attempt returns (its ranks' work returned): it is never restarted.
            return run_attempts(attempt, self.max_restarts, "launch")
        finally:
            self.attempt = 0

    def restart_variables(self) -> dict[str, str]:
        """What tells a rank of this attempt which one it is (nothing when restarts are off)."""
        return restart_variables(self.attempt, self.max_restarts) if self.max_restarts else {}

    @abstractmethod
    def _launch(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Start the ranks (this process is not a rank yet)."""

    @contextlib.contextmanager
    def rendezvous(self) -> Iterator[tuple[str, int, socket.socket | None]]:
        """Rank 0's address and port and, on node 0, a socket listening there until the block ends.

        Started before any rank, the socket is where rank 0's store serves (a rank process that
        inherits it, or this process as rank 0: give that rank :func:`store_socket_variables`), so
        a peer that is quicker than rank 0 waits in its queue instead of being refused and backing
        off (:mod:`runtime._protocol.ports`). A busy port is an error rather than a silent switch to
        another port: the other nodes (and anyone who set ``MASTER_PORT`` on purpose) expect this exact one.
        """
        address = self.cluster_environment.main_address
        port = self.cluster_environment.main_port
        source = self.cluster_environment.main_port_source
        listening = listen_on_rendezvous_port(
            address, port, source, self.config.node_rank, one_machine=self.config.num_nodes == 1
        )
        try:
            yield address, port, listening
        finally:
            if listening is not None:
                listening.close()
