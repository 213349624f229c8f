"""Writing the generated evaluation (:mod:`resolver.codegen`): names, tests and checks as Python.

:class:`Writer` gives every outside object a numbered name bound in the function's namespace (``c12``
a constant, ``t7`` a test, ``k3`` a slot's name, ``a3`` the local holding its value), so what it
writes never holds rule text. :class:`Tests` writes a condition's operators as each operator
writes itself (:meth:`resolver.operators.Operator.code`), and as a call of the predicate where it
does not. :func:`write_verify` writes a stage's check of one value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from resolver.conditions import OPERATORS, Condition, Ref
from resolver.slot_types import PYTHON_CLASS

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
    """How each test of the table is written: as its operator writes it (inline Python that means
    exactly what the operator's predicate means), else as a call of the predicate."""

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
        """The operator's own Python for this test (:meth:`resolver.operators.Operator.code`)."""
        self._w.read(slot)  # the code reads the slots a test names, inline or not
        if isinstance(operand, Ref):
            self._w.read(operand.slot)
        return OPERATORS[op].code(slot, operand, self._w, self.domains)


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
