"""The evaluator: runs a compiled rule table over input values, stage by stage.

The engine knows slots, rules and stages, nothing about accelerators or clusters. Each stage
decides its slots in the graph's order (for each slot, the first rule that fires in priority
order wins; otherwise the slot's default), then runs its checks (conflict and note rules), then
verifies its slots' types and domains. Everything a person may want to watch goes through a
:class:`~resolver.reporter.Reporter`.

Evaluation is compiled ahead, once per table. Each slot's setters become a decision tree over the
slots they test (:mod:`resolver.dispatch`), and the tree becomes a chain of closures specialised per
rule (how the rule gets its value: a constant, another slot, or a registered function; how many
tests are left), so a resolution calls one function per slot and runs only the remaining tests of
the candidate rules. Slots no rule sets take their defaults in one step. What verifying a stage
would check is proven at compile time where it can be (constants, defaults, a slot copied from a
slot that was verified against the same or a narrower type and domain), so only values that may
be wrong are checked. Provenance is built only when asked for. No rule text is ever evaluated as
code: closures capture the compiled conditions and values.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from resolver import dispatch
from resolver.compiler import CompiledRule, CompiledTable, DomainRef, Template
from resolver.conditions import Call, Const, NotANumber, Ref, ValueExpr
from resolver.config import FrozenMapping, Provenance, display
from resolver.dispatch import Leaf, Node, lookup
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
#: ``(slot, expected types, domain members, required)``: what verifying a stage checks of one slot.
SlotCheck = tuple[str, "tuple[type, ...] | None", "frozenset[str] | None", bool]


class _Choice(NamedTuple):
    """A setter rule and how it gets the slot's value.

    ``payload`` is the constant, the slot copied, or (``_CALL``) a closure computing the value;
    ``verify`` is False when the value is proven at compile time to pass the stage's verification.
    """

    rule: CompiledRule
    kind: int
    payload: Any
    expr: ValueExpr
    note: Template | None
    verify: bool


#: No value has this type: the slot's check always runs in full.
_NO_TYPE = type("_NoType", (), {})
#: The origin of an input the caller gave (inputs are not in ``origins``).
_GIVEN: Any = object()
#: Decides one slot: sets ``values[slot]``, may add a note, returns the rule's choice or None (default).
#: Its arguments: the values, the notes, and the slots whose values the stage must still verify.
Step = Callable[[dict[str, Any], list[str], list[str]], "_Choice | None"]


class _CallFailed(Exception):
    """A registered function refused its input; the evaluator turns this into a ResolutionError."""

    def __init__(self, rule: CompiledRule, expr: Call, error: InvalidInput) -> None:
        self.rule, self.expr, self.error = rule, expr, error


class _StageProgram(NamedTuple):
    name: str
    #: Slots no rule can set, with their defaults: assigned in one step.
    defaults: dict[str, Any]
    default_origins: dict[str, None]
    #: The other slots, in the graph's order, each with its step.
    steps: tuple[tuple[str, Step], ...]
    #: Every slot in order (defaults included), for runs that report each decision.
    all_steps: tuple[tuple[str, Step], ...]
    checks: dispatch.Node[CompiledRule] | dispatch.Leaf[CompiledRule] | None
    #: When the stage is verified slot by slot in order (see ``_stage_program``): ``(slot, check,
    #: whether its default needs checking, the exact type and the domain members that pass at once)``.
    verify: tuple[tuple[str, SlotCheck, bool, type, frozenset[str] | None], ...] | None
    #: Otherwise, the check of each slot a step may mark as pending.
    checks_of: dict[str, tuple[SlotCheck, type, frozenset[str] | None]]


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
        #: Inputs are given by the caller; a missing one takes its slot's default.
        self._input_slots = frozenset(table.stages[0].slots) if table.stages else frozenset()
        #: Inputs the snapshot does not fill (``Environment.inputs`` gives every env./file./var. one).
        self._other_inputs = tuple(s for s in sorted(self._input_slots) if not s.startswith(("env.", "file.", "var.")))
        self._other_input_set = frozenset(self._other_inputs)
        #: Every decided slot in the order the stages decide them (the provenance's order).
        self._decided = tuple(s for plan in table.stages for s in plan.slots if s not in self._input_slots)
        #: What verifying each decided slot guarantees (inputs are not verified: they guarantee nothing).
        self._guarantees = {name: check for name in self._decided if (check := _check_of(table, name)) is not None}
        # The first run tries the rules in order; decision trees are built for the runs after it,
        # so a process that resolves once (the CLI) does not pay for building them.
        self._stages = self._program(trees=False)
        self._linear = True
        self._runs = 0

    def _program(self, *, trees: bool) -> tuple[_StageProgram, ...]:
        return tuple(self._stage_program(plan, self._guarantees, trees) for plan in self.table.stages)

    def _stage_program(self, plan: Any, guarantees: Mapping[str, SlotCheck], trees: bool) -> _StageProgram:
        build = dispatch.build if trees else dispatch.linear
        table = self.table
        checked: dict[str, tuple[SlotCheck, bool, type, frozenset[str] | None]] = {}
        for name in plan.slots:
            check = _check_of(table, name)
            if check is not None:
                # Values of exactly the expected type (and text in the domain) pass without a call.
                exact = check[1][0] if check[1] is not None and check[1][0] is not Mapping else _NO_TYPE
                default_needs = not _passes(table.slots[name].default, *check[1:])
                checked[name] = (check, default_needs, exact, check[2] if exact is str else None)
        defaults: dict[str, Any] = {}
        steps: list[tuple[str, Step]] = []
        all_steps: list[tuple[str, Step]] = []
        # Slots whose value is checked whatever decides it: inputs (when their default would not
        # pass: the default shows what the slot is meant to hold) and slots no rule sets whose
        # default fails. Then the whole stage is verified in order; otherwise only the values the
        # steps mark as pending (set by a rule not proven to pass, or a default that fails).
        in_order = False
        for slot in plan.slots:
            setters = plan.setters.get(slot, ())
            found = checked.get(slot)
            default_needs = found is not None and found[1]
            if slot in self._input_slots or not setters:
                in_order = in_order or default_needs
            if slot in self._input_slots:
                continue
            default = table.slots[slot].default
            check = guarantees.get(slot)
            choices = [(_choice(self, rule, slot, check, guarantees), rule.when) for rule in setters]
            step = _step(slot, build(choices), default, default_needs, self)
            all_steps.append((slot, step))
            if setters:
                steps.append((slot, step))
            else:
                defaults[slot] = default
        verify = tuple(
            (name, check, default_needs, exact, members)
            for name, (check, default_needs, exact, members) in checked.items()
        )
        checks = build([(rule, rule.when) for rule in plan.checks]) if plan.checks else None
        return _StageProgram(
            plan.name,
            defaults,
            dict.fromkeys(defaults),
            tuple(steps),
            tuple(all_steps),
            checks,
            verify if in_order else None,
            {name: (check, exact, members) for name, (check, _, exact, members) in checked.items()},
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
        if self._linear:  # a second run: from now on, the decision trees
            if self._runs:
                self._stages = self._program(trees=True)
                self._linear = False
            self._runs += 1
        stages = self._stages
        origins: dict[str, _Choice | None] = {}
        provenance = ProvenanceMap(self, values, inputs, origins)
        notes: list[str] = []
        pending: list[str] = []
        if not self._other_input_set <= values.keys():
            for slot in self._other_inputs:
                if slot not in values:
                    values[slot] = self.table.slots[slot].default
                    origins[slot] = None
        check: CompiledRule | None = None
        try:
            for stage in stages:
                if reporter is None:
                    values.update(stage.defaults)
                    origins.update(stage.default_origins)
                    for slot, step in stage.steps:
                        origins[slot] = step(values, notes, pending)
                else:
                    for slot, step in stage.all_steps:
                        origins[slot] = step(values, notes, pending)
                        reporter.decided(slot, values[slot], provenance[slot])
                checks = stage.checks
                if checks is not None:
                    for check, tests in checks.entries if type(checks) is Leaf else lookup(checks, values):
                        for test in tests:
                            if not test(values):
                                break
                        else:
                            self._fire(check, values, notes, provenance, reporter)
                    check = None
                if stage.verify is not None:
                    for slot, slot_check, default_needs, exact, members in stage.verify:
                        choice = origins.get(slot, _GIVEN)
                        if default_needs if choice is None or choice is _GIVEN else choice.verify:
                            value = values[slot]
                            if type(value) is not exact or (members is not None and value not in members):
                                _verify(stage.name, slot_check, value)  # the full check; raises if wrong
                elif pending:
                    checks_of = stage.checks_of
                    for slot in pending:  # in the stage's order: the steps ran in it
                        slot_check, exact, members = checks_of[slot]
                        value = values[slot]
                        if type(value) is not exact or (members is not None and value not in members):
                            _verify(stage.name, slot_check, value)
                pending.clear()
                if reporter is not None:
                    reporter.stage_finished(stage.name, self.stage_value(stage.name, values))
        except NotANumber as exc:
            rule = check if check is not None else getattr(exc, "_resolver_rule", None)
            raise ResolutionError(exc.message, hint=exc.hint, rule=rule.id if rule else None) from None
        except _CallFailed as failed:
            raise self._call_error(failed, values, provenance) from None
        return Evaluation(self, values, provenance, tuple(notes))

    def stage_value(self, stage: str, values: Mapping[str, Any]) -> Any:
        """One stage's slots as a frozen attrs instance (``PlacedStage(num_devices=2, ...)``).

        Each stage's class is a plain subclass of one attrs class, made once per evaluator: cheap
        enough for a process that resolves once, fields read as attributes (``placed.num_devices``).
        """
        plan = next(p for p in self.table.stages if p.name == stage)
        cls = self._stage_classes.get(stage)
        if cls is None:
            cls = self._stage_classes[stage] = type(_class_name(stage), (_stage_base(),), {"__slots__": ()})
        return cls(tuple((_field_name(s), values[s]) for s in plan.slots))

    # -- pieces ---------------------------------------------------------------------------------

    def _fire(
        self,
        check: CompiledRule,
        values: Mapping[str, Any],
        notes: list[str],
        provenance: Mapping[str, Provenance],
        reporter: Reporter | None,
    ) -> None:
        """A check's conditions hold: raise its conflict, or add its note."""
        if check.conflict is not None:
            error = self._conflict(check, values, provenance)
            if reporter is not None:
                reporter.failed(error)
            raise error
        note = self.render(check.templates.get("note"), values)
        notes.append(note)  # type: ignore[arg-type]
        if reporter is not None:
            reporter.noted(check.id, note)  # type: ignore[arg-type]

    def _add_note(self, template: Template, values: Mapping[str, Any], notes: list[str]) -> None:
        note = self.render(template, values)
        if note not in notes:
            notes.append(note)  # type: ignore[arg-type]

    def _call_error(
        self, failed: _CallFailed, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> ResolutionError:
        refs = [a.slot for a in failed.expr.args if isinstance(a, Ref)]
        sides = tuple(Side(s, values.get(s), provenance.get(s, _DEFAULT)) for s in refs)
        message = failed.error.message
        if len(refs) == 1:
            label = _input_label(self.table, refs[0])
            if label not in message:
                message = f"{label}: {message}"
        return ResolutionError(message, hint=failed.error.hint, rule=failed.rule.id, sides=sides)

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


def _verify(stage: str, check: SlotCheck, value: Any) -> None:
    name, expected, members, required = check
    if value is None:
        if required:
            raise ResolutionError(
                f"no rule decided {name!r} in stage {stage!r} for these flags and this environment",
                hint="this is a gap in the rule table: add a rule for this case (resolver explain "
                "shows what was decided so far)",
            )
        return
    if expected is not None and (not isinstance(value, expected) or (expected == (int,) and value is True)):
        raise ResolutionError(f"slot {name!r} got {value!r}, which is not of type {expected[0].__name__}")
    if members is not None and isinstance(value, str) and value not in members:
        raise ResolutionError(
            f"slot {name!r} got {value!r}, which is not in its domain ({', '.join(sorted(members))})"
        )


# -- compiling a slot's setters into closures ------------------------------------------------------


def _choice(
    evaluator: Evaluator,
    rule: CompiledRule,
    slot: str,
    check: SlotCheck | None,
    guarantees: Mapping[str, SlotCheck],
) -> _Choice:
    expr = rule.set_of(slot)
    note = rule.templates.get("note")
    if isinstance(expr, Const):
        value = FrozenMapping(expr.value) if isinstance(expr.value, dict) else expr.value
        verify = check is not None and not _passes(value, *check[1:])
        return _Choice(rule, _CONST, value, expr, note, verify)
    if isinstance(expr, Ref):
        verify = check is not None and not _copy_proven(rule, expr.slot, check, guarantees)
        return _Choice(rule, _REF, expr.slot, expr, note, verify)
    assert isinstance(expr, Call)
    return _Choice(rule, _CALL, _compute(rule, expr), expr, note, check is not None)


def _copy_proven(rule: CompiledRule, source: str, check: SlotCheck, guarantees: Mapping[str, SlotCheck]) -> bool:
    """Whether copying ``source`` always passes ``check``: ``source`` is a decided slot, verified
    (or proven) against the same type and a narrower domain, or this rule's conditions on it admit
    only text of the domain."""
    given = guarantees.get(source)
    if given is None:
        return False  # an input, or a slot nothing checks: its value may be anything
    _, expected, members, required = check
    _, source_expected, source_members, source_required = given
    shape = None
    for condition in rule.when:
        if condition.slot == source:
            shape = condition.shape
    if expected is not None and expected != source_expected:
        return False
    if members is not None:
        narrower = source_members is not None and source_members <= members
        admitted = (
            shape is not None
            and shape.allowed is not None
            and all(type(v) is str and v in members for v in shape.allowed)
        )
        if not (narrower or admitted):
            return False
    if required and not source_required and not (shape is not None and shape.is_set is True):
        return False
    return True


def _compute(rule: CompiledRule, expr: Call) -> Callable[[Mapping[str, Any]], Any]:
    """A closure calling the registered function on the slots' values (None if any is unset)."""
    name = expr.fn
    parts = tuple((isinstance(a, Ref), a.slot if isinstance(a, Ref) else a.value) for a in expr.args)  # type: ignore[union-attr]
    if len(parts) == 1 and parts[0][0]:
        only = parts[0][1]

        def call_one(values: Mapping[str, Any]) -> Any:
            value = values.get(only)
            if None in (value,):
                return None  # a function of an unset value is unset; the stage's checks say why
            try:
                return FUNCTIONS[name](value)
            except InvalidInput as exc:
                raise _CallFailed(rule, expr, exc) from None

        return call_one

    def call(values: Mapping[str, Any]) -> Any:
        args = [values.get(p) if is_ref else p for is_ref, p in parts]
        if None in args:
            return None
        try:
            return FUNCTIONS[name](*args)
        except InvalidInput as exc:
            raise _CallFailed(rule, expr, exc) from None

    return call


def _blame(exc: NotANumber, rule: CompiledRule) -> NotANumber:
    """Remember which rule's test met a non-number (the run names it in the error)."""
    if getattr(exc, "_resolver_rule", None) is None:
        exc._resolver_rule = rule  # type: ignore[attr-defined]
    return exc


def _step(
    slot: str, tree: Node[_Choice] | Leaf[_Choice], default: Any, default_needs: bool, evaluator: Evaluator
) -> Step:
    """One closure deciding ``slot``: walks the decision tree, then the candidate rules in order.

    A value not proven to pass the stage's verification (``_Choice.verify``, or a default that
    fails it) is marked pending, for the stage to check once its slots are decided.
    """
    if type(tree) is Leaf:
        entries: tuple[tuple[_Choice, tuple[Predicate, ...]], ...] = tree.entries
        if not entries and not default_needs:

            def by_default(values: dict[str, Any], notes: list[str], pending: list[str]) -> None:
                values[slot] = default

            return by_default
        if entries:
            first, tests = entries[0]
            if (
                len(entries) == 1
                and first.note is None
                and first.kind == _CONST
                and not first.verify
                and not default_needs
                and len(tests) <= 1
            ):
                return _const_step(slot, first, tests, default)
    root = tree
    add_note = evaluator._add_note

    def decide(values: dict[str, Any], notes: list[str], pending: list[str]) -> _Choice | None:
        node = root
        key = node.slot
        while key is not None:  # the tree's lookup, inline (a leaf's slot is None): one call per slot
            value = values.get(key)
            if value is None:
                node = node.unset
            else:
                try:
                    node = node.branches.get(value, node.other)
                except TypeError:  # unhashable: equal to none of the constants
                    node = node.other
            key = node.slot
        for choice, tests in node.entries:  # type: ignore[union-attr]
            try:
                for test in tests:
                    if not test(values):
                        break
                else:
                    kind = choice.kind
                    if kind == _CONST:
                        values[slot] = choice.payload
                    elif kind == _REF:
                        values[slot] = values.get(choice.payload)
                    else:
                        values[slot] = choice.payload(values)
                    if choice.note is not None:
                        add_note(choice.note, values, notes)
                    if choice.verify:
                        pending.append(slot)
                    return choice
            except NotANumber as exc:
                raise _blame(exc, choice.rule) from None
        values[slot] = default
        if default_needs:
            pending.append(slot)
        return None

    return decide


def _const_step(slot: str, choice: _Choice, tests: tuple[Predicate, ...], default: Any) -> Step:
    """One rule setting a constant, after at most one test: the commonest shape, made cheap."""
    value = choice.payload
    if not tests:

        def always(values: dict[str, Any], notes: list[str], pending: list[str]) -> _Choice:
            values[slot] = value
            return choice

        return always
    test = tests[0]

    def when(values: dict[str, Any], notes: list[str], pending: list[str]) -> _Choice | None:
        try:
            fired = test(values)
        except NotANumber as exc:
            raise _blame(exc, choice.rule) from None
        if fired:
            values[slot] = value
            return choice
        values[slot] = default
        return None

    return when


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
        origins = self._origins
        yield from (s for s in self._values if s not in origins)
        yield from (s for s in self._evaluator._other_inputs if s in origins)
        yield from (s for s in self._evaluator._decided if s in origins)

    def __len__(self) -> int:
        return len(self._values.keys() | self._origins.keys())


def _input_label(table: CompiledTable, slot: str) -> str:
    """How a user knows an input: a variable by its name, a flag by its name, else the slot."""
    variable = table.variables.get(slot)
    if variable is not None:
        return variable
    return slot.removeprefix("arg.")


def _check_of(table: CompiledTable, name: str) -> SlotCheck | None:
    """What verifying a stage checks of one slot (type, domain, required); None: nothing to check.

    Variables and files are text or unset by construction. Which values still need the check at
    run time is decided per rule (:func:`_choice`) and for the default.
    """
    if name in table.variables or name.startswith(("var.", "file.")):
        return None
    slot = table.slots[name]
    members = table.domains[slot.domain] if slot.domain is not None else None
    expected = _PYTHON_TYPES.get(slot.type)
    if expected is None and members is None and not slot.required:
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


@functools.cache
def _stage_base() -> type:
    import attrs

    @attrs.frozen(repr=False)
    class StageValue:
        """A stage's slots, in order, as ``(field, value)`` pairs; read as attributes."""

        _pairs: tuple[tuple[str, Any], ...]

        def __getattr__(self, name: str) -> Any:
            for field, value in object.__getattribute__(self, "_pairs"):
                if field == name:
                    return value
            raise AttributeError(f"{type(self).__name__!r} has no field {name!r}")

        def __repr__(self) -> str:
            return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self._pairs) + ")"

    return StageValue


def _class_name(stage: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", stage)) + "Stage"


def _field_name(slot: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", slot)
