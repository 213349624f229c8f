"""The rank side of a launch: run the work, report failures, do not outlive the launcher."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from runtime._protocol.gc_pause import collector_paused
from runtime._protocol.rank_environment import CONFIG_VARIABLE, PARENT_PID_VARIABLE, launched_config, threads_applied
from runtime._protocol.rank_files import RankFiles
from runtime.errors import RuntimeConfigError

if TYPE_CHECKING:
    from resolver import ResolvedConfig
    from runtime.strategies.base import Strategy

__all__ = [
    "MARKS_JOINED_ITSELF",
    "check_worker_entry",
    "die_with_launcher",
    "is_stop_request",
    "run_launched_rank",
    "run_worker",
]

R = TypeVar("R")

_PR_SET_PDEATHSIG = 1
_INTERRUPTED_EXIT_CODE = 130
#: Set on a function that marks the rank as joined itself (after building its strategy), so that
#: :func:`run_launched_rank` does not mark it on entry.
MARKS_JOINED_ITSELF = "_runtime_marks_joined_itself"


def is_stop_request(exc: BaseException) -> bool:
    """Whether ``exc`` asks the process to stop rather than reports a failure of the rank's work.

    Ctrl-C (``KeyboardInterrupt``), ``SystemExit`` and ``GeneratorExit`` (control flow) are; every
    other exception is the rank's failure, also one that derives from ``BaseException`` alone (torch's
    ``CheckpointException``, a user's own class): a rank process reports it and exits with 1, and the
    subprocess launcher's rank 0, which runs in the launching process, is blamed for it the same way.
    """
    return isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit))


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


#: What must agree between the run that started a worker and the launch() call it reaches.
RUN_FIELDS = ("accelerator", "device_ids", "num_nodes", "strategy", "precision")
_entered = False


def check_worker_entry(requested: ResolvedConfig | None, wanted: str, *, accepts_any: bool = False) -> None:
    """A re-run worker may enter only the launch() call that started it, and only once.

    The subprocess launcher re-runs the whole script in each worker. A script that calls
    launch() twice, or another launch() before the one that started the worker, would make the
    worker join the wrong run and wait forever; this makes it an error instead, which the
    launcher reports in the caller with this rank's traceback. ``requested`` is the config of
    the call reached (``None``: its flags do not resolve), ``wanted`` describes that call for the
    message; ``accepts_any`` (a launch() without flags) takes whatever started the worker.
    """
    global _entered
    launched = launched_config()
    if launched is None:
        return
    if _entered:
        raise RuntimeConfigError(
            "launch() was reached a second time in a worker that the subprocess launcher started: the "
            "worker re-runs the whole script, so it would join a run it does not belong to",
            hint="call launch() once per script, or use strategy='ddp_spawn' (which does not re-run the script) "
            "for scripts with several launches",
        )
    _entered = True
    if accepts_any:
        return
    if requested is None or any(getattr(requested, f) != getattr(launched, f) for f in RUN_FIELDS):
        started = ", ".join(f"{f}={getattr(launched, f)!r}" for f in RUN_FIELDS)
        raise RuntimeConfigError(
            f"this worker was started for a run with {started}, but the script reached {wanted} "
            "first: the subprocess launcher re-runs the whole script in every worker",
            hint="make the ddp launch() the script's first and only launch, or use strategy='ddp_spawn' for the "
            "other launches",
        )


def run_worker(build: Callable[[ResolvedConfig], Strategy], fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """Build this rank's strategy from ``RESOLVER_CONFIG`` with ``build`` and run ``fn(strategy, *args, **kwargs)``.

    ``build`` is :func:`runtime.build`, handed down by the strategy that launched the ranks (which
    :func:`runtime.build` gave it): the rank side of the launch is below the strategies and the
    build, so it cannot import them.

    Once the strategy is built and its device selected, the rank tells its launcher it reached
    the rendezvous (the launching rank of the subprocess launcher waits for that before it joins
    the process group, and every launcher bounds the wait with the rendezvous timeout).
    """
    config = launched_config()
    if config is None:
        raise RuntimeError(f"run_worker runs inside a launched rank, but {CONFIG_VARIABLE} is not set")
    with collector_paused():
        strategy = build(config)
        reports = RankFiles.from_environment()
        if reports is not None:
            # Selecting the device can fail (or hang) too: do it before telling the launcher this
            # rank is about to join (strategy.run selects it again, which is harmless).
            strategy.accelerator.set_device(strategy.root_device)
            reports.mark_joined(config.global_rank)
    with threads_applied(strategy.config):
        return strategy.run(fn, *args, **kwargs)


setattr(run_worker, MARKS_JOINED_ITSELF, True)
