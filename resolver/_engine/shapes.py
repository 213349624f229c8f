"""What conditions mean by a value: equality (integer text equals its number, a boolean is not a
number), numbers, type names, and :class:`Shape`, what a condition admits, for proving two rules
exclusive. The operators (:mod:`resolver._engine.operators`) and the generated code share these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from resolver._engine.errors import ResolutionError
from resolver._engine.integers import parse_int
from resolver._engine.slot_types import TYPE_NAMES, TYPE_TESTS, VARIABLE_PREFIX
from resolver._engine.values import excerpt, fields_repr

__all__ = ["ANY", "TYPE_NAMES", "TYPE_TESTS", "NotANumber", "Shape", "as_number", "is_int", "same", "type_of"]


class NotANumber(ResolutionError):
    """A slot compared as a number holds something else (e.g. ``SLURM_NTASKS=abc``)."""


def as_number(value: Any, slot: str) -> int | float:
    """A value compared as a number: ints and floats as they are, integer text parsed."""
    if isinstance(value, bool):
        raise NotANumber(f"{slot} is a boolean ({value}), not a number")
    if isinstance(value, (int, float)):
        return value
    parsed = parse_int(value)
    if parsed is not None:
        return parsed
    label = slot.removeprefix(VARIABLE_PREFIX)
    raise NotANumber(
        f"{label}={excerpt(value, 42)} is not an integer", hint=f"set {label} to a whole number or unset it"
    )


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def same(a: Any, b: Any) -> bool:
    """Equality as conditions mean it (what :mod:`resolver._engine.codegen` calls where it cannot inline it)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b  # True is not the number 1 here
    if a == b:
        return True
    if isinstance(a, str) and is_int(b):
        return parse_int(a) == b
    if isinstance(b, str) and is_int(a):
        return parse_int(b) == a
    return False


def type_of(value: Any) -> str:
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


@attrs.frozen(eq=False)
class Shape:
    """What a condition admits, for proving two rules exclusive (see ``disjoint``)."""

    allowed: frozenset[Any] | None = None
    denied: frozenset[Any] = frozenset()
    low: float = float("-inf")
    high: float = float("inf")
    is_set: bool | None = None
    types: frozenset[str] | None = None

    __repr__ = fields_repr

    def meet(self, other: Shape) -> Shape:
        """What both shapes admit (the conditions of one slot all hold)."""
        allowed = (
            self.allowed
            if other.allowed is None
            else (other.allowed if self.allowed is None else self.allowed & other.allowed)
        )
        types = self.types if other.types is None else (other.types if self.types is None else self.types & other.types)
        return Shape(
            allowed,
            self.denied | other.denied,
            max(self.low, other.low),
            min(self.high, other.high),
            self.is_set if other.is_set is None else other.is_set,
            types,
        )

    def admits(self, value: Any) -> bool:
        """Whether a (non-None) constant could satisfy this shape."""
        if self.is_set is False:
            return False
        if self.allowed is not None and value not in self.allowed:
            return False
        if value in self.denied:
            return False
        if self.types is not None and type_of(value) not in self.types:
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


#: The shape of a condition that admits anything.
ANY = Shape()
