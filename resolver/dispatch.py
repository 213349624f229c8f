"""Decision trees over the slots rules test, built once per table so a resolution tests few conditions.

A list of rules (the setters of one slot in priority order, or the checks of one stage) becomes a
tree. Each inner node looks at one slot's value: a dict maps each text or boolean constant the
rules compare it with to a subtree, and two more subtrees take an unset value and any other value.
A rule goes down every branch its condition on that slot admits, with that condition removed (it is
known to hold there); a rule without such a condition goes down every branch unchanged. Leaves
hold the rules that can still fire, in their original order, each with the tests left to run.

The tree decides exactly what testing every rule in order would: only conditions whose truth is a
plain function of the value's identity are resolved by lookup (equality and membership with text or
booleans, which equal only themselves; ``set``). Everything else stays a test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from resolver.conditions import Condition

__all__ = ["Leaf", "Node", "build", "linear", "lookup"]

Predicate = Callable[[Mapping[str, Any]], bool]
T = TypeVar("T")
_UNSET, _OTHER = object(), object()
#: How deep a tree may grow; deeper conditions stay tests. Bounds the tree's size for big tables.
MAX_DEPTH = 4
#: A slot is split on only when at least 1/SPLIT_SHARE of the rules at that point test it.
SPLIT_SHARE = 4


class Leaf(Generic[T]):
    """The rules that may fire here, in order, each as ``(item, tests left to run)``."""

    __slots__ = ("entries",)
    #: A leaf looks at no slot (a walk stops where ``slot`` is None).
    slot = None

    def __init__(self, entries: tuple[tuple[T, tuple[Predicate, ...]], ...]) -> None:
        self.entries = entries


class Node(Generic[T]):
    __slots__ = ("slot", "branches", "unset", "other")

    def __init__(
        self, slot: str, branches: dict[Any, Node[T] | Leaf[T]], unset: Node[T] | Leaf[T], other: Node[T] | Leaf[T]
    ):
        self.slot = slot
        self.branches = branches
        self.unset = unset
        self.other = other


def admitted(condition: Condition) -> tuple[frozenset[Any], bool, bool] | None:
    """What a condition admits, when a lookup decides it: (constants, unset, any other value).

    None when the condition is not decided by the value's identity (ranges, ``ne``, integers that
    may equal numeric text, several operators): it stays a test.
    """
    if len(condition.ops) != 1:
        return None
    shape = condition.shape
    if shape.denied or shape.types is not None or shape.low != float("-inf") or shape.high != float("inf"):
        return None
    if shape.allowed is None:
        if shape.is_set is True:
            return frozenset(), False, True  # set = true
        if shape.is_set is False:
            return frozenset(), True, False  # set = false, eq = "none"
        return None
    if shape.is_set is not True or not shape.allowed or not all(isinstance(v, str | bool) for v in shape.allowed):
        return None
    return shape.allowed, False, False


_Entry = tuple[Any, tuple[Condition, ...]]


def linear(items: Sequence[tuple[T, Sequence[Condition]]]) -> Leaf[T]:
    """No tree: one leaf testing every item in order (what :func:`build` decides, without the set-up)."""
    return Leaf(tuple((item, tuple(t for c in conditions for t in c.tests)) for item, conditions in items))


def build(items: Sequence[tuple[T, Sequence[Condition]]], depth: int = 0) -> Node[T] | Leaf[T]:
    """The tree for ``items`` (each an item and its conditions, all of which must hold), order kept."""
    entries: list[_Entry] = [(item, tuple(conditions)) for item, conditions in items]
    # What each condition admits, worked out once (the tree asks again at every level).
    admits = {id(c): admitted(c) for _, conditions in entries for c in conditions}
    return _build(entries, depth, admits)


def _build(
    entries: list[_Entry], depth: int, admits_of: dict[int, tuple[frozenset[Any], bool, bool] | None]
) -> Node[Any] | Leaf[Any]:
    counts: Counter[str] = Counter()
    for _, conditions in entries:
        for condition in conditions:
            if admits_of[id(condition)] is not None:
                counts[condition.slot] += 1
    # Split on a slot only when enough of the rules test it: rules that do not are copied into every
    # branch, so splitting on a slot few rules test would multiply the tree for little gain.
    if depth >= MAX_DEPTH or not counts or max(counts.values()) < max(2, len(entries) // SPLIT_SHARE):
        return Leaf(tuple((item, tuple(t for c in conditions for t in c.tests)) for item, conditions in entries))
    slot = min(counts, key=lambda s: (-counts[s], s))
    split: list[tuple[Any, tuple[Condition, ...], tuple[frozenset[Any], bool, bool] | None]] = []
    constants: set[Any] = set()
    for item, conditions in entries:
        decided = next((c for c in conditions if c.slot == slot and admits_of[id(c)] is not None), None)
        if decided is None:
            split.append((item, conditions, None))
            continue
        admits = admits_of[id(decided)]
        assert admits is not None
        constants |= admits[0]
        split.append((item, tuple(c for c in conditions if c is not decided), admits))

    def branch(key: Any) -> Node[Any] | Leaf[Any]:
        kept: list[_Entry] = []
        for item, rest, admits in split:
            if admits is None:
                kept.append((item, rest))
            elif key is _UNSET:
                if admits[1]:
                    kept.append((item, rest))
            elif key is _OTHER:
                if admits[2]:
                    kept.append((item, rest))
            elif key in admits[0] or admits[2]:
                kept.append((item, rest))
        return _build(kept, depth + 1, admits_of)

    return Node(slot, {key: branch(key) for key in constants}, branch(_UNSET), branch(_OTHER))


def lookup(tree: Node[T] | Leaf[T], values: Mapping[str, Any]) -> tuple[tuple[T, tuple[Predicate, ...]], ...]:
    """The leaf entries that apply to ``values``."""
    while type(tree) is Node:  # exact type: cheaper than isinstance on this hot path
        node: Node[T] = tree
        value = values.get(node.slot)
        if value is None:
            tree = node.unset
        else:
            try:
                tree = node.branches.get(value, node.other)
            except TypeError:  # unhashable: equal to none of the constants
                tree = node.other
    return tree.entries  # type: ignore[union-attr]  # the loop leaves only at a Leaf
