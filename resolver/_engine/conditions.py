"""Declarative conditions (``when``) and value expressions (``set``), compiled to closures.

A condition maps a slot to a scalar (equality) or to a table of operators, all of which must hold.
Each operator is one :class:`~resolver._engine.operators.Operator` in :data:`OPERATORS`: it checks its operand when the
table loads (``validate``), builds the test run at resolution (``predicate``), writes it for the
generated evaluation (``code``, ``needs_set``), says what values it admits for the ambiguity check
(``shape``) and writes itself for ``docs/rules.md`` (``render``).
An operand may be ``{ ref = "slot" }``. An unset slot (None) satisfies only ``set = false``,
``is = "none"``, ``is_not`` of another type and ``eq = "none"`` on a nullable slot. Strings that hold
integers (environment variables) compare as integers with integers.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import attrs

from resolver._engine.operators import (
    CONDITION_OPS,
    OPERATORS,
    TYPE_NAMES,
    InvalidOperand,
    NotANumber,
    OperandContext,
    Operator,
    Predicate,
    Ref,
    Shape,
    as_number,
)
from resolver._engine.values import fields_repr

__all__ = [
    "CONDITION_OPS",
    "OPERATORS",
    "Call",
    "Condition",
    "Const",
    "InvalidOperand",
    "NotANumber",
    "OperandContext",
    "Operator",
    "Ref",
    "Shape",
    "TYPE_NAMES",
    "ValueExpr",
    "as_number",
]


@attrs.frozen(eq=False, slots=False)  # a dict class: the disk cache restores it without a Python call
class Const:
    value: Any

    __repr__ = fields_repr


@attrs.frozen(eq=False, slots=False)
class Call:
    fn: str
    args: tuple[Ref | Const, ...]

    __repr__ = fields_repr


ValueExpr = Const | Ref | Call


@attrs.frozen(eq=False, slots=False)
class Condition:
    """One ``slot = spec`` entry of a rule's ``when``.

    Its tests (closures) are made on first use and are not pickled: a table loaded from the disk
    cache is restored without a Python call per condition (a dict class; ``__getstate__`` leaves
    out what was made), and a resolution tries few of its conditions through the closures."""

    slot: str
    ops: tuple[tuple[str, Any], ...]
    #: The domains the operands name, for :attr:`shape` and the tests.
    domains: Mapping[str, frozenset[str]] = attrs.field(factory=dict, repr=False)

    __repr__ = fields_repr

    def __getstate__(self) -> dict[str, Any]:
        return {"slot": self.slot, "ops": self.ops, "domains": self.domains}

    @cached_property
    def tests(self) -> tuple[Predicate, ...]:
        """One test per operator, in order (:attr:`predicate` is all of them): the evaluator runs these."""
        return tuple(OPERATORS[op].predicate(self.slot, operand, self.domains) for op, operand in self.ops)

    @cached_property
    def predicate(self) -> Predicate:
        """Whether the condition holds for a run's values."""
        preds = self.tests
        if len(preds) == 1:
            return preds[0]

        def predicate(values: Mapping[str, Any]) -> bool:
            for p in preds:
                if not p(values):
                    return False
            return True

        return predicate

    @cached_property
    def shape(self) -> Shape:
        """What the condition admits (for the ambiguity check and the generated code); made on first
        use, as a resolution that loads its table from the disk cache asks for few of them."""
        shape = Shape()
        for op, operand in self.ops:
            shape = shape.meet(OPERATORS[op].shape(operand, self.domains))
        return shape

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(v.slot for _, v in self.ops if isinstance(v, Ref))

    def render(self) -> tuple[str, ...]:
        """Each operator of the condition, written for the docs."""
        return tuple(OPERATORS[op].render(self.slot, operand) for op, operand in self.ops)
