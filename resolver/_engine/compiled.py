"""The compiled form of a rule table: what the evaluator runs and the disk cache keeps.

:func:`resolver._engine.compile.compile_table` builds it from loaded rule files (imported only when a
table is compiled, so a process served by the disk cache never loads it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from resolver._engine.conditions import Call, Condition, Ref, ValueExpr
from resolver._engine.table import Slot
from resolver._engine.values import fields_repr, lean_state

if TYPE_CHECKING:
    import networkx as nx


__all__ = [
    "CompiledRule",
    "CompiledTable",
    "DomainRef",
    "StagePlan",
    "Template",
]

#: A ``{slot}`` or ``{domain:NAME}`` placeholder (a pattern: ``re`` compiles it on first use, not at import).
PLACEHOLDER = r"\{([A-Za-z0-9_.:-]+)\}"
_DOMAIN_PLACEHOLDER = "domain:"


@attrs.frozen(eq=False)
class DomainRef:
    """``{domain:NAME}`` in a message: the domain's members, listed."""

    domain: str

    __repr__ = fields_repr


@attrs.frozen(eq=False)
class Template:
    """A message with ``{slot}`` and ``{domain:NAME}`` placeholders, parsed once at compile time.

    ``parts`` alternates literal text with :class:`~resolver._engine.conditions.Ref` (a slot's value) and
    :class:`DomainRef` (a domain's members); ``text`` is the message as written.
    """

    text: str
    parts: tuple[str | Ref | DomainRef, ...]

    __repr__ = fields_repr

    @classmethod
    def parse(cls, text: str) -> Template:
        parts: list[str | Ref | DomainRef] = []
        position = 0
        for match in re.finditer(PLACEHOLDER, text):
            if match.start() > position:
                parts.append(text[position : match.start()])
            name = match.group(1)
            if name.startswith(_DOMAIN_PLACEHOLDER):
                parts.append(DomainRef(name.removeprefix(_DOMAIN_PLACEHOLDER)))
            else:
                parts.append(Ref(name))
            position = match.end()
        if position < len(text):
            parts.append(text[position:])
        return cls(text, tuple(parts))

    @property
    def slots(self) -> tuple[str, ...]:
        return tuple(p.slot for p in self.parts if isinstance(p, Ref))

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(p.domain for p in self.parts if isinstance(p, DomainRef))


@lean_state(priority=0, sets=(), why="", conflict=None, hint=None, note=None, between=())
@attrs.frozen(eq=False, slots=False)  # a dict class: the disk cache restores it without a Python call
class CompiledRule:
    id: str
    stage: str
    file: str
    line: int | None
    priority: int
    when: tuple[Condition, ...]
    sets: tuple[tuple[str, ValueExpr], ...]
    why: str
    conflict: str | None
    hint: str | None
    note: str | None
    between: tuple[str, ...]
    reads: tuple[str, ...]
    templates: Mapping[str, Template] = attrs.field(factory=dict, repr=False)

    __repr__ = fields_repr

    def set_of(self, slot: str) -> ValueExpr:
        """The expression this rule sets ``slot`` to."""
        for name, expr in self.sets:
            if name == slot:
                return expr
        raise KeyError(slot)

    @property
    def kind(self) -> str:
        return "conflict" if self.conflict is not None else ("set" if self.sets else "note")


@attrs.frozen(eq=False)
class StagePlan:
    """What one stage does, in order: decide these slots, then run these checks."""

    name: str
    slots: tuple[str, ...]
    setters: Mapping[str, tuple[CompiledRule, ...]]
    checks: tuple[CompiledRule, ...]

    __repr__ = fields_repr


@attrs.frozen(eq=False)
class CompiledTable:
    """A rule table ready to evaluate. Build with :func:`resolver.load_rules`. Tables compare by
    identity: loading the same files twice gives two tables that resolve alike but are not ``==``."""

    stages: tuple[StagePlan, ...]
    slots: Mapping[str, Slot]
    domains: Mapping[str, frozenset[str]]
    rules: Mapping[str, CompiledRule]
    removed: Mapping[str, Mapping[str, Any]]
    #: The ``var.NAME`` slots the rules read, mapped to the environment variable NAME.
    variables: Mapping[str, str]
    files: tuple[str, ...] = ()

    __repr__ = fields_repr

    @property
    def functions(self) -> frozenset[str]:
        """Names of the registered functions the rules call."""
        return frozenset(expr.fn for rule in self.rules.values() for _, expr in rule.sets if isinstance(expr, Call))

    def graph(self) -> nx.DiGraph:
        """The dependency graph: slot -> rule that reads it -> slot it sets (imports networkx)."""
        stage_index = {plan.name: i for i, plan in enumerate(self.stages)}
        from resolver._engine.slot_graph import dependency_graph  # networkx: only when a graph is drawn

        return dependency_graph(self.slots, self.rules.values(), stage_index)
