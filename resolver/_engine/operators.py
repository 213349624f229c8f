"""Condition operators: each one object that checks its operand when the table loads
(``validate``), tests a value at resolution (``predicate``), writes that test as Python for the
generated evaluation (``code``), says which values it admits for the ambiguity check (``shape``)
and writes itself for ``docs/rules.md`` (``render``). :data:`OPERATORS` is the registry the loader,
the compiler, the code writer and the docs use; a new operator is a class and a registration here,
not a branch elsewhere.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from resolver._engine.shapes import ANY, TYPE_NAMES, TYPE_TESTS, NotANumber, Shape, as_number, is_int, same
from resolver._engine.values import display, fields_repr

__all__ = [
    "CONDITION_OPS",
    "OPERATORS",
    "TYPE_NAMES",
    "TYPE_TESTS",
    "InvalidOperand",
    "NotANumber",
    "OperandContext",
    "Operator",
    "CodeNames",
    "Ref",
    "Shape",
    "as_number",
    "same",
]

Values = Mapping[str, Any]
Predicate = Callable[[Values], bool]


class InvalidOperand(Exception):
    """An operator's operand is not what it takes (raised when the table loads)."""


@attrs.frozen(eq=False, slots=False)  # a dict class: the disk cache restores it without a Python call
class Ref:
    slot: str

    __repr__ = fields_repr


def _type_predicate(slot: str, name: str, positive: bool) -> Predicate:
    """``(type_of(value) == name) == positive``, as one closure."""
    if name == "none":
        return (lambda v: v.get(slot) is None) if positive else (lambda v: v.get(slot) is not None)
    kind, excluded = TYPE_TESTS[name]
    if not excluded:
        if positive:
            return lambda v: isinstance(v.get(slot), kind)
        return lambda v: not isinstance(v.get(slot), kind)
    if positive:
        return lambda v: isinstance(x := v.get(slot), kind) and not isinstance(x, excluded)
    return lambda v: not isinstance(x := v.get(slot), kind) or isinstance(x, excluded)


def _membership(slot: str, members: frozenset[Any], inside: bool, *, none_tested: bool) -> Predicate:
    """``x in members`` (``inside``) or not, where an unhashable value is in no set.

    ``none_tested``: an unset value is compared like any other (``in = ["none", ...]``);
    otherwise an unset value fails either way.
    """
    if inside:

        def member(values: Values) -> bool:
            x = values.get(slot)
            if x is None and not none_tested:
                return False
            try:
                return x in members
            except TypeError:
                return False

        return member

    def not_member(values: Values) -> bool:
        x = values.get(slot)
        if x is None:
            return False
        try:
            return x not in members
        except TypeError:
            return True

    return not_member


class OperandContext:
    """What an operator may consult while checking its operand: the domains, and the slot's own
    check of a constant (domain membership, ``"none"`` on a nullable slot).

    A plain class: only compiling a table makes one, and an attrs class would cost every process
    that resolves from the disk cache its creation (about 0.2 ms)."""

    __slots__ = ("slot", "domains", "check_value")

    def __init__(self, slot: str, domains: Mapping[str, frozenset[str]], check_value: Callable[[Any], Any]) -> None:
        self.slot, self.domains, self.check_value = slot, domains, check_value

    def __repr__(self) -> str:
        return f"OperandContext(slot={self.slot!r})"


def _operand_text(value: Any) -> str:
    return f"`{value.slot}`" if isinstance(value, Ref) else display(value, quoted=True)


_SCALARS = (str, int, float, bool)


class CodeNames(Protocol):
    """What an operator's ``code`` asks of the code writer (:class:`resolver._engine.codewriter.Writer`):
    the local holding a slot's value, a name bound to an object, a name bound to a slot's name. The
    generated code also has ``SAME`` (:func:`same`) and ``NUM`` (:func:`as_number`) in scope."""

    def read(self, slot: str) -> str: ...

    def name(self, prefix: str, obj: Any) -> str: ...

    def key(self, slot: str) -> str: ...


#: Python's spelling of each comparison operator, for the generated code.
_COMPARE = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
#: Types whose exact-type test is a safe shortcut (an instance of exactly this type passes).
_EXACT_FIRST = (int, str, tuple)


class Operator:
    """One condition operator: ``validate`` its operand at load, build its ``predicate``, write it as
    ``code`` for the generated evaluation, say whether it ``needs_set`` (the generated code's gates),
    give its ``shape`` for the ambiguity check and ``render`` it for the docs. Subclasses set ``name``,
    ``symbol`` and ``takes_ref`` (whether ``{ ref = "slot" }`` is accepted)."""

    name: str = ""
    symbol: str = ""
    takes_ref: bool = True

    def validate(self, operand: Any, context: OperandContext) -> Any:
        """The operand as the predicate uses it; raise :class:`InvalidOperand` if it is wrong."""
        raise NotImplementedError

    def predicate(self, slot: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
        raise NotImplementedError

    def code(self, slot: str, operand: Any, w: CodeNames, domains: Mapping[str, frozenset[str]]) -> str | None:
        """The predicate as a Python expression over the slot's local (``w.read(slot)``), meaning
        exactly what ``predicate`` means for the same operand; where the predicate would raise or
        answer specially (a non-number compared as a number, an unhashable value in a set), the
        expression raises and the evaluator's closures decide instead. None: the generated code
        calls the predicate."""
        return None

    def shape(self, operand: Any, domains: Mapping[str, frozenset[str]]) -> Shape:
        return ANY

    def needs_set(self, operand: Any) -> bool:
        """Whether the predicate fails (without raising) wherever the slot is unset, so a rule
        testing it need not be tried for a run without that input. False where unsure."""
        return False

    def render(self, slot: str, operand: Any) -> str:
        return f"`{slot}` {self.symbol} {_operand_text(operand)}"


def _value(operand: Any, op: str, context: OperandContext) -> Any:
    """A constant to compare with: a scalar, or a list of scalars (compared as a tuple)."""
    if isinstance(operand, list):
        return tuple(_scalar(item, op, context) for item in operand)
    return _scalar(operand, op, context)


def _scalar(operand: Any, op: str, context: OperandContext) -> Any:
    if not isinstance(operand, _SCALARS):
        raise InvalidOperand(f"{op!r} on {context.slot!r} takes a string, number or boolean, not {operand!r}")
    return context.check_value(operand)


def _equality_code(equal: bool, slot: str, operand: Any, w: CodeNames) -> str:
    """``eq`` (``equal``) or ``ne`` as Python: plain ``==`` where both sides are text, :func:`same`
    otherwise (integer text equals its number, a boolean is no number)."""
    a = w.read(slot)
    if isinstance(operand, Ref):
        b = w.read(operand.slot)
        both = f"{a} is not None and {b} is not None"
        if equal:
            return f"({both} and ({a} == {b} if type({a}) is str and type({b}) is str else SAME({a}, {b})))"
        return f"({both} and ({a} != {b} if type({a}) is str and type({b}) is str else not SAME({a}, {b})))"
    if operand is None:
        return f"({a} is None)" if equal else f"({a} is not None)"
    c = w.name("c", operand)
    if not is_int(operand):
        return f"({a} == {c})" if equal else f"({a} is not None and {a} != {c})"
    same_code = f"({a} == {c} if type({a}) is int else SAME({a}, {c}))"
    return f"({a} is not None and {same_code})" if equal else f"({a} is not None and not {same_code})"


class _Equal(Operator):
    name, symbol = "eq", "="

    def code(self, slot: str, operand: Any, w: CodeNames, domains: Mapping[str, frozenset[str]]) -> str | None:
        return _equality_code(True, slot, operand, w)

    def validate(self, operand: Any, context: OperandContext) -> Any:
        return _value(operand, self.name, context)

    def predicate(self, slot: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
        if operand is None:
            return lambda v: v.get(slot) is None
        if isinstance(operand, Ref):
            other = operand.slot
            return lambda v: (x := v.get(slot)) is not None and (y := v.get(other)) is not None and same(x, y)
        if not is_int(operand):
            return lambda v: v.get(slot) == operand  # a non-integer constant equals only itself
        return lambda v: (x := v.get(slot)) is not None and same(x, operand)

    def shape(self, operand: Any, domains: Mapping[str, frozenset[str]]) -> Shape:
        if isinstance(operand, Ref):
            return ANY
        if operand is None:
            return Shape(is_set=False)
        return Shape(allowed=frozenset([operand]), is_set=True)

    def needs_set(self, operand: Any) -> bool:
        return operand is not None


class _NotEqual(Operator):
    name, symbol = "ne", "≠"

    def code(self, slot: str, operand: Any, w: CodeNames, domains: Mapping[str, frozenset[str]]) -> str | None:
        return _equality_code(False, slot, operand, w)

    def validate(self, operand: Any, context: OperandContext) -> Any:
        return _value(operand, self.name, context)

    def predicate(self, slot: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
        if isinstance(operand, Ref):
            other = operand.slot
            return lambda v: (x := v.get(slot)) is not None and (y := v.get(other)) is not None and not same(x, y)
        if operand is None:
            return lambda v: v.get(slot) is not None
        if not is_int(operand):
            return lambda v: (x := v.get(slot)) is not None and x != operand
        return lambda v: (x := v.get(slot)) is not None and not same(x, operand)

    def shape(self, operand: Any, domains: Mapping[str, frozenset[str]]) -> Shape:
        if isinstance(operand, Ref):
            return ANY
        return Shape(denied=frozenset([operand]), is_set=True)

    def needs_set(self, operand: Any) -> bool:
        return operand is not None


class _Member(Operator):
    """``in`` and ``not_in``: a list of constants, or a slot holding a list."""

    def __init__(self, name: str, symbol: str, inside: bool) -> None:
        self.name, self.symbol, self.inside = name, symbol, inside

    def validate(self, operand: Any, context: OperandContext) -> Any:
        if not isinstance(operand, list):
            raise InvalidOperand(f"{self.name!r} on {context.slot!r} needs a list, not {operand!r}")
        return tuple(_scalar(item, self.name, context) for item in operand)

    def predicate(self, slot: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
        inside = self.inside
        if isinstance(operand, Ref):
            other = operand.slot

            def by_ref(values: Values) -> bool:
                x, items = values.get(slot), values.get(other)
                if x is None or items is None:
                    return False
                if isinstance(items, (str, Mapping)) or not hasattr(items, "__iter__"):
                    items = (items,)
                return any(same(x, o) for o in items) == inside

            return by_ref
        if not any(is_int(o) for o in operand):
            members = frozenset(operand)  # may hold None: `in = ["none", ...]` on a nullable slot
            return _membership(slot, members, inside, none_tested=True)
        return lambda v: (x := v.get(slot)) is not None and any(same(x, o) for o in operand) == inside

    def code(self, slot: str, operand: Any, w: CodeNames, domains: Mapping[str, frozenset[str]]) -> str | None:
        a = w.read(slot)
        if isinstance(operand, Ref) or any(is_int(o) for o in operand):
            return None  # a slot's list, or integers that integer text equals: the predicate decides
        members = w.name("d", frozenset(operand))
        return f"({a} in {members})" if self.inside else f"({a} is not None and {a} not in {members})"

    def shape(self, operand: Any, domains: Mapping[str, frozenset[str]]) -> Shape:
        if isinstance(operand, Ref):
            return ANY
        members = frozenset(operand)
        return Shape(allowed=members, is_set=True) if self.inside else Shape(denied=members, is_set=True)

    def needs_set(self, operand: Any) -> bool:
        if isinstance(operand, Ref):
            return False  # a slot's list may hold none
        return None not in operand if self.inside else True


class _Compare(Operator):
    """``gt ge lt le``: numbers; integer text (environment variables) compares as a number."""

    def __init__(self, name: str, symbol: str, compare: Callable[[Any, Any], bool]) -> None:
        self.name, self.symbol, self.compare = name, symbol, compare

    def validate(self, operand: Any, context: OperandContext) -> Any:
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            raise InvalidOperand(f"{self.name!r} on {context.slot!r} needs a number, not {operand!r}")
        return operand

    def predicate(self, slot: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
        compare = self.compare
        if isinstance(operand, Ref):
            other = operand.slot

            def by_ref(values: Values) -> bool:
                x, y = values.get(slot), values.get(other)
                if x is None or y is None:
                    return False
                return compare(as_number(x, slot), as_number(y, other))

            return by_ref

        def numeric(values: Values) -> bool:
            x = values.get(slot)
            if x is None:
                return False
            if type(x) is int:
                return compare(x, operand)
            return compare(as_number(x, slot), operand)

        return numeric

    def code(self, slot: str, operand: Any, w: CodeNames, domains: Mapping[str, frozenset[str]]) -> str | None:
        a, sign = w.read(slot), _COMPARE[self.name]
        if isinstance(operand, Ref):
            b = w.read(operand.slot)
            both = f"{a} is not None and {b} is not None"
            ints = f"type({a}) is int and type({b}) is int"
            numbers = f"NUM({a}, {w.key(slot)}) {sign} NUM({b}, {w.key(operand.slot)})"
            return f"({both} and ({a} {sign} {b} if {ints} else {numbers}))"
        c = w.name("c", operand)
        return f"({a} is not None and ({a} {sign} {c} if type({a}) is int else NUM({a}, {w.key(slot)}) {sign} {c}))"

    def shape(self, operand: Any, domains: Mapping[str, frozenset[str]]) -> Shape:
        if isinstance(operand, Ref):
            return ANY
        step = 1 if isinstance(operand, int) and self.name in ("gt", "lt") else 0
        if self.name in ("gt", "ge"):
            return Shape(low=operand + step, is_set=True)
        return Shape(high=operand - step, is_set=True)

    def needs_set(self, operand: Any) -> bool:
        return True


class _IsSet(Operator):
    name, takes_ref = "set", False

    def validate(self, operand: Any, context: OperandContext) -> Any:
        if not isinstance(operand, bool):
            raise InvalidOperand(f"'set' on {context.slot!r} takes true or false, not {operand!r}")
        return operand

    def predicate(self, slot: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
        if operand:
            return lambda v: v.get(slot) is not None
        return lambda v: v.get(slot) is None

    def code(self, slot: str, operand: Any, w: CodeNames, domains: Mapping[str, frozenset[str]]) -> str | None:
        a = w.read(slot)
        return f"({a} is not None)" if operand else f"({a} is None)"

    def shape(self, operand: Any, domains: Mapping[str, frozenset[str]]) -> Shape:
        return Shape(is_set=operand)

    def needs_set(self, operand: Any) -> bool:
        return operand is True

    def render(self, slot: str, operand: Any) -> str:
        return f"`{slot}` {'is set' if operand else 'is unset'}"


class _IsType(Operator):
    """``is`` and ``is_not``: the value's type, one of :data:`TYPE_NAMES`."""

    takes_ref = False

    def __init__(self, name: str, symbol: str, positive: bool) -> None:
        self.name, self.symbol, self.positive = name, symbol, positive

    def validate(self, operand: Any, context: OperandContext) -> Any:
        if operand not in TYPE_NAMES or not isinstance(operand, str):
            raise InvalidOperand(f"{self.name!r} on {context.slot!r} takes one of {', '.join(TYPE_NAMES)}")
        return operand

    def predicate(self, slot: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
        return _type_predicate(slot, operand, self.positive)

    def code(self, slot: str, operand: Any, w: CodeNames, domains: Mapping[str, frozenset[str]]) -> str | None:
        a = w.read(slot)
        if operand == "none":
            return f"({a} is None)" if self.positive else f"({a} is not None)"
        kind, excluded = TYPE_TESTS[operand]
        test = f"isinstance({a}, {w.name('y', kind)})"
        if excluded:
            test += f" and not isinstance({a}, {w.name('y', excluded)})"
        if kind in _EXACT_FIRST:  # the commonest answer first: the value's exact type
            test = f"type({a}) is {kind.__name__} or ({test})"
        return f"({test})" if self.positive else f"(not ({test}))"

    def shape(self, operand: Any, domains: Mapping[str, frozenset[str]]) -> Shape:
        types = frozenset([operand]) if self.positive else frozenset(TYPE_NAMES) - {operand}
        is_set = (operand != "none") if self.positive else (None if operand != "none" else True)
        return Shape(types=types, is_set=is_set)

    def needs_set(self, operand: Any) -> bool:
        return (operand != "none") if self.positive else (operand == "none")


class _InDomain(Operator):
    """``in_domain`` and ``not_in_domain``: membership of a named domain (a set slot only)."""

    takes_ref = False

    def __init__(self, name: str, symbol: str, inside: bool) -> None:
        self.name, self.symbol, self.inside = name, symbol, inside

    def validate(self, operand: Any, context: OperandContext) -> Any:
        if not isinstance(operand, str) or operand not in context.domains:
            raise InvalidOperand(
                f"{self.name!r} on {context.slot!r} names unknown domain {operand!r}; "
                f"domains: {', '.join(sorted(context.domains))}"
            )
        return operand

    def predicate(self, slot: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
        return _membership(slot, domains[operand], self.inside, none_tested=False)

    def code(self, slot: str, operand: Any, w: CodeNames, domains: Mapping[str, frozenset[str]]) -> str | None:
        a, members = w.read(slot), w.name("d", domains[operand])
        return f"({a} is not None and {a} {'in' if self.inside else 'not in'} {members})"

    def shape(self, operand: Any, domains: Mapping[str, frozenset[str]]) -> Shape:
        if self.inside:
            return Shape(allowed=domains[operand], is_set=True)
        return Shape(denied=domains[operand], is_set=True)

    def needs_set(self, operand: Any) -> bool:
        return True


#: Every condition operator, by the name rule files use.
OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        _Equal(),
        _NotEqual(),
        _Member("in", "in", True),
        _Member("not_in", "not in", False),
        _Compare("gt", ">", operator.gt),
        _Compare("ge", "≥", operator.ge),
        _Compare("lt", "<", operator.lt),
        _Compare("le", "≤", operator.le),
        _IsSet(),
        _IsType("is", "is", True),
        _IsType("is_not", "is not", False),
        _InDomain("in_domain", "in domain", True),
        _InDomain("not_in_domain", "not in domain", False),
    )
}
CONDITION_OPS = tuple(OPERATORS)
