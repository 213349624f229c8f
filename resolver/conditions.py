"""Declarative conditions (``when``) and value expressions (``set``), compiled to closures.

A condition maps a slot to a scalar (equality) or to a table of operators, all of which must hold:
``eq ne in not_in gt ge lt le set is in_domain not_in_domain``. An operand may be ``{ ref =
"slot" }``. An unset slot (None) satisfies only ``set = false``, ``is = "none"`` and ``eq = "none"``
on a nullable slot. Strings that hold integers (environment variables) compare as integers with
integers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from resolver.errors import ResolutionError

__all__ = ["Condition", "Const", "Call", "Ref", "ValueExpr", "CONDITION_OPS", "Shape", "as_number"]

CONDITION_OPS = ("eq", "ne", "in", "not_in", "gt", "ge", "lt", "le", "set", "is", "in_domain", "not_in_domain")
TYPE_NAMES = ("int", "str", "bool", "tuple", "none", "mapping")
Values = Mapping[str, Any]
Predicate = Callable[[Values], bool]


class NotANumber(ResolutionError):
    """A slot compared as a number holds something else (e.g. ``SLURM_NTASKS=abc``)."""


@attrs.frozen
class Const:
    value: Any


@attrs.frozen
class Ref:
    slot: str


@attrs.frozen
class Call:
    fn: str
    args: tuple[Ref | Const, ...]


ValueExpr = Const | Ref | Call


def as_number(value: Any, slot: str) -> int | float:
    if isinstance(value, bool):
        raise NotANumber(f"{slot} is a boolean ({value}), not a number")
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
    raise NotANumber(
        f"{slot.removeprefix('var.')}={value!r} is not an integer",
        hint=f"set {slot.removeprefix('var.')} to a whole number or unset it",
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b  # True is not the number 1 here
    if a == b:
        return True
    if isinstance(a, str) and isinstance(b, int) and not isinstance(b, bool):
        return a.strip().lstrip("-").isdigit() and int(a) == b
    if isinstance(b, str) and isinstance(a, int) and not isinstance(a, bool):
        return b.strip().lstrip("-").isdigit() and int(b) == a
    return False


def _type_of(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "str"
    if isinstance(value, tuple):
        return "tuple"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__


def _operand(operand: Any) -> Callable[[Values], Any]:
    if isinstance(operand, Ref):
        name = operand.slot
        return lambda values: values.get(name)
    return lambda values: operand


@attrs.frozen
class Shape:
    """What a condition admits, for proving two rules exclusive (see ``disjoint``)."""

    allowed: frozenset[Any] | None = None
    denied: frozenset[Any] = frozenset()
    low: float = float("-inf")
    high: float = float("inf")
    is_set: bool | None = None
    types: frozenset[str] | None = None

    def admits(self, value: Any) -> bool:
        """Whether a (non-None) constant could satisfy this shape."""
        if self.is_set is False:
            return False
        if self.allowed is not None and value not in self.allowed:
            return False
        if value in self.denied:
            return False
        if self.types is not None and _type_of(value) not in self.types:
            return False
        if self.low > float("-inf") or self.high < float("inf"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
            return self.low <= value <= self.high
        return True

    def disjoint(self, other: Shape) -> bool:
        """True when no value satisfies both shapes (so two rules cannot both fire)."""
        if self.is_set is not None and other.is_set is not None and self.is_set != other.is_set:
            return True
        if self.types is not None and other.types is not None and not self.types & other.types:
            return True
        for a, b in ((self, other), (other, self)):
            if a.allowed is not None and not any(b.admits(v) for v in a.allowed):
                return True
        return self.high < other.low or other.high < self.low


@attrs.frozen
class Condition:
    """One ``slot = spec`` entry of a rule's ``when``."""

    slot: str
    ops: tuple[tuple[str, Any], ...]
    predicate: Predicate = attrs.field(eq=False, repr=False)
    shape: Shape = attrs.field(eq=False, repr=False)

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(v.slot for _, v in self.ops if isinstance(v, Ref))

    @classmethod
    def build(cls, slot: str, ops: tuple[tuple[str, Any], ...], domains: Mapping[str, frozenset[str]]) -> Condition:
        preds = [_make_predicate(slot, op, operand, domains) for op, operand in ops]
        if len(preds) == 1:
            predicate = preds[0]
        else:
            predicate = lambda values: all(p(values) for p in preds)  # noqa: E731
        return cls(slot, ops, predicate, _shape(ops, domains))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _make_predicate(slot: str, op: str, operand: Any, domains: Mapping[str, frozenset[str]]) -> Predicate:
    if op == "set":
        want = bool(operand)
        return lambda v: (v.get(slot) is not None) == want
    if op == "is":
        return lambda v: _type_of(v.get(slot)) == operand
    if op == "eq" and operand is None:
        return lambda v: v.get(slot) is None
    if op in ("in_domain", "not_in_domain"):
        members = domains[operand]
        inside = op == "in_domain"
        return lambda v: (x := v.get(slot)) is not None and (x in members) == inside
    if not isinstance(operand, Ref):
        fast = _constant_predicate(slot, op, operand)
        if fast is not None:
            return fast
    get = _operand(operand)

    def predicate(values: Values) -> bool:
        x = values.get(slot)
        if x is None:
            return False
        other = get(values)
        if other is None:
            return False
        if op == "eq":
            return _same(x, other)
        if op == "ne":
            return not _same(x, other)
        if op == "in":
            return any(_same(x, o) for o in other)
        if op == "not_in":
            return not any(_same(x, o) for o in other)
        left, right = as_number(x, slot), as_number(other, getattr(operand, "slot", "value"))
        if op == "gt":
            return left > right
        if op == "ge":
            return left >= right
        if op == "lt":
            return left < right
        return left <= right

    return predicate


def _constant_predicate(slot: str, op: str, operand: Any) -> Predicate | None:
    """Fast paths for comparisons with a constant (the common case)."""
    if op in ("eq", "ne") and not _is_int(operand):
        # A non-integer constant equals only itself: no str/int coercion can apply.
        if op == "eq":
            return lambda v: v.get(slot) == operand
        return lambda v: (x := v.get(slot)) is not None and x != operand
    if op in ("in", "not_in") and not any(_is_int(o) for o in operand):
        try:
            members = frozenset(operand)
        except TypeError:
            return None
        if op == "in":
            return lambda v: v.get(slot) in members
        return lambda v: (x := v.get(slot)) is not None and x not in members
    if op in ("gt", "ge", "lt", "le"):
        import operator

        compare = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}[op]

        def numeric(values: Values) -> bool:
            x = values.get(slot)
            if x is None:
                return False
            if type(x) is int:
                return compare(x, operand)
            return compare(as_number(x, slot), operand)

        return numeric
    return None


def _shape(ops: tuple[tuple[str, Any], ...], domains: Mapping[str, frozenset[str]]) -> Shape:
    allowed: frozenset[Any] | None = None
    denied: set[Any] = set()
    low, high = float("-inf"), float("inf")
    is_set: bool | None = None
    types: frozenset[str] | None = None
    for op, operand in ops:
        if isinstance(operand, Ref):
            continue
        if op == "eq":
            allowed = frozenset([operand]) if operand is not None else None
            is_set = operand is not None
        elif op == "in":
            allowed = frozenset(operand)
        elif op == "in_domain":
            allowed = domains[operand]
        elif op == "ne":
            denied.add(operand)
        elif op == "not_in":
            denied.update(operand)
        elif op == "not_in_domain":
            denied.update(domains[operand])
        elif op == "set":
            is_set = bool(operand)
        elif op == "is":
            types = frozenset([operand])
            is_set = operand != "none"
        elif op in ("gt", "ge") and isinstance(operand, (int, float)):
            low = max(low, operand + (1 if op == "gt" and isinstance(operand, int) else 0))
        elif op in ("lt", "le") and isinstance(operand, (int, float)):
            high = min(high, operand - (1 if op == "lt" and isinstance(operand, int) else 0))
    if allowed is not None or denied or low > float("-inf") or high < float("inf"):
        is_set = True if is_set is None else is_set
    return Shape(allowed, frozenset(denied), low, high, is_set, types)
