"""The evaluator: runs a compiled rule table over input values, stage by stage.

The engine knows slots, rules and stages, nothing about accelerators or clusters. Each stage
decides its slots in the graph's order (for each slot, the first rule that fires in priority
order wins; otherwise the slot's default), then runs its checks (conflict and note rules), then
verifies its slots' types and domains. Everything a person may want to watch goes through a
:class:`~resolver.reporter.Reporter`.

Evaluation is compiled ahead, once per table: each slot gets a dispatch table keyed by the value of
the slot its setters test most for equality, so a resolution looks up a short list of candidate
rules and tests only their remaining conditions. Provenance is built only when someone asks.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import attrs

from resolver.compiler import CompiledRule, CompiledTable, DomainRef, Template
from resolver.conditions import Call, Condition, Const, NotANumber, Ref, ValueExpr
from resolver.config import FrozenMapping, Provenance, display
from resolver.errors import ConflictError, ResolutionError, Side
from resolver.functions import FUNCTIONS, InvalidInput
from resolver.reporter import Reporter

__all__ = ["Evaluation", "Evaluator", "display"]

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "tuple": (tuple,),
    "mapping": (Mapping,),
}
_DEFAULT = Provenance("default")
_CONST, _REF, _CALL = 0, 1, 2
Predicate = Callable[[Mapping[str, Any]], bool]


@attrs.frozen
class _Choice:
    """A setter rule as one dispatch branch sees it: the tests left to run and how to get the value."""

    rule: CompiledRule
    tests: tuple[Predicate, ...]
    kind: int
    payload: Any
    expr: ValueExpr


@attrs.frozen
class _SlotProgram:
    slot: str
    dispatch: str | None
    branches: Mapping[Any, tuple[_Choice, ...]]
    other: tuple[_Choice, ...]
    default: Any


@attrs.frozen
class _StageProgram:
    name: str
    slots: tuple[str, ...]
    programs: tuple[_SlotProgram, ...]
    checks: _CheckIndex
    verify: tuple[tuple[str, tuple[type, ...] | None, frozenset[str] | None, bool], ...]


class Evaluation:
    """The outcome of a successful run: every slot's value and provenance, plus notes."""

    __slots__ = ("values", "provenance", "notes", "_evaluator")

    def __init__(
        self, evaluator: Evaluator, values: Mapping[str, Any], provenance: Mapping[str, Provenance], notes: tuple[str, ...]
    ) -> None:
        self._evaluator = evaluator
        self.values = values
        self.provenance = provenance
        self.notes = notes

    @property
    def stages(self) -> tuple[Any, ...]:
        """Each stage's slots as a frozen typed value, in stage order."""
        return tuple(self._evaluator.stage_value(plan.name, self.values) for plan in self._evaluator.table.stages)


class Evaluator:
    """Evaluates one compiled table; build once per table, call :meth:`run` per resolution."""

    def __init__(self, table: CompiledTable) -> None:
        self.table = table
        self._stage_classes: dict[str, type] = {}
        self._stages = tuple(
            _StageProgram(
                name=plan.name,
                slots=plan.slots,
                programs=tuple(_slot_program(table, slot, plan.setters.get(slot, ())) for slot in plan.slots),
                checks=_CheckIndex(plan.checks),
                verify=tuple(v for v in (_slot_check(table, name) for name in plan.slots) if v is not None),
            )
            for plan in table.stages
        )

    def render(self, template: Template | None, values: Mapping[str, Any]) -> str | None:
        if template is None:
            return None
        if len(template.parts) == 1 and type(template.parts[0]) is str:
            return template.text
        out = []
        for part in template.parts:
            if type(part) is str:
                out.append(part)
            elif isinstance(part, DomainRef):
                out.append(", ".join(sorted(self.table.domains[part.domain])))
            else:
                value = values.get(part.slot)
                out.append("unset" if value is None else display(value))
        return "".join(out)

    def run(
        self,
        values: dict[str, Any],
        inputs: Mapping[str, Provenance] | Callable[[str], Provenance | None],
        reporter: Reporter | None = None,
    ) -> Evaluation:
        """Decide every slot. ``values`` holds the inputs and is filled in place."""
        origins: dict[str, _Choice | None] = {}
        provenance = ProvenanceMap(self, values, inputs, origins)
        notes: list[str] = []
        rule: CompiledRule | None = None
        try:
            for stage in self._stages:
                for program in stage.programs:
                    slot = program.slot
                    if slot in values:
                        continue
                    choices = program.other
                    if program.dispatch is not None:
                        try:
                            choices = program.branches.get(values.get(program.dispatch), choices)
                        except TypeError:  # an unhashable value equals none of the constants
                            pass
                    for choice in choices:
                        rule = choice.rule
                        for test in choice.tests:
                            if not test(values):
                                break
                        else:
                            kind = choice.kind
                            if kind == _CONST:
                                values[slot] = choice.payload
                            elif kind == _REF:
                                values[slot] = values.get(choice.payload)
                            else:
                                values[slot] = self._call(rule, choice.payload, values, provenance)
                            origins[slot] = choice
                            if rule.note is not None:
                                note = self.render(rule.templates["note"], values)
                                if note not in notes:
                                    notes.append(note)  # type: ignore[arg-type]
                            break
                    else:
                        values[slot] = program.default
                        origins[slot] = None
                    rule = None
                    if reporter is not None:
                        reporter.decided(slot, values[slot], provenance[slot])
                for check, tests in stage.checks.candidates(values):
                    rule = check
                    for test in tests:
                        if not test(values):
                            break
                    else:
                        if check.conflict is not None:
                            error = self._conflict(check, values, provenance)
                            if reporter is not None:
                                reporter.failed(error)
                            raise error
                        note = self.render(check.templates.get("note"), values)
                        notes.append(note)  # type: ignore[arg-type]
                        if reporter is not None:
                            reporter.noted(check.id, note)  # type: ignore[arg-type]
                rule = None
                self._verify(stage, values)
                if reporter is not None:
                    reporter.stage_finished(stage.name, self.stage_value(stage.name, values))
        except NotANumber as exc:
            raise ResolutionError(exc.message, hint=exc.hint, rule=rule.id if rule else None) from None
        return Evaluation(self, values, provenance, tuple(notes))

    def stage_value(self, stage: str, values: Mapping[str, Any]) -> Any:
        """One stage's slots as a frozen attrs instance (``PlacedStage(num_devices=2, ...)``)."""
        plan = next(p for p in self.table.stages if p.name == stage)
        cls = self._stage_classes.get(stage)
        if cls is None:
            cls = self._stage_classes[stage] = attrs.make_class(
                _class_name(stage), {_field_name(s): attrs.field() for s in plan.slots}, frozen=True, slots=True
            )
        return cls(*(values[s] for s in plan.slots))

    # -- pieces ---------------------------------------------------------------------------------

    def _call(self, rule: CompiledRule, expr: Call, values: Mapping[str, Any], provenance: Mapping[str, Provenance]) -> Any:
        args = [values.get(a.slot) if type(a) is Ref else a.value for a in expr.args]
        if None in args:
            return None  # a function of an unset value is unset; the stage's checks say why
        try:
            return FUNCTIONS[expr.fn](*args)
        except InvalidInput as exc:
            refs = [a.slot for a in expr.args if isinstance(a, Ref)]
            sides = tuple(Side(s, values.get(s), provenance.get(s, _DEFAULT)) for s in refs)
            message = exc.message
            if len(refs) == 1:
                label = _input_label(self.table, refs[0])
                if label not in message:
                    message = f"{label}: {message}"
            raise ResolutionError(message, hint=exc.hint, rule=rule.id, sides=sides) from None

    def provenance_of(self, choice: _Choice, values: Mapping[str, Any], provenance: Mapping[str, Provenance]) -> Provenance:
        rule, expr = choice.rule, choice.expr
        why = self.render(rule.templates.get("why"), values)
        inputs = tuple((s, values.get(s)) for s in rule.reads)
        origin = None
        if isinstance(expr, Ref):
            origin = provenance.get(expr.slot)
        elif isinstance(expr, Call):
            refs = [a.slot for a in expr.args if isinstance(a, Ref)]
            if len(refs) == 1:
                origin = provenance.get(refs[0])
        if origin is not None and origin.kind != "rule":
            return Provenance(origin.kind, origin.source, rule.id, why, inputs)
        return Provenance("rule", None, rule.id, why or "", inputs)

    def _conflict(
        self, rule: CompiledRule, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> ConflictError:
        sides = tuple(Side(s, values.get(s), provenance.get(s, _DEFAULT)) for s in rule.between)
        return ConflictError(
            self.render(rule.templates.get("conflict"), values) or "",
            rule=rule.id,
            sides=sides,
            hint=self.render(rule.templates.get("hint"), values),
        )

    @staticmethod
    def _verify(stage: _StageProgram, values: Mapping[str, Any]) -> None:
        for name, expected, members, required in stage.verify:
            value = values[name]
            if value is None:
                if required:
                    raise ResolutionError(
                        f"no rule decided {name!r} in stage {stage.name!r} for these flags and this environment",
                        hint="this is a gap in the rule table: add a rule for this case (resolver explain "
                        "shows what was decided so far)",
                    )
                continue
            if expected is not None and (not isinstance(value, expected) or (expected == (int,) and value is True)):
                raise ResolutionError(f"slot {name!r} got {value!r}, which is not of type {expected[0].__name__}")
            if members is not None and isinstance(value, str) and value not in members:
                raise ResolutionError(
                    f"slot {name!r} got {value!r}, which is not in its domain ({', '.join(sorted(members))})"
                )


# -- compiling a slot's setters into a dispatch table ---------------------------------------------


def _equality_members(condition: Condition) -> frozenset[Any] | None:
    """The constants a condition accepts when it is a plain equality or membership test, else None.

    Only text and booleans qualify: they equal only themselves, so a dict lookup decides them
    exactly as the condition would (integers may equal numeric text and are left to the test).
    """
    if len(condition.ops) != 1:
        return None
    op, operand = condition.ops[0]
    if op == "eq" and isinstance(operand, (str, bool)):
        return frozenset([operand])
    if op == "in" and isinstance(operand, tuple) and operand and all(isinstance(o, (str, bool)) for o in operand):
        return frozenset(operand)
    return None


def _choice(rule: CompiledRule, slot: str, skip: str | None) -> _Choice:
    tests = tuple(c.predicate for c in rule.when if c.slot != skip)
    expr = rule.set_of(slot)
    if isinstance(expr, Const):
        value = FrozenMapping(expr.value) if isinstance(expr.value, dict) else expr.value
        return _Choice(rule, tests, _CONST, value, expr)
    if isinstance(expr, Ref):
        return _Choice(rule, tests, _REF, expr.slot, expr)
    return _Choice(rule, tests, _CALL, expr, expr)


def _slot_program(table: CompiledTable, slot: str, setters: tuple[CompiledRule, ...]) -> _SlotProgram:
    default = table.slots[slot].default
    counts: Counter[str] = Counter()
    for rule in setters:
        for condition in rule.when:
            if _equality_members(condition) is not None:
                counts[condition.slot] += 1
    if not counts:
        return _SlotProgram(slot, None, {}, tuple(_choice(r, slot, None) for r in setters), default)
    dispatch = min(counts, key=lambda s: (-counts[s], s))
    accepted: list[frozenset[Any] | None] = []
    for rule in setters:
        condition = next((c for c in rule.when if c.slot == dispatch), None)
        accepted.append(_equality_members(condition) if condition is not None else None)
    constants = set().union(*(a for a in accepted if a is not None))
    branches = {
        value: tuple(
            _choice(rule, slot, dispatch if members is not None else None)
            for rule, members in zip(setters, accepted, strict=True)
            if members is None or value in members
        )
        for value in constants
    }
    other = tuple(_choice(r, slot, None) for r, members in zip(setters, accepted, strict=True) if members is None)
    return _SlotProgram(slot, dispatch, branches, other, default)


class _CheckIndex:
    """A stage's checks, indexed by an equality each must satisfy, so most are never evaluated.

    A check whose conditions include ``slot = "text"`` (or a boolean) can only fire when the slot
    holds that value; the others are always candidates. Candidates keep the stage's order
    (priority, then id), so indexing changes nothing but the work done. Each candidate comes with
    the tests left to run (the guard is already known to hold).
    """

    def __init__(self, checks: tuple[CompiledRule, ...]) -> None:
        self._always: list[tuple[int, CompiledRule, tuple[Predicate, ...]]] = []
        self._guarded: dict[str, dict[Any, list[tuple[int, CompiledRule, tuple[Predicate, ...]]]]] = {}
        for position, rule in enumerate(checks):
            guard = next((c for c in rule.when if _equality_members(c) is not None), None)
            if guard is None:
                self._always.append((position, rule, tuple(c.predicate for c in rule.when)))
                continue
            tests = tuple(c.predicate for c in rule.when if c is not guard)
            by_value = self._guarded.setdefault(guard.slot, {})
            for value in _equality_members(guard) or ():
                by_value.setdefault(value, []).append((position, rule, tests))
        self._always_pairs = [(rule, tests) for _, rule, tests in self._always]
        self._guards = tuple(self._guarded.items())

    def candidates(self, values: Mapping[str, Any]) -> list[tuple[CompiledRule, tuple[Predicate, ...]]]:
        found: list[tuple[int, CompiledRule, tuple[Predicate, ...]]] | None = None
        for slot, by_value in self._guards:
            value = values.get(slot)
            if value is not None and isinstance(value, Hashable):
                hits = by_value.get(value)
                if hits:
                    if found is None:
                        found = list(self._always)
                    found.extend(hits)
        if found is None:
            return self._always_pairs
        found.sort(key=_first)
        return [(rule, tests) for _, rule, tests in found]


def _first(item: tuple[int, CompiledRule, tuple[Predicate, ...]]) -> int:
    return item[0]


class ProvenanceMap(Mapping[str, Provenance]):
    """Provenance of every slot, built only when someone looks (most resolutions never do)."""

    def __init__(
        self,
        evaluator: Evaluator,
        values: Mapping[str, Any],
        inputs: Mapping[str, Provenance] | Callable[[str], Provenance | None],
        origins: Mapping[str, _Choice | None],
    ) -> None:
        self._evaluator = evaluator
        self._values = values
        self._inputs = inputs
        self._origins = origins
        self._done: dict[str, Provenance] = {}

    def record(self, slot: str, provenance: Provenance) -> None:
        self._done[slot] = provenance

    def __getitem__(self, slot: str) -> Provenance:
        found = self._done.get(slot)
        if found is not None:
            return found
        if slot in self._origins:
            choice = self._origins[slot]
            found = _DEFAULT if choice is None else self._evaluator.provenance_of(choice, self._values, self)
        else:
            inputs = self._inputs
            found = inputs(slot) if callable(inputs) else inputs.get(slot)
            if found is None:
                raise KeyError(slot)
        self._done[slot] = found
        return found

    def __iter__(self) -> Iterator[str]:
        yield from (s for s in self._values if s not in self._origins)
        yield from self._origins

    def __len__(self) -> int:
        return len(self._values.keys() | self._origins.keys())


def _input_label(table: CompiledTable, slot: str) -> str:
    """How a user knows an input: a variable by its name, a flag by its name, else the slot."""
    variable = table.variables.get(slot)
    if variable is not None:
        return variable
    return slot.removeprefix("arg.")


def _slot_check(table: CompiledTable, name: str) -> tuple[str, tuple[type, ...] | None, frozenset[str] | None, bool] | None:
    """What verifying a stage checks of one slot (type, domain, required); None: nothing to check."""
    if name in table.variables:
        return None  # variables are text or unset by construction
    slot = table.slots[name]
    members = table.domains[slot.domain] if slot.domain is not None else None
    expected = _PYTHON_TYPES.get(slot.type)
    if expected is None and members is None and not slot.required:
        return None
    return name, expected, members, slot.required


def _class_name(stage: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", stage)) + "Stage"


def _field_name(slot: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", slot)
