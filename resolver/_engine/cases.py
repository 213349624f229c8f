"""Rules written as a table of cases: one rule per value of a slot, expanded when the files load.

A rule with ``match = "SLOT"`` and ``cases`` stands for one rule per case: the case named VALUE
becomes the ordinary rule ``ID.VALUE`` (or, where the rule gives ``case_id``, that text with VALUE
in place of ``{case}``: ``ranks.{case}.global.negative`` makes ``ranks.slurm.global.negative``),
whose ``when`` adds ``SLOT = VALUE`` to the rule's own conditions, whose ``set`` adds the case's
``set`` to the rule's, and whose ``why``, ``conflict``, ``hint`` and ``note`` are the case's where
it gives them; a case's own ``when`` adds conditions on other slots, and ``none`` (for a
``cases_complete`` table) says why a value has no rule at all. ``[cases."ID"]`` in any file adds cases
to such a rule, and ``cases_join = "DOMAIN"`` makes every case's value a member of that domain
(a flag value the table accepts), so a new alias is one line. Everything after loading (the
compiler, the ambiguity check, provenance, ``explain``, ``docs/rules.md``) sees ordinary rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs

from resolver._engine.declared import RawRule, RuleCase, TableData
from resolver._engine.errors import RuleTableError
from resolver._engine.integers import parse_int
from resolver._engine.slot_types import MATCHABLE_TYPES
from resolver._engine.suggest import did_you_mean
from resolver._engine.table import Slot, toml_key_pattern

__all__ = ["case_line", "expand_cases"]

#: A rule's keys that describe its cases; the rules made from them do not carry these (``cases`` aside).
_TABLE_KEYS = ("match", "cases_join", "case_id", "cases_complete")
#: What a case may give; each replaces the rule's own, except ``set``, which adds to it.
_REPLACED = ("why", "conflict", "hint", "note", "between", "priority")


def expand_cases(table: TableData, extensions: Sequence[RuleCase]) -> None:
    """Replace each rule with ``match`` in ``table.rules`` by one rule per case, in place.

    ``extensions`` are the cases of top-level ``[cases."ID"]`` tables, in file order. The values
    of a rule with ``cases_join`` are added to that domain.
    """
    by_id = {raw.id: raw for raw in table.rules}
    more: dict[str, list[RuleCase]] = {}
    for case in extensions:
        target = by_id.get(case.rule)
        if target is None or target.spec.match is None:
            raise _unknown_target(table, case, target)
        more.setdefault(case.rule, []).append(case)
    rules: list[RawRule] = []
    complete: list[tuple[RawRule, set[str]]] = []
    for raw in table.rules:
        if raw.spec.match is None:
            rules.append(raw)
        else:
            cases = [*raw.cases, *more.get(raw.id, ())]
            rules += _expand(table, raw, cases)
            if raw.spec.cases_complete:
                complete.append((raw, {case.value for case in cases}))
    for raw, given in complete:  # after every table: a `cases_join` may add a value
        _check_complete(table, raw, given)
    defined: dict[str, RawRule] = {}
    for raw in rules:
        first = defined.setdefault(raw.id, raw)
        if first is not raw:
            made = raw if raw.case_of is not None else first
            other = first if made is raw else raw
            where = other.file + (f":{other.line}" if other.line else "")
            raise made.error(f"makes the rule id {made.id!r}, which {where} defines too; rename the case or that rule")
    table.rules[:] = rules


def _unknown_target(table: TableData, case: RuleCase, target: RawRule | None) -> RuleTableError:
    where = f'[cases."{case.rule}"]'
    if target is not None:
        return case.error(
            f"{where} adds cases to rule {case.rule!r} ({target.file}:{target.line}), which has no `match`; "
            'only a rule with `match = "slot"` takes cases'
        )
    tables = sorted(raw.id for raw in table.rules if raw.spec.match is not None)
    hint = did_you_mean(case.rule, tables)
    known = f"rules with cases: {', '.join(tables)}" if tables else "no rule has `match`"
    return case.error(f"{where} names unknown rule {case.rule!r}; {hint + ' ' if hint else ''}{known}")


def _expand(table: TableData, raw: RawRule, cases: list[RuleCase]) -> list[RawRule]:
    assert raw.spec.match is not None
    match, join = raw.spec.match, raw.spec.cases_join
    slot = table.slot(match)
    if slot is None:
        hint = did_you_mean(match, table.slots)
        raise raw.error(f"`match` names unknown slot {match!r}" + (f"; {hint}" if hint else ""))
    if slot.type not in MATCHABLE_TYPES:
        raise raw.error(f"`match` names slot {match!r}, which holds {slot.type}; cases match text, int or bool slots")
    if join is not None and join not in table.domains:
        hint = did_you_mean(join, table.domains)
        raise raw.error(
            f"`cases_join` names unknown domain {join!r}; {hint + ' ' if hint else ''}"
            f"known domains: {', '.join(sorted(table.domains))}"
        )
    if not cases:
        raise raw.error(f'`match = {match!r}` but no cases: add `cases.VALUE = {{ set = {{ ... }}, why = "..." }}`')
    seen: dict[str, RuleCase] = {}
    expanded = []
    rule = raw.spec
    for case in cases:
        first = seen.setdefault(case.value, case)
        if first is not case:
            raise case.error(f"given twice (first at {first.file}:{first.line})")
        made = raw.spec.case_id.replace("{case}", case.value) if raw.spec.case_id else f"{raw.id}.{case.value}"
        given = case.spec
        if given.none is not None:
            if not rule.cases_complete:
                raise case.error(
                    f"`none` says why a value has no rule of a `cases_complete` table, and rule {raw.id!r} is not "
                    "one: leave the case out"
                )
            if slot.domain is not None and case.value not in table.expand_domain(slot.domain):
                hint = did_you_mean(case.value, table.expand_domain(slot.domain))
                raise case.error(f"{case.value!r} is not a value of {match!r}" + (f"; {hint}" if hint else ""))
            continue
        tested = [name for name in given.when if name == match or name in rule.when]
        if tested:
            raise case.error(
                f"`when` tests {tested[0]!r}, which the rule's `when` (or its `match`) tests already: a case's "
                "`when` adds conditions on other slots"
            )
        changes: dict[str, Any] = dict.fromkeys(_TABLE_KEYS)  # the rules made are no tables
        changes["cases_complete"] = False
        changes.update((key, getattr(given, key)) for key in _REPLACED if getattr(given, key) is not None)
        if given.set is not None:
            changes["set"] = {**(rule.set or {}), **given.set}
        when = {**rule.when, **given.when, match: _value(slot, case)}
        spec = attrs.evolve(rule, id=made, when=when, cases={}, **changes)
        expanded.append(
            RawRule(spec, case.file, case.line, case_of=raw.id, case=case.value, table=(raw.file, raw.line))
        )
        if join is not None:
            domain = table.domains[join]
            domain.values.add(case.value)
            domain.value_files.setdefault(case.value, f"{case.file}:{case.line}" if case.line else case.file)
            if case.file not in domain.files:
                domain.files.append(case.file)
    return expanded


def _check_complete(table: TableData, raw: RawRule, given: set[str]) -> None:
    """``cases_complete``: every value of the matched slot's domain has its own case, so a value
    added later (a new accelerator's name) cannot fall through to no rule at all."""
    slot = table.slot(str(raw.spec.match))
    if slot is None or slot.domain is None:
        raise raw.error(f"`cases_complete` needs `match` to name a slot with a domain; {raw.spec.match!r} has none")
    for value in sorted(table.expand_domain(slot.domain) - given):
        where = table.value_file(slot.domain, value) or "<rules>"
        file = where.rsplit(":", 1)[0] if where[-1:].isdigit() and ":" in where else where
        raise RuleTableError(
            f"{raw.spec.match} {value!r} has no case of rule {raw.id!r} ({raw.file}"
            f"{f':{raw.line}' if raw.line else ''}), which needs one for every value: add "
            f'[cases."{raw.id}"] {value} = {{ ... }} to {file}, beside {value!r} in [domain.{slot.domain}]',
            file=file,
            rule=raw.id,
        )


def _value(slot: Slot, case: RuleCase) -> Any:
    """The case's name (a TOML key, so text) as a value of the matched slot."""
    name = case.value
    if not name.strip():
        raise case.error("a case is named by a value of the matched slot, not by empty text")
    if slot.type == "int":
        number = parse_int(name)
        if number is None:
            raise case.error(f"`match` slot {slot.name!r} holds int, and {name!r} is not an integer")
        return number
    if slot.type == "bool":
        if name not in ("true", "false"):
            raise case.error(f"`match` slot {slot.name!r} holds true or false, not {name!r}")
        return name == "true"
    return name


def case_line(text: str, key: str, rule: str | None, start: int | None) -> int | None:
    """The line where case ``key`` is written, for messages.

    ``rule`` None: among the ``cases`` of the rule whose ``id`` is at line ``start`` (``cases.KEY =``,
    ``[rule.cases.KEY]`` or ``KEY =`` under ``[rule.cases]``); else in the top-level table of that
    rule (``[cases."RULE"]``). Falls back to the line that opens the cases.
    """
    table = r"cases" if rule is None else rf"cases\s*\.\s*{toml_key_pattern(rule)}"
    header = r"rule\s*\.\s*cases" if rule is None else table
    name = toml_key_pattern(key)
    in_table, fallback = False, None
    first = (start or 1) - 1
    for number, line in enumerate(text.splitlines()[first:], first + 1):
        if re.match(r"[ \t]*\[", line):
            if rule is None and number > first + 1 and re.match(r"[ \t]*\[\[", line):
                break  # the next [[rule]]
            if re.match(rf"[ \t]*\[\s*{header}\s*\.\s*{name}\s*\]", line):
                return number
            in_table = re.match(rf"[ \t]*\[\s*{header}\s*\]", line) is not None
            fallback = fallback or (number if in_table else None)
            continue
        if re.match(rf"[ \t]*{table}\s*\.\s*{name}\s*[=.]", line) or (
            in_table and re.match(rf"[ \t]*{name}\s*[=.]", line)
        ):
            return number
        if fallback is None and re.match(rf"[ \t]*{table}\s*[=.]", line):
            fallback = number
    return fallback
