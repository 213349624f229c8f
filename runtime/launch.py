"""``runtime.launch``: resolve the flags, build the strategy and launch a function, in one call."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from resolver._runtime_interface import collect_flags
from runtime._protocol.exit_report import launch_failed
from runtime._protocol.gc_pause import collector_paused
from runtime._protocol.launched_rank import enter_rank
from runtime._protocol.node_result import keep_node_result
from runtime._protocol.rank_environment import launched_config
from runtime._protocol.spawned_rank import check_not_reimported
from runtime._protocol.timeouts import TIMEOUT_HINTS, check_timeout
from runtime._rank.worker import check_worker
from runtime.build import build
from runtime.errors import MissingDependencyError, RuntimeConfigError
from runtime.preemption import Preempted, exit_if_preempted

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
    num_nodes: int | tuple[int, int] = 1,
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

    Several nodes that restart together: the same script started with ``python`` on every node, calling
    ``launch(fn, num_nodes=N, max_restarts=K, master_addr=HOST, master_port=PORT)``, does what ``resolver run
    --nnodes N --rdzv-endpoint HOST:PORT --max-restarts K`` does (``HOST:PORT`` is the endpoint of torch's
    c10d rendezvous, hosted by the node whose address HOST is; ``MASTER_ADDR``/``MASTER_PORT`` give it
    too): a rank's failure on any node restarts every node's ranks, with one ``TORCHELASTIC_RESTART_COUNT``,
    and a failure that must not restart ends every node with one reason (raised on the others as a
    :class:`~runtime.errors.LaunchError`). ``num_nodes=(MIN, MAX)``: each round runs on the nodes the
    rendezvous gathers, at least ``MIN`` (``--nnodes MIN:MAX``). Each rank runs the script again, as the
    subprocess launcher's do; this process returns the node's first rank's result (see
    :mod:`runtime._launch_on_nodes`).
    With ``strategy_options={"preemption_signal": "SIGUSR1"}``, a run whose ranks stopped on that signal
    (``strategy.preempted()``) raises :class:`~runtime.errors.PreemptedError` (see :mod:`runtime.preemption`).

    In a process that a launcher or ``resolver run`` started (``RESOLVER_CONFIG`` is set), the
    flags are not resolved again: ``fn`` runs as the rank that config names. This is what
    happens when the subprocess launcher re-runs a script and it reaches this call again.
    """
    check_not_reimported()  # a spawned rank re-importing a script whose launch() is not under `if __name__ ...`
    from runtime._launch_on_nodes import node_range

    try:
        least, num_nodes = node_range(num_nodes)  # the flag is the most nodes, as resolver run's --nnodes MIN:MAX
    except RuntimeConfigError as exc:
        raise launch_failed(exc, rank=None, environment=environment, rules=rules) from None
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
        if isinstance(result, Preempted):  # nodes that restart together: their launch() raises PreemptedError
            keep_node_result(result, launched.local_rank)
        result = exit_if_preempted(result, launched.global_rank)
        if keep_node_result(result, launched.local_rank):
            # Nodes that restart together: the launching process goes on past launch() as this node's first
            # rank, with this result (the other ranks go on here, as the subprocess launcher's re-run scripts).
            raise SystemExit(0)
        return result  # type: ignore[no-any-return]
    import resolver
    from runtime._launch_on_nodes import launch_on_nodes, restarts_across_nodes

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
        across_nodes = restarts_across_nodes(config, least, max_restarts)
    except (resolver.ResolutionError, RuntimeConfigError, MissingDependencyError) as exc:
        rank = None if config is None else config.global_rank
        raise launch_failed(exc, rank=rank, environment=environment, rules=rules) from exc.__cause__  # as it was
    if across_nodes:  # this process is the node's member of torch's c10d rendezvous, as resolver run is
        kept = {name: value for name, value in options.items() if name != "max_restarts"}
        config = attrs.evolve(config, strategy_options={**config.strategy_options, **kept})
        return launch_on_nodes(config, least, max_restarts, environment=environment, rules=_rule_files(rules))
    return built.launch(fn, *args, **kwargs)


def _rule_files(rules: RulesArg) -> list[str]:
    """The rule files ``rules`` names (a compiled table names none: the ranks do not resolve again)."""
    if isinstance(rules, (str, os.PathLike)):
        return [os.fspath(rules)]
    if rules is None or not isinstance(rules, Iterable):
        return []
    return [os.fspath(rule) for rule in rules]
