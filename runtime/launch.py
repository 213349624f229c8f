"""``runtime.launch``: resolve the flags, build the strategy and launch a function, in one call."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from resolver._runtime_interface import collect_flags
from runtime._protocol.exit_report import launch_failed
from runtime._protocol.gc_pause import collector_paused
from runtime._protocol.launched_rank import enter_rank
from runtime._protocol.rank_environment import launched_config
from runtime._protocol.spawned_rank import check_not_reimported
from runtime._protocol.timeouts import TIMEOUT_HINTS, check_timeout
from runtime._rank.worker import check_worker
from runtime.build import build
from runtime.errors import MissingDependencyError, RuntimeConfigError
from runtime.preemption import exit_if_preempted

if TYPE_CHECKING:
    from resolver import Environment, Reporter
    from resolver.api import RulesArg
    from resolver.flagsfile import FlagsFile

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
    plugins: Sequence[str] = (),
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    environment: Environment | None = None,
    rules: RulesArg = None,
    config_file: str | os.PathLike[str] | FlagsFile | None = None,
    reporter: Reporter | None = None,
    timeout: float | None = None,
    max_restarts: int = 0,
    strategy_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> R:
    """Run ``fn(strategy, *args, **kwargs)`` in every process of the run the flags describe.

    The flags (declared in ``resolver._domain.flags.FLAGS``), ``environment``, ``rules`` (your rule files),
    ``config_file`` (a flags file) and ``reporter`` go through ``resolver.resolve`` as they are;
    the strategy is built from the result and launches the processes. ``fn`` runs after this process's device
    is selected and the process group is joined, and ``launch`` returns rank 0's return value (on
    other nodes, the node's first rank's). ``timeout`` (seconds) bounds each attempt of the run and every
    collective. ``max_restarts``: after a rank fails, every local rank is started again, at most this many
    times (torchrun's ``--max-restarts``; ``strategy.restart_count`` tells ``fn`` which attempt it runs in);
    the last failure is raised. Under torchrun, SLURM or MPI restarts are that launcher's: there it is an error.
    With ``strategy_options={"preemption_signal": "SIGUSR1"}``, a run whose ranks stopped on that signal
    (``strategy.preempted()``) raises :class:`~runtime.errors.PreemptedError` (see :mod:`runtime.preemption`).

    In a process that a launcher or ``resolver run`` started (``RESOLVER_CONFIG`` is set), the
    flags are not resolved again: ``fn`` runs as the rank that config names. This is what
    happens when the subprocess launcher re-runs a script and it reaches this call again.
    """
    check_not_reimported()  # a spawned rank re-importing a script whose launch() is not under `if __name__ ...`
    flags = collect_flags(locals())
    launched = launched_config()
    if launched is not None:
        if config_file is not None:  # the flags the run was started with include the file's
            from resolver._runtime_interface import FLAG_DEFAULTS
            from resolver.flagsfile import flags_with_file

            flags = flags_with_file(flags, FLAG_DEFAULTS, config_file)[0]
        options = dict(strategy_options or {})
        if timeout is not None:
            options["timeout"] = check_timeout(timeout, f"timeout={timeout!r}", TIMEOUT_HINTS["timeout"])
        check = functools.partial(check_worker, launched, flags, max_restarts, options)
        result = enter_rank(fn, args, kwargs, build=build, check=check)
        return exit_if_preempted(result, launched.global_rank)  # type: ignore[no-any-return]
    import resolver

    config = None
    try:  # bad input ends an uncaught launch with its message, not a traceback (exit_report)
        options = dict(strategy_options or {})
        if timeout is not None:
            options["timeout"] = check_timeout(timeout, f"timeout={timeout!r}", TIMEOUT_HINTS["timeout"])
        if max_restarts:
            options["max_restarts"] = max_restarts
        with collector_paused():
            config = resolver.resolve(
                **flags, environment=environment, rules=rules, config_file=config_file, reporter=reporter
            )
            built = build(config, **options)  # `strategy` is the flag's name
    except (resolver.ResolutionError, RuntimeConfigError, MissingDependencyError) as exc:
        rank = None if config is None else config.global_rank
        raise launch_failed(exc, rank=rank, environment=environment, rules=rules) from exc.__cause__  # as it was
    return built.launch(fn, *args, **kwargs)
