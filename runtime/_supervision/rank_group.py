"""The one way ranks are started, supervised and reaped (``resolver run`` and every local launcher).

::

    with rank_group() as group:                       # a fresh report folder and doorbell
        group.popen(rank, command, env)                # or group.add(rank, MultiprocessingRank(p));
                                                       # output=pump: through a RankOutputPump
        outcome = group.supervisor(timeout).watch()    # event-driven, see supervisor.py

When the block ends every rank process still running is stopped (``SIGTERM``, then ``SIGKILL``)
and reaped, and the report folder is removed, however the block ends. A launcher whose ranks all
finished their work may :meth:`RankGroup.release` the processes that are still exiting (a torch
interpreter takes a while to shut down) so that ``launch()`` returns at once: a background
thread reaps them (within what is left of the launch timeout), and the launching process waits
for it before it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any, Protocol

from runtime._protocol.rank_environment import DOORBELL_VARIABLE
from runtime._protocol.rank_files import RankFiles
from runtime._supervision.capacity import PROGRAM_MEMORY, check_room_for, start_refused
from runtime._supervision.cleanup import temporary_rank_files
from runtime._supervision.in_process_rank import InProcessRank
from runtime._supervision.supervisor import PopenRank, RankProcess, Supervisor, stop_processes
from runtime.preemption import watched

__all__ = ["DOORBELL_VARIABLE", "RankGroup", "rank_group", "start_rank_process"]


_reapers: set[threading.Thread] = set()


class OutputPump(Protocol):
    """Where a rank's output goes (``runtime.launchers.rank_output.RankOutputPump``, a layer above: a
    protocol here rather than an import of it)."""

    def popen(
        self,
        command: Sequence[str],
        *,
        env: dict[str, str],
        rank: int,
        local_rank: int,
        start: Callable[..., subprocess.Popen[bytes]],
    ) -> subprocess.Popen[bytes]: ...


def start_rank_process(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    pass_fds: Sequence[int] = (),
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
) -> subprocess.Popen[bytes]:
    """Start one rank's interpreter: the single place a rank's ``Popen`` is created.

    ``stdout``/``stderr`` default to this process's own streams (output streams straight through);
    a caller that prefixes or tees rank output passes pipes or files here.
    """
    return subprocess.Popen(list(command), env=dict(env), pass_fds=tuple(pass_fds), stdout=stdout, stderr=stderr)


class RankGroup:
    """The rank processes of one launch, their report folder and their doorbell (use :func:`rank_group`)."""

    def __init__(self, reports: RankFiles, doorbell: tuple[int, int], ranks: int = 0) -> None:
        self.reports = reports
        self.processes: dict[int, RankProcess] = {}
        #: How many rank processes the launcher means to start (0: not said).
        self.ranks = ranks
        self._bell_read, self._bell_write = doorbell

    def raise_if_refused(self, exc: OSError, rank: int) -> None:
        """Raise the clear error for the OS refusing to start ``rank`` for want of room
        (:func:`~runtime._supervision.capacity.start_refused`); return for any other ``exc``."""
        refused = start_refused(exc, rank, max(self.ranks, len(self.processes) + 1), len(self.processes))
        if refused is not None:
            raise refused from exc

    def popen(
        self,
        rank: int,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        output: OutputPump | None = None,
        local_rank: int = 0,
    ) -> PopenRank:
        """Start ``command`` as ``rank`` with ``env`` (plus the doorbell) and watch it; with
        ``output``, its stdout and stderr go through that pump (``local_rank`` for its filter)."""
        env = {**env, DOORBELL_VARIABLE: f"{self._bell_write}:{os.fstat(self._bell_write).st_ino}"}

        def start(
            command: Sequence[str], *, env: Mapping[str, str], stdout: int | None = None, stderr: int | None = None
        ) -> subprocess.Popen[bytes]:
            return start_rank_process(command, env, pass_fds=(self._bell_write,), stdout=stdout, stderr=stderr)

        try:
            if output is None:
                popen = start(command, env=env)
            else:
                popen = output.popen(command, env=env, rank=rank, local_rank=local_rank, start=start)
        except OSError as exc:
            self.raise_if_refused(exc, rank)
            raise
        process = PopenRank(popen)
        self.add(rank, process)
        return process

    def add(self, rank: int, process: RankProcess) -> None:
        self.processes[rank] = process

    def supervisor(
        self,
        timeout: float | None,
        *,
        rendezvous_timeout: float | None = None,
        in_process: InProcessRank | None = None,
        progress_timeout: float | None = None,
    ) -> Supervisor:
        """The supervisor of these processes; ``in_process``: a rank running in this process; ``progress_timeout``:
        the progress watchdog's least deadline (:class:`Supervisor`)."""
        return Supervisor(self.processes, self.reports, timeout, rendezvous_timeout=rendezvous_timeout,
                          doorbell=self._bell_read, in_process=in_process,
                          progress_timeout=progress_timeout)  # fmt: skip

    def release(self, limit: float | None = None) -> None:
        """Hand the processes still running (their work is done) to a background reaper, which
        waits for them to exit (a re-run script may still run the code after its ``launch()``) for
        up to ``limit`` seconds (``None``: no limit), then stops them."""
        running = [p for p in self.processes.values() if p.poll() is None]
        for process in self.processes.values():
            if process not in running:
                process.close()
        self.processes.clear()
        if running:
            deadline = None if limit is None else time.monotonic() + limit
            reaper = threading.Thread(target=_reap, args=(running, deadline), name="rank-reaper", daemon=True)
            _reapers.add(reaper)
            reaper.start()

    def close(self) -> None:
        stop_processes(self.processes)
        for process in self.processes.values():
            process.close()
        for fd in (self._bell_read, self._bell_write):
            os.close(fd)


def _reap(processes: list[RankProcess], deadline: float | None) -> None:
    try:
        for process in processes:
            while process.poll() is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    stop_processes({0: process})
                    break
                process.wait(3600.0 if left is None else left)
            process.close()
    finally:
        _reapers.discard(threading.current_thread())


@atexit.register
def _wait_for_reapers() -> None:
    for reaper in list(_reapers):
        reaper.join()


@contextlib.contextmanager
def rank_group(ranks: int = 0, per_rank: int = PROGRAM_MEMORY, *, on_cpu: bool = False) -> Iterator[RankGroup]:
    """A :class:`RankGroup` with a fresh report folder; no process of it outlives the block.

    ``ranks`` processes of at least ``per_rank`` bytes each (``on_cpu``: computing on the CPU cores)
    are to start: refused first when this machine surely cannot hold them
    (:mod:`~runtime._supervision.capacity`)."""
    check_room_for(ranks, per_rank, "rank processes", on_cpu=on_cpu)
    with temporary_rank_files() as reports:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        group = RankGroup(reports, (read, write), ranks)
        try:
            with watched(group.processes):  # a pre-emption signal the launching process gets reaches them
                yield group
        finally:
            group.close()
