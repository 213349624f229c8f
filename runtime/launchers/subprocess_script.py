"""The ``subprocess`` launcher: re-run the user's script once per extra local rank, like torchrun.

The calling process becomes local rank 0 and runs ``fn`` itself; local ranks 1..n-1 are new
interpreters running the same command line (``sys.executable`` + ``sys.argv``, or ``-m module``).
When a re-run script reaches the same ``launch`` call, the environment says it is a launched
rank and ``fn`` runs there directly. Since the script runs top to bottom in every rank, work
before the launch call happens once per rank.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from runtime.errors import RankFailedError, RuntimeConfigError
from runtime.launchers.base import Launcher
from runtime.launchers.reports import RankReports
from runtime.launchers.supervision import Failure, PopenRank, RankProcess, Supervisor, stop_processes
from runtime.rank_environment import environ_patch, rank_config, rank_variables
from runtime.registry import register_launcher

__all__ = ["SubprocessScriptLauncher", "script_command"]

R = TypeVar("R")


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
        address, port = self.rendezvous()
        own = rank_config(self.config, 0)
        with RankReports.temporary() as reports:
            processes: dict[int, RankProcess] = {}
            try:
                for local_rank in range(1, self.config.num_devices):
                    config = rank_config(self.config, local_rank)
                    env = {**os.environ, **rank_variables(config, address, port, reports.directory)}
                    processes[config.global_rank] = PopenRank(subprocess.Popen(command, env=env))
                supervisor = Supervisor(processes, reports, self.timeout)
                watcher = threading.Thread(target=supervisor.watch, name="rank-supervisor", daemon=True)
                watcher.start()
                try:
                    with environ_patch(rank_variables(own, address, port)):
                        result = fn(*args, **kwargs)
                except BaseException as exc:
                    supervisor.stop()
                    watcher.join()
                    if not isinstance(exc, Exception):
                        raise  # KeyboardInterrupt, SystemExit: the other ranks are stopped; let it go
                    supervisor.outcome.failures.append(Failure.from_exception(own.global_rank, exc))
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
