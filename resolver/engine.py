"""The evaluator: runs a compiled rule table over input values, stage by stage.

The engine knows slots, rules and stages, nothing about accelerators or clusters. Each stage
decides its slots in the graph's order (for each slot, the first rule that fires in priority
order wins; otherwise the slot's default), then runs its checks (conflict and note rules), then
verifies its slots' types and domains. Everything a person may want to watch goes through a
:class:`~resolver.reporter.Reporter`.

Evaluation is compiled ahead, once per table: each slot's setters and each stage's checks become a
decision tree over the slots they test (:mod:`resolver.dispatch`), so a resolution looks up a short
list of candidate rules and runs only their remaining tests. Provenance is built only when asked for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import attrs

from resolver import dispatch
from resolver.compiler import CompiledRule, CompiledTable, DomainRef, Template
from resolver.conditions import Call, Const, NotANumber, Ref, ValueExpr
from resolver.config import FrozenMapping, Provenance, display
from resolver.dispatch import Leaf, lookup
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


class _Choice(NamedTuple):
    """A setter rule and how it gets the slot's value (a constant, another slot, or a function)."""

    rule: CompiledRule
    kind: int
    payload: Any
    expr: ValueExpr
    note: Template | None


class _SlotProgram(NamedTuple):
    """How one slot is decided: the decision tree over its setters, and its default."""

    slot: str
    tree: dispatch.Node[_Choice] | dispatch.Leaf[_Choice]
    default: Any


class Evaluation:
    """The outcome of a successful run: every slot's value and provenance, plus notes."""

    __slots__ = ("values", "provenance", "notes", "_evaluator")

    def __init__(
        self,
        evaluator: Evaluator,
        values: Mapping[str, Any],
        provenance: Mapping[str, Provenance],
        notes: tuple[str, ...],
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
        self._input_stage = table.stages[0].name if table.stages else None
        #: Inputs are given by the caller; a missing one takes its slot's default.
        self._input_slots = frozenset(table.stages[0].slots) if table.stages else frozenset()
        #: Inputs the snapshot does not fill (``Environment.inputs`` gives every env./file./var. one).
        self._other_inputs = tuple(s for s in sorted(self._input_slots) if not s.startswith(("env.", "file.", "var.")))
        self._plan = tuple(
            (
                plan.name,
                tuple(
                    _slot_program(table, slot, plan.setters.get(slot, ()))
                    for slot in plan.slots
                    if slot not in self._input_slots
                ),
                dispatch.build([(rule, rule.when) for rule in plan.checks]),
                tuple(
                    v
                    for v in (_slot_check(table, name, plan.setters.get(name, ())) for name in plan.slots)
                    if v is not None
                ),
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
            if isinstance(part, str):
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
        """Decide every slot. ``values`` holds the inputs and is filled in place.

        ``values`` must hold the snapshot's inputs (:meth:`Environment.inputs`); a missing ``arg.*``
        input takes its slot's default.
        """
        origins: dict[str, _Choice | None] = {}
        provenance = ProvenanceMap(self, values, inputs, origins)
        notes: list[str] = []
        rule: CompiledRule | None = None
        missing = [s for s in self._other_inputs if s not in values]
        for slot in missing:
            values[slot] = self.table.slots[slot].default
            origins[slot] = None
        try:
            for name, programs, checks, verify in self._plan:
                for slot, tree, default in programs:
                    entries = tree.entries if type(tree) is Leaf else lookup(tree, values)
                    for choice, tests in entries:
                        rule, kind, payload, _, note_template = choice
                        for test in tests:
                            if not test(values):
                                break
                        else:
                            if kind == _CONST:
                                values[slot] = payload
                            elif kind == _REF:
                                values[slot] = values.get(payload)
                            else:
                                values[slot] = self._call(rule, payload, values, provenance)
                            origins[slot] = choice
                            if note_template is not None:
                                note = self.render(note_template, values)
                                if note not in notes:
                                    notes.append(note)  # type: ignore[arg-type]
                            break
                    else:
                        values[slot] = default
                        origins[slot] = None
                    rule = None
                    if reporter is not None:
                        reporter.decided(slot, values[slot], provenance[slot])
                for check, tests in checks.entries if type(checks) is Leaf else lookup(checks, values):
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
                if verify:
                    _verify(name, verify, values)
                if reporter is not None:
                    reporter.stage_finished(name, self.stage_value(name, values))
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

    def _call(
        self, rule: CompiledRule, expr: Call, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> Any:
        args = [values.get(a.slot) if isinstance(a, Ref) else a.value for a in expr.args]
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

    def provenance_of(
        self, choice: _Choice, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> Provenance:
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


def _verify(stage: str, verify: tuple[Any, ...], values: Mapping[str, Any]) -> None:
    for name, expected, members, required in verify:
        value = values[name]
        if value is None:
            if required:
                raise ResolutionError(
                    f"no rule decided {name!r} in stage {stage!r} for these flags and this environment",
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


# -- compiling a slot's setters and a stage's checks into decision trees ------------------------------


def _choice(rule: CompiledRule, slot: str) -> _Choice:
    expr = rule.set_of(slot)
    note = rule.templates.get("note")
    if isinstance(expr, Const):
        value = FrozenMapping(expr.value) if isinstance(expr.value, dict) else expr.value
        return _Choice(rule, _CONST, value, expr, note)
    if isinstance(expr, Ref):
        return _Choice(rule, _REF, expr.slot, expr, note)
    return _Choice(rule, _CALL, expr, expr, note)


def _slot_program(table: CompiledTable, slot: str, setters: tuple[CompiledRule, ...]) -> _SlotProgram:
    tree = dispatch.build([(_choice(rule, slot), rule.when) for rule in setters])
    return _SlotProgram(slot, tree, table.slots[slot].default)


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


def _slot_check(
    table: CompiledTable, name: str, setters: tuple[CompiledRule, ...]
) -> tuple[str, tuple[type, ...] | None, frozenset[str] | None, bool] | None:
    """What verifying a stage checks of one slot (type, domain, required); None: nothing to check.

    A slot only ever set to constants that pass, whose default passes too, is proven at compile
    time and skipped; so are variables and files (text or unset by construction).
    """
    if name in table.variables or name.startswith(("var.", "file.")):
        return None
    slot = table.slots[name]
    members = table.domains[slot.domain] if slot.domain is not None else None
    expected = _PYTHON_TYPES.get(slot.type)
    if expected is None and members is None and not slot.required:
        return None
    exprs = [rule.set_of(name) for rule in setters]
    constants = [e.value for e in exprs if isinstance(e, Const)]
    if len(constants) == len(exprs):
        candidates = [*constants, slot.default]
        if all(_passes(v, expected, members, slot.required) for v in candidates):
            return None
    return name, expected, members, slot.required


def _passes(value: Any, expected: tuple[type, ...] | None, members: frozenset[str] | None, required: bool) -> bool:
    if value is None:
        return not required
    if isinstance(value, dict):
        value = FrozenMapping(value)
    if expected is not None and (not isinstance(value, expected) or (expected == (int,) and value is True)):
        return False
    return members is None or not isinstance(value, str) or value in members


def _class_name(stage: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", stage)) + "Stage"


def _field_name(slot: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", slot)
