"""The evaluator: runs a compiled rule table over input values, stage by stage.

The engine knows slots, rules and stages, nothing about accelerators or clusters. Each stage
decides its slots in the graph's order (for each slot, the first rule that fires in priority
order wins; otherwise the slot's default), then runs its checks (conflict and note rules), then
freezes its slots into a typed stage value. Everything a person may want to watch goes through a
:class:`~resolver.reporter.Reporter`.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import attrs

from resolver.compiler import PLACEHOLDER, CompiledRule, CompiledTable
from resolver.conditions import Call, NotANumber, Ref, ValueExpr
from resolver.config import FrozenMapping, Provenance
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


def display(value: Any) -> str:
    """A value as shown in messages: text bare, tuples as lists, booleans lowercase."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(display(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={display(v)}" for k, v in value.items()) + "}"
    return str(value)


@attrs.frozen
class Evaluation:
    """The outcome of a successful run: every slot's value and provenance, plus notes."""

    values: Mapping[str, Any]
    provenance: Mapping[str, Provenance]
    notes: tuple[str, ...]
    stages: tuple[Any, ...]


class Evaluator:
    """Evaluates one compiled table; build once per table, call :meth:`run` per resolution."""

    def __init__(self, table: CompiledTable) -> None:
        self.table = table
        self.stage_classes = {
            plan.name: attrs.make_class(
                _class_name(plan.name),
                {_field_name(s): attrs.field() for s in plan.slots},
                frozen=True,
                slots=True,
            )
            for plan in table.stages
        }
        self._stage_slots = {plan.name: plan.slots for plan in table.stages}
        self._checks = {plan.name: _CheckIndex(plan.checks) for plan in table.stages}
        self._stage_checks = {
            plan.name: tuple(_slot_check(table, name) for name in plan.slots) for plan in table.stages
        }

    def render(self, template: str | None, values: Mapping[str, Any]) -> str | None:
        if template is None or "{" not in template:
            return template

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("domain:"):
                return ", ".join(sorted(self.table.domains[name[7:]]))
            value = values.get(name)
            return "unset" if value is None else display(value)

        return PLACEHOLDER.sub(substitute, template)

    def run(
        self,
        values: dict[str, Any],
        inputs: Mapping[str, Provenance],
        reporter: Reporter | None = None,
    ) -> Evaluation:
        """Decide every slot. ``values`` holds the inputs and is filled in place."""
        provenance = ProvenanceMap(self, values, inputs)
        notes: list[str] = []
        stage_values = []
        for plan in self.table.stages:
            for slot in plan.slots:
                if slot in values:
                    continue
                rule = self._winner(plan.setters[slot], values)
                if rule is None:
                    values[slot] = self.table.slots[slot].default
                    provenance.record(slot, _DEFAULT)
                else:
                    expr = rule.set_of(slot)
                    values[slot] = self._value(rule, expr, values, provenance)
                    provenance.defer(slot, rule, expr)
                    if rule.note is not None:
                        note = self.render(rule.note, values)
                        if note not in notes:
                            notes.append(note)  # type: ignore[arg-type]
                if reporter is not None:
                    reporter.decided(slot, values[slot], provenance[slot])
            for check in self._checks[plan.name].candidates(values):
                if not self._fires(check, values):
                    continue
                if check.conflict is not None:
                    error = self._conflict(check, values, provenance)
                    if reporter is not None:
                        reporter.failed(error)
                    raise error
                note = self.render(check.note, values)
                notes.append(note)  # type: ignore[arg-type]
                if reporter is not None:
                    reporter.noted(check.id, note)  # type: ignore[arg-type]
            stage_value = self._freeze(plan.name, values)
            stage_values.append(stage_value)
            if reporter is not None:
                reporter.stage_finished(plan.name, stage_value)
        return Evaluation(values, provenance, tuple(notes), tuple(stage_values))

    # -- pieces ---------------------------------------------------------------------------------

    @staticmethod
    def _fires(rule: CompiledRule, values: Mapping[str, Any]) -> bool:
        try:
            for condition in rule.when:
                if not condition.predicate(values):
                    return False
        except NotANumber as exc:
            raise ResolutionError(exc.message, hint=exc.hint, rule=rule.id) from None
        return True

    @staticmethod
    def _winner(setters: tuple[CompiledRule, ...], values: Mapping[str, Any]) -> CompiledRule | None:
        rule = None
        try:
            for rule in setters:
                for condition in rule.when:
                    if not condition.predicate(values):
                        break
                else:
                    return rule
        except NotANumber as exc:
            raise ResolutionError(exc.message, hint=exc.hint, rule=rule.id if rule else None) from None
        return None

    def _value(
        self, rule: CompiledRule, expr: ValueExpr, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> Any:
        if isinstance(expr, Ref):
            return values.get(expr.slot)
        if isinstance(expr, Call):
            args = [values.get(a.slot) if isinstance(a, Ref) else a.value for a in expr.args]
            if None in args:
                return None  # a function of an unset value is unset; the stage's checks say why
            try:
                return FUNCTIONS[expr.fn](*args)
            except InvalidInput as exc:
                sides = tuple(
                    Side(a.slot, values.get(a.slot), provenance.get(a.slot, _DEFAULT))
                    for a in expr.args
                    if isinstance(a, Ref)
                )
                refs = [a.slot for a in expr.args if isinstance(a, Ref)]
                message = exc.message
                if len(refs) == 1:
                    label = _input_label(refs[0])
                    if label not in message:
                        message = f"{label}: {message}"
                raise ResolutionError(message, hint=exc.hint, rule=rule.id, sides=sides) from None
        value = expr.value
        return FrozenMapping(value) if isinstance(value, dict) else value

    def _provenance(
        self, rule: CompiledRule, expr: ValueExpr, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> Provenance:
        why = self.render(rule.why, values)
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
        return Provenance("rule", None, rule.id, why, inputs)

    def _conflict(
        self, rule: CompiledRule, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> ConflictError:
        sides = tuple(Side(s, values.get(s), provenance.get(s, _DEFAULT)) for s in rule.between)
        return ConflictError(
            self.render(rule.conflict, values) or "",
            rule=rule.id,
            sides=sides,
            hint=self.render(rule.hint, values),
        )

    def _freeze(self, stage: str, values: Mapping[str, Any]) -> Any:
        for name, expected, members, required in self._stage_checks[stage]:
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
        cls, slots = self.stage_classes[stage], self._stage_slots[stage]
        return cls(*(values[s] for s in slots))


class _CheckIndex:
    """A stage's checks, indexed by an equality each must satisfy, so most are never evaluated.

    A check whose conditions include ``slot = "text"`` (or a boolean) on a typed slot can only fire
    when the slot holds that value; the others are always candidates. Candidates keep the stage's
    order (priority, then id), so indexing changes nothing but the work done.
    """

    def __init__(self, checks: tuple[CompiledRule, ...]) -> None:
        self._always: list[tuple[int, CompiledRule]] = []
        self._guarded: dict[str, dict[Any, list[tuple[int, CompiledRule]]]] = {}
        for position, rule in enumerate(checks):
            guard = _guard(rule)
            if guard is None:
                self._always.append((position, rule))
            else:
                slot, value = guard
                self._guarded.setdefault(slot, {}).setdefault(value, []).append((position, rule))

    def candidates(self, values: Mapping[str, Any]) -> list[CompiledRule]:
        found = list(self._always)
        for slot, by_value in self._guarded.items():
            value = values.get(slot)
            if value is not None and isinstance(value, Hashable):
                found.extend(by_value.get(value, ()))
        if len(found) > 1:
            found.sort(key=_first)
        return [rule for _, rule in found]


def _first(item: tuple[int, CompiledRule]) -> int:
    return item[0]


def _guard(rule: CompiledRule) -> tuple[str, Any] | None:
    for condition in rule.when:
        if condition.slot.startswith("var.") or len(condition.ops) != 1:
            continue  # variables are text that may compare equal to numbers: no exact guard
        op, operand = condition.ops[0]
        if op == "eq" and isinstance(operand, (str, bool)):
            return condition.slot, operand
    return None


class ProvenanceMap(Mapping[str, Provenance]):
    """Provenance of every slot, built only when someone looks (most resolutions never do)."""

    def __init__(self, evaluator: Evaluator, values: Mapping[str, Any], inputs: Mapping[str, Provenance]) -> None:
        self._evaluator = evaluator
        self._values = values
        self._done: dict[str, Provenance] = dict(inputs)
        self._pending: dict[str, tuple[CompiledRule, ValueExpr]] = {}

    def record(self, slot: str, provenance: Provenance) -> None:
        self._done[slot] = provenance

    def defer(self, slot: str, rule: CompiledRule, expr: ValueExpr) -> None:
        self._pending[slot] = (rule, expr)

    def __getitem__(self, slot: str) -> Provenance:
        found = self._done.get(slot)
        if found is None:
            rule, expr = self._pending[slot]
            found = self._done[slot] = self._evaluator._provenance(rule, expr, self._values, self)
        return found

    def __iter__(self) -> Iterator[str]:
        yield from self._done
        yield from (s for s in self._pending if s not in self._done)

    def __len__(self) -> int:
        return len(self._done.keys() | self._pending.keys())


def _input_label(slot: str) -> str:
    """How a user knows an input: a variable by its name, a flag by its name, else the slot."""
    for prefix in ("var.", "arg."):
        if slot.startswith(prefix):
            return slot[len(prefix) :]
    return slot


def _slot_check(table: CompiledTable, name: str) -> tuple[str, tuple[type, ...] | None, frozenset[str] | None, bool]:
    """What freezing a stage verifies of one slot: type, domain, required."""
    slot = table.slots[name]
    members = table.domains[slot.domain] if slot.domain is not None else None
    return name, _PYTHON_TYPES.get(slot.type), members, slot.required


def _class_name(stage: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", stage)) + "Stage"


def _field_name(slot: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", slot)
