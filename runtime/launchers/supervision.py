"""Watching rank processes: first failure wins, the rest are stopped, nothing is left behind.

A :class:`Supervisor` polls the processes of one launch. When one exits with an error it stops
the others (``SIGTERM``, then ``SIGKILL`` after a grace period) and reaps every one; at the
deadline it asks the ranks still running for their Python stacks, then stops them. The
:class:`Outcome` names the first problem in time: a rank's failure (with the traceback the rank
reported) or the timeout.
"""

from __future__ import annotations

import multiprocessing.process
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Protocol

import attrs

from runtime.errors import LaunchTimeoutError, RankFailedError, failure_time
from runtime.launchers.reports import STACK_SIGNAL, RankReports, describe_exception

__all__ = [
    "Failure",
    "MultiprocessingRank",
    "Outcome",
    "PopenRank",
    "RankProcess",
    "Supervisor",
    "stop_processes",
]

_POLL_INTERVAL = 0.05
_GRACE = 3.0
_STACK_WAIT = 1.0
_SETTLE = 1.0


class RankProcess(Protocol):
    """A process running one rank."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal) once exited, else ``None``."""

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds; the exit code, or ``None`` if still running."""

    def send_signal(self, signum: int) -> None: ...


class MultiprocessingRank:
    """A :class:`multiprocessing.Process` as a :class:`RankProcess`."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def send_signal(self, signum: int) -> None:
        if self.process.exitcode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass


class PopenRank:
    """A :class:`subprocess.Popen` as a :class:`RankProcess`."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, signum: int) -> None:
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signum)
            except ProcessLookupError:
                pass


def stop_processes(processes: Mapping[int, RankProcess], grace: float = _GRACE) -> None:
    """Terminate, then kill after ``grace`` seconds, every process still running; reap them all."""
    alive = [p for p in processes.values() if p.poll() is None]
    for process in alive:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in alive:
        if process.wait(max(0.0, deadline - time.monotonic())) is None:
            process.send_signal(signal.SIGKILL)
    for process in alive:
        process.wait(grace)


@attrs.frozen
class Failure:
    """A rank that raised or died, and when (wall-clock seconds)."""

    rank: int
    time: float
    exit_code: int | None
    summary: str
    traceback: str

    @classmethod
    def from_exception(cls, rank: int, exc: BaseException) -> Failure:
        """The failure of a rank that ran in this process."""
        summary, text = describe_exception(exc)
        return cls(rank, failure_time(exc), None, summary, text)

    def error(self) -> RankFailedError:
        return RankFailedError(self.rank, exit_code=self.exit_code, traceback=self.traceback, summary=self.summary)


@attrs.define
class Outcome:
    """What happened to the ranks of one launch."""

    failures: list[Failure] = attrs.field(factory=list)
    timed_out_ranks: tuple[int, ...] = ()
    timed_out_at: float | None = None
    stacks: dict[int, str] = attrs.field(factory=dict)

    def problem(self, timeout: float | None) -> RankFailedError | LaunchTimeoutError | None:
        """The exception for the earliest failure or the timeout, whichever came first."""
        first = min(self.failures, key=lambda f: f.time, default=None)
        if self.timed_out_at is not None and (first is None or self.timed_out_at <= first.time):
            return LaunchTimeoutError(self.timed_out_ranks, timeout or 0.0, self.stacks)
        return first.error() if first is not None else None


class Supervisor:
    """Watches the rank processes of one launch until all have exited (see the module docstring).

    :meth:`watch` may run on a helper thread while the launching process runs a rank itself;
    :meth:`stop` (from any thread) then makes it stop the processes that are still running.
    """

    def __init__(
        self,
        processes: Mapping[int, RankProcess],
        reports: RankReports,
        timeout: float | None,
        *,
        grace: float = _GRACE,
    ) -> None:
        self.processes = dict(processes)
        self.reports = reports
        self.timeout = timeout
        self.grace = grace
        self.outcome = Outcome()
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._stop_requested = threading.Event()
        self._stopped: set[int] = set()

    def stop(self) -> None:
        """Ask :meth:`watch` to stop every process still running."""
        self._stop_requested.set()

    def watch(self) -> Outcome:
        running = dict(self.processes)
        settle_until: float | None = None
        while running:
            self._collect_exits(running)
            if not running:
                break
            now = time.monotonic()
            if self.outcome.failures or self._stop_requested.is_set():
                # A rank that fails makes its peers fail a moment later; give the first one time
                # to write its report (and exit) before the rest are stopped.
                settle_until = settle_until if settle_until is not None else now + _SETTLE
                if now >= settle_until:
                    self._stop(running)
                    continue
            elif self._deadline is not None and now >= self._deadline:
                self.outcome.timed_out_at = time.time()
                self.outcome.timed_out_ranks = tuple(sorted(running))
                self.outcome.stacks = self._collect_stacks(running)
                self._stop(running)
                continue
            self._stop_requested.wait(_POLL_INTERVAL)
        return self.outcome

    def _collect_exits(self, running: dict[int, RankProcess]) -> None:
        for rank, process in list(running.items()):
            code = process.poll()
            if code is None:
                continue
            del running[rank]
            if code != 0:
                failure = self._failure(rank, code)
                # A rank we stopped failed on its own only if it reported before we stopped it.
                if rank not in self._stopped or failure.traceback:
                    self.outcome.failures.append(failure)

    def _failure(self, rank: int, code: int) -> Failure:
        report = self.reports.read_error(rank)
        if report is not None:
            return Failure(rank, report.time, code, report.summary, report.traceback)
        summary = f"killed by signal {-code}" if code < 0 else "exited without reporting an error (see its output)"
        return Failure(rank, time.time(), code, summary, "")

    def _stop(self, running: dict[int, RankProcess]) -> None:
        self._stopped.update(running)
        stop_processes(running, self.grace)
        self._collect_exits(running)

    def _collect_stacks(self, running: Mapping[int, RankProcess]) -> dict[int, str]:
        if STACK_SIGNAL is None:
            return {}
        for process in running.values():
            process.send_signal(STACK_SIGNAL)
        deadline = time.monotonic() + _STACK_WAIT
        stacks: dict[int, str] = {}
        while time.monotonic() < deadline and len(stacks) < len(running):
            for rank in running:
                text = self.reports.read_stack(rank)
                if text.strip():
                    stacks[rank] = text
            time.sleep(_POLL_INTERVAL)
        time.sleep(_POLL_INTERVAL)  # let a dump that is still being written finish
        return {rank: self.reports.read_stack(rank) for rank in stacks}
