"""SIGTERM during a launch: stop the ranks, remove the report folder, exit 143, at once.

Python runs a signal handler in the main thread between bytecodes, so a main thread blocked
inside a C++ collective (the ``subprocess`` launcher's rank 0 waiting in a barrier) would run it
only once that collective returns. While a launch runs, :func:`sigterm_guard` therefore

- installs a Python ``SIGTERM`` handler that raises ``SystemExit(143)`` in the main thread (the
  launch unwinds: its ``finally`` blocks stop the ranks and remove the folder), and
- points :func:`signal.set_wakeup_fd` at a pipe: CPython's C-level handler writes the signal
  number there the moment the signal arrives, whatever the main thread is doing. A helper thread
  reads it; if the Python handler has not run within :data:`HANDLER_GRACE` seconds, the main
  thread is blocked in C, and the helper stops the ranks registered with :func:`watch_processes`,
  removes the folder and ends the process with status 143 (128 + SIGTERM) itself.

A program that installed its own SIGTERM handler, or its own wakeup fd (asyncio does), keeps
them: nothing is installed then. Forked children (the ``fork`` launcher's ranks) get the default
SIGTERM action and no wakeup fd back right after the fork, so stopping a rank stays a plain
SIGTERM and never reaches the launcher's helper thread.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Iterator, MutableMapping
from types import FrameType
from typing import Any

from runtime._supervision.rank_processes import stop_processes

__all__ = ["HANDLER_GRACE", "SIGTERM_EXIT_CODE", "sigterm_guard", "watch_processes"]

#: The exit status of a launching process stopped by SIGTERM (as a shell reports it).
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM
#: Seconds the helper thread leaves the main thread to run the Python handler before acting itself.
HANDLER_GRACE = 0.5
_SENTINEL = b"\0"  # written by the guard itself to end the helper thread (no signal is number 0)


class _Guard:
    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.owner = os.getpid()
        self.processes: list[MutableMapping[int, Any]] = []
        self.handler_ran = threading.Event()
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.owner:  # a forked child that has not been reset yet
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.handler_ran.set()
        raise SystemExit(SIGTERM_EXIT_CODE)

    def watch(self) -> None:
        while True:
            try:
                data = os.read(self.read_fd, 64)
            except OSError:
                return
            if not data or _SENTINEL in data:
                return
            if signal.SIGTERM in data and not self.handler_ran.wait(HANDLER_GRACE):
                self._stop_now()

    def _stop_now(self) -> None:
        for processes in list(self.processes):
            stop_processes(dict(processes))
        shutil.rmtree(self.folder, ignore_errors=True)
        os._exit(SIGTERM_EXIT_CODE)


_current: _Guard | None = None


def _reset_in_forked_child() -> None:
    global _current
    if _current is not None and os.getpid() != _current.owner:
        _current = None
        with contextlib.suppress(ValueError):  # forked from another thread than the main one
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)


os.register_at_fork(after_in_child=_reset_in_forked_child)


def watch_processes(processes: MutableMapping[int, Any]) -> None:
    """Stop these rank processes (a mapping the launcher fills as it starts them) on SIGTERM.

    Only needed where the main thread runs a rank itself (it may be blocked in a collective);
    a no-op outside :func:`sigterm_guard`.
    """
    if _current is not None:
        _current.processes.append(processes)


@contextlib.contextmanager
def sigterm_guard(folder: str) -> Iterator[None]:
    """Inside the block, SIGTERM stops the launch at once (module docstring); ``folder`` is removed."""
    global _current
    if threading.current_thread() is not threading.main_thread() or _current is not None:
        yield
        return
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except ValueError:
        yield
        return
    if previous is not signal.SIG_DFL:
        yield  # the program handles SIGTERM itself: leave its handler alone
        return
    guard = _Guard(folder)
    previous_fd = signal.set_wakeup_fd(guard.write_fd, warn_on_full_buffer=False)
    helper: threading.Thread | None = None
    if previous_fd != -1:  # the program reads signals from its own fd: keep it, use the handler only
        signal.set_wakeup_fd(previous_fd)
    else:
        helper = threading.Thread(target=guard.watch, name="runtime-sigterm", daemon=True)
        helper.start()
    signal.signal(signal.SIGTERM, guard.on_sigterm)
    _current = guard
    try:
        yield
    finally:
        _current = None
        signal.signal(signal.SIGTERM, previous)
        if helper is not None:
            signal.set_wakeup_fd(-1)
            os.write(guard.write_fd, _SENTINEL)
            helper.join()
        os.close(guard.read_fd)
        os.close(guard.write_fd)
