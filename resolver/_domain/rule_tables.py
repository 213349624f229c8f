"""Where the rule tables come from: the built-in folder, :func:`load_rules` (through the disk
cache), the evaluators kept per process, and the error for a removed flag.

Below :mod:`resolver.api`, :mod:`resolver._snapshot.environment` and :mod:`resolver.flagsfile`, which all
need the built-in table; none of them is imported here.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import resolver._domain.functions  # noqa: F401 - importing it registers the built-in functions the rules call
from resolver._domain.flags import flag_rules_source, flags_fingerprint
from resolver._engine.compiled import CompiledTable
from resolver._engine.errors import ResolutionError
from resolver._engine.evaluator import Evaluator
from resolver._engine.table import RuleSource, read_folder, read_sources
from resolver._store.cache import cached_table, compile_code
from resolver.plugins import checked_plugins, naming_plugin_files

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "NO_VALUE",
    "RulesArg",
    "builtin_rules_dir",
    "builtin_table",
    "compile_sources",
    "load_rules",
    "removed_flag_error",
]

RulesArg = CompiledTable | str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None


def builtin_rules_dir() -> Path:
    """The shipped rule table: inside the wheel (``resolver/_rules``) or the source tree's ``rules/``."""
    from pathlib import Path

    return Path(_builtin_folder())


@functools.cache
def _builtin_folder() -> str:
    """:func:`builtin_rules_dir` as text (``os.path``: pathlib costs every process a few milliseconds)."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # resolver/, above _domain/
    candidates = (os.path.join(package, "_rules"), os.path.join(os.path.dirname(package), "rules"))
    for candidate in candidates:
        if os.path.isdir(candidate):
            return candidate
    raise ResolutionError(f"the built-in rule table is missing (looked in {candidates[0]} and {candidates[1]})")


def load_rules(
    extra: Iterable[str | os.PathLike[str]] = (), *, builtin: bool = True, plugins: bool = True
) -> CompiledTable:
    """Load and compile the rule table: the built-in files, then the installed plugins' rule files
    (:mod:`resolver.plugins`; with ``builtin`` and ``plugins`` only), then ``extra`` files or folders.

    A plugin that does not load raises its :class:`~resolver.plugins.PluginError`; an error in a
    plugin's rule file names the plugin. Each file's name and text key the disk cache, so installing
    or removing a plugin never serves a table compiled without it, or with it."""
    sources = read_folder(_builtin_folder()) if builtin else []
    installed = checked_plugins() if builtin and plugins else ()
    with naming_plugin_files(installed):
        for plugin in installed:  # after the built-in files: a plugin extends the built-in domains and rules
            for path in plugin.rules:
                sources += read_folder(path) if os.path.isdir(path) else [RuleSource._read(path)]
        extra = list(extra)
        if extra:
            sources += read_sources(extra)
        return cached_table(sources, _compile_with_flags, fingerprint=flags_fingerprint())


def compile_sources(sources: Sequence[RuleSource]) -> CompiledTable:
    """Compile rule texts held in memory (used by tests and tools), after the flags' own rules
    (:func:`resolver._domain.flags.flag_rules_source`); never cached."""
    return _compile_with_flags(sources)


def _compile_with_flags(sources: Sequence[RuleSource]) -> CompiledTable:
    from resolver._engine.compile import compile_table  # parsing, checking, compiling: only on a cache miss
    from resolver._engine.loading import load_sources

    return compile_table(load_sources([flag_rules_source(), *sources]))


@functools.lru_cache(maxsize=1)
def _builtin_evaluator() -> Evaluator:
    return Evaluator(load_rules(), compile_code=compile_code)


def builtin_table() -> CompiledTable:
    """The built-in rule table, loaded and compiled once per process."""
    return _builtin_evaluator().table


@functools.lru_cache(maxsize=16)
def _evaluator_for(files: tuple[tuple[str, int, int], ...]) -> Evaluator:
    return Evaluator(load_rules([f for f, _, _ in files]), compile_code=compile_code)


def _evaluator(rules: RulesArg) -> Evaluator:
    if rules is None:
        return _builtin_evaluator()
    if isinstance(rules, CompiledTable):
        return _table_evaluator(rules)
    items = (
        [rules] if isinstance(rules, (str, os.PathLike)) else list(rules) if isinstance(rules, Iterable) else [rules]
    )
    wrong = [item for item in items if not isinstance(item, (str, os.PathLike))]
    if wrong:
        raise ResolutionError(
            f"rules={wrong[0]!r} is not a rule file",
            hint="pass rules as a path, a list of paths, or a table from resolver.load_rules()",
        )
    if not items:
        return _builtin_evaluator()
    from pathlib import Path

    key = []
    for item in items:
        path = Path(item).resolve()
        try:
            st = path.stat()
        except OSError as exc:
            raise ResolutionError(f"cannot read rule file {path}: {exc.strerror}") from exc
        key.append((str(path), st.st_mtime_ns, st.st_size))
    return _evaluator_for(tuple(key))


_TABLE_EVALUATORS: dict[int, tuple[CompiledTable, Evaluator]] = {}


def _table_evaluator(table: CompiledTable) -> Evaluator:
    cached = _TABLE_EVALUATORS.get(id(table))
    if cached is None or cached[0] is not table:
        cached = (table, Evaluator(table, compile_code=compile_code))
        _TABLE_EVALUATORS[id(table)] = cached
    return cached[1]


#: The value of a removed flag given on the command line without one (``--auto-select-gpus``).
NO_VALUE: Any = type("NoValue", (), {"__repr__": lambda self: "<no value>"})()


def removed_flag_error(
    table: CompiledTable, flag: str, value: Any, *, cli: bool = False, spelling: str | None = None
) -> ResolutionError | None:
    """The error for a removed flag (``gpus=2``), spelling out the replacement; None if not removed.

    ``cli``: the command line's words (``spelling``: the option as written, ``--num_processes``);
    ``value`` may be :data:`NO_VALUE` there, and the replacement then shows the flag's ``value_name``.
    """
    entry = table.removed.get(flag)
    if entry is None:
        return None
    key = "cli" if cli else "python"
    given = value is not NO_VALUE
    if cli:
        option = spelling or f"--{flag.replace('_', '-')}"
        # a value the replacement does not use is not shown (`--auto-select-gpus` may have taken
        # the next word, `resolver run`'s script, as its value)
        shown = f"{option} {value}" if given and "{value" in str(entry.get(key, "")) else option
    else:
        shown = f"{flag}={value!r}"
    text = str(value) if given else str(entry.get("value_name") or "VALUE")
    replacement = str(entry.get(key, "")).replace("{value}", text).replace("{value!r}", repr(value) if given else text)
    return ResolutionError(
        f"{shown} was removed: {entry.get('why', 'it overlapped with other flags')}",
        hint=f"use {replacement}" if replacement else None,
        rule=f"removed.{flag}",
    )
