"""A compiled table's warm evaluation as one generated Python function.

The evaluator's closures (:mod:`resolver._engine.steps`) call one function per slot and one per test; this
module writes the same decisions out as straight-line code: each slot's candidate rules as one
block of ``if`` tests over local variables (a row of rules comparing one slot with constants as one
lookup of its value), the conflict checks grouped the same way, the common operators written inline
(:mod:`resolver._engine.codewriter`) and the others calling the operator's test. The function is made once
the closures have run a table :data:`~resolver._engine.evaluator.GENERATE_AFTER` times; the resolver keeps its
compiled code in the table cache's folder (:func:`resolver._store.cache.compile_code`, handed to :func:`generate`).

No rule text reaches the compiler. The source is made of this module's own tokens only: every slot
name, constant, test, function and template is a numbered name (``k3``, ``c12``, ``t7``) bound in
the function's namespace, so the source holds no string literal at all (:func:`generate` refuses
source holding a quote or a backslash). What a rule file says is data the generated code looks up.

The generated code covers the successful path only. Anything out of the ordinary (a conflict, a
value that fails its stage's verification, a test meeting a non-number, a function refusing its
input) raises, and the evaluator runs the same resolution again through its closures, which give
the precise error with provenance; so both paths always agree, and the closures stay the reference
(``tests/resolver/engine/test_codegen.py`` compares them).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from types import CodeType
from typing import Any

from resolver._engine.codewriter import Atom, Gates, Tests, Writer, atoms, gates_present, write_verify
from resolver._engine.conditions import Call, Ref
from resolver._engine.function_registry import FUNCTIONS, READS_UNSET
from resolver._engine.shapes import as_number, same
from resolver._engine.steps import CALL, CONST, REF, Choice, verify_value

__all__ = ["CompileCode", "Generated", "generate"]

#: ``run(values, notes, present=None)``: decides every slot in place; raises on anything unusual.
#: ``present``: the sparse inputs (variables, files) that may be set (empty: none is, and none is
#: read); None: it looks. Which rule decided each slot is not recorded: provenance, when asked for,
#: replays the closures.
Generated = Callable[..., None]

#: ``compile_code(source, filename)``: the generated source as a code object (compiled, or read
#: from a cache of compiled sources).
CompileCode = Callable[[str, str], CodeType]

#: What generated source may contain: names, numbers, operators, brackets. No quote, no backslash.
_SAFE_SOURCE = re.compile(r"[A-Za-z0-9_ \n():.,=\[\]<>!+\-]*")


def generate(
    stages: tuple[Any, ...],
    domains: Mapping[str, frozenset[str]],
    add_note: Callable[..., None],
    render: Callable[..., Any],
    compile_code: CompileCode | None = None,
    sparse: frozenset[str] = frozenset(),
) -> tuple[Generated, str]:
    """The generated ``run`` for ``stages`` (the evaluator's stage programs) and its source.

    ``compile_code(source, filename)`` compiles the source (default: :func:`compile`); the resolver
    hands in the disk cache's (:func:`resolver._store.cache.compile_code`), which this engine module does
    not import. ``sparse``: the inputs that are unset unless a snapshot sets them (variables and
    files); runs of rules that need one of them set are tried only for those a run has
    (:class:`resolver._engine.codewriter.Gates`)."""
    w = Writer()
    tests = Tests(w, domains)
    gates = Gates(w, tests, sparse, render)
    decided: set[str] = set()
    default_marks: list[tuple[int, Any]] = []  # where each stage's defaults are assigned
    for stage in stages:
        if stage.defaults:
            w.emit(1, f"v.update({w.name('D', stage.defaults)})")
            default_marks.append((len(w.lines), stage))
            decided.update(stage.defaults)
        for slot, choices, default, default_needs in stage.decisions:
            _decision(w, tests, gates, stage, slot, choices, default, default_needs)
            decided.add(slot)
        # Any conflict hands the run back, whichever fires first: they are grouped by the slot
        # most of them compare with a constant, then the notes follow in the table's order.
        conflicts = gates.conflicts([atoms(rule.when) for rule, _ in stage.checks if rule.conflict is not None])
        _conflicts(w, tests, 1, conflicts)
        _notes(w, tests, gates, [rule for rule, _ in stage.checks if rule.conflict is None])
        if stage.verify is not None:
            # The whole stage is verified: inputs and defaults too, where a default would fail
            # (values set by rules were verified where they were set).
            for slot, slot_check, default_needs, _, _ in stage.verify:
                if default_needs and (slot in stage.defaults or slot not in decided):
                    w.read(slot)
                    write_verify(w, 1, stage.name, slot, slot_check)
    # The locals read before any code assigns them: inputs from the values, defaults as constants.
    for mark, stage in reversed(default_marks):
        lines = [
            f"    {w.used[slot]} = {w.name('c', value)}" for slot, value in stage.defaults.items() if slot in w.used
        ]
        w.lines[mark:mark] = lines
    # Every input is in the values (the evaluator fills the missing ones): one C call reads them all.
    inputs = [(slot, local) for slot, local in w.used.items() if slot not in decided]
    unset = [local for slot, local in inputs if slot in sparse]
    prologue = []
    if unset:
        # A run whose snapshot has none of the sparse inputs (most: no variable the rules read, no
        # file) knows them all unset without reading them.
        prologue.append("    if present is not None and not present:")
        prologue.extend(_read_inputs(w, "        ", [(s, local) for s, local in inputs if s not in sparse]))
        prologue.append(f"        {' = '.join(unset)} = None")
        prologue.append("    else:")
        prologue.extend(_read_inputs(w, "        ", inputs))
    else:
        prologue.extend(_read_inputs(w, "    ", inputs))
    if gates.used:  # which gated rules this run tries: the sparse inputs it has (most runs: none)
        used = frozenset(gates.used)
        look, names = w.name("G", functools.partial(gates_present, used)), w.name("d", used)
        # present: those the snapshot has (empty: none of them); None: look at each
        found = f"{names}.intersection(present) if present else {look}(v, None) if present is None else present"
        prologue.append(f"    gp = {found}")
    source = "\n".join(["def run(v, notes, present=None):", *prologue, *w.lines]) + "\n"
    if not _SAFE_SOURCE.fullmatch(source):
        raise AssertionError("generated source holds characters outside its own tokens")
    namespace = dict(w.namespace)
    namespace.update(
        VERIFY=verify_value,
        REDO=Redo,
        RENDER=render,
        ADD_NOTE=add_note,
        SAME=same,
        NUM=as_number,
        FUNCTIONS=FUNCTIONS,
        __builtins__={"type": type, "isinstance": isinstance, "int": int, "str": str, "bool": bool, "tuple": tuple},
    )
    code = (compile_code or _compile)(source, _FILENAME)
    exec(code, namespace)  # noqa: S102 - the source holds only this module's tokens
    return namespace["run"], source


_FILENAME = "<resolver generated>"


def _read_inputs(w: Writer, indent: str, inputs: list[tuple[str, str]]) -> list[str]:
    """The lines reading ``inputs`` (slot, local) from the values: one C call for several."""
    if len(inputs) == 1:
        return [f"{indent}{inputs[0][1]} = v[{w.key(inputs[0][0])}]"]
    if inputs:
        getter = w.name("r", itemgetter(*(slot for slot, _ in inputs)))
        return [f"{indent}{', '.join(local for _, local in inputs)} = {getter}(v)"]
    return []


def _compile(source: str, filename: str) -> CodeType:
    return compile(source, filename, "exec")


def _decision(
    w: Writer, tests: Tests, gates: Gates, stage: Any, slot: str, choices: Any, default: Any, default_needs: bool
) -> None:
    """One slot: its candidate rules in priority order (the first whose conditions hold), else the default.

    The decision is a ``while True`` block that the first rule to fire (or the default) leaves with
    ``break``; where several rules in a row compare one slot with constants, that slot's value is
    looked up once and only the rules of its constant are tried (:func:`_chain`).
    """
    k, a = w.key(slot), w.local(slot)
    check = stage.checks_of.get(slot)
    slot_check = check[0] if check is not None else None
    items = [(choice, atoms(choice.rule.when)) for choice in choices]

    def assign(depth: int, choice: Choice) -> None:
        _assign(w, depth, stage.name, slot, choice, slot_check)

    def by_default(depth: int) -> None:
        w.emit(depth, f"v[{k}] = {a} = {w.name('c', default)}")
        if default_needs and slot_check is not None:
            write_verify(w, depth, stage.name, slot, slot_check)

    table = _constant_table(items, gates, slot_check, default_needs)
    if table is not None:
        # Each rule gives a constant for one value of one slot: the value looks its constant up.
        on, constants = table
        x, d = w.read(on), w.name("c", default)
        w.emit(1, "try:")
        w.emit(2, f"v[{k}] = {a} = {w.name('m', constants)}.get({x}, {d})")
        w.emit(1, "except TypeError:")  # unhashable: equal to none of the values
        w.emit(2, f"v[{k}] = {a} = {d}")
        return
    w.emit(1, "while True:")
    if not _chain(w, tests, 2, items, assign, gates):
        by_default(2)
        w.emit(2, "break")


def _constant_table(
    items: Sequence[_Item], gates: Gates, slot_check: Any, default_needs: bool
) -> tuple[str, dict[Any, Any]] | None:
    """``(slot, {value: constant})`` where every rule of a decision tests only that one slot for
    equality with a text or boolean and sets a constant that needs no check, with no note and no
    default to check: then one lookup decides it (the first rule of a value wins, as in order)."""
    if len(items) < 2 or (default_needs and slot_check is not None) or gates.choice_run(items, 0) > 0:
        return None
    on = None
    constants: dict[Any, Any] = {}
    for choice, its in items:
        if len(its) != 1 or not _groupable(its[0]) or choice.kind != CONST or choice.note is not None:
            return None
        if choice.verify and slot_check is not None:
            return None
        slot, _, operand, _ = its[0]
        if on is None:
            on = slot
        elif slot != on:
            return None
        constants.setdefault(operand, choice.payload)
    assert on is not None
    return on, constants


#: Rules in a row comparing one slot with constants, from which a lookup pays.
MIN_RUN = 3

_Item = tuple[Choice, tuple[Atom, ...]]


def _run_at(items: Sequence[_Item], start: int) -> tuple[str | None, int]:
    """The slot the longest row of rules from ``start`` compares with a constant, and the row's end."""
    best: tuple[str | None, int] = (None, start)
    for atom in items[start][1]:
        if not _groupable(atom):
            continue
        end = start + 1
        while end < len(items) and any(_groupable(x) and x[0] == atom[0] for x in items[end][1]):
            end += 1
        if end > best[1]:
            best = (atom[0], end)
    return best


def _chain(
    w: Writer,
    tests: Tests,
    depth: int,
    items: Sequence[_Item],
    assign: Callable[[int, Choice], None],
    gates: Gates | None = None,
) -> bool:
    """``if tests: assign; break`` per rule, in order, rows grouped by a lookup, runs of rules that
    need a variable set tried only where a run has one (:meth:`resolver._engine.codewriter.Gates.choices`);
    True when a rule without tests ends it (what follows could never run)."""

    def fire(depth: int, choice: Choice) -> None:
        assign(depth, choice)
        w.emit(depth, "break")

    i = 0
    while i < len(items):
        end = gates.choice_run(items, i) if gates is not None else i
        if end > i:  # the local i<depth>: no name bound in the namespace starts with i
            inner = gates.choices(depth, items[i:end], f"i{depth}")  # type: ignore[union-attr]
            _switch(w, inner, f"i{depth}", [functools.partial(fire, choice=choice) for choice, _ in items[i:end]])
            i = end
            continue
        slot, end = _run_at(items, i)
        if slot is not None and end - i >= MIN_RUN:
            groups: dict[Any, list[_Item]] = {}
            for choice, its in items[i:end]:
                found = next(x for x in its if _groupable(x) and x[0] == slot)
                groups.setdefault(found[2], []).append((choice, tuple(x for x in its if x is not found)))
            var, a = f"n{depth}", w.read(slot)
            w.emit(depth, "try:")
            w.emit(depth + 1, f"{var} = {w.name('m', {c: n for n, c in enumerate(groups)})}.get({a}, -1)")
            w.emit(depth, "except TypeError:")  # unhashable: equal to none of the constants
            w.emit(depth + 1, f"{var} = -1")
            bodies = [functools.partial(_chain, w, tests, items=m, assign=assign, gates=gates) for m in groups.values()]
            _switch(w, depth, var, bodies)
            i = end
            continue
        choice, its = items[i]
        if not its:
            assign(depth, choice)
            w.emit(depth, "break")
            return True
        w.emit(depth, f"if {tests.all_of(its)}:")
        assign(depth + 1, choice)
        w.emit(depth + 1, "break")
        i += 1
    return False


def _assign(w: Writer, depth: int, stage: str, slot: str, choice: Choice, check: Any) -> None:
    k, a = w.key(slot), w.local(slot)
    if choice.kind == CONST:
        w.emit(depth, f"v[{k}] = {a} = {w.name('c', choice.payload)}")
    elif choice.kind == REF:
        w.emit(depth, f"v[{k}] = {a} = {w.read(choice.payload)}")
    else:
        assert choice.kind == CALL
        expr: Call = choice.expr  # type: ignore[assignment]
        args = [w.read(arg.slot) if isinstance(arg, Ref) else w.name("c", arg.value) for arg in expr.args]
        unset = [] if expr.fn in READS_UNSET else [f"{x} is None" for x in args]
        call = f"FUNCTIONS[{w.name('g', expr.fn)}]({', '.join(args)})"
        w.emit(depth, f"v[{k}] = {a} = None if {' or '.join(unset)} else {call}" if unset else f"v[{k}] = {a} = {call}")
    if choice.note is not None:
        w.emit(depth, f"ADD_NOTE({w.name('n', choice.note)}, v, notes)")
    if choice.verify and check is not None:
        write_verify(w, depth, stage, slot, check)


def _groupable(atom: Atom) -> bool:
    """An equality with text or a boolean: decided by a dict lookup of the value."""
    _, op, operand, _ = atom
    return op == "eq" and isinstance(operand, str | bool)


def _switch(w: Writer, depth: int, var: str, bodies: Sequence[Callable[..., Any]]) -> None:
    """Run ``bodies[var]`` (``var`` is -1 or an index): a bound check, then halving the range, so
    the code compares ``var`` about log2(len(bodies)) times, not once per body."""
    w.emit(depth, f"if {var} >= 0:")

    def split(depth: int, lo: int, hi: int) -> None:
        if hi - lo == 1:
            bodies[lo](depth=depth)
        elif hi - lo == 2:
            w.emit(depth, f"if {var} == {lo}:")
            bodies[lo](depth=depth + 1)
            w.emit(depth, "else:")
            bodies[lo + 1](depth=depth + 1)
        else:
            mid = (lo + hi) // 2
            w.emit(depth, f"if {var} < {mid}:")
            split(depth + 1, lo, mid)
            w.emit(depth, "else:")
            split(depth + 1, mid, hi)

    split(depth + 1, 0, len(bodies))


def _notes(w: Writer, tests: Tests, gates: Gates, rules: Sequence[Any]) -> None:
    """The note rules, in the table's order: runs of rules that need a sparse input set (a site's
    rules reading their own variables) through :meth:`resolver._engine.codewriter.Gates.notes`, the others
    by :func:`_plain_notes`."""
    start = 0
    for i, j in gates.note_runs(rules):
        _plain_notes(w, tests, rules[start:i])
        gates.notes(rules[i:j])
        start = j
    _plain_notes(w, tests, rules[start:])


def _plain_notes(w: Writer, tests: Tests, rules: Sequence[Any]) -> None:
    """Note rules written out. Consecutive rules whose first test is the same are
    nested under one ``if`` of it (a site's rules often share one, ``num_devices > 0``): the test is
    made once where each rule made it, and a rule's other tests only where it holds, as before; a
    test has no effect but its answer (or its error, which the first rule's test raised too)."""
    tested = [tests.parts(rule.when) for rule in rules]
    i = 0
    while i < len(rules):
        first = tested[i][0] if tested[i] else None
        j = i + 1
        while first is not None and j < len(rules) and tested[j] and tested[j][0] == first:
            j += 1
        if j - i == 1:
            depth = 1
            if tested[i]:
                w.emit(1, f"if {' and '.join(tested[i])}:")
                depth = 2
            w.emit(depth, f"notes.append(RENDER({w.name('n', rules[i].templates.get('note'))}, v))")
        else:
            w.emit(1, f"if {first}:")
            for rule, parts in zip(rules[i:j], tested[i:j], strict=True):
                depth = 2
                if len(parts) > 1:
                    w.emit(2, f"if {' and '.join(parts[1:])}:")
                    depth = 3
                w.emit(depth, f"notes.append(RENDER({w.name('n', rule.templates.get('note'))}, v))")
        i = j


def _conflicts(w: Writer, tests: Tests, depth: int, checks: list[tuple[Atom, ...]]) -> None:
    """``raise REDO`` if any of ``checks`` (each its atoms, all of which must hold) holds.

    The slot most checks compare with a constant is looked up once: each check goes into the group
    of its constant with that comparison removed (so into one group only), the others stay after.
    """
    counts = Counter(a[0] for check in checks for a in check if _groupable(a))
    slot = min(counts, key=lambda s: (-counts[s], s)) if counts else None
    if slot is None or counts[slot] < 2:
        for check in checks:
            if check:
                w.emit(depth, f"if {tests.all_of(check)}:")
                w.emit(depth + 1, "raise REDO")
            else:
                w.emit(depth, "raise REDO")
        return
    groups: dict[Any, list[tuple[Atom, ...]]] = {}
    rest: list[tuple[Atom, ...]] = []
    for check in checks:
        found = next((a for a in check if a[0] == slot and _groupable(a)), None)
        if found is None:
            rest.append(check)
        else:
            groups.setdefault(found[2], []).append(tuple(a for a in check if a is not found))
    var, a = f"n{depth}", w.read(slot)
    w.emit(depth, "try:")
    w.emit(depth + 1, f"{var} = {w.name('m', {c: i for i, c in enumerate(groups)})}.get({a}, -1)")
    w.emit(depth, "except TypeError:")  # unhashable: equal to none of the constants
    w.emit(depth + 1, f"{var} = -1")
    _switch(w, depth, var, [functools.partial(_conflicts, w, tests, checks=m) for m in groups.values()])
    _conflicts(w, tests, depth, rest)


class Redo(Exception):
    """The generated code met a conflict: the evaluator's closures decide again and raise it."""
