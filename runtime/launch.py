"""``runtime.launch``: resolve the flags, build the strategy and launch a function, in one call."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from resolver.config import ResolvedConfig
from runtime.build import build
from runtime.launchers.launched_rank import MARKS_JOINED_ITSELF, run_launched_rank
from runtime.rank_environment import LAUNCH_FLAGS_VARIABLE, environ_patch, launched_config
from runtime.worker import check_worker_entry, run_worker

if TYPE_CHECKING:
    from resolver.environment import Environment

__all__ = ["launch"]

R = TypeVar("R")
#: ``resolve()``'s flag defaults (as ``resolver.api.FLAG_DEFAULTS``; a test keeps them equal).
_FLAG_DEFAULTS: dict[str, Any] = {
    "accelerator": "auto",
    "devices": "auto",
    "strategy": "auto",
    "precision": None,
    "num_nodes": 1,
    "cluster_environment": "auto",
    "plugins": (),
}


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
    # Workers that reach this call with the same flags need not resolve them again (nor load the rules).
    with environ_patch({LAUNCH_FLAGS_VARIABLE: _flags_text(flags)}):
        return build(config, **options).launch(fn, *args, **kwargs)


def _flags_text(flags: Mapping[str, Any]) -> str:
    return json.dumps(flags, sort_keys=True, default=repr)


def _run_checked_worker(
    launched: ResolvedConfig, flags: Mapping[str, Any], fn: Callable[..., R], *args: Any, **kwargs: Any
) -> R:
    # No flags: the command that started this worker (e.g. `resolver run`) decided.
    accepts_any = all(flags[name] == default for name, default in _FLAG_DEFAULTS.items())
    requested: ResolvedConfig | None = None
    if not accepts_any and os.environ.get(LAUNCH_FLAGS_VARIABLE) == _flags_text(flags):
        requested = launched  # the flags the launching process resolved: no need to resolve them here
    elif not accepts_any:
        import resolver

        try:
            requested = resolver.resolve(**flags)
        except resolver.ResolutionError:
            requested = None
    wanted = ", ".join(f"{name}={value!r}" for name, value in flags.items() if value != _FLAG_DEFAULTS[name])
    check_worker_entry(requested, f"launch({wanted})", accepts_any=accepts_any)
    return run_worker(fn, *args, **kwargs)


setattr(_run_checked_worker, MARKS_JOINED_ITSELF, True)  # run_worker marks it, after building
