"""Rules-as-data resolution of distributed-training flags.

    >>> import resolver
    >>> cfg = resolver.resolve(devices=2, strategy="ddp", environment=resolver.Environment())
    >>> cfg.strategy, cfg.launcher, cfg.world_size
    ('ddp', 'subprocess', 2)

Importing this package never imports torch. The names below are imported on first use, so a
process that only reads a resolved config (a rank a launcher started, via ``resolver.ResolvedConfig``)
does not load the rule engine, the rule file reader or their dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # explicit re-exports (name as name), for type checkers
    from resolver._domain.config import FrozenMapping as FrozenMapping
    from resolver._domain.config import Provenance as Provenance
    from resolver._domain.config import ResolvedConfig as ResolvedConfig
    from resolver._domain.functions import register_function as register_function
    from resolver._engine.compiled import CompiledTable as CompiledTable
    from resolver._engine.errors import ConflictError as ConflictError
    from resolver._engine.errors import ResolutionError as ResolutionError
    from resolver._engine.errors import RuleTableError as RuleTableError
    from resolver._engine.errors import Side as Side
    from resolver._engine.reporter import RecordingReporter as RecordingReporter
    from resolver._engine.reporter import Reporter as Reporter
    from resolver._snapshot.environment import Environment as Environment
    from resolver._snapshot.probes import register_probe as register_probe
    from resolver.api import builtin_rules_dir as builtin_rules_dir
    from resolver.api import load_rules as load_rules
    from resolver.api import resolve as resolve

#: Where each public name lives.
_HOMES = {
    "builtin_rules_dir": "resolver.api",
    "load_rules": "resolver.api",
    "resolve": "resolver.api",
    "CompiledTable": "resolver._engine.compiled",
    "FrozenMapping": "resolver._domain.config",
    "Provenance": "resolver._domain.config",
    "ResolvedConfig": "resolver._domain.config",
    "Environment": "resolver._snapshot.environment",
    "ConflictError": "resolver._engine.errors",
    "ResolutionError": "resolver._engine.errors",
    "RuleTableError": "resolver._engine.errors",
    "Side": "resolver._engine.errors",
    "register_function": "resolver._domain.functions",
    "register_probe": "resolver._snapshot.probes",
    "RecordingReporter": "resolver._engine.reporter",
    "Reporter": "resolver._engine.reporter",
}

__all__ = sorted(_HOMES)

from resolver._version import __version__ as __version__  # noqa: E402


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value
    try:  # resolver.api, resolver.golden, ...: submodules, as after an eager import
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
