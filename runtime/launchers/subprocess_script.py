"""The ``subprocess`` launcher: re-run the user's script once per extra local rank, like torchrun.

The calling process becomes local rank 0 and runs ``fn`` itself; local ranks 1..n-1 are new
interpreters running the same command line (``sys.executable`` + ``sys.argv``, or ``-m module``).
When a re-run script reaches the same ``launch`` call, the environment says it is a launched
rank and ``fn`` runs there directly. Since the script runs top to bottom in every rank, work
before the launch call happens once per rank.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from runtime.errors import RankFailedError, RuntimeConfigError
from runtime.launchers.base import Launcher
from runtime.launchers.rank_output import RankOutputPump
from runtime.launchers.reports import RankReports
from runtime.launchers.supervision import Failure, PopenRank, RankProcess, Supervisor, stop_processes
from runtime.rank_environment import environ_patch, rank_config, rank_variables, rendezvous_timeout
from runtime.registry import register_launcher

__all__ = ["SubprocessScriptLauncher", "script_command"]

R = TypeVar("R")
_JOIN_POLL = 0.02


def script_command() -> list[str]:
    """The command line that re-runs the current program."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        module = spec.name.removesuffix(".__main__")
        return [sys.executable, "-m", module, *sys.argv[1:]]
    script = sys.argv[0] if sys.argv else ""
    if not script or script == "-c" or not os.path.isfile(script):
        raise RuntimeConfigError(
            "the subprocess launcher re-runs your script once per extra device, but this process "
            f"was not started from a script file (sys.argv[0] = {script!r})\n"
            "  hint: in a notebook or `python -c`, use strategy='ddp_fork' or 'ddp_spawn'; or put "
            "the code in a script and run it"
        )
    return [sys.executable, os.path.abspath(script), *sys.argv[1:]]


@register_launcher("subprocess")
class SubprocessScriptLauncher(Launcher):
    """This process is local rank 0; the script is re-run for local ranks 1..n-1."""

    def _launch(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        command = script_command() if self.config.num_devices > 1 else []
        joining_timeout = rendezvous_timeout()
        address, port = self.rendezvous()
        own = rank_config(self.config, 0)
        with RankReports.temporary() as reports, RankOutputPump(self.rank_output, self.config.num_devices) as pump:
            processes: dict[int, RankProcess] = {}
            try:
                for local_rank in range(1, self.config.num_devices):
                    config = rank_config(self.config, local_rank)
                    env = {**os.environ, **rank_variables(config, address, port, reports.directory)}
                    popen = pump.popen(command, env=env, rank=config.global_rank, local_rank=local_rank)
                    processes[config.global_rank] = PopenRank(popen)
                supervisor = Supervisor(processes, reports, self.timeout, rendezvous_timeout=joining_timeout)
                watcher = threading.Thread(target=supervisor.watch, name="rank-supervisor", daemon=True)
                watcher.start()
                try:
                    self._wait_for_peers(processes, reports, supervisor)
                    with environ_patch(rank_variables(own, address, port)):
                        result = fn(*args, **kwargs)
                except _PeersFailed:
                    supervisor.stop()
                    watcher.join()
                    problem = supervisor.outcome.problem(self.timeout)
                    assert problem is not None
                    raise problem from None
                except BaseException as exc:
                    if isinstance(exc, Exception):
                        supervisor.add_failure(Failure.from_exception(own.global_rank, exc))
                    supervisor.stop()
                    watcher.join()
                    if not isinstance(exc, Exception):
                        raise  # KeyboardInterrupt, SystemExit: the other ranks are stopped; let it go
                    problem = supervisor.outcome.problem(self.timeout)
                    assert problem is not None  # this rank's failure is in the outcome
                    own_fault = isinstance(problem, RankFailedError) and problem.rank == own.global_rank
                    # This rank's error is only shown when it is the cause, not a peer's echo.
                    raise problem from (exc if own_fault else None)
                watcher.join()
            finally:
                stop_processes(processes)
        problem = supervisor.outcome.problem(self.timeout)
        if problem is not None:
            raise problem
        return result

    def _wait_for_peers(self, processes: dict[int, RankProcess], reports: RankReports, supervisor: Supervisor) -> None:
        """Wait until every re-run script reached its launch() call, before this rank's rendezvous.

        This rank is the caller's own process, so once it waits inside torch's rendezvous nothing
        can interrupt it; a worker that fails, exits or hangs before joining is caught here
        instead (the supervisor applies the launch and rendezvous timeouts).
        """
        waiting = set(processes)
        while waiting:
            waiting = {rank for rank in waiting if not reports.has_joined(rank)}
            outcome = supervisor.outcome
            if outcome.failures or outcome.timed_out_at is not None:
                raise _PeersFailed
            for rank in sorted(waiting):
                if processes[rank].poll() == 0:
                    raise RuntimeConfigError(
                        f"rank {rank} exited before reaching this launch() call: the script it re-ran "
                        "ended (or branched) before launch()\n"
                        "  hint: make sure every process reaches the same launch() call"
                    )
            if waiting:
                time.sleep(_JOIN_POLL)


class _PeersFailed(Exception):
    """A worker failed or timed out before the launching rank joined; the supervisor knows the details."""
