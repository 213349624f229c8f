"""Writing the generated evaluation (:mod:`resolver.codegen`): names, tests and checks as Python.

:class:`Writer` gives every outside object a numbered name bound in the function's namespace (``c12``
a constant, ``t7`` a test, ``k3`` a slot's name, ``a3`` the local holding its value), so what it
writes never holds rule text. :class:`Tests` writes a condition's operators inline where their
meaning is plain, with exactly the meaning of :mod:`resolver.operators`' predicates, and as a call
of the predicate otherwise. :func:`write_verify` writes a stage's check of one value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from resolver.conditions import Condition, Ref
from resolver.slot_types import PYTHON_CLASS, TYPE_TESTS

__all__ = ["Atom", "Tests", "Writer", "atoms", "write_verify"]


class Writer:
    """Collects lines and the namespace: every outside object gets a numbered name, every slot a
    local variable (``a3``) besides its name (``k3``)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {}
        self._names: dict[tuple[str, int], str] = {}
        self._slots: dict[str, int] = {}  # slot -> its number: ``k<n>`` names it, ``a<n>`` holds its value
        self.used: dict[str, str] = {}  # slot -> its local, for the slots the code reads
        self._counter = 0

    def name(self, prefix: str, obj: Any) -> str:
        """A name bound to ``obj`` (the same object always gets the same name)."""
        key = (prefix, id(obj))
        found = self._names.get(key)
        if found is None:
            found = f"{prefix}{self._counter}"
            self._counter += 1
            self._names[key] = found
            self.namespace[found] = obj
        return found

    def key(self, slot: str) -> str:
        """The name bound to a slot's name (equal strings share one name)."""
        return f"k{self._slot_number(slot)}"

    def local(self, slot: str) -> str:
        """The local variable holding a slot's value."""
        return f"a{self._slot_number(slot)}"

    def _slot_number(self, slot: str) -> int:
        found = self._slots.get(slot)
        if found is None:
            found = self._slots[slot] = self._counter
            self._counter += 1
            self.namespace[f"k{found}"] = slot
        return found

    def read(self, slot: str) -> str:
        """The local holding a slot's value, where the code reads it."""
        found = self.local(slot)
        self.used[slot] = found
        return found

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_COMPARE = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
#: Types whose exact-type test is a safe shortcut (an instance of exactly this type passes).
_EXACT_FIRST = (int, str, tuple)


#: One operator of one condition: ``(slot, operator name, operand, its test)``.
Atom = tuple[str, str, Any, Callable[[Mapping[str, Any]], bool]]


def atoms(conditions: Sequence[Condition] | Sequence[Atom]) -> tuple[Atom, ...]:
    """Conditions as atoms (atoms are kept as they are)."""
    out: list[Atom] = []
    for condition in conditions:
        if isinstance(condition, tuple):
            out.append(condition)
            continue
        for (op, operand), test in zip(condition.ops, condition.tests, strict=True):
            out.append((condition.slot, op, operand, test))
    return tuple(out)


class Tests:
    """How each test of the table is written: inline where its meaning is plain, else a call.

    Inline tests mean exactly what :mod:`resolver.operators`' predicates mean for the same
    operands; where a predicate would raise or answer specially (a non-number compared as a
    number, an unhashable value in a membership test), the inline test raises and the evaluator's
    closures decide instead.
    """

    def __init__(self, writer: Writer, domains: Mapping[str, frozenset[str]]) -> None:
        self._w = writer
        self.domains = domains

    def all_of(self, conditions: Sequence[Condition] | Sequence[Atom]) -> str:
        """Every operator of ``conditions`` (or atoms), in order, joined by ``and``; empty if none."""
        return " and ".join(self.parts(conditions))

    def parts(self, conditions: Sequence[Condition] | Sequence[Atom]) -> list[str]:
        """Every operator of ``conditions`` (or atoms) as its own test, in order."""
        parts = []
        for slot, op, operand, test in atoms(conditions):
            inline = self._inline(slot, op, operand)
            parts.append(inline if inline is not None else f"{self._w.name('t', test)}(v)")
        return parts

    def _inline(self, slot: str, op: str, operand: Any) -> str | None:
        w = self._w
        a = w.read(slot)
        if isinstance(operand, Ref):
            b = w.read(operand.slot)
            both = f"{a} is not None and {b} is not None"
            if op == "ne":
                return f"({both} and ({a} != {b} if type({a}) is str and type({b}) is str else not SAME({a}, {b})))"
            if op == "eq":
                return f"({both} and ({a} == {b} if type({a}) is str and type({b}) is str else SAME({a}, {b})))"
            if op in _COMPARE:
                sign = _COMPARE[op]
                ints = f"type({a}) is int and type({b}) is int"
                numbers = f"NUM({a}, {w.key(slot)}) {sign} NUM({b}, {w.key(operand.slot)})"
                return f"({both} and ({a} {sign} {b} if {ints} else {numbers}))"
            return None
        if op == "set":
            return f"({a} is not None)" if operand else f"({a} is None)"
        if op in ("eq", "ne"):
            if operand is None:
                return f"({a} is None)" if op == "eq" else f"({a} is not None)"
            c = w.name("c", operand)
            if not _is_int(operand):
                return f"({a} == {c})" if op == "eq" else f"({a} is not None and {a} != {c})"
            same = f"({a} == {c} if type({a}) is int else SAME({a}, {c}))"
            return f"({a} is not None and {same})" if op == "eq" else f"({a} is not None and not {same})"
        if op in _COMPARE:
            sign, c = _COMPARE[op], w.name("c", operand)
            return f"({a} is not None and ({a} {sign} {c} if type({a}) is int else NUM({a}, {w.key(slot)}) {sign} {c}))"
        if op in ("in", "not_in") and not any(_is_int(o) for o in operand):
            members = w.name("d", frozenset(operand))
            return f"({a} in {members})" if op == "in" else f"({a} is not None and {a} not in {members})"
        if op in ("in_domain", "not_in_domain"):
            members = w.name("d", self.domains[operand])
            inside = "in" if op == "in_domain" else "not in"
            return f"({a} is not None and {a} {inside} {members})"
        if op in ("is", "is_not"):
            if operand == "none":
                return f"({a} is None)" if op == "is" else f"({a} is not None)"
            kind, excluded = TYPE_TESTS[operand]
            test = f"isinstance({a}, {w.name('y', kind)})"
            if excluded:
                test += f" and not isinstance({a}, {w.name('y', excluded)})"
            if kind in _EXACT_FIRST:  # the commonest answer first: the value's exact type
                test = f"type({a}) is {kind.__name__} or ({test})"
            return f"({test})" if op == "is" else f"(not ({test}))"
        return None


#: Slot types whose check may first test the exact type (a built-in class; not ``Mapping``).
_QUICK_TYPES = {(kind,): kind.__name__ for kind in PYTHON_CLASS.values() if kind.__module__ == "builtins"}


def write_verify(w: Writer, depth: int, stage: str, slot: str, check: Any) -> None:
    """The stage's verification of one value: the full check runs only when the quick one fails
    (and raises if the value is wrong: the evaluator's closures then decide again and say why)."""
    _, expected, members, required = check
    a = w.local(slot)
    quick = []
    if expected is not None:
        exact = _QUICK_TYPES.get(expected)
        quick.append(f"type({a}) is {exact}" if exact else f"isinstance({a}, {w.name('y', expected)})")
    if members is not None:
        quick.append(f"{a} in {w.name('d', members)}")
    if not quick:
        if not required:
            return
        quick.append(f"{a} is not None")
    test = " and ".join(quick)
    if not required:  # unset passes where the slot may be unset
        test = f"{a} is None or ({test})"
    w.emit(depth, f"if not ({test}):")
    w.emit(depth + 1, f"VERIFY({w.name('s', stage)}, {w.name('q', check)}, {a})")
