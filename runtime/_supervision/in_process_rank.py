"""The rank that runs inside the launching process (the ``subprocess`` launcher's rank 0), at the launch deadline.

Rank processes are stopped with signals; the launching process cannot be, and a rank stuck in
plain Python there (a loop, a ``time.sleep``) is not ended by stopping its peers either. Python
raises an exception in the main thread only from a signal handler, so while the rank's work runs,
:meth:`InProcessRank.working` installs a ``SIGALRM`` handler (with a launch timeout, or the progress
watchdog on: ``interruptible``). At the launch deadline (or the watchdog's) the
supervisor thread takes the rank's stack (:meth:`InProcessRank.stack`), then, unless the stack
shows it waiting in a collective (stopping its peers ends that wait), calls
:meth:`InProcessRank.interrupt`: ``SIGALRM`` goes to the main thread (``pthread_kill``) and the
handler raises :class:`~runtime.errors.LaunchTimeoutError` there, also out of a blocking call such
as ``time.sleep``. No timer is set: the deadline stays the supervisor's, so every rank's stack is
taken before anything unwinds, and the process's own ``ITIMER_REAL`` is never touched.

A program's own ``SIGALRM`` use wins (the safe route): when it installed a ``SIGALRM`` handler
(``SIG_IGN`` included), has a real-time timer pending (``signal.alarm``, ``signal.setitimer``), or
launches outside the main thread, nothing is installed and the rank is not interrupted: its peers
are still stopped at the deadline, and the launch raises the timeout once the rank's work
returns. A handler the work installs itself replaces this one (and is left in place); a
``SIGALRM`` from a timer the work starts without a handler gets the default action (the process
ends), as it would without the launch.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

from runtime.errors import LaunchTimeoutError

__all__ = ["InProcessRank"]

_ALARM: int | None = getattr(signal, "SIGALRM", None)


class InProcessRank:
    """One rank that runs in this process, in the thread that calls :meth:`working`."""

    def __init__(self, rank: int, timeout: float | None, *, interruptible: bool = False) -> None:
        self.rank = rank
        self.timeout = timeout
        #: It can be interrupted without a timeout too (the progress watchdog may stop the launch).
        self._interruptible = interruptible or timeout is not None
        self._thread_id: int | None = None
        self._handler_installed = False
        self._interrupted = threading.Event()

    @property
    def interruptible(self) -> bool:
        """Whether :meth:`interrupt` can end the work now (the handler is installed and still this one's)."""
        return self._handler_installed and _ALARM is not None and signal.getsignal(_ALARM) == self._on_alarm

    def is_working(self) -> bool:
        return self._thread_id is not None

    def stack(self) -> str:
        """Where the rank's thread is now (outermost call first), or ``""`` outside its work."""
        thread_id = self._thread_id
        frame = sys._current_frames().get(thread_id) if thread_id is not None else None
        if frame is None:
            return ""
        return "Launching process, main thread (most recent call last):\n" + "".join(traceback.format_stack(frame))

    def interrupt(self) -> bool:
        """Raise :class:`LaunchTimeoutError` in the rank's thread (from another thread); ``False`` if it cannot."""
        if not self.is_working() or not self.interruptible or _ALARM is None:
            return False
        self._interrupted.set()
        signal.pthread_kill(threading.main_thread().ident or 0, _ALARM)
        return True

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """Around the rank's work: :meth:`stack` and :meth:`interrupt` apply to it (module docstring)."""
        previous = self._install()
        self._thread_id = threading.get_ident()
        try:
            yield
        finally:
            self._thread_id = None  # first: a SIGALRM still pending now raises nothing
            if self._handler_installed:
                self._handler_installed = False
                if _ALARM is not None and signal.getsignal(_ALARM) == self._on_alarm:
                    signal.signal(_ALARM, previous)

    def _install(self) -> Any:
        """Install the handler when the program does not use SIGALRM itself; the handler it replaced."""
        if not self._interruptible or _ALARM is None or not hasattr(signal, "pthread_kill"):
            return None
        if threading.current_thread() is not threading.main_thread():
            return None  # a handler can only be installed, and only runs, in the main thread
        previous = signal.getsignal(_ALARM)
        if previous != signal.SIG_DFL or signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
            return None  # the program's own handler or timer: leave SIGALRM to it
        signal.signal(_ALARM, self._on_alarm)
        self._handler_installed = True
        return previous

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if not self._interrupted.is_set():
            # Not ours: a timer the work started without a handler. Its default action, as without the launch.
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        if self._thread_id is None:
            return  # the work returned meanwhile: the launcher reports the timeout
        raise LaunchTimeoutError((self.rank,), self.timeout or 0.0)  # the launcher reports what it saw
