"""The rank side of a launch: run the work, report failures, do not outlive the launcher."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from runtime.launchers.rank_files import RankFiles
from runtime.rank_environment import PARENT_PID_VARIABLE

__all__ = ["MARKS_JOINED_ITSELF", "die_with_launcher", "run_launched_rank"]

R = TypeVar("R")

_PR_SET_PDEATHSIG = 1
_INTERRUPTED_EXIT_CODE = 130
#: Set on a function that marks the rank as joined itself (after building its strategy), so that
#: :func:`run_launched_rank` does not mark it on entry.
MARKS_JOINED_ITSELF = "_runtime_marks_joined_itself"


def die_with_launcher() -> None:
    """Have the kernel kill this process if its launcher dies (Linux), so no rank is orphaned."""
    expected = os.environ.get(PARENT_PID_VARIABLE)
    if not sys.platform.startswith("linux") or not expected:
        return
    try:
        # The symbols already loaded into this process (libc among them): no library search,
        # which costs milliseconds (ctypes.util.find_library runs ldconfig) in every rank.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != expected:  # the launcher died before we asked
        os._exit(1)


def run_launched_rank(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """Call ``fn(*args, **kwargs)`` in a process a launcher started for one rank.

    Failures are reported to the launcher (which re-raises them in the caller with this rank's
    traceback) and end this process's work with ``SystemExit(1)`` (130 for Ctrl-C), so the
    traceback is shown once, by the launcher. The rank answers the launcher's stack requests.
    """
    reports = RankFiles.from_environment()
    if reports is None:
        return fn(*args, **kwargs)
    die_with_launcher()
    rank = int(os.environ.get("RANK", "0"))
    if not getattr(fn, MARKS_JOINED_ITSELF, False):
        reports.mark_joined(rank)
    try:
        with reports.reporting(rank):
            result = fn(*args, **kwargs)
        reports.mark_finished(rank)
        return result
    except SystemExit:
        raise
    except BaseException as exc:
        # Reported: the launcher shows this traceback once, so this process does not print it too.
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(_INTERRUPTED_EXIT_CODE if isinstance(exc, KeyboardInterrupt) else 1) from None
