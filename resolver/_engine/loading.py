"""Loading the TOML rule files: slots, domains, stages and rules, checked as they load.

A rule file may hold ``stages``, ``[domain.NAME]`` tables, ``[slot."NAME"]`` tables, ``[[rule]]``
entries, ``[removed.FLAG]`` tables and ``[cases."RULE"]`` tables (see ``docs/rule-format.md``).
Every problem is reported as a :class:`~resolver._engine.errors.RuleTableError` naming the file, the rule
and, where it can, the line. A rule with ``match`` and ``cases`` is expanded into one ordinary
rule per case (:mod:`resolver._engine.cases`) before anything else sees it. Imported only when a table is
compiled (a table from the disk cache skips it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from resolver._engine.declared import Domain, RawRule, RuleCase, TableData
from resolver._engine.errors import RuleTableError
from resolver._engine.table import FLAGS_SOURCE_NAME, RuleSource, Slot, toml_key_pattern
from resolver._engine.values import FrozenMapping

if TYPE_CHECKING:  # the schema (and cattrs) is imported only when rule files are loaded
    from resolver._engine.schema import CaseSpec, SchemaProblem, SlotSpec

__all__ = ["load_sources"]


_ID_LINE = re.compile(r'^[ \t]*id\s*=\s*["\']([^"\']+)["\']', re.MULTILINE)


def _id_lines(text: str) -> dict[str, list[int]]:
    """The line of each ``id = "..."``, in order (an id written twice has two lines)."""
    lines: dict[str, list[int]] = {}
    line, position = 1, 0
    for match in _ID_LINE.finditer(text):  # count newlines incrementally: linear in the file's size
        line += text.count("\n", position, match.start())
        position = match.start()
        lines.setdefault(match.group(1), []).append(line)
    return lines


def _line_of(text: str, pattern: str) -> int | None:
    match = re.search(pattern, text, re.MULTILINE)
    return text.count("\n", 0, match.start()) + 1 if match else None


def _table_line(text: str, table: str, name: str) -> int | None:
    """The line of ``[table.NAME]`` (or ``table.NAME = ...``, ``NAME = ...`` inside ``[table]``)."""
    key = toml_key_pattern(name)
    for pattern in (
        rf"^[ \t]*\[\s*{table}\s*\.\s*{key}\s*\]",
        rf"^[ \t]*{table}\s*\.\s*{key}\s*[.=]",
        rf"^[ \t]*{key}\s*[.=]",
    ):
        line = _line_of(text, pattern)
        if line is not None:
            return line
    return _line_of(text, rf"^[ \t]*\[\s*{table}\s*[.\]]")


class _Locator:
    """Lines of one file's declarations, for messages."""

    def __init__(self, source: RuleSource, document: Mapping[str, Any]) -> None:
        self.source = source
        self.document = document
        self.ids = _id_lines(source.text)

    def error(self, problem: SchemaProblem) -> RuleTableError:
        from resolver._engine.cases import case_line

        path = problem.path
        rule = None
        line = None
        if path and path[0] == "rule" and len(path) > 1 and isinstance(path[1], int):
            entries = self.document.get("rule")
            entry = entries[path[1]] if isinstance(entries, list) and path[1] < len(entries) else None
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                rule = entry["id"]
                line = self.rule_line(rule)
            else:
                line = self.nth_rule_line(path[1])
            if len(path) > 3 and path[2] == "cases":
                line = case_line(self.source.text, str(path[3]), None, line) or line
            message = f"{problem.message} (at {'.'.join(str(p) for p in path[2:]) or 'the rule'})"
            return RuleTableError(message, file=self.source.name, rule=rule, line=line)
        if path and path[0] == "cases" and len(path) > 2:
            line = case_line(self.source.text, str(path[2]), str(path[1]), None)
        elif path and path[0] in ("slot", "domain", "removed", "cases") and len(path) > 1:
            line = _table_line(self.source.text, str(path[0]), str(path[1]))
        elif len(path) == 1:  # a top-level key: `stages = ...`, `cases = 5`
            line = _line_of(self.source.text, rf"^[ \t]*\[?\s*{toml_key_pattern(str(path[0]))}\s*[=.\]]")
        where = problem.where
        return RuleTableError(
            f"{where}: {problem.message}" if where else problem.message, file=self.source.name, line=line
        )

    def rule_line(self, rule: str, occurrence: int = 0) -> int | None:
        lines = self.ids.get(rule, [])
        return lines[occurrence] if occurrence < len(lines) else (lines[-1] if lines else None)

    def nth_rule_line(self, index: int) -> int | None:
        matches = list(re.finditer(r"^[ \t]*\[\[\s*rule\s*\]\]", self.source.text, re.MULTILINE))
        if index < len(matches):
            return self.source.text.count("\n", 0, matches[index].start()) + 1
        return None

    def line(self, table: str, name: str) -> int | None:
        return _table_line(self.source.text, table, name)

    def cases(self, rule: str, cases: Mapping[str, CaseSpec], start: int | None, *, extension: bool) -> list[RuleCase]:
        """The cases of a rule (``extension``: of a top-level ``[cases."RULE"]`` table), with their lines."""
        from resolver._engine.cases import case_line

        owner = rule if extension else None
        return [
            RuleCase(rule, value, case, self.source.name, case_line(self.source.text, value, owner, start))
            for value, case in cases.items()
        ]


def load_sources(sources: Iterable[RuleSource]) -> TableData:
    """Parse, check against the declared shape (:mod:`resolver._engine.schema`) and merge rule sources.

    Structural errors and those between files (a slot declared twice, an unknown stage or domain,
    a domain that includes itself) are raised here; the rules' meaning is checked at compile.
    """
    import tomllib  # only when parsing: a table loaded from the disk cache needs neither

    from resolver._engine.cases import expand_cases
    from resolver._engine.input_files import InputFileError, loads_toml
    from resolver._engine.schema import SchemaProblem, structure_file  # cattrs: only when rule files are read

    table = TableData()
    extensions: list[RuleCase] = []
    seen_ids: dict[str, RawRule] = {}
    for source in sources:
        table.files.append(source.name)
        try:
            doc = loads_toml(source.text, source.name, "rule file")
        except tomllib.TOMLDecodeError as exc:
            raise RuleTableError(f"malformed TOML: {exc}", file=source.name) from exc
        except InputFileError as exc:
            raise RuleTableError(f"{exc.problem}; {exc.hint}", file=source.name, line=exc.line) from None
        locate = _Locator(source, doc)
        try:
            spec = structure_file(doc)
        except SchemaProblem as problem:
            raise locate.error(problem) from None
        if spec.stages is not None:
            line = _line_of(source.text, r"^[ \t]*stages\s*=")
            if table.stages and table.stages != spec.stages:
                first = f" in {table.stages_from[0]}" if table.stages_from else ""
                raise RuleTableError(
                    f"`stages` redefined as {spec.stages}, already {table.stages}{first}", file=source.name, line=line
                )
            table.stages = list(spec.stages)
            table.stages_from = table.stages_from or (source.name, line)
        for name, domain_spec in spec.domain.items():
            domain = table.domains.setdefault(name, Domain())
            if source.name not in domain.files:
                domain.files.append(source.name)
            domain.values.update(domain_spec.values)
            for value in domain_spec.values:
                domain.value_files.setdefault(value, source.name)
            for inner in domain_spec.include:
                domain.include.add(inner)
                domain.where.setdefault(inner, (source.name, locate.line("domain", name)))
        for name, slot_spec in spec.slot.items():
            line = locate.line("slot", name)
            if name in table.slots:
                earlier = table.slots[name]
                where = f"{earlier.file}:{earlier.line}" if earlier.line else str(earlier.file)
                raise RuleTableError(f"slot {name!r} declared twice (first at {where})", file=source.name, line=line)
            table.slots[name] = _slot(name, slot_spec, source.name, line)
        for flag, removed in spec.removed.items():
            table.removed[flag] = attrs.asdict(removed)
        occurrences: dict[str, int] = {}
        for rule_spec in spec.rule:
            occurrence = occurrences[rule_spec.id] = occurrences.get(rule_spec.id, -1) + 1
            line = locate.rule_line(rule_spec.id, occurrence)
            cases = locate.cases(rule_spec.id, rule_spec.cases, line, extension=False)
            raw = RawRule(rule_spec, source.name, line, tuple(cases))
            first_rule = seen_ids.get(raw.id)
            if first_rule is not None:
                where = first_rule.file + (f":{first_rule.line}" if first_rule.line else "")
                raise raw.error(f"duplicate rule id (first defined at {where})")
            seen_ids[raw.id] = raw
            table.rules.append(raw)
        for rule_id, more in spec.cases.items():
            extensions += locate.cases(rule_id, more, None, extension=True)
    if not table.stages:
        raise RuleTableError("no `stages` list in any rule file", file=", ".join(table.files) or None)
    expand_cases(table, extensions)
    _check_declarations(table)
    return table


def _slot(name: str, spec: SlotSpec, file: str, line: int | None) -> Slot:
    default = spec.default
    if isinstance(default, list):
        default = tuple(default)
    elif isinstance(default, dict):
        default = FrozenMapping(default)
    return Slot(
        name=name,
        stage=spec.stage,
        type=spec.type,
        domain=spec.domain,
        nullable=spec.nullable,
        required=spec.required,
        default=default,
        doc=spec.doc,
        lowercase=spec.lowercase,
        file=file,
        line=line,
    )


def _check_declarations(table: TableData) -> None:
    """What needs every file: each slot's stage and domain exist; domains include known domains;
    a slot that text reaches lowercased has no capitals in its domain (no value could match them)."""
    for name in sorted(table.domains):
        table.expand_domain(name)
    for slot in table.slots.values():
        if slot.stage not in table.stages:
            raise _unknown_stage(table, slot)
        if slot.domain is not None and slot.domain not in table.domains:
            raise RuleTableError(
                f"slot {slot.name!r} names unknown domain {slot.domain!r}; domains: "
                + ", ".join(sorted(table.domains)),
                file=slot.file,
                line=slot.line,
            )
        if slot.lowercase and slot.domain is not None:
            _check_lowercase(table, slot, slot.domain)


def _unknown_stage(table: TableData, slot: Slot) -> RuleTableError:
    """A slot decided at a stage that `stages` lacks. The flags' own slots (:mod:`resolver._domain.flags`)
    are not the user's to edit: a stage they need that is missing was renamed or removed by the
    file that gave `stages`, which is named instead (with the stage it renamed it to, when only one
    stage of the list is named by nothing)."""
    from resolver._engine.suggest import did_you_mean

    if slot.file != FLAGS_SOURCE_NAME or table.stages_from is None:
        hint = did_you_mean(slot.stage, table.stages)
        return RuleTableError(
            f"slot {slot.name!r} names unknown stage {slot.stage!r}; {hint + ' ' if hint else ''}{table.stages_said()};"
            f" name one of them, or add {slot.stage!r} to `stages`",
            file=slot.file,
            line=slot.line,
        )
    named = {s.stage for s in table.slots.values()} | {r.spec.stage for r in table.rules}
    unnamed = [stage for stage in table.stages if stage not in named]
    renamed = f" (renamed to {unnamed[0]!r}?)" if len(unnamed) == 1 else ""
    flag_stages = dict.fromkeys(s.stage for s in table.slots.values() if s.file == slot.file)
    needed = " and ".join(map(repr, flag_stages))
    file, line = table.stages_from
    return RuleTableError(
        f"`stages` has no stage {slot.stage!r}{renamed}, which slot {slot.name!r} of {slot.file} is decided at;"
        f" stages are {', '.join(table.stages)}; put {slot.stage!r} back in `stages`"
        f" (the flags of resolve() are decided at {needed})",
        file=file,
        line=line,
    )


def _check_lowercase(table: TableData, slot: Slot, domain: str) -> None:
    capital = sorted(v for v in table.expand_domain(domain) if v != v.lower())
    if not capital:
        return
    value = capital[0]
    more = f" ({len(capital) - 1} more value(s) of it have capitals too)" if len(capital) > 1 else ""
    raise RuleTableError(
        f"domain {domain!r} has the value {value!r}, which {slot.name} can never hold: text reaches "
        f"{slot.name} lowercased, as {value.lower()!r}; write the value as {value.lower()!r}{more}",
        file=table.value_file(domain, value),
    )
