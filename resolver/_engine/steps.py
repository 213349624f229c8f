"""How one slot is decided: its setter rules compiled into a closure, and what its stage must verify.

Each setter rule becomes a :class:`Choice` (a constant, a copy of another slot, or a closure calling
a registered function), marked with whether its value is proven at compile time to pass the
stage's verification. A slot's candidate rules become one closure (:func:`step_for`) that tries
them in priority order; a value not proven is marked pending for the stage to check. These closures
are the reference evaluation: the evaluator's first run and every run with a reporter use them,
and so does any run the generated code (:mod:`resolver._engine.codegen`) hands back. No rule text is
evaluated as code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from resolver._engine.compiled import CompiledRule, CompiledTable, Template
from resolver._engine.conditions import Call, Condition, Const, NotANumber, Ref, ValueExpr
from resolver._engine.errors import ResolutionError
from resolver._engine.function_registry import FUNCTIONS, READS_UNSET, InvalidInput
from resolver._engine.slot_types import FILE_PREFIX, PYTHON_CLASS, VARIABLE_PREFIX
from resolver._engine.values import FrozenMapping

__all__ = [
    "CALL",
    "CONST",
    "NO_TYPE",
    "REF",
    "CallFailed",
    "Choice",
    "SlotCheck",
    "Step",
    "check_of",
    "choice_for",
    "passes",
    "step_for",
    "tests_of",
    "verify_value",
]

CONST, REF, CALL = 0, 1, 2
Predicate = Callable[[Mapping[str, Any]], bool]
#: ``(slot, expected types, domain members, required)``: what verifying a stage checks of one slot.
SlotCheck = tuple[str, "tuple[type, ...] | None", "frozenset[str] | None", bool]


class Choice(NamedTuple):
    """A setter rule and how it gets the slot's value.

    ``payload`` is the constant, the slot copied, or (``CALL``) a closure computing the value;
    ``verify`` is False when the value is proven at compile time to pass the stage's verification.
    """

    rule: CompiledRule
    kind: int
    payload: Any
    expr: ValueExpr
    note: Template | None
    verify: bool


#: No value has this type: the slot's check always runs in full.
NO_TYPE = type("_NoType", (), {})
#: Decides one slot: sets ``values[slot]``, may add a note, returns the rule's choice or None (default).
#: Its arguments: the values, the notes, and the slots whose values the stage must still verify.
Step = Callable[[dict[str, Any], list[str], list[str]], "Choice | None"]


class CallFailed(Exception):
    """A registered function refused its input; the evaluator turns this into a ResolutionError."""

    def __init__(self, rule: CompiledRule, expr: Call, error: InvalidInput) -> None:
        self.rule, self.expr, self.error = rule, expr, error


def verify_value(stage: str, check: SlotCheck, value: Any) -> None:
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
        raise ResolutionError(f"slot {name!r} got {value!r}, which is not in its domain ({', '.join(sorted(members))})")


# -- compiling a slot's setters into closures ------------------------------------------------------


def choice_for(
    rule: CompiledRule,
    slot: str,
    check: SlotCheck | None,
    guarantees: Mapping[str, SlotCheck],
) -> Choice:
    expr = rule.set_of(slot)
    note = rule.templates.get("note")
    if isinstance(expr, Const):
        value = FrozenMapping(expr.value) if isinstance(expr.value, dict) else expr.value
        verify = check is not None and not passes(value, *check[1:])
        return Choice(rule, CONST, value, expr, note, verify)
    if isinstance(expr, Ref):
        verify = check is not None and not _copy_proven(rule, expr.slot, check, guarantees)
        return Choice(rule, REF, expr.slot, expr, note, verify)
    assert isinstance(expr, Call)
    return Choice(rule, CALL, _compute(rule, expr), expr, note, check is not None)


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
    """A closure calling the registered function on the slots' values (None if any is unset, unless
    the function reads unset values: :data:`~resolver._engine.function_registry.READS_UNSET`)."""
    name = expr.fn
    parts = tuple((isinstance(a, Ref), a.slot if isinstance(a, Ref) else a.value) for a in expr.args)  # type: ignore[union-attr]
    if name in READS_UNSET:

        def call_all(values: Mapping[str, Any]) -> Any:
            try:
                return FUNCTIONS[name](*[values.get(p) if is_ref else p for is_ref, p in parts])
            except InvalidInput as exc:
                raise CallFailed(rule, expr, exc) from None

        return call_all
    if len(parts) == 1 and parts[0][0]:
        only = parts[0][1]

        def call_one(values: Mapping[str, Any]) -> Any:
            value = values.get(only)
            if None in (value,):
                return None  # a function of an unset value is unset; the stage's checks say why
            try:
                return FUNCTIONS[name](value)
            except InvalidInput as exc:
                raise CallFailed(rule, expr, exc) from None

        return call_one

    def call(values: Mapping[str, Any]) -> Any:
        args = [values.get(p) if is_ref else p for is_ref, p in parts]
        if None in args:
            return None
        try:
            return FUNCTIONS[name](*args)
        except InvalidInput as exc:
            raise CallFailed(rule, expr, exc) from None

    return call


def _blame(exc: NotANumber, rule: CompiledRule) -> NotANumber:
    """Remember which rule's test met a non-number (the run names it in the error)."""
    if getattr(exc, "_resolver_rule", None) is None:
        exc._resolver_rule = rule  # type: ignore[attr-defined]
    return exc


def tests_of(conditions: Sequence[Condition]) -> tuple[Predicate, ...]:
    """Every operator's test of ``conditions``, in order: all must hold."""
    return tuple(t for c in conditions for t in c.tests)


def step_for(
    slot: str,
    entries: tuple[tuple[Choice, tuple[Predicate, ...]], ...],
    default: Any,
    default_needs: bool,
    add_note: Callable[[Template, dict[str, Any], list[str]], None],
) -> Step:
    """One closure deciding ``slot``: the first candidate rule whose tests hold, else the default.

    A value not proven to pass the stage's verification (``Choice.verify``, or a default that
    fails it) is marked pending, for the stage to check once its slots are decided.
    """
    if not entries and not default_needs:

        def by_default(values: dict[str, Any], notes: list[str], pending: list[str]) -> None:
            values[slot] = default

        return by_default
    if entries:
        first, tests = entries[0]
        if (
            len(entries) == 1
            and first.note is None
            and first.kind == CONST
            and not first.verify
            and not default_needs
            and len(tests) <= 1
        ):
            return _const_step(slot, first, tests, default)

    def decide(values: dict[str, Any], notes: list[str], pending: list[str]) -> Choice | None:
        for choice, tests in entries:
            try:
                for test in tests:
                    if not test(values):
                        break
                else:
                    kind = choice.kind
                    if kind == CONST:
                        values[slot] = choice.payload
                    elif kind == REF:
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


def _const_step(slot: str, choice: Choice, tests: tuple[Predicate, ...], default: Any) -> Step:
    """One rule setting a constant, after at most one test: the commonest shape, made cheap."""
    value = choice.payload
    if not tests:

        def always(values: dict[str, Any], notes: list[str], pending: list[str]) -> Choice:
            values[slot] = value
            return choice

        return always
    test = tests[0]

    def when(values: dict[str, Any], notes: list[str], pending: list[str]) -> Choice | None:
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


def check_of(table: CompiledTable, name: str) -> SlotCheck | None:
    """What verifying a stage checks of one slot (type, domain, required); None: nothing to check.

    Variables and files are text or unset by construction. Which values still need the check at
    run time is decided per rule (:func:`choice_for`) and for the default.
    """
    if name in table.variables or name.startswith((VARIABLE_PREFIX, FILE_PREFIX)):
        return None
    slot = table.slots[name]
    members = table.domains[slot.domain] if slot.domain is not None else None
    expected = (PYTHON_CLASS[slot.type],) if slot.type in PYTHON_CLASS else None
    if expected is None and members is None and not slot.required:
        return None
    return name, expected, members, slot.required


def passes(value: Any, expected: tuple[type, ...] | None, members: frozenset[str] | None, required: bool) -> bool:
    if value is None:
        return not required
    if isinstance(value, dict):
        value = FrozenMapping(value)
    if expected is not None and (not isinstance(value, expected) or (expected == (int,) and value is True)):
        return False
    return members is None or not isinstance(value, str) or value in members
