"""The processes of a launch's ranks, behind one small interface, and how they are stopped."""

from __future__ import annotations

import multiprocessing.process
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Protocol

__all__ = ["MultiprocessingRank", "PopenRank", "RankProcess", "process_state", "stop_processes"]

#: Seconds between SIGTERM and SIGKILL when stopping ranks.
GRACE = 3.0


class RankProcess(Protocol):
    """A process running one rank."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal) once exited, else ``None``."""

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds; the exit code, or ``None`` if still running."""

    def send_signal(self, signum: int) -> None: ...

    def sentinel(self) -> int | None:
        """A file descriptor that becomes readable when the process exits (``None``: none; poll)."""

    def close(self) -> None:
        """Release the sentinel (after the process was reaped)."""


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

    def sentinel(self) -> int | None:
        return self.process.sentinel

    def close(self) -> None:
        """The sentinel belongs to the process object (closed when it is collected)."""


class PopenRank:
    """A :class:`subprocess.Popen` as a :class:`RankProcess`; its sentinel is a pidfd, opened at once."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self._pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self._pidfd = os.pidfd_open(popen.pid)
            except OSError:  # no pidfd support (old kernel, seccomp): poll instead
                self._pidfd = None

    def sentinel(self) -> int | None:
        return self._pidfd

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

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


def process_state(pid: int) -> str | None:
    """The state letter ``/proc/<pid>/stat`` shows (``R``, ``S``, ``D``, ``T`` stopped, ``t`` stopped
    by a debugger, ``Z``...), or ``None`` where it cannot be read (no ``/proc``, the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    # "pid (comm) state ...": the command name may hold spaces and parentheses, the state follows the last ")".
    fields = text[text.rfind(b")") + 1 :].split()
    return fields[0].decode("ascii", "replace") if fields else None


def stop_processes(processes: Mapping[int, RankProcess], grace: float = GRACE) -> None:
    """Terminate, then kill after ``grace`` seconds, every process still running; reap them all.

    A stopped process (``SIGSTOP``, Ctrl-Z) is continued right after its ``SIGTERM``, so it acts on
    it at once instead of lying frozen until the ``SIGKILL``."""
    alive = [p for p in processes.values() if p.poll() is None]
    for process in alive:
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + grace
    for process in alive:
        if process.wait(max(0.0, deadline - time.monotonic())) is None:
            process.send_signal(signal.SIGKILL)
    for process in alive:
        process.wait(grace)
