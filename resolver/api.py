"""``resolve()`` and ``load_rules()``: the resolver's public entry points."""

from __future__ import annotations

import gc
import operator
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

# The collector is paused while the engine's modules load (attrs and the classes it makes): the first
# import of this module, by a CLI command or the first resolve(), is most of a cold start. Those imports
# make tens of thousands of objects and no garbage, and the collections their allocations would start
# cost a cold `resolver explain` about 5 ms (tests/benchmarks/cold_explain.py).
_collecting = gc.isenabled()
gc.disable()
try:
    from resolver._domain.config import DECIDED_FIELDS, FrozenMapping, Provenance, ProvenanceView, ResolvedConfig
    from resolver._domain.flag_values import DEFAULT_INPUTS, by_name, flag_inputs, given_flags
    from resolver._domain.flags import FLAG_DEFAULTS, FLAGS
    from resolver._domain.rule_tables import (
        NO_VALUE,
        RulesArg,
        _evaluator,
        builtin_rules_dir,
        builtin_table,
        compile_sources,
        load_rules,
        removed_flag_error,
        site_evaluator,
    )
    from resolver._engine.errors import ResolutionError
    from resolver._engine.evaluator import Evaluation, Evaluator
    from resolver._snapshot.environment import Environment, InputPlan
finally:
    if _collecting:
        gc.enable()

if TYPE_CHECKING:
    from resolver._engine.reporter import Reporter
    from resolver.flagsfile import FlagsFile

__all__ = [
    "FLAG_DEFAULTS",
    "builtin_rules_dir",
    "builtin_table",
    "compile_sources",
    "given_flags",
    "load_rules",
    "NO_VALUE",
    "removed_flag_error",
    "resolve",
    "run_rules",
]

_CONFIG_FIELDS = DECIDED_FIELDS


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

    ``rules`` is the table exactly as given (the golden checks run the built-in one):
    ``RESOLVER_RULES`` is ``resolve()``'s to add. ``sources`` gives the provenance of flags that
    did not come from the caller (a flags file).
    """
    return _run(flags, environment, _evaluator(rules), reporter, sources)[0]


def _run(
    flags: Mapping[str, Any] | tuple[Any, ...],
    environment: Environment,
    evaluator: Evaluator,
    reporter: Reporter | None,
    sources: Mapping[str, Provenance] | None,
) -> tuple[Evaluation, FrozenMapping]:
    """:func:`run_rules`, and the flags given (normalized), for ``ResolvedConfig.flags``."""
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
            named = by_name(flags) if isinstance(flags, tuple) else flags
        return _flag_provenance(named, values, slot, sources)

    # The variables and files the snapshot has (most have none): the generated code tries the rules
    # needing one only for those.
    present = plan.present(environment) if environment.variables._data or environment.files._data else ()
    # complete: the values started from the template, which holds every flag
    return evaluator.run(values, inputs, reporter, present, complete=True), FrozenMapping.of_sorted(given)


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

    The flags are declared in :data:`resolver._domain.flags.FLAGS` (``docs/usage.md`` lists them).

    ``environment=None`` probes the real machine (:meth:`Environment.probe`), keeping every
    variable and file the rule table in use reads (what cannot change within a process, such as
    which packages are importable, is read once: ``Environment.probe(refresh=True)`` reads it again).
    ``rules`` adds rule files (paths) to the built-in table, or replaces it with a compiled table. Raises
    :class:`ResolutionError` (a ``ValueError``); :class:`ConflictError` when two sources disagree.
    ``config_file`` reads flags from a TOML flags file (:mod:`resolver.flagsfile`); a keyword
    given here with a value other than its default wins over the file. The site rule files that
    the ``RESOLVER_RULES`` variable names (separated as ``PATH`` is) and those of the flags file's
    ``rules`` key are added before ``rules``' own (not to a compiled table, which is the whole table).
    """
    file: FlagsFile | None = None
    if config_file is not None:
        from resolver.flagsfile import FlagsFile, load_flags_file  # imports cattrs when a file is read

        file = config_file if isinstance(config_file, FlagsFile) else load_flags_file(config_file)
    evaluator = site_evaluator(rules, file.rules if file is not None else ())
    if removed:
        for flag, value in sorted(removed.items()):
            error = removed_flag_error(evaluator.table, flag, value)
            if error is not None:
                raise error
        raise TypeError(f"resolve() got unexpected keyword argument(s): {', '.join(sorted(removed))}")
    if environment is None:
        environment = Environment.probe(table=evaluator.table)
    elif not isinstance(environment, Environment):
        raise ResolutionError(
            f"environment={environment!r:.60} is not an Environment",
            hint="pass Environment.probe(), Environment(...) or Environment.from_toml(path), or leave it out",
        )
    # The flags in name order (flag_values.NAME_ORDER; tests/resolver/domain/test_flags.py checks each one): a
    # tuple costs a fraction of locals().
    flags = (
        accelerator, cluster_environment, devices, master_addr, master_port,
        node_rank, num_nodes, plugins, precision, strategy,
    )  # fmt: skip
    if file is None:
        evaluation, given = _run(flags, environment, evaluator, reporter, None)
    else:
        from resolver.flagsfile import flags_with_file

        with_file, sources = flags_with_file(by_name(flags), FLAG_DEFAULTS, file)
        evaluation, given = _run(with_file, environment, evaluator, reporter, sources)
    return config_from(evaluation, given)


def config_from(evaluation: Evaluation, flags: Mapping[str, Any] | None = None) -> ResolvedConfig:
    values = evaluation.values
    try:
        decided = _decided_values(values)
    except KeyError as exc:
        raise ResolutionError(f"the rule table has no slot {exc.args[0]!r}, a field of ResolvedConfig") from None
    # The decided fields come first, in order, then flags, provenance and notes (resolver._domain.config).
    # mypy lets a star of unknown length fill every field, leaving none for the three after it
    return ResolvedConfig(*decided, flags, ProvenanceView(_CONFIG_FIELDS, evaluation.provenance), evaluation.notes)  # type: ignore[call-arg]


_decided_values = operator.itemgetter(*_CONFIG_FIELDS)
