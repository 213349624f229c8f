"""The ``xla`` launcher: torch_xla's own multiprocess launcher starts one replica per XLA device.

torch_xla starts the replicas (processes on TPU; on XLA:CPU, threads of one process), so each
replica learns its rank from torch_xla's runtime, not from variables set per process. Every
replica reads the launching config from ``RESOLVER_CONFIG``; rank 0's return value and any
replica's failure come back through the launch's report directory.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch_xla.distributed.xla_multiprocessing as xmp

from runtime._protocol.rank_environment import CONFIG_VARIABLE, environ_patch
from runtime._protocol.rank_files import RankFiles
from runtime._supervision.cleanup import temporary_rank_files
from runtime.accelerators.xla import runtime_initialized
from runtime.errors import LaunchError, LaunchTimeoutError, RankFailedError, RuntimeConfigError, stamp_failure_time
from runtime.launchers.base import Launcher

__all__ = ["XLALauncher"]

R = TypeVar("R")


class _Replica:
    """What torch_xla runs in each replica: ``fn``, with its outcome reported to the launcher."""

    def __init__(self, directory: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.directory = directory
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def __call__(self, index: int) -> None:
        reports = RankFiles(self.directory)
        try:
            result = self.fn(*self.args, **self.kwargs)
            if index == 0:
                reports.write_result(index, result)
        except BaseException as exc:
            stamp_failure_time(exc)
            reports.write_error(index, exc)
            raise


class XLALauncher(Launcher):
    """Runs ``fn`` in every replica with ``torch_xla``'s ``xmp.spawn``; returns rank 0's result.

    A replica that raises makes :meth:`launch` raise :class:`~runtime.errors.RankFailedError`
    naming the first replica that failed, with its traceback. With a ``timeout``, replicas still
    running at the deadline are killed (the processes torch_xla started for this launch) and
    :class:`~runtime.errors.LaunchTimeoutError` names the ranks that had not reported.
    """

    start_method = "spawn"
    check_ranks = "replicas"

    def _launch(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        if runtime_initialized():
            raise RuntimeConfigError(
                "torch_xla's runtime already runs in this process (an XLA device or tensor was used), "
                "and torch_xla cannot start replicas after that",
                hint="launch before touching any XLA device in the launching process",
            )
        with temporary_rank_files() as reports, environ_patch({CONFIG_VARIABLE: self.config.to_json()}):
            try:
                self._spawn(_Replica(reports.directory, fn, args, kwargs), reports)
            except LaunchTimeoutError:
                raise
            except BaseException as exc:
                failure = self._first_failure(reports)
                if failure is None:
                    raise LaunchError(
                        f"torch_xla's launcher failed before any replica reported an error: {exc!r}",
                        hint="the function and its arguments must be picklable (a module-level function); a "
                        "replica killed by XLA's runtime (e.g. a collective timing out at its rendezvous) cannot "
                        "report",
                    ) from exc
                raise failure from None
            if not reports.has_result(0):
                raise RuntimeError("torch_xla's launcher returned, but rank 0 reported no result")
            return reports.read_result(0)  # type: ignore[no-any-return]

    def _spawn(self, replica: _Replica, reports: RankFiles) -> None:
        if self.timeout is None:
            xmp.spawn(replica, start_method=self.start_method)
            return
        before = set(multiprocessing.active_children())
        failure: list[BaseException] = []

        def spawn() -> None:
            try:
                xmp.spawn(replica, start_method=self.start_method)
            except BaseException as exc:  # re-raised in the launching thread
                failure.append(exc)

        thread = threading.Thread(target=spawn, name="xla-launch", daemon=True)
        thread.start()
        thread.join(self.timeout)
        if thread.is_alive():
            for process in set(multiprocessing.active_children()) - before:
                process.kill()
                process.join(10)
            thread.join(30)
            silent = [
                rank
                for rank in range(self.config.world_size)
                if reports.read_error(rank) is None and not (rank == 0 and reports.has_result(0))
            ]
            raise LaunchTimeoutError(silent, self.timeout)
        if failure:
            raise failure[0]

    def _first_failure(self, reports: RankFiles) -> RankFailedError | None:
        errors = [e for rank in range(self.config.world_size) if (e := reports.read_error(rank)) is not None]
        if not errors:
            return None
        first = min(errors, key=lambda error: error.time)
        return RankFailedError(first.rank, exit_code=None, traceback=first.traceback, summary=first.summary)
