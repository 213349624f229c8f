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
from collections.abc import Callable
from typing import Any, TypeVar

from runtime._protocol.launched_rank import is_stop_request
from runtime._protocol.ports import store_socket_variables
from runtime._protocol.progress import recording_progress
from runtime._protocol.rank_environment import environ_patch, rank_config, rank_variables, rendezvous_timeout
from runtime._protocol.rank_files import RankFiles
from runtime._supervision.capacity import TORCH_RANK_MEMORY
from runtime._supervision.in_process_rank import InProcessRank
from runtime._supervision.progress_watchdog import progress_timeout
from runtime._supervision.rank_group import rank_group
from runtime._supervision.signals import watch_processes
from runtime._supervision.supervisor import Failure, RankProcess, Supervisor
from runtime.errors import LaunchTimeoutError, RankFailedError, RuntimeConfigError
from runtime.launchers.base import Launcher
from runtime.launchers.rank_output import RankOutputPump

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
            f"was not started from a script file (sys.argv[0] = {script!r})",
            hint="in a notebook or `python -c`, use strategy='ddp_fork' or 'ddp_spawn'; or put the code in a script "
            "and run it",
        )
    return [sys.executable, os.path.abspath(script), *sys.argv[1:]]


class SubprocessScriptLauncher(Launcher):
    """This process is local rank 0; the script is re-run for local ranks 1..n-1.

    ``launch`` returns as soon as every rank's work has returned (each rank reports it): the
    re-run interpreters finish exiting in the background (see :meth:`RankGroup.release`).

    With ``max_restarts``, a failed attempt is torn down (the peers stopped and reaped, this rank's
    process group destroyed as its work unwound) and ``fn`` is called again here, with the re-run
    scripts started afresh. This rank lives in the launching process: if it dies (``SIGKILL``), the
    whole run ends, as torchrun's run ends when its agent dies.
    """

    supports_restarts = True
    check_ranks = "processes"
    runs_first_rank_here = True

    def _launch(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        command = script_command() if self.config.num_devices > 1 else []
        joining_timeout = rendezvous_timeout(self.config)
        own = rank_config(self.config, 0)
        # The group is left first: its ranks are stopped (or released) before the pump writes what is left.
        with (
            self.rendezvous() as (address, port, listening),
            RankOutputPump(self.rank_output, self.config.num_devices) as pump,
            rank_group(self.config.num_devices - 1, TORCH_RANK_MEMORY, on_cpu=self.on_cpu) as group,
        ):
            reports = group.reports
            watch_processes(group.processes)  # SIGTERM stops them even while this rank is blocked in a collective
            for local_rank in range(1, self.config.num_devices):
                config = rank_config(self.config, local_rank)
                variables = rank_variables(config, address, port, reports.directory)
                environment = {**os.environ, **variables, **self.restart_variables()}
                group.popen(config.global_rank, command, environment, output=pump, local_rank=local_rank)
            processes = dict(group.processes)
            # This rank runs here: at the launch deadline it is interrupted too (in_process_rank.py).
            watchdog = progress_timeout(self.config.strategy_options)
            in_process = InProcessRank(own.global_rank, self.timeout, interruptible=watchdog > 0)
            supervisor = group.supervisor(self.timeout, rendezvous_timeout=joining_timeout, in_process=in_process,
                                          progress_timeout=watchdog)  # fmt: skip
            watcher = threading.Thread(target=supervisor.watch, name="rank-supervisor", daemon=True)
            watcher.start()
            try:
                self._wait_for_peers(processes, reports, supervisor)
                own_variables = {
                    **rank_variables(own, address, port),
                    **self.restart_variables(),
                    **store_socket_variables(listening),  # this rank's store serves on it
                }
                with (
                    environ_patch(own_variables),
                    in_process.working(),
                    recording_progress(reports.directory, own.global_rank),
                ):
                    result = fn(*args, **kwargs)
                # If a peer's collective now fails, this rank left it waiting (as a rank process that exits would).
                supervisor.add_departure(own.global_rank)
                # Return once every worker's work returned too (or one failed), not when its
                # interpreter has finished exiting.
                supervisor.wait_for(lambda: _peers_done(processes, reports, supervisor))
            except _PeersFailed:
                supervisor.stop()
                watcher.join()
                problem = supervisor.outcome.problem(self.timeout)
                assert problem is not None
                raise problem from None
            except BaseException as exc:
                # Interrupted at the launch deadline: the supervisor has recorded the timeout.
                interrupted = isinstance(exc, LaunchTimeoutError) and supervisor.outcome.timed_out_at is not None
                # Any other exception from the work is this rank's failure, whatever its base class
                # (torch's CheckpointException derives from BaseException), as in a rank process.
                stopping = is_stop_request(exc)
                if not stopping and not interrupted:
                    supervisor.add_failure(Failure.from_exception(own.global_rank, exc))
                supervisor.stop()
                watcher.join()
                if stopping:
                    raise  # Ctrl-C, SystemExit: the other ranks are stopped; let it go
                problem = supervisor.outcome.problem(self.timeout)
                assert problem is not None  # this rank's failure is in the outcome
                own_fault = isinstance(problem, RankFailedError) and problem.rank == own.global_rank
                # This rank's error is only shown when it is the cause, not a peer's echo.
                raise problem from (exc if own_fault else None)
            if _failed(supervisor):
                watcher.join()  # the supervisor stops the others and settles the blame
            else:
                supervisor.detach()
                watcher.join()
                group.release(supervisor.time_left())
        problem = supervisor.outcome.problem(self.timeout)
        if problem is not None:
            raise problem
        return result

    def _wait_for_peers(self, processes: dict[int, RankProcess], reports: RankFiles, supervisor: Supervisor) -> None:
        """Wait until every re-run script reached its launch() call, before this rank's rendezvous.

        This rank is the caller's own process, so once it waits inside torch's rendezvous nothing
        can interrupt it; a worker that fails, exits or hangs before joining is caught here
        instead (the supervisor applies the launch and rendezvous timeouts). No polling: the
        supervisor wakes this thread whenever a worker reports or exits.
        """

        def settled() -> bool:
            arrived = (reports.has_joined(r) or processes[r].poll() is not None for r in processes)
            return _failed(supervisor) or all(arrived)

        supervisor.wait_for(settled)
        if _failed(supervisor):
            raise _PeersFailed
        absent = sorted(r for r in processes if not reports.has_joined(r))
        for rank in absent:
            if processes[rank].poll() == 0:
                raise RuntimeConfigError(
                    f"rank {rank} exited before reaching this launch() call: the script it re-ran "
                    "ended (or branched) before launch()",
                    hint="make sure every process reaches the same launch() call",
                )
        if absent:
            raise _PeersFailed  # it exited with an error: the supervisor has recorded why


def _failed(supervisor: Supervisor) -> bool:
    outcome = supervisor.outcome
    return bool(outcome.failures) or outcome.timed_out_at is not None


def _peers_done(processes: dict[int, RankProcess], reports: RankFiles, supervisor: Supervisor) -> bool:
    return _failed(supervisor) or all(reports.has_finished(r) or processes[r].poll() is not None for r in processes)


class _PeersFailed(Exception):
    """A worker failed or timed out before the launching rank joined; the supervisor knows the details."""
