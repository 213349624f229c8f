"""``resolve()`` and ``load_rules()``: the resolver's public entry points."""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from resolver.cache import cached_table
from resolver.compiler import CompiledTable
from resolver.config import DECIDED_FIELDS, FrozenMapping, Provenance, ProvenanceView, ResolvedConfig
from resolver.engine import Evaluation, Evaluator
from resolver.environment import Environment, InputPlan
from resolver.errors import ResolutionError
from resolver.flag_values import DEFAULT_INPUTS, by_name, flag_inputs, given_flags
from resolver.flags import FLAG_DEFAULTS, FLAGS, flag_rules_source, flags_fingerprint
from resolver.table import RuleSource, read_folder, read_sources

if TYPE_CHECKING:
    from pathlib import Path

    from resolver.flagsfile import FlagsFile
    from resolver.reporter import Reporter

__all__ = [
    "FLAG_DEFAULTS",
    "builtin_rules_dir",
    "builtin_table",
    "given_flags",
    "load_rules",
    "NO_VALUE",
    "removed_flag_error",
    "resolve",
    "run_rules",
]

RulesArg = CompiledTable | str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None

_CONFIG_FIELDS = DECIDED_FIELDS


def builtin_rules_dir() -> Path:
    """The shipped rule table: inside the wheel (``resolver/_rules``) or the source tree's ``rules/``."""
    from pathlib import Path

    return Path(_builtin_folder())


@functools.cache
def _builtin_folder() -> str:
    """:func:`builtin_rules_dir` as text (``os.path``: pathlib costs every process a few milliseconds)."""
    here = os.path.dirname(os.path.realpath(__file__))
    candidates = (os.path.join(here, "_rules"), os.path.join(os.path.dirname(here), "rules"))
    for candidate in candidates:
        if os.path.isdir(candidate):
            return candidate
    raise ResolutionError(f"the built-in rule table is missing (looked in {candidates[0]} and {candidates[1]})")


def load_rules(extra: Iterable[str | os.PathLike[str]] = (), *, builtin: bool = True) -> CompiledTable:
    """Load and compile the rule table: the built-in files plus ``extra`` files or folders."""
    sources = read_folder(_builtin_folder()) if builtin else []
    extra = list(extra)
    if extra:
        sources += read_sources(extra)
    return cached_table(sources, _compile_with_flags, fingerprint=flags_fingerprint())


def compile_sources(sources: Sequence[RuleSource]) -> CompiledTable:
    """Compile rule texts held in memory (used by tests and tools), after the flags' own rules
    (:func:`resolver.flags.flag_rules_source`); never cached."""
    return _compile_with_flags(sources)


def _compile_with_flags(sources: Sequence[RuleSource]) -> CompiledTable:
    from resolver.compiling import compile_table  # parsing, checking, compiling: only on a cache miss
    from resolver.loading import load_sources

    return compile_table(load_sources([flag_rules_source(), *sources]))


@functools.lru_cache(maxsize=1)
def _builtin_evaluator() -> Evaluator:
    return Evaluator(load_rules())


def builtin_table() -> CompiledTable:
    """The built-in rule table, loaded and compiled once per process."""
    return _builtin_evaluator().table


@functools.lru_cache(maxsize=16)
def _evaluator_for(files: tuple[tuple[str, int, int], ...]) -> Evaluator:
    return Evaluator(load_rules([f for f, _, _ in files]))


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
        cached = (table, Evaluator(table))
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


_ARG_NAMES = {f"arg.{flag.name}": flag.name for flag in FLAGS}
_NOT_GIVEN = Provenance("default")


def _flag_provenance(
    flags: Mapping[str, Any], values: Mapping[str, Any], slot: str, sources: Mapping[str, Provenance] | None = None
) -> Provenance | None:
    """What the user wrote for an arg.* input (built only when someone asks); ``sources``: flags read from a file."""
    name = _ARG_NAMES.get(slot)
    if name is None:
        return None
    if sources and name in sources:
        return sources[name]
    default = FLAG_DEFAULTS[name]
    value = values[slot]
    given = type(value) is not type(default) or value != default
    return Provenance("flag", f"{name}={flags.get(name, default)!r}") if given else _NOT_GIVEN


def _input_plan(evaluator: Evaluator) -> tuple[InputPlan, dict[str, Any]]:
    """What a snapshot fills for this evaluator's table, and the dict a run's values start from:
    the snapshot's inputs (unset), every flag at its default (a run writes the given ones) and room
    for every decided slot (a run writes each), so a run's copy never grows."""
    found = evaluator.__dict__.get("_input_plan")
    if found is None:
        plan = InputPlan(evaluator.table)
        template = dict.fromkeys(plan.slots)
        template.update(DEFAULT_INPUTS)
        template.update(dict.fromkeys(evaluator.decided_slots))
        found = evaluator.__dict__["_input_plan"] = (plan, template)
    return found


def run_rules(
    flags: Mapping[str, Any],
    environment: Environment,
    rules: RulesArg = None,
    reporter: Reporter | None = None,
    sources: Mapping[str, Provenance] | None = None,
) -> Evaluation:
    """Evaluate the table for already-collected flags; the engine-level entry used by ``resolve``.

    ``sources`` gives the provenance of flags that did not come from the caller (a flags file).
    """
    return _run(flags, environment, rules, reporter, sources)[0]


def _run(
    flags: Mapping[str, Any] | tuple[Any, ...],
    environment: Environment,
    rules: RulesArg,
    reporter: Reporter | None,
    sources: Mapping[str, Provenance] | None,
) -> tuple[Evaluation, FrozenMapping]:
    """:func:`run_rules`, and the flags given (normalized), for ``ResolvedConfig.flags``."""
    evaluator = _evaluator(rules)
    plan, template = _input_plan(evaluator)
    # A copy of a same-shaped dict (no rehashing, however many variables) that the given flags update.
    values, given = flag_inputs(flags, environment.input_values(plan, template))

    named: Mapping[str, Any] | None = None  # the flags by name, made at the first look

    def inputs(slot: str) -> Provenance | None:
        """Where an input came from, made only when someone asks (most resolutions never do)."""
        nonlocal named
        found = plan.provenance(environment, slot)
        if found is not None:
            return found
        if named is None:
            named = by_name(flags) if type(flags) is tuple else flags
        return _flag_provenance(named, values, slot, sources)

    return evaluator.run(values, inputs, reporter), FrozenMapping.of_sorted(given)


def resolve(
    accelerator: str = "auto",
    devices: int | str | Sequence[int] = "auto",
    strategy: str = "auto",
    precision: str | int | None = None,
    num_nodes: int = 1,
    *,
    cluster_environment: str = "auto",
    plugins: Sequence[str] = (),
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    environment: Environment | None = None,
    rules: RulesArg = None,
    reporter: Reporter | None = None,
    config_file: str | os.PathLike[str] | FlagsFile | None = None,
    **removed: Any,
) -> ResolvedConfig:
    """Resolve training flags against a machine snapshot.

    The flags are declared in :data:`resolver.flags.FLAGS` (``docs/usage.md`` lists them).

    ``environment=None`` probes the real machine (:meth:`Environment.probe`), keeping every
    variable and file the rule table in use reads (what cannot change within a process, such as
    which packages are importable, is read once: ``Environment.probe(refresh=True)`` reads it again).
    ``rules`` adds rule files (paths) to the built-in table, or replaces it with a compiled table. Raises
    :class:`ResolutionError` (a ``ValueError``); :class:`ConflictError` when two sources disagree.
    ``config_file`` reads flags from a TOML flags file (:mod:`resolver.flagsfile`); a keyword
    given here with a value other than its default wins over the file.
    """
    if removed:
        evaluator = _evaluator(rules)
        for flag, value in sorted(removed.items()):
            error = removed_flag_error(evaluator.table, flag, value)
            if error is not None:
                raise error
        raise TypeError(f"resolve() got unexpected keyword argument(s): {', '.join(sorted(removed))}")
    if environment is None:
        environment = Environment.probe(table=_evaluator(rules).table)
    elif not isinstance(environment, Environment):
        raise ResolutionError(
            f"environment={environment!r:.60} is not an Environment",
            hint="pass Environment.probe(), Environment(...) or Environment.from_toml(path), or leave it out",
        )
    # The flags in name order (flag_values.NAME_ORDER; tests/test_flags.py checks each one): a tuple costs
    # a fraction of locals().
    flags: Mapping[str, Any] | tuple[Any, ...] = (
        accelerator, cluster_environment, devices, master_addr, master_port,
        node_rank, num_nodes, plugins, precision, strategy,
    )  # fmt: skip
    sources = None
    if config_file is not None:
        from resolver.flagsfile import flags_with_file  # imports cattrs when a file is read

        flags, sources = flags_with_file(by_name(flags), FLAG_DEFAULTS, config_file)
    evaluation, given = _run(flags, environment, rules, reporter, sources)
    return config_from(evaluation, given)


def config_from(evaluation: Evaluation, flags: Mapping[str, Any] | None = None) -> ResolvedConfig:
    values = evaluation.values
    try:
        decided = _decided_values(values)
    except KeyError as exc:
        raise ResolutionError(f"the rule table has no slot {exc.args[0]!r}, a field of ResolvedConfig") from None
    # The decided fields come first, in order, then flags, provenance and notes (resolver.config).
    return ResolvedConfig(*decided, flags, ProvenanceView(_CONFIG_FIELDS, evaluation.provenance), evaluation.notes)


_decided_values = operator.itemgetter(*_CONFIG_FIELDS)
