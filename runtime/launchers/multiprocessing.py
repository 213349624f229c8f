"""The ``spawn`` and ``fork`` launchers: one ``torch.multiprocessing`` process per local rank.

The calling process only supervises; rank 0's return value is pickled back to it. With
``spawn``, ``fn`` and its arguments must be picklable (a module-level function); ``fork``
copies the calling process, so closures work, but it is unsafe once CUDA is initialised.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
import torch.distributed
import torch.multiprocessing

from runtime._protocol.ports import store_socket_variables
from runtime._protocol.rank_environment import DOORBELL_VARIABLE, rank_config, rank_variables, rendezvous_timeout
from runtime._protocol.rank_files import RankFiles
from runtime._protocol.spawned_rank import SPAWNED_RANK_VARIABLE, spawning
from runtime._supervision.capacity import FORKED_RANK_MEMORY, TORCH_RANK_MEMORY
from runtime._supervision.progress_watchdog import progress_timeout
from runtime._supervision.rank_group import rank_group
from runtime._supervision.supervisor import MultiprocessingRank
from runtime.errors import RuntimeConfigError
from runtime.launchers.base import Launcher
from runtime.launchers.rank_output import ChildStreams, RankOutputPump

__all__ = ["ForkLauncher", "MultiprocessingLauncher", "SpawnLauncher"]

R = TypeVar("R")


def _rank_process_main(
    variables: Mapping[str, str],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    streams: ChildStreams | None = None,
    store_socket: socket.socket | None = None,
) -> None:
    """Entry point of a rank process: become the rank, run ``fn``, hand back the result.

    ``fn`` is the rank's entry (:func:`runtime._protocol.launched_rank.enter_rank`, which reports a failure).

    ``store_socket`` (rank 0): the socket the launcher listens on, where this rank's store serves.
    """
    if streams is not None:
        streams.connect()  # the launcher's rank output pump reads them
    os.environ.pop(SPAWNED_RANK_VARIABLE, None)  # this rank's start is over: its own spawned children are not ranks
    os.environ.update(variables)
    os.environ.update(store_socket_variables(store_socket))
    rank = int(variables["RANK"])
    try:
        result = fn(*args, **kwargs)
        if variables["LOCAL_RANK"] == "0":
            reports = RankFiles.from_environment()
            assert reports is not None
            try:
                reports.write_result(rank, result)
            except TypeError as exc:
                reports.write_error(rank, exc)
                raise
    except BaseException as exc:
        # Already reported to the launcher, which re-raises it with this traceback.
        sys.stdout.flush()
        sys.stderr.flush()
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code else 1
        os._exit(code)
    sys.stdout.flush()
    sys.stderr.flush()


class MultiprocessingLauncher(Launcher):
    """Starts local ranks with the :mod:`torch.multiprocessing` ``start_method``."""

    start_method = "spawn"
    #: Whether a rank process imports the main script afresh (spawn), so that it can reach its launch() again.
    reimports_main = True
    supports_restarts = True
    check_ranks = "processes"
    #: The least memory each rank holds of its own (a fresh interpreter that imports torch).
    rank_memory = TORCH_RANK_MEMORY

    def _launch(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        self.check_start_method()
        rendezvous_timeout(self.config)  # a bad RUNTIME_RENDEZVOUS_TIMEOUT fails before anything starts
        context: Any = torch.multiprocessing.get_context(self.start_method)
        first_rank = rank_config(self.config, 0).global_rank
        # The group is left first: its ranks are stopped and reaped before the pump writes what is left.
        with (
            self.rendezvous() as (address, port, listening),
            RankOutputPump(self.rank_output, self.config.num_devices) as pump,
            rank_group(self.config.num_devices, self.rank_memory, on_cpu=self.on_cpu) as group,
        ):
            for local_rank in range(self.config.num_devices):
                config = rank_config(self.config, local_rank)
                # These ranks wake their launcher by exiting; a doorbell of an outer launch is not theirs.
                variables = {
                    **rank_variables(config, address, port, group.reports.directory),
                    **self.restart_variables(),
                    DOORBELL_VARIABLE: "",
                }
                streams = pump.child_streams(rank=config.global_rank, local_rank=local_rank)
                process = context.Process(
                    target=_rank_process_main,
                    # Rank 0's store serves on the socket listening since before any rank started.
                    args=(variables, fn, args, kwargs, streams, listening if config.global_rank == 0 else None),
                    name=f"rank-{config.global_rank}",
                    daemon=False,  # ranks may start DataLoader workers
                )
                # A spawned rank re-imports the main script: it can tell a re-run launch() through this.
                reporting = spawning(config.global_rank, group.reports.directory) if self.reimports_main else None
                try:
                    with reporting or contextlib.nullcontext():
                        self._start(process, fn)
                except OSError as exc:
                    group.raise_if_refused(exc, config.global_rank)
                    raise
                finally:
                    if streams is not None:
                        streams.close()  # the child holds its own copies
                group.add(config.global_rank, MultiprocessingRank(process))
            outcome = group.supervisor(
                self.timeout,
                rendezvous_timeout=rendezvous_timeout(self.config),
                progress_timeout=progress_timeout(self.config.strategy_options),
            ).watch()
            problem = outcome.problem(self.timeout)
            if problem is not None:
                raise problem
            return group.reports.read_result(first_rank)  # type: ignore[no-any-return]

    def check_start_method(self) -> None:
        """Refuse to start ranks in a way that cannot work here (hook for subclasses)."""

    def _start(self, process: Any, fn: Callable[..., Any]) -> None:
        try:
            process.start()
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise TypeError(
                f"the {self.start_method} launcher must pickle the function and its arguments to send "
                f"them to the rank processes, and could not ({exc}); define "
                f"{getattr(fn, '__qualname__', fn)!r} at module level and pass picklable arguments, "
                "or use the fork launcher (strategy='ddp_fork')"
            ) from exc


class SpawnLauncher(MultiprocessingLauncher):
    """Fresh interpreters (``spawn``): safe with CUDA, costs an import of torch per rank."""

    start_method = "spawn"


class ForkLauncher(MultiprocessingLauncher):
    """Copies of the calling process (``fork``): fast, works in notebooks, not after CUDA init."""

    start_method = "fork"
    reimports_main = False
    rank_memory = FORKED_RANK_MEMORY  # a copy of this process: only what it writes is its own

    def check_start_method(self) -> None:
        if torch.cuda.is_initialized():
            raise RuntimeConfigError(
                "the fork launcher cannot start ranks after CUDA was initialised in this process "
                "(a forked process cannot use the parent's CUDA context)",
                hint="use strategy='ddp_spawn' or 'ddp', or launch before touching CUDA",
            )
        if torch.distributed.is_available() and not torch.distributed.is_initialized():
            # What every rank imports before joining its group, imported once here: the forked
            # ranks inherit it instead of each importing it (milliseconds per rank).
            from runtime.collectives.torch_distributed import import_group_default_modules

            import_group_default_modules()

    def _start(self, process: Any, fn: Callable[..., Any]) -> None:
        # The rank inherits this process's objects, garbage not yet collected among them. Frozen
        # at the fork, the rank's collections never look at them: it does not run this process's
        # finalizers (closing its sockets and files, or joining its threads, which a forked process
        # does not have: a stale process group finalized in a rank can wait forever), and it does
        # not copy every page of the heap by touching each object. This process takes its objects
        # back at once. A process that froze objects itself keeps them as they are (unfreezing is
        # all or nothing): its ranks collect what it did not freeze.
        if gc.get_freeze_count():
            super()._start(process, fn)
            return
        gc.freeze()
        try:
            super()._start(process, fn)
        finally:
            gc.unfreeze()
