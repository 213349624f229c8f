"""What the rule files declared, merged, before compilation (:class:`TableData`): its domains,
rules as written and their cases. Made by :mod:`resolver._engine.loading` and :mod:`resolver._engine.cases` and
read by :mod:`resolver._engine.compile`, all imported only when a table is compiled: a process served
by the disk cache never makes these classes (about 0.3 ms each at import).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from resolver._engine.errors import RuleTableError
from resolver._engine.table import VARIABLE_PREFIX, Slot
from resolver._engine.values import fields_repr

if TYPE_CHECKING:
    from resolver._engine.schema import CaseSpec, RuleSpec

__all__ = ["Domain", "RawRule", "RuleCase", "TableData"]


@attrs.define
class Domain:
    """A named set of accepted string values; ``include`` pulls in other domains."""

    values: set[str] = attrs.field(factory=set)
    include: set[str] = attrs.field(factory=set)
    #: Where each ``include`` was written (file, line), for errors.
    where: dict[str, tuple[str, int | None]] = attrs.field(factory=dict)
    #: The files that declare or extend this domain, for errors.
    files: list[str] = attrs.field(factory=list)
    #: The file that first gave each value, for errors.
    value_files: dict[str, str] = attrs.field(factory=dict)

    __repr__ = fields_repr


@attrs.frozen
class RuleCase:
    """One case of a rule with ``match``, as written: the slot's value and that value's outcome."""

    rule: str
    value: str
    spec: CaseSpec
    file: str
    line: int | None

    __repr__ = fields_repr

    def error(self, message: str) -> RuleTableError:
        return RuleTableError(f"case {self.value!r}: {message}", file=self.file, rule=self.rule, line=self.line)


@attrs.frozen
class RawRule:
    """A rule as written (its checked, typed :class:`~resolver._engine.schema.RuleSpec`), with where it was written.

    A rule expanded from a case (:mod:`resolver._engine.cases`) has ``case_of``, the id of the rule whose
    ``cases`` held it, ``case``, and ``table``, where that rule is written; its errors name both,
    at the case's line, and the rule's file and line too where the case is in another file (the
    mistake may be in either: `when` is the rule's, `set` may be the case's).
    """

    spec: RuleSpec
    file: str
    line: int | None
    cases: tuple[RuleCase, ...] = attrs.field(default=(), eq=False, repr=False)
    case_of: str | None = None
    case: str | None = None
    table: tuple[str, int | None] | None = None

    __repr__ = fields_repr

    @property
    def id(self) -> str:
        return self.spec.id

    def error(self, message: str) -> RuleTableError:
        if self.case_of is not None:
            written = ""
            if self.table is not None and self.table[0] != self.file:
                file, line = self.table
                written = f" (rule {self.case_of!r} is written at {file}{f':{line}' if line else ''})"
            return RuleTableError(
                f"case {self.case!r}: {message}{written}", file=self.file, rule=self.case_of, line=self.line
            )
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
    #: The file and line of the ``stages`` list, once a file gave it.
    stages_from: tuple[str, int | None] | None = None

    __repr__ = fields_repr

    def stages_said(self) -> str:
        """``stages are a, b, c (`stages` in FILE:LINE)``: the other side of an unknown-stage error."""
        where = ""
        if self.stages_from is not None:
            file, line = self.stages_from
            where = f" (`stages` in {file}{f':{line}' if line else ''})"
        return f"stages are {', '.join(self.stages)}{where}"

    def domain_files(self, name: str, _seen: tuple[str, ...] = ()) -> list[str]:
        """The files that give a domain its values, its included domains' files too."""
        domain = self.domains.get(name)
        if domain is None or name in _seen:
            return []
        files = list(domain.files)
        for inner in sorted(domain.include):
            files += [f for f in self.domain_files(inner, (*_seen, name)) if f not in files]
        return files

    def value_file(self, name: str, value: str, _seen: tuple[str, ...] = ()) -> str | None:
        """The file that gave ``value`` to domain ``name`` or to a domain it includes."""
        domain = self.domains.get(name)
        if domain is None or name in _seen:
            return None
        if value in domain.value_files:
            return domain.value_files[value]
        found = (self.value_file(inner, value, (*_seen, name)) for inner in sorted(domain.include))
        return next((file for file in found if file is not None), None)

    def expand_domain(self, name: str, _seen: tuple[str, ...] = ()) -> frozenset[str]:
        domain = self.domains[name]
        values = set(domain.values)
        for inner in sorted(domain.include):
            file, line = domain.where.get(inner, (None, None))
            if inner in _seen or inner == name:
                cycle = " -> ".join((*_seen, name, inner))
                raise RuleTableError(f"domain {name!r} includes itself ({cycle})", file=file, line=line)
            if inner not in self.domains:
                raise RuleTableError(
                    f"[domain.{name}] includes unknown domain {inner!r}; known domains: "
                    + ", ".join(sorted(self.domains)),
                    file=file,
                    line=line,
                )
            values |= self.expand_domain(inner, (*_seen, name))
        return frozenset(values)

    def slot(self, name: str) -> Slot | None:
        if name in self.slots:
            return self.slots[name]
        if name.startswith(VARIABLE_PREFIX) and len(name) > len(VARIABLE_PREFIX):
            return Slot(name=name, stage=self.stages[0] if self.stages else "input", type="str", nullable=True)
        return None
