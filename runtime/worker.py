"""What a launched rank runs: its strategy, built from the config its launcher handed down."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from runtime.build import build
from runtime.collector import collector_paused
from runtime.errors import RuntimeConfigError
from runtime.launchers.launched_rank import MARKS_JOINED_ITSELF
from runtime.launchers.rank_files import RankFiles
from runtime.rank_environment import CONFIG_VARIABLE, launched_config, threads_applied

if TYPE_CHECKING:
    from resolver._domain.config import ResolvedConfig

__all__ = ["check_worker_entry", "run_worker"]

R = TypeVar("R")

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
            "worker re-runs the whole script, so it would join a run it does not belong to\n"
            "  hint: call launch() once per script, or use strategy='ddp_spawn' (which does not re-run the "
            "script) for scripts with several launches"
        )
    _entered = True
    if accepts_any:
        return
    if requested is None or any(getattr(requested, f) != getattr(launched, f) for f in RUN_FIELDS):
        started = ", ".join(f"{f}={getattr(launched, f)!r}" for f in RUN_FIELDS)
        raise RuntimeConfigError(
            f"this worker was started for a run with {started}, but the script reached {wanted} "
            "first: the subprocess launcher re-runs the whole script in every worker\n"
            "  hint: make the ddp launch() the script's first and only launch, or use strategy='ddp_spawn' "
            "for the other launches"
        )


def run_worker(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """Build this rank's strategy from ``RESOLVER_CONFIG`` and run ``fn(strategy, *args, **kwargs)``.

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
