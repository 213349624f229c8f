"""Loading the TOML rule table: slots, domains, stages and rules, checked as they load.

A rule file may hold ``stages``, ``[domain.NAME]`` tables, ``[slot."NAME"]`` tables, ``[[rule]]``
entries and ``[removed.FLAG]`` tables (see ``docs/rule-format.md``). Every problem is reported as
a :class:`~resolver.errors.RuleTableError` naming the file, the rule and, where it can, the line.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from resolver.config import FrozenMapping
from resolver.errors import RuleTableError

__all__ = ["Domain", "RawRule", "RuleSource", "Slot", "TableData", "load_sources", "read_sources"]

SLOT_TYPES = ("str", "int", "bool", "tuple", "mapping", "any")
RULE_KEYS = {"id", "stage", "when", "set", "why", "conflict", "hint", "between", "note", "priority"}
VARIABLE_PREFIX = "var."
_NO_DEFAULT = object()


@attrs.frozen
class RuleSource:
    """One rule file's text and the name used in messages."""

    name: str
    text: str

    @classmethod
    def from_path(cls, path: str | Path) -> RuleSource:
        p = Path(path)
        try:
            return cls(str(p), p.read_text())
        except OSError as exc:
            raise RuleTableError(f"cannot read rule file: {exc.strerror}", file=str(p)) from exc


@attrs.frozen
class Slot:
    """A named value the rules read or decide, owned by exactly one stage."""

    name: str
    stage: str
    type: str = "any"
    domain: str | None = None
    nullable: bool = False
    required: bool = False
    default: Any = None
    doc: str = ""


@attrs.define
class Domain:
    """A named set of accepted string values; ``include`` pulls in other domains."""

    values: set[str] = attrs.field(factory=set)
    include: set[str] = attrs.field(factory=set)


@attrs.frozen
class RawRule:
    """A rule as written, with where it was written."""

    data: Mapping[str, Any]
    file: str
    line: int | None

    @property
    def id(self) -> str:
        return str(self.data.get("id", "<no id>"))

    def error(self, message: str) -> RuleTableError:
        return RuleTableError(message, file=self.file, rule=self.id, line=self.line)


@attrs.define
class TableData:
    """Everything the rule files declared, merged, before compilation."""

    stages: list[str] = attrs.field(factory=list)
    slots: dict[str, Slot] = attrs.field(factory=dict)
    domains: dict[str, Domain] = attrs.field(factory=dict)
    rules: list[RawRule] = attrs.field(factory=list)
    removed: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    files: list[str] = attrs.field(factory=list)

    def expand_domain(self, name: str, _seen: frozenset[str] = frozenset()) -> frozenset[str]:
        if name in _seen:
            raise RuleTableError(f"domain {name!r} includes itself")
        domain = self.domains.get(name)
        if domain is None:
            raise RuleTableError(f"unknown domain {name!r}; known domains: {', '.join(sorted(self.domains))}")
        values = set(domain.values)
        for inner in domain.include:
            values |= self.expand_domain(inner, _seen | {name})
        return frozenset(values)

    def slot(self, name: str) -> Slot | None:
        if name in self.slots:
            return self.slots[name]
        if name.startswith(VARIABLE_PREFIX) and len(name) > len(VARIABLE_PREFIX):
            return Slot(name=name, stage=self.stages[0] if self.stages else "input", type="str", nullable=True)
        return None


_ID_LINE = re.compile(r'^\s*id\s*=\s*["\']([^"\']+)["\']', re.MULTILINE)


def _id_lines(text: str) -> dict[str, int]:
    lines: dict[str, int] = {}
    for match in _ID_LINE.finditer(text):
        lines.setdefault(match.group(1), text.count("\n", 0, match.start()) + 1)
    return lines


def read_sources(paths: Iterable[str | Path]) -> list[RuleSource]:
    """The rule sources of the given files or folders (``*.toml`` in a folder, sorted)."""
    sources: list[RuleSource] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            sources.extend(RuleSource.from_path(f) for f in sorted(p.glob("*.toml")))
        else:
            sources.append(RuleSource.from_path(p))
    return sources


def load_sources(sources: Iterable[RuleSource]) -> TableData:
    """Parse and merge rule sources; structural errors are raised here, semantic ones at compile."""
    table = TableData()
    seen_ids: dict[str, RawRule] = {}
    for source in sources:
        table.files.append(source.name)
        try:
            doc = tomllib.loads(source.text)
        except tomllib.TOMLDecodeError as exc:
            raise RuleTableError(f"malformed TOML: {exc}", file=source.name) from exc
        unknown = sorted(set(doc) - {"stages", "domain", "slot", "rule", "removed"})
        if unknown:
            raise RuleTableError(
                f"unknown top-level key(s) {', '.join(unknown)}; "
                "expected stages, [domain.*], [slot.*], [[rule]], [removed.*]",
                file=source.name,
            )
        _merge_stages(table, doc.get("stages"), source.name)
        for name, spec in doc.get("domain", {}).items():
            _merge_domain(table, name, spec, source.name)
        for name, spec in doc.get("slot", {}).items():
            _merge_slot(table, name, spec, source.name)
        for flag, spec in doc.get("removed", {}).items():
            table.removed[flag] = dict(spec)
        lines = _id_lines(source.text)
        for entry in doc.get("rule", []):
            raw = RawRule(entry, source.name, lines.get(str(entry.get("id"))))
            if "id" not in entry or not isinstance(entry["id"], str) or not entry["id"]:
                raise raw.error("every rule needs a non-empty string `id`")
            stray = sorted(set(entry) - RULE_KEYS)
            if stray:
                raise raw.error(f"unknown key(s) {', '.join(stray)}; a rule has {', '.join(sorted(RULE_KEYS))}")
            first = seen_ids.get(raw.id)
            if first is not None:
                where = first.file + (f":{first.line}" if first.line else "")
                raise raw.error(f"duplicate rule id (first defined at {where})")
            seen_ids[raw.id] = raw
            table.rules.append(raw)
    if not table.stages:
        raise RuleTableError("no `stages` list in any rule file")
    return table


def _merge_stages(table: TableData, stages: Any, file: str) -> None:
    if stages is None:
        return
    if not isinstance(stages, list) or not all(isinstance(s, str) for s in stages):
        raise RuleTableError("`stages` must be a list of names", file=file)
    if table.stages and table.stages != stages:
        raise RuleTableError(f"`stages` redefined as {stages}, already {table.stages}", file=file)
    table.stages = list(stages)


def _merge_domain(table: TableData, name: str, spec: Any, file: str) -> None:
    if not isinstance(spec, dict) or set(spec) - {"values", "include"}:
        raise RuleTableError(f"[domain.{name}] takes `values` and `include` lists", file=file)
    domain = table.domains.setdefault(name, Domain())
    domain.values.update(str(v) for v in spec.get("values", []))
    domain.include.update(str(v) for v in spec.get("include", []))


def _merge_slot(table: TableData, name: str, spec: Any, file: str) -> None:
    allowed = {"stage", "type", "domain", "nullable", "required", "default", "doc"}
    if not isinstance(spec, dict) or set(spec) - allowed:
        raise RuleTableError(f"[slot.{name!r}] takes only {', '.join(sorted(allowed))}", file=file)
    if name in table.slots:
        raise RuleTableError(f"slot {name!r} declared twice", file=file)
    if spec.get("type", "any") not in SLOT_TYPES:
        raise RuleTableError(f"slot {name!r}: type must be one of {', '.join(SLOT_TYPES)}", file=file)
    if "stage" not in spec:
        raise RuleTableError(f"slot {name!r} needs a `stage`", file=file)
    default = spec.get("default")
    if isinstance(default, list):
        default = tuple(default)
    elif isinstance(default, dict):
        default = FrozenMapping(default)
    table.slots[name] = Slot(
        name=name,
        stage=spec["stage"],
        type=spec.get("type", "any"),
        domain=spec.get("domain"),
        nullable=bool(spec.get("nullable", False)),
        required=bool(spec.get("required", False)),
        default=default,
        doc=spec.get("doc", ""),
    )
