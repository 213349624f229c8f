"""Writing the generated evaluation (:mod:`resolver._engine.codegen`): names, tests and checks as Python.

:class:`Writer` gives every outside object a numbered name bound in the function's namespace (``c12``
a constant, ``t7`` a test, ``k3`` a slot's name, ``a3`` the local holding its value), so what it
writes never holds rule text. :class:`Tests` writes a condition's operators as each operator
writes itself (:meth:`resolver._engine.operators.Operator.code`), and as a call of the predicate where it
does not. :func:`write_verify` writes a stage's check of one value.

:class:`Gates` writes rules (checks and setters) that need a variable set so that a run pays only
for the variables it has. A site's rule files add rules reading variables of their own (``var.MY_SITE_*``),
which most snapshots do not have; written out like the others, each would cost every run the
reading of its variable and a test, and the evaluation would grow with the table, not with what a
snapshot holds. Runs of such rules become one call each, made only where the run has one of their
variables (``gp``, found once per run from the snapshot's variables and files).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from resolver._engine.conditions import OPERATORS, Condition, Ref
from resolver._engine.slot_types import PYTHON_CLASS

__all__ = ["MIN_GATED", "Atom", "Gates", "Tests", "Writer", "atoms", "gates_present", "write_verify"]


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
        """The operator's own Python for this test (:meth:`resolver._engine.operators.Operator.code`)."""
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


#: Consecutive rules (checks, or setters of one slot) needing a sparse input set, from which trying
#: only those a run has pays.
MIN_GATED = 4


def gates_present(gates: frozenset[str], v: Mapping[str, Any], present: Any) -> Any:
    """The gates a run tries: those among ``present`` (sparse inputs that may be set; None: those
    ``v`` holds a value for). The generated code calls it where ``present`` is empty or None."""
    if present is None:
        return {slot for slot in gates if v.get(slot) is not None}
    return gates.intersection(present)


def _positions(index: Mapping[str, tuple[int, ...]], present: Any) -> list[int]:
    if len(present) == 1:
        for slot in present:
            return list(index.get(slot, ()))
    return sorted(n for slot in present for n in index.get(slot, ()))


def _gated_notes(
    index: Mapping[str, tuple[int, ...]],
    entries: Sequence[tuple[tuple[Any, ...], Any]],
    render: Callable[..., Any],
    v: dict[str, Any],
    notes: list[str],
    present: Any,
) -> None:
    """The rules of a gated run whose gate ``present`` holds, in the table's order: their tests from
    the gate on (the evaluator's own), then the note, as the closures do."""
    for n in _positions(index, present):
        tests, template = entries[n]
        for test in tests:
            if not test(v):
                break
        else:
            notes.append(render(template, v))


def _first_firing(
    index: Mapping[str, tuple[int, ...]], entries: Sequence[tuple[Any, ...]], v: dict[str, Any], present: Any
) -> int:
    """The first rule of a gated run of setters (in priority order) whose gate ``present`` holds and
    whose tests hold; -1 if none does."""
    for n in _positions(index, present):
        for test in entries[n]:
            if not test(v):
                break
        else:
            return n
    return -1


def _gated_conflicts(
    index: Mapping[str, tuple[int, ...]], entries: Sequence[tuple[Any, ...]], v: dict[str, Any], present: Any
) -> bool:
    """Whether a conflict of a gated group whose gate ``present`` holds fires (any order: the
    generated code hands the run back on any conflict)."""
    return _first_firing(index, entries, v, present) >= 0


_Split = tuple[tuple[Atom, ...], str, tuple[Atom, ...]]


class Gates:
    """Rules (checks, and setters of one slot) whose tests need a sparse input set (a variable a
    site's rules read, which most snapshots do not have), written so that a run pays only for the
    inputs it has.

    A rule's tests up to its gate (its first test that fails on an unset sparse input) are written
    out as always, once for a run of rules with the same ones; from the gate on, a rule is tried
    with the evaluator's own tests, and only where a run has its gate's input (``gp``, found once
    per run from the snapshot's variables). The closures make the same tests in the same order, and
    stop at the gate too where its input is unset."""

    def __init__(self, w: Writer, tests: Tests, sparse: frozenset[str], render: Callable[..., Any]) -> None:
        self._w, self._tests, self._sparse, self._render = w, tests, sparse, render
        #: The gates of the runs written: the prologue finds which of them a run has.
        self.used: set[str] = set()

    def _split(self, tested: tuple[Atom, ...]) -> _Split | None:
        for i, (slot, op, operand, _) in enumerate(tested):
            if slot in self._sparse and OPERATORS[op].needs_set(operand):
                return tested[:i], slot, tested[i:]
        return None

    def _prefix(self, split: _Split) -> tuple[str, ...]:
        return tuple(self._tests.parts(split[0]))

    def note_runs(self, rules: Sequence[Any]) -> list[tuple[int, int]]:
        """Where the runs of at least :data:`MIN_GATED` gated note rules with the same tests before
        their gates are, as ``(start, end)``."""
        if not self._sparse:
            return []
        splits = [self._split(atoms(rule.when)) for rule in rules]
        runs, i = [], 0
        while i < len(rules):
            first = splits[i]
            if first is None:
                i += 1
                continue
            key, j = self._prefix(first), i + 1
            while j < len(rules) and (found := splits[j]) is not None and self._prefix(found) == key:
                j += 1
            if j - i >= MIN_GATED:
                runs.append((i, j))
            i = j
        return runs

    def notes(self, rules: Sequence[Any]) -> None:
        """One gated run of note rules (see :meth:`note_runs`)."""
        splits: list[_Split] = [self._split(atoms(rule.when)) for rule in rules]  # type: ignore[misc]
        entries = tuple(
            (tuple(a[3] for a in split[2]), rule.templates.get("note"))
            for split, rule in zip(splits, rules, strict=True)
        )
        run = functools.partial(_gated_notes, self._index(splits), entries, self._render)
        depth = self._guard(self._prefix(splits[0]))
        self._w.emit(depth, f"{self._w.name('G', run)}(v, notes, gp)")

    def choice_run(self, items: Sequence[tuple[Any, tuple[Atom, ...]]], start: int) -> int:
        """The end of the run of at least :data:`MIN_GATED` gated setters from ``start`` (``(choice,
        its atoms)`` in priority order) with the same tests before their gates; ``start`` if none."""
        first = self._split(items[start][1]) if self._sparse else None
        if first is None:
            return start
        key, end = self._prefix(first), start + 1
        while end < len(items) and (found := self._split(items[end][1])) is not None and self._prefix(found) == key:
            end += 1
        return end if end - start >= MIN_GATED else start

    def choices(self, depth: int, items: Sequence[tuple[Any, tuple[Atom, ...]]], var: str) -> int:
        """One gated run of setters (see :meth:`choice_run`): sets ``var`` to the index of the first
        that fires (-1: none), where the run has one of their gates; returns the depth to go on at."""
        splits: list[_Split] = [self._split(tested) for _, tested in items]  # type: ignore[misc]
        entries = tuple(tuple(a[3] for a in split[2]) for split in splits)
        run = functools.partial(_first_firing, self._index(splits), entries)
        depth = self._guard(self._prefix(splits[0]), depth)
        self._w.emit(depth, f"{var} = {self._w.name('G', run)}(v, gp)")
        return depth

    def conflicts(self, checks: list[tuple[Atom, ...]]) -> list[tuple[Atom, ...]]:
        """Writes the groups of at least :data:`MIN_GATED` gated conflicts with the same tests before
        their gates; returns the other conflicts."""
        if not self._sparse:
            return checks
        groups: dict[tuple[str, ...], list[tuple[tuple[Atom, ...], _Split]]] = {}
        rest = []
        for check in checks:
            split = self._split(check)
            if split is None:
                rest.append(check)
            else:
                groups.setdefault(self._prefix(split), []).append((check, split))
        for prefix, members in groups.items():
            if len(members) < MIN_GATED:
                rest.extend(check for check, _ in members)
                continue
            splits = [split for _, split in members]
            entries = tuple(tuple(a[3] for a in split[2]) for split in splits)
            run = functools.partial(_gated_conflicts, self._index(splits), entries)
            depth = self._guard(prefix)
            self._w.emit(depth, f"if {self._w.name('G', run)}(v, gp):")
            self._w.emit(depth + 1, "raise REDO")
        return rest

    def _index(self, splits: Sequence[_Split]) -> dict[str, tuple[int, ...]]:
        index: dict[str, list[int]] = {}
        for n, (_, gate, _) in enumerate(splits):
            index.setdefault(gate, []).append(n)
        self.used.update(index)
        return {gate: tuple(found) for gate, found in index.items()}

    def _guard(self, prefix: tuple[str, ...], depth: int = 1) -> int:
        """``if prefix:`` (where there is one: made first, as each rule makes it) and ``if gp:``."""
        if prefix:
            self._w.emit(depth, f"if {' and '.join(prefix)}:")
            depth += 1
        self._w.emit(depth, "if gp:")
        return depth + 1
