"""What a launched rank does when the script it runs reaches ``runtime.launch``: it does not
resolve again, it checks the call is the one it was started for and runs as the rank its config names."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from resolver import ResolutionError
from resolver._runtime_interface import given_flags
from runtime._protocol.launched_rank import check_worker_entry
from runtime._protocol.rank_environment import CONFIG_VARIABLE
from runtime._protocol.run_context import RunContext
from runtime._rank.script_flags import check_script_restarts, config_with_script_flags, config_with_script_options

if TYPE_CHECKING:
    from resolver import ResolvedConfig

__all__ = ["check_worker"]


def check_worker(
    launched: ResolvedConfig, flags: Mapping[str, Any], max_restarts: int, options: Mapping[str, Any]
) -> None:
    """Raise unless this launch() is the one the rank ``launched`` names was started for (the ``check`` a
    worker enters its rank with, :func:`~runtime._protocol.launched_rank.enter_rank`).

    A worker a launcher of the runtime started does not resolve: it compares the flags of the launch()
    it reached with the flags recorded in the config it was given (``ResolvedConfig.flags``). A launch()
    without flags takes whatever started the worker (``resolver run --devices 2 script.py``). In a rank
    of ``resolver run``, the launch()'s flags join the command line's
    (:func:`~runtime._rank.script_flags.config_with_script_flags`), its strategy ``options`` (``timeout``,
    ``strategy_options``) join the command line's, and its ``max_restarts`` must be the command line's.
    Elsewhere ``options`` are the launching process's own, which its launcher already handed the rank.
    """
    context = RunContext.from_environment()
    if context is not None:
        check_script_restarts(max_restarts, launched, context)
    try:
        given = given_flags(flags)
    except ResolutionError:
        given = None  # flags that do not even read as flags: not the launch() that started this worker
    if context is not None and given is not None:
        config = config_with_script_options(config_with_script_flags(launched, given, context), options)
        if config is not launched:
            # What the rank runs with, and what runtime.launched_config() answers from now on.
            os.environ[CONFIG_VARIABLE] = config.to_json()
        check_worker_entry(config, f"launch({_shown(given)})", accepts_any=True)
        return
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


#: Flags that place this node in a multi-node rendezvous rather than describe the run.
_PLACEMENT_FLAGS = ("node_rank", "master_addr", "master_port")


def _plain(flags: Mapping[str, Any]) -> str:
    """Flags as canonical JSON: a config that came through JSON holds lists where tuples were."""
    return json.dumps(dict(flags), sort_keys=True, default=list)


def _shown(flags: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in flags.items())
