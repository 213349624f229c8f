"""``runtime.launch``: resolve the flags, build the strategy and launch a function, in one call."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from resolver.config import ResolvedConfig
from runtime.build import build
from runtime.errors import RuntimeConfigError
from runtime.launchers.launched_rank import run_launched_rank
from runtime.launchers.reports import RankReports
from runtime.rank_environment import launched_config
from runtime.worker import run_worker

if TYPE_CHECKING:
    from resolver.environment import Environment

__all__ = ["launch"]

R = TypeVar("R")


def launch(
    fn: Callable[..., R],
    *args: Any,
    accelerator: str = "auto",
    devices: int | str | Sequence[int] = "auto",
    strategy: str = "auto",
    precision: str | int | None = None,
    num_nodes: int = 1,
    cluster_environment: str = "auto",
    plugins: Sequence[Any] = (),
    environment: Environment | None = None,
    timeout: float | None = None,
    strategy_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> R:
    """Run ``fn(strategy, *args, **kwargs)`` in every process of the run the flags describe.

    The flags go through ``resolver.resolve``; the strategy is built from the result and
    launches the processes. ``fn`` runs after this process's device is selected and the process
    group is joined, and ``launch`` returns rank 0's return value (on other nodes, the node's
    first rank's). ``timeout`` (seconds) bounds the whole run and every collective.

    In a process that a launcher or ``resolver run`` started (``RESOLVER_CONFIG`` is set), the
    flags are not resolved again: ``fn`` runs as the rank that config names. This is what
    happens when the subprocess launcher re-runs a script and it reaches this call again.
    """
    flags: dict[str, Any] = {
        "accelerator": accelerator,
        "devices": devices,
        "strategy": strategy,
        "precision": precision,
        "num_nodes": num_nodes,
        "cluster_environment": cluster_environment,
        "plugins": plugins,
    }
    launched = launched_config()
    if launched is not None:
        return run_launched_rank(_run_checked_worker, launched, flags, fn, *args, **kwargs)
    import resolver

    config = resolver.resolve(**flags, environment=environment)
    options = dict(strategy_options or {})
    if timeout is not None:
        options["timeout"] = timeout
    return build(config, **options).launch(fn, *args, **kwargs)


def _run_checked_worker(
    launched: ResolvedConfig, flags: Mapping[str, Any], fn: Callable[..., R], *args: Any, **kwargs: Any
) -> R:
    _check_worker_call(launched, flags)
    reports = RankReports.from_environment()
    if reports is not None:
        reports.mark_joined(launched.global_rank)  # the launching rank waits for this before its rendezvous
    return run_worker(fn, *args, **kwargs)


_WORKER_RAN = False
# What must agree between the run that started a worker and the launch() call it reaches.
_RUN_FIELDS = ("accelerator", "device_ids", "num_nodes", "strategy", "precision")


def _check_worker_call(launched: ResolvedConfig, flags: Mapping[str, Any]) -> None:
    """A re-run worker may enter only the launch() call that started it, and only once.

    The subprocess launcher re-runs the whole script in each worker. A script that calls
    launch() twice, or calls another launch() before the one that started the worker, would
    make the worker join the wrong run and wait forever; this turns that into an error, which
    the launcher reports in the caller with this rank's traceback.
    """
    global _WORKER_RAN
    import resolver

    if _WORKER_RAN:
        raise RuntimeConfigError(
            "launch() was reached a second time in a worker that the subprocess launcher started: the "
            "worker re-runs the whole script, so it would join a run it does not belong to\n"
            "  hint: call launch() once per script, or use strategy='ddp_spawn' (which does not re-run the "
            "script) for scripts with several launches"
        )
    _WORKER_RAN = True
    if all(flags[name] == default for name, default in resolver.api.FLAG_DEFAULTS.items()):
        return  # no flags: the command that started this worker (e.g. `resolver run`) decided
    try:
        requested = resolver.resolve(**flags)
    except resolver.ResolutionError:
        requested = None
    if requested is None or any(getattr(requested, f) != getattr(launched, f) for f in _RUN_FIELDS):
        defaults = resolver.api.FLAG_DEFAULTS
        wanted = ", ".join(f"{name}={value!r}" for name, value in flags.items() if value != defaults[name])
        started = ", ".join(f"{f}={getattr(launched, f)!r}" for f in _RUN_FIELDS)
        raise RuntimeConfigError(
            f"this worker was started for a run with {started}, but the script reached launch({wanted}) "
            "first: the subprocess launcher re-runs the whole script in every worker\n"
            "  hint: make the ddp launch() the script's first and only launch, or use strategy='ddp_spawn' "
            "for the other launches"
        )
