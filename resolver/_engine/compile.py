"""Compiling loaded rule files into a :class:`~resolver._engine.compiled.CompiledTable`, with every check
that can run before use; imported only when a table is compiled (a table from the disk cache skips it).

Slots and rules form a networkx DiGraph (slot -> rule that reads it -> slot it sets). The plan is
the graph's deterministic topological order, cut into stages. Errors found here name the file,
the rule and the line: unknown slots, stages, functions and values, rules reading a slot a later
stage decides, rules setting another stage's slot, cycles, and ambiguous rules.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from resolver._engine.compiled import CompiledRule, CompiledTable, StagePlan, Template
from resolver._engine.conditions import (
    OPERATORS,
    Call,
    Condition,
    Const,
    InvalidOperand,
    OperandContext,
    Ref,
    ValueExpr,
)
from resolver._engine.declared import RawRule, TableData
from resolver._engine.errors import RuleTableError
from resolver._engine.expressions import CallSpec, ConstSpec, DomainArg, OrderArg, RefSpec, SlotsArg
from resolver._engine.function_registry import call_problem, slots_problem
from resolver._engine.slot_graph import RuleNode, SlotNode, dependency_graph
from resolver._engine.suggest import did_you_mean
from resolver._engine.table import VARIABLE_PREFIX, Slot

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["compile_table"]


def _sort_key(graph: nx.DiGraph) -> Any:
    def key(node: SlotNode | RuleNode) -> tuple[int, int, str]:
        if isinstance(node, RuleNode):
            return (graph.nodes[node]["stage"], 0, node.rule)
        return (graph.nodes[node]["stage"], 1, node.slot)

    return key


def compile_table(data: TableData) -> CompiledTable:
    domains = {name: data.expand_domain(name) for name in sorted(data.domains)}
    stage_index = {name: i for i, name in enumerate(data.stages)}
    for slot in data.slots.values():
        if slot.stage not in stage_index:
            raise RuleTableError(f"slot {slot.name!r} names unknown stage {slot.stage!r}")
        if slot.domain is not None and slot.domain not in domains:
            raise RuleTableError(f"slot {slot.name!r} names unknown domain {slot.domain!r}")
    compiler = _RuleCompiler(data, domains, stage_index)
    rules = [compiler.compile(raw) for raw in data.rules]
    slots = dict(data.slots)
    for rule in rules:
        for name in rule.reads:
            if name.startswith(VARIABLE_PREFIX) and name not in slots:
                variable = data.slot(name)
                assert variable is not None
                slots[name] = variable

    import networkx as nx

    graph = dependency_graph(slots, rules, stage_index)
    by_id = {rule.id: rule for rule in rules}
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        path = [a for a, _ in cycle] + [cycle[0][0]]
        first_rule = next(by_id[n.rule] for n in path if isinstance(n, RuleNode))
        raise RuleTableError(
            "rules form a cycle: " + " -> ".join(_node_text(n) for n in path),
            file=first_rule.file,
            rule=first_rule.id,
            line=first_rule.line,
        )

    order = list(nx.lexicographical_topological_sort(graph, key=_sort_key(graph)))
    setters: dict[str, list[CompiledRule]] = {}
    for rule in rules:
        for name, _ in rule.sets:
            setters.setdefault(name, []).append(rule)
    for name, group in setters.items():
        group.sort(key=lambda r: (-r.priority, r.id))
        _check_ambiguity(name, group)

    plans = []
    for stage in data.stages:
        stage_slots = tuple(n.slot for n in order if isinstance(n, SlotNode) and slots[n.slot].stage == stage)
        checks = sorted((r for r in rules if r.stage == stage and not r.sets), key=lambda r: (-r.priority, r.id))
        plans.append(
            StagePlan(
                name=stage,
                slots=stage_slots,
                setters={n: tuple(setters.get(n, ())) for n in stage_slots},
                checks=tuple(checks),
            )
        )
    return CompiledTable(
        stages=tuple(plans),
        slots=slots,
        domains=domains,
        rules={r.id: r for r in sorted(rules, key=lambda r: r.id)},
        removed=data.removed,
        variables={n: n.removeprefix(VARIABLE_PREFIX) for n in sorted(slots) if n.startswith(VARIABLE_PREFIX)},
        files=tuple(data.files),
    )


def _node_text(node: SlotNode | RuleNode) -> str:
    return f"slot:{node.slot}" if isinstance(node, SlotNode) else f"rule:{node.rule}"


def _check_ambiguity(slot: str, group: list[CompiledRule]) -> None:
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            if a.priority != b.priority:
                break
            if not _exclusive(a, b):
                raise RuleTableError(
                    f"ambiguous: rules {a.id!r} and {b.id!r} both set {slot!r} at priority {a.priority} and "
                    "their conditions can both hold; give one a higher `priority` or make them exclusive",
                    file=b.file,
                    rule=b.id,
                    line=b.line,
                )


def _exclusive(a: CompiledRule, b: CompiledRule) -> bool:
    shapes_b = {c.slot: c.shape for c in b.when}
    return any(c.slot in shapes_b and c.shape.disjoint(shapes_b[c.slot]) for c in a.when)


_T = TypeVar("_T")


def _typed(value: Any) -> Any:
    """``value`` with the type of every part beside it: a key under which only identical values meet."""
    if isinstance(value, Condition):
        return (Condition, value.slot, _typed(value.ops))
    if isinstance(value, tuple):
        return (tuple, *map(_typed, value))
    if isinstance(value, frozenset):
        return (frozenset, frozenset(map(_typed, value)))
    return (type(value), value)


class _RuleCompiler:
    def __init__(self, data: TableData, domains: Mapping[str, frozenset[str]], stage_index: Mapping[str, int]):
        self.data = data
        self.domains = domains
        self._values: dict[Any, Any] = {}
        self.stage_index = stage_index

    def compile(self, raw: RawRule) -> CompiledRule:
        """The rule's meaning checked against the table (its shape is the schema's: ``raw.spec``)."""
        spec = raw.spec
        stage = sys.intern(spec.stage)
        if stage not in self.stage_index:
            hint = did_you_mean(stage, self.data.stages)
            raise raw.error(f"unknown stage {stage!r}; {hint + ' ' if hint else ''}{self.data.stages_said()}")
        if stage == self.data.stages[0]:
            raise raw.error(f"stage {stage!r} holds the inputs; rules belong to a later stage")
        # one outcome: known only now, as a table of cases gives its rules their outcomes
        has_set, has_conflict = spec.set is not None, spec.conflict is not None
        if has_set == has_conflict and not (spec.note is not None and not has_set and not has_conflict):
            raise raw.error('a rule has exactly one outcome: `set = {...}`, `conflict = "..."`, or only `note`')
        if has_conflict and spec.hint is None:
            raise raw.error("a conflict needs a `hint` that tells the user the fix")

        reads: list[str] = []
        when = tuple(self._condition(raw, name, condition, reads) for name, condition in sorted(spec.when.items()))
        sets = tuple(self._set(raw, name, expr, reads) for name, expr in sorted((spec.set or {}).items()))
        templates: dict[str, Template] = {}
        texts = {"why": spec.why or None, "conflict": spec.conflict, "hint": spec.hint, "note": spec.note}
        for key, text in texts.items():
            if text is None:
                continue
            template = templates[key] = Template.parse(text)
            for domain in template.domains:
                if domain not in self.domains:
                    raise raw.error(f"template names unknown domain {domain!r}")
            for name in template.slots:
                self._read(raw, name, reads)
        between = tuple(spec.between)
        if has_conflict:
            if not between:
                between = tuple(c.slot for c in when[:2])
            for name in between:
                self._read(raw, name, reads)
        decided_at = [(name, self._stage_of(name)) for name in reads]
        late = [(name, decided) for name, decided in decided_at if self.stage_index[decided] > self.stage_index[stage]]
        if late:
            name, decided = late[0]
            raise raw.error(
                f"reads slot {name!r}, which stage {decided!r} decides after this rule's stage {stage!r}; "
                + self._stage_to_use(spec, stage, max((d for _, d in late), key=self.stage_index.__getitem__))
            )
        for name, _ in sets:
            slot = self.data.slots[name]
            if slot.stage != stage:
                raise raw.error(f"sets slot {name!r}, which belongs to stage {slot.stage!r}, not {stage!r}")
        return CompiledRule(
            id=raw.id,
            stage=stage,
            file=raw.file,
            line=raw.line,
            priority=spec.priority,
            when=when,
            sets=sets,
            why=spec.why,
            conflict=spec.conflict,
            hint=spec.hint,
            note=spec.note,
            between=between,
            reads=tuple(dict.fromkeys(reads)),
            templates=templates,
        )

    def _stage_to_use(self, spec: Any, stage: str, needed: str) -> str:
        """The fix for a rule that reads a slot decided after its stage: the earliest stage that has
        every slot it reads, unless the rule sets a slot of its own stage (then it cannot move)."""
        owned = sorted(spec.set or {})
        where = "docs/rule-format.md lists the stage of each slot"
        if owned:
            return (
                f"the stage to read it from is {needed!r}, but the rule sets {owned[0]!r} of stage {stage!r} (a rule "
                f"sets only slots of its own stage): read slots decided at {stage!r} or before instead ({where})"
            )
        return f'write stage = "{needed}", the earliest stage that has every slot it reads ({where})'

    def _stage_of(self, name: str) -> str:
        slot = self.data.slot(name)
        assert slot is not None  # every name read was looked up by _read
        return slot.stage

    def _read(self, raw: RawRule, name: str, reads: list[str]) -> Slot:
        slot = self.data.slot(name)
        if slot is None:
            hint = did_you_mean(name, self.data.slots)
            raise raw.error(f"unknown slot {name!r}" + (f"; {hint}" if hint else ""))
        reads.append(sys.intern(name))
        return slot

    def _check_value(self, raw: RawRule, slot: Slot, value: Any) -> Any:
        if isinstance(value, list):
            return tuple(self._check_value(raw, slot, v) if slot.type != "tuple" else v for v in value)
        if value == "none" and slot.nullable:
            return None
        if slot.domain is not None and isinstance(value, str):
            members = self.domains[slot.domain]
            if value not in members:
                declared = ", ".join(self.data.domain_files(slot.domain))
                hint = did_you_mean(value, members)
                raise raw.error(
                    f"unknown value {value!r} for slot {slot.name!r}; {hint + ' ' if hint else ''}"
                    f"domain {slot.domain!r} "
                    f"(declared in {declared}) has " + ", ".join(sorted(members))
                )
        return value

    def _condition(self, raw: RawRule, name: str, condition: Any, reads: list[str]) -> Condition:
        name = sys.intern(name)
        slot = self._read(raw, name, reads)
        context = OperandContext(name, self.domains, lambda value: self._check_value(raw, slot, value))
        ops: list[tuple[str, Any]] = []
        items = condition.items() if isinstance(condition, dict) else [("eq", condition)]
        for op, operand in items:
            operator = OPERATORS.get(op)
            if operator is None:
                hint = did_you_mean(str(op), OPERATORS)
                raise raw.error(
                    f"unknown condition operator {op!r} on {name!r}; {hint + ' ' if hint else ''}"
                    f"use one of {', '.join(OPERATORS)}"
                )
            if isinstance(operand, RefSpec):
                if not operator.takes_ref:
                    raise raw.error(f"{op!r} on {name!r} takes a constant, not {{ ref }}")
                self._read(raw, operand.ref, reads)
                ops.append((op, Ref(operand.ref)))
                continue
            try:
                ops.append(self._shared((sys.intern(op), operator.validate(operand, context))))
            except InvalidOperand as exc:
                raise raw.error(str(exc)) from None
        return self._shared(Condition(name, tuple(ops), self.domains))

    def _shared(self, value: _T) -> _T:
        """The first equal value compiled, if it can be hashed: the same test in many rules is one
        object, pickled once by the disk cache and (a condition) tested once. Types are part of the
        key, so ``1``, ``1.0`` and ``true`` (equal in Python) stay apart."""
        try:
            return self._values.setdefault(_typed(value), value)  # type: ignore[no-any-return]
        except TypeError:  # an operand that cannot be hashed
            return value

    def _set(self, raw: RawRule, name: str, expr: Any, reads: list[str]) -> tuple[str, ValueExpr]:
        slot = self.data.slots.get(name)
        if slot is None:
            if self.data.slot(name) is not None:
                raise raw.error(f"sets {name!r}, an input variable; rules cannot change inputs")
            self._read(raw, name, [])  # raises "unknown slot"
            raise AssertionError
        if isinstance(expr, RefSpec):
            self._read(raw, expr.ref, reads)
            return name, Ref(expr.ref)
        if isinstance(expr, ConstSpec):
            return name, Const(expr.const)
        if isinstance(expr, CallSpec):
            return name, self._call(raw, expr, reads)
        value = self._check_value(raw, slot, expr)
        if not slot.accepts(value):
            raise raw.error(f"sets {name!r} to {expr!r}, but the slot holds {slot.type}")
        return name, Const(value)

    def _call(self, raw: RawRule, call: CallSpec, reads: list[str]) -> Call:
        args: list[Ref | Const] = []
        for position, arg in enumerate(call.args):
            if isinstance(arg, ConstSpec):
                args.append(Const(arg.const))
            elif isinstance(arg, DomainArg):
                if arg.domain not in self.domains:
                    raise raw.error(f"function argument names unknown domain {arg.domain!r}")
                args.append(Const(tuple(sorted(self.domains[arg.domain]))))
            elif isinstance(arg, OrderArg):
                args.append(Const(self._order_of(raw, arg.order_of)))
            elif isinstance(arg, SlotsArg):
                problem = slots_problem(call.fn, position, len(call.args))
                if problem is not None:
                    raise raw.error(problem)
                names = self._slots_of(raw, arg.slots_of)
                args.append(Const(tuple(name[len(arg.slots_of) + 1 :] for name in names)))
                for name in names:
                    self._read(raw, name, reads)
                    args.append(Ref(name))
            else:  # a slot's name
                self._read(raw, arg, reads)
                args.append(Ref(arg))
        problem = call_problem(
            call.fn,
            [
                ("slot", self.data.slots[a.slot].type if a.slot in self.data.slots else "str")
                if isinstance(a, Ref)
                else ("const", a.value)
                for a in args
            ],
        )
        if problem is not None:
            raise raw.error(problem)
        return Call(call.fn, tuple(args))

    def _slots_of(self, raw: RawRule, prefix: str) -> list[str]:
        """The slots declared under ``PREFIX.``, sorted: one argument each (``{ slots_of }``)."""
        names = sorted(name for name in self.data.slots if name.startswith(prefix + "."))
        if not names:
            raise raw.error(f"{{ slots_of = {prefix!r} }} names no slots: no slot name starts with {prefix + '.'!r}")
        return names

    def _order_of(self, raw: RawRule, prefix: str) -> tuple[Any, ...]:
        """The constants the rules ``PREFIX.*`` set (each one slot to a value; others are left out),
        highest priority first: an order declared once, by those rules' priorities (``auto``'s
        accelerators), that a function can be given."""
        found = []
        for rule in self.data.rules:
            if not rule.id.startswith(prefix + "."):
                continue
            values = [v for v in (rule.spec.set or {}).values() if not isinstance(v, (RefSpec, ConstSpec, CallSpec))]
            if len(values) == 1:  # a rule that computes its value has no place of its own in the order
                found.append((-rule.spec.priority, rule.id, values[0]))
        if not found:
            raise raw.error(f"{{ order_of = {prefix!r} }} names no rules: no rule id starts with {prefix + '.'!r}")
        return tuple(dict.fromkeys(value for _, _, value in sorted(found)))  # a value's first place
