"""Declarative conditions (``when``) and value expressions (``set``), compiled to closures.

A condition maps a slot to a scalar (equality) or to a table of operators, all of which must hold.
Each operator is one :class:`~resolver._engine.operators.Operator` in :data:`OPERATORS`: it checks its operand when the
table loads (``validate``), builds the test run at resolution (``predicate``), says what values it
admits for the ambiguity check (``shape``) and writes itself for ``docs/rules.md`` (``render``).
An operand may be ``{ ref = "slot" }``. An unset slot (None) satisfies only ``set = false``,
``is = "none"``, ``is_not`` of another type and ``eq = "none"`` on a nullable slot. Strings that hold
integers (environment variables) compare as integers with integers.
"""

from __future__ import annotations

from collections.abc import Mapping
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


@attrs.frozen
class Const:
    value: Any

    __repr__ = fields_repr


@attrs.frozen
class Call:
    fn: str
    args: tuple[Ref | Const, ...]

    __repr__ = fields_repr


ValueExpr = Const | Ref | Call


@attrs.frozen
class Condition:
    """One ``slot = spec`` entry of a rule's ``when``. Build with :meth:`build`."""

    slot: str
    ops: tuple[tuple[str, Any], ...]
    predicate: Predicate = attrs.field(eq=False, repr=False)
    #: One test per operator, in order (``predicate`` is all of them): the evaluator runs these.
    tests: tuple[Predicate, ...] = attrs.field(default=(), eq=False, repr=False)
    #: The domains the operands name, for :attr:`shape`.
    domains: Mapping[str, frozenset[str]] = attrs.field(factory=dict, eq=False, repr=False)
    _shape: Shape | None = attrs.field(default=None, init=False, eq=False, repr=False)

    __repr__ = fields_repr

    @property
    def shape(self) -> Shape:
        """What the condition admits (for the ambiguity check and the generated code); made on first
        use, as a resolution that loads its table from the disk cache asks for few of them."""
        shape = self._shape
        if shape is None:
            shape = Shape()
            for op, operand in self.ops:
                shape = shape.meet(OPERATORS[op].shape(operand, self.domains))
            object.__setattr__(self, "_shape", shape)  # a cache of what the fields determine
        return shape

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(v.slot for _, v in self.ops if isinstance(v, Ref))

    def render(self) -> tuple[str, ...]:
        """Each operator of the condition, written for the docs."""
        return tuple(OPERATORS[op].render(self.slot, operand) for op, operand in self.ops)

    @classmethod
    def build(cls, slot: str, ops: tuple[tuple[str, Any], ...], domains: Mapping[str, frozenset[str]]) -> Condition:
        preds = tuple(OPERATORS[op].predicate(slot, operand, domains) for op, operand in ops)
        if len(preds) == 1:
            predicate = preds[0]
        else:

            def predicate(values: Mapping[str, Any]) -> bool:
                for p in preds:
                    if not p(values):
                        return False
                return True

        return cls(slot, ops, predicate, preds, domains)
