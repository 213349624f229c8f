"""``runtime.launch``: resolve the flags, build the strategy and launch a function, in one call."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from resolver._domain.config import ResolvedConfig
from resolver._domain.flag_values import given_flags
from resolver._domain.flags import collect_flags
from resolver._engine.errors import ResolutionError
from runtime.build import build
from runtime.collector import collector_paused
from runtime.launchers.launched_rank import MARKS_JOINED_ITSELF, run_launched_rank
from runtime.preemption import exit_if_preempted
from runtime.rank_environment import launched_config
from runtime.worker import check_worker_entry, run_worker

if TYPE_CHECKING:
    from resolver._engine.reporter import Reporter
    from resolver._snapshot.environment import Environment
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
    flags = collect_flags(locals())
    launched = launched_config()
    if launched is not None:
        if config_file is not None:  # the flags the run was started with include the file's
            from resolver._domain.flags import FLAG_DEFAULTS
            from resolver.flagsfile import flags_with_file

            flags = flags_with_file(flags, FLAG_DEFAULTS, config_file)[0]
        result = run_launched_rank(_run_checked_worker, launched, flags, fn, *args, **kwargs)
        return exit_if_preempted(result, launched.global_rank)  # type: ignore[no-any-return]
    import resolver

    options = dict(strategy_options or {})
    if timeout is not None:
        options["timeout"] = timeout
    if max_restarts:
        options["max_restarts"] = max_restarts
    with collector_paused():
        config = resolver.resolve(
            **flags, environment=environment, rules=rules, config_file=config_file, reporter=reporter
        )
        built = build(config, **options)  # `strategy` is the flag's name
    return built.launch(fn, *args, **kwargs)


def _run_checked_worker(
    launched: ResolvedConfig, flags: Mapping[str, Any], fn: Callable[..., R], *args: Any, **kwargs: Any
) -> R:
    """Run ``fn`` as the rank ``launched`` names, if this launch() is the one the rank was started for.

    The worker does not resolve: it compares the flags of the launch() it reached with the flags
    recorded in the config it was given (``ResolvedConfig.flags``). A launch() without flags takes
    whatever started the worker (``resolver run --devices 2 script.py``).
    """
    try:
        given = given_flags(flags)
    except ResolutionError:
        given = None  # flags that do not even read as flags: not the launch() that started this worker
    recorded = dict(launched.flags)
    if given is not None:
        # Where this node sits in the rendezvous (resolver run --node-rank/--master-addr/--master-port)
        # is the command line's to say: a script's launch() that leaves it out is still this run's.
        for name in _PLACEMENT_FLAGS:
            if name not in given:
                recorded.pop(name, None)
    same = given is not None and _plain(given) == _plain(recorded)
    wanted = f"launch({_shown(given if given is not None else flags)})"
    check_worker_entry(launched if same else None, wanted, accepts_any=given == {})
    return run_worker(fn, *args, **kwargs)


#: Flags that place this node in a multi-node rendezvous rather than describe the run.
_PLACEMENT_FLAGS = ("node_rank", "master_addr", "master_port")


def _plain(flags: Mapping[str, Any]) -> str:
    """Flags as canonical JSON: a config that came through JSON holds lists where tuples were."""
    return json.dumps(dict(flags), sort_keys=True, default=list)


def _shown(flags: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in flags.items())


setattr(_run_checked_worker, MARKS_JOINED_ITSELF, True)  # run_worker marks it, after building
