"""A ``resolver run`` rank whose script's ``launch()`` names flags: the command line's and the script's
together decide the rank's config.

The command line wins nothing and loses nothing: a flag it left at its default takes the script's
value, as a flags file's would (the rank resolves both sets together against the machine snapshot and
rule files ``resolver run`` used, :mod:`runtime._protocol.run_context`, so every rank agrees), and a flag
both name with different values is an error naming the flag and both values. What ``resolver run``
already did cannot change: the processes it started (how many, on how many nodes, by which launcher)
and the restarts it was given. The script's strategy options (``launch(timeout=60)``,
``strategy_options={...}``) join those of the command line (``--preemption-signal``) the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from resolver import ResolutionError, ResolvedConfig
from resolver._runtime_interface import FLAGS
from runtime._protocol.rank_files import mark_as_plain
from runtime._protocol.run_context import RunContext
from runtime.errors import RuntimeConfigError

__all__ = ["check_script_restarts", "config_with_script_flags", "config_with_script_options"]

#: What ``resolver run`` fixed by starting the processes: the script's flags may not change it.
_STARTED = ("num_devices", "num_nodes", "world_size", "node_rank", "launcher", "cluster_environment")
_SPELLING = {flag.name: flag.cli_spellings()[0] for flag in FLAGS}


def _plain_error(message: str, hint: str | None = None) -> RuntimeConfigError:
    error = RuntimeConfigError(message, hint=hint)
    mark_as_plain(error)  # the message says it all; the frames would be the runtime's own
    return error


def _json(value: Any) -> str:
    """A flag's value as canonical JSON: a config that came through JSON holds lists where tuples were."""
    return json.dumps(value, sort_keys=True, default=list)


def _option(name: str, value: Any) -> str:
    """``--devices 3``: the flag as ``resolver run`` takes it."""
    shown = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
    return f"{_SPELLING.get(name, '--' + name)} {shown}"


def _call(given: Mapping[str, Any]) -> str:
    return "launch(" + ", ".join(f"{name}={value!r}" for name, value in given.items()) + ")"


def config_with_script_flags(launched: ResolvedConfig, given: Mapping[str, Any], context: RunContext) -> ResolvedConfig:
    """This rank's config once the script's ``launch()`` flags ``given`` (normalized, those it named) join
    the command line's (``launched.flags``); ``launched`` itself when they add nothing.

    Raises a :class:`~runtime.errors.RuntimeConfigError`, reported without a traceback, when a flag both
    name disagrees, when the flags together do not resolve, or when they would change the processes
    ``resolver run`` started.
    """
    recorded = dict(launched.flags)
    disagree = [name for name in given if name in recorded and _json(given[name]) != _json(recorded[name])]
    if disagree:
        lines = [
            f"  - {name}: resolver run was given {_option(name, recorded[name])}, the script's launch() "
            f"asks {name}={given[name]!r}"
            for name in disagree
        ]
        fix = " ".join(_option(name, given[name]) for name in disagree)
        raise _plain_error(
            f"the script's {_call(given)} and resolver run's command line disagree on "
            f"{', '.join(disagree)}:\n" + "\n".join(lines),
            hint="name each flag in one place: drop it from launch() (the command line's value is used) or pass "
            f"the script's to resolver run ({fix})",
        )
    added = {name: value for name, value in given.items() if name not in recorded}
    if not added:
        return launched
    config = _resolved({**recorded, **added}, context, given)
    # two resolved values compared, no component named: the launcher the script asks for is not the one that ran
    if launched.launcher != config.launcher and launched.num_devices == config.num_devices:
        raise _plain_error(
            f"the script's {_call(given)} has the {config.launcher!r} launcher start the processes, but resolver run "
            f"already started them (launcher {launched.launcher!r})",
            hint=f"under resolver run, use strategy={config.strategy!r} in launch(), or start the script with python "
            "instead",
        )
    changed = [field for field in _STARTED if getattr(config, field) != getattr(launched, field)]
    if changed:
        shown = ", ".join(f"{f}={getattr(launched, f)!r}" for f in changed)
        theirs = ", ".join(f"{f}={getattr(config, f)!r}" for f in changed)
        raise _plain_error(
            f"the script's {_call(given)} makes {theirs}, but resolver run already started this run's processes "
            f"with {shown} (its command line left {', '.join(added)} at the default)",
            hint=f"pass the script's flags to resolver run ({' '.join(_option(n, v) for n, v in added.items())}), "
            "or start the script with python instead",
        )
    # This rank's place and the rendezvous stay resolver run's; so do the options it set (pre-emption, timeouts).
    return attrs.evolve(
        config,
        global_rank=launched.global_rank,
        local_rank=launched.local_rank,
        main_address=launched.main_address,
        main_port=launched.main_port,
        strategy_options={**config.strategy_options, **launched.strategy_options},
    )


def _resolved(flags: Mapping[str, Any], context: RunContext, given: Mapping[str, Any]) -> ResolvedConfig:
    import resolver
    from resolver import Environment

    try:
        environment = Environment.from_dict(context.environment)
        return resolver.resolve(**flags, environment=environment, rules=list(context.rules) or None)
    except ResolutionError as error:
        raise _plain_error(
            f"the script's {_call(given)} together with resolver run's flags does not resolve:\n{error.diagnostic()}"
        ) from None


def check_script_restarts(max_restarts: int, launched: ResolvedConfig, context: RunContext) -> None:
    """``launch(max_restarts=N)`` in a ``resolver run`` rank: resolver run restarts the ranks (or the cluster
    that started them does), so a value other than its own ``--max-restarts`` would be silently ignored."""
    if max_restarts == 0 or max_restarts == context.max_restarts:
        return
    from runtime.registry import CLUSTER_ENVIRONMENTS

    if launched.launcher is None and CLUSTER_ENVIRONMENTS.get(launched.cluster_environment).starts_processes:
        cause = f"the processes were started by {launched.cluster_environment!r}, so restarts are its to do"
        fix = f"drop max_restarts and let {launched.cluster_environment!r} restart the job"
    else:
        given = f"--max-restarts {context.max_restarts}" if context.max_restarts else "no --max-restarts"
        cause = f"resolver run started the ranks and restarts them (it was given {given})"
        fix = f"pass --max-restarts {max_restarts} to resolver run, and drop max_restarts from launch()"
    raise _plain_error(f"launch(max_restarts={max_restarts}) in a rank that resolver run started: {cause}", fix)


def config_with_script_options(config: ResolvedConfig, options: Mapping[str, Any]) -> ResolvedConfig:
    """``config`` with the script's strategy ``options`` (``launch(timeout=...)``, ``strategy_options``)
    added to those ``resolver run`` gave (``--preemption-signal``, ``--requeue``); ``config`` itself when
    there are none. An option both give with different values is an error naming it and both values."""
    if not options:
        return config
    current = dict(config.strategy_options)
    for name, value in options.items():
        if name in current and _json(current[name]) != _json(value):
            raise _plain_error(
                f"the script's launch() sets the strategy option {name}={value!r}, but resolver run's command "
                f"line gave {name}={current[name]!r}",
                hint=f"set {name} in one place: drop it from launch(), or from resolver run's command line",
            )
    return attrs.evolve(config, strategy_options={**current, **options})
