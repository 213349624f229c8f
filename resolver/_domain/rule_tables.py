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
from resolver._domain.rule_files import (
    RULES_VARIABLE,
    RuleFile,
    cache_key,
    given_rule_files,
    named_by,
    site_rule_files,
)
from resolver._engine.compiled import CompiledTable
from resolver._engine.errors import ResolutionError, RuleTableError
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
    "rule_files_in_use",
    "site_evaluator",
    "table_in_use",
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
    """The evaluator of ``rules`` exactly: a compiled table as it is, else the built-in table (with
    the installed plugins' files) and the files ``rules`` names (no site rules: :func:`site_evaluator`)."""
    if rules is None:
        return _builtin_evaluator()
    if isinstance(rules, CompiledTable):
        return _table_evaluator(rules)
    return _files_evaluator(given_rule_files(rules))


def _files_evaluator(files: Sequence[RuleFile]) -> Evaluator:
    if not files:
        return _builtin_evaluator()
    try:
        return _evaluator_for(tuple(cache_key(file) for file in files))
    except RuleTableError as error:  # an error in a file a variable or a flags file named says which
        raise named_by(error, files) from None


def rule_files_in_use(
    rules: RulesArg = None, file_rules: Sequence[RuleFile] = (), *, spelling: str = "rules="
) -> tuple[RuleFile, ...]:
    """The rule files ``resolve()`` adds to the built-in table, each with what named it: those of
    ``RESOLVER_RULES``, then a flags file's (``file_rules``), then those of ``rules`` (``spelling``:
    how the caller names it, ``--rules`` on the command line), each file once. None for a compiled
    table, which is the whole table."""
    if isinstance(rules, CompiledTable):
        return ()
    files = (*site_rule_files(), *file_rules, *given_rule_files(rules, spelling))
    if len(files) < 2:
        return files
    named: dict[str, RuleFile] = {}  # a file named twice (by the variable and a flags file) is read once
    for file in files:
        named.setdefault(os.path.realpath(file.path), file)
    return tuple(named.values())


def site_evaluator(rules: RulesArg = None, file_rules: Sequence[RuleFile] = ()) -> Evaluator:
    """The evaluator ``resolve()`` runs: :func:`rule_files_in_use`'s files on the built-in table,
    or a compiled table as it is."""
    if rules is None and not file_rules and RULES_VARIABLE not in os.environ:  # most resolves: no lookup
        return _builtin_evaluator()
    if isinstance(rules, CompiledTable):
        return _table_evaluator(rules)
    return _files_evaluator(rule_files_in_use(rules, file_rules))


def table_in_use(files: Sequence[RuleFile]) -> CompiledTable:
    """The built-in table with ``files`` (from :func:`rule_files_in_use`)."""
    return _files_evaluator(files).table


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
