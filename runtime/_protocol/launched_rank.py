"""The rank side of a launch: the one entry into a rank (:func:`enter_rank`), which runs the work,
reports failures and does not outlive the launcher."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from runtime._protocol.gc_pause import collector_paused
from runtime._protocol.progress import recording_progress
from runtime._protocol.rank_environment import CONFIG_VARIABLE, PARENT_PID_VARIABLE, launched_config, threads_applied
from runtime._protocol.rank_files import RankFiles
from runtime.errors import RuntimeConfigError

if TYPE_CHECKING:
    import torch

    from resolver import ResolvedConfig
    from runtime.accelerators.base import Accelerator

__all__ = [
    "RankStrategy",
    "check_worker_entry",
    "die_with_launcher",
    "enter_rank",
    "is_stop_request",
]

R = TypeVar("R")

_PR_SET_PDEATHSIG = 1
_INTERRUPTED_EXIT_CODE = 130


class RankStrategy(Protocol):
    """What a rank's entry asks of its strategy (``runtime.strategies.base.Strategy``, above this module:
    a protocol here rather than an import of it)."""

    @property
    def config(self) -> ResolvedConfig: ...

    @property
    def accelerator(self) -> Accelerator: ...

    @property
    def root_device(self) -> torch.device: ...

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R: ...


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


def enter_rank(
    fn: Callable[..., R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    strategy: RankStrategy | None = None,
    build: Callable[[ResolvedConfig], RankStrategy] | None = None,
    check: Callable[[], object] | None = None,
) -> R:
    """The one way into a rank: run ``fn(strategy, *args, **kwargs)`` as this process's rank.

    (``args`` and ``kwargs`` are the work's own, kept apart from the entry's parameters.)

    Every rank goes through it: a rank process a launcher started, a script a launcher re-ran
    (or ``resolver run`` started) reaching its launch, the launching process acting as rank 0, a
    process torchrun, SLURM or MPI started, an XLA replica. ``strategy`` is this rank's own (the one
    the caller was given); without it, ``build`` builds it from this rank's ``RESOLVER_CONFIG``, and
    the device is selected before the rank tells its launcher it joined (the launching rank of the
    subprocess launcher waits for that before it joins the process group; every launcher bounds the
    wait with the rendezvous timeout). ``check`` (a re-run worker's entry check,
    :func:`check_worker_entry`) runs first, so that a wrong launch is reported like any failure.

    Where a launcher of this library started the process, a failure is reported to it (which
    re-raises it in the caller with this rank's traceback) and ends the process's work with
    ``SystemExit(1)`` (130 for Ctrl-C), so the traceback is shown once, by the launcher; the rank
    answers the launcher's stack requests and dies with it.
    """
    if strategy is None and build is None:
        raise TypeError("enter_rank needs this rank's strategy, or build to make it from RESOLVER_CONFIG")
    reports = RankFiles.from_environment()
    if reports is None:
        return _run_rank(fn, args, kwargs, strategy, build, check, None)
    die_with_launcher()
    rank = int(os.environ.get("RANK", "0"))
    try:
        with reports.reporting(rank), recording_progress(reports.directory, rank):
            result = _run_rank(fn, args, kwargs, strategy, build, check, (reports, rank))
        reports.mark_finished(rank)
        return result
    except SystemExit:
        raise
    except BaseException as exc:
        # Reported: the launcher shows this traceback once, so this process does not print it too.
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(_INTERRUPTED_EXIT_CODE if isinstance(exc, KeyboardInterrupt) else 1) from None


def _run_rank(
    fn: Callable[..., R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    strategy: RankStrategy | None,
    build: Callable[[ResolvedConfig], RankStrategy] | None,
    check: Callable[[], object] | None,
    joining: tuple[RankFiles, int] | None,
) -> R:
    """The rank's work; ``joining``: the launcher's rank files and this rank, told when it is about to join."""
    if check is not None:
        check()
    if strategy is None:
        assert build is not None
        config = launched_config()
        if config is None:
            raise RuntimeError(f"a rank without its strategy builds it from {CONFIG_VARIABLE}, which is not set")
        with collector_paused():
            strategy = build(config)
            if joining is not None:
                # Selecting the device can fail (or hang) too: do it before telling the launcher this
                # rank is about to join (strategy.run selects it again, which is harmless).
                strategy.accelerator.set_device(strategy.root_device)
    if joining is not None:
        reports, rank = joining
        reports.mark_joined(rank)
    with threads_applied(strategy.config):
        return strategy.run(fn, *args, **kwargs)


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
