"""What a rule's ``when`` and ``set`` may hold, checked and typed: a value names a slot
(:class:`RefSpec`), is taken as written (:class:`ConstSpec`) or calls a rule function
(:class:`CallSpec`, whose arguments may name a domain, :class:`DomainArg`, or the order the rules of
a prefix declare, :class:`OrderArg`).

:mod:`resolver._engine.schema` runs these checks as validators of the rule file's classes and
hands the typed values to the compile pass (:mod:`resolver._engine.compile`).
"""

from __future__ import annotations

from typing import Any

import attrs

from resolver._engine.values import excerpt

__all__ = [
    "CallSpec",
    "ConstSpec",
    "DomainArg",
    "Invalid",
    "OrderArg",
    "RefSpec",
    "check_when",
    "is_scalar",
    "non_empty",
    "typed_condition",
]

_SCALAR = (str, int, float, bool)


class Invalid(ValueError):
    """A validator's finding, with the key it was found at."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def non_empty(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not value:
        raise Invalid(attribute.name, f"`{attribute.name}` must not be empty")


def is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALAR)


@attrs.frozen
class RefSpec:
    """``{ ref = "slot" }``: the value of another slot (in ``when``, ``set`` and an operator's operand)."""

    ref: str


@attrs.frozen
class ConstSpec:
    """``{ const = value }``: a value taken as written (a table, a list no domain checks)."""

    const: Any


@attrs.frozen
class DomainArg:
    """``{ domain = "name" }`` as a function argument: the domain's members, sorted."""

    domain: str


@attrs.frozen
class OrderArg:
    """``{ order_of = "PREFIX" }`` as a function argument: the values the rules ``PREFIX.*`` set,
    highest priority first (the order their priorities declare, e.g. ``auto``'s accelerators)."""

    order_of: str


@attrs.frozen
class SlotsArg:
    """``{ slots_of = "PREFIX" }`` as function arguments: the names (after ``PREFIX.``) of the slots
    declared under it, sorted, then each one's value: a list that every file may add to by
    declaring a slot (each accelerator's ``accelerator.present.NAME``)."""

    slots_of: str


_TYPED = (RefSpec, ConstSpec, DomainArg, OrderArg, SlotsArg)
_NAMED_ARGS = ("domain", "order_of", "slots_of")


def check_ref(value: Any, where: str) -> None:
    if set(value) != {"ref"} or not isinstance(value["ref"], str) or not value["ref"]:
        raise ValueError(f'{where} must be a value or {{ ref = "slot" }}, not {excerpt(value)}')


def _check_condition(name: str, spec: Any) -> None:
    where = f"condition on {name!r}"
    if (
        isinstance(spec, RefSpec)
        or is_scalar(spec)
        or (isinstance(spec, list) and all(is_scalar(item) for item in spec))
    ):
        return
    if not isinstance(spec, dict) or not spec:
        raise ValueError(f"{where} must be a value or a table of operators, not {excerpt(spec)}")
    if "ref" in spec:
        check_ref(spec, where)
        return
    for op, operand in spec.items():
        if isinstance(operand, RefSpec):
            continue
        if isinstance(operand, dict):
            check_ref(operand, f"operand of {op!r} on {name!r}")
        elif isinstance(operand, list):
            if not all(is_scalar(item) for item in operand):
                raise ValueError(f"operand of {op!r} on {name!r} must list plain values, not {excerpt(operand)}")
        elif not is_scalar(operand):
            raise ValueError(f"operand of {op!r} on {name!r} must be a value, not {excerpt(operand)}")


def check_when(instance: Any, attribute: attrs.Attribute[Any], value: dict[str, Any]) -> None:
    for name, spec in value.items():
        try:
            _check_condition(name, spec)
        except ValueError as exc:
            raise Invalid(f"when.{name}", str(exc)) from None


def typed_condition(spec: Any) -> Any:
    """A checked condition with its ``{ ref }`` tables typed: a value, a list, a :class:`RefSpec`
    (equal to that slot), or operators whose operands are values, lists or :class:`RefSpec`."""
    if not isinstance(spec, dict):
        return spec
    if "ref" in spec:
        return RefSpec(spec["ref"])
    return {op: RefSpec(operand["ref"]) if isinstance(operand, dict) else operand for op, operand in spec.items()}


@attrs.frozen
class CallSpec:
    """``{ fn = "name", args = [...] }``: each argument a slot name, ``{ const }``, ``{ domain }``,
    ``{ order_of }`` or ``{ slots_of }``."""

    fn: str = attrs.field(validator=non_empty)
    args: list[Any] = attrs.field(factory=list)

    @args.validator
    def _check_args(self, attribute: attrs.Attribute[Any], value: list[Any]) -> None:
        for arg in value:
            if (isinstance(arg, str) and arg) or isinstance(arg, _TYPED):
                continue
            if isinstance(arg, dict) and set(arg) == {"const"}:
                continue
            if isinstance(arg, dict) and len(arg) == 1 and set(arg) <= set(_NAMED_ARGS):
                if isinstance(next(iter(arg.values())), str):
                    continue
            raise Invalid(
                "args",
                f"argument {excerpt(arg)} of {self.fn!r}: function arguments are slot names, "
                "{ const = value }, { domain = name }, { order_of = rule id prefix } or { slots_of = slot prefix }",
            )

    def __attrs_post_init__(self) -> None:
        # checked: each argument is a slot name, or typed
        typed = [_typed_argument(arg) for arg in self.args]
        object.__setattr__(self, "args", typed)


def _typed_argument(arg: Any) -> Any:
    if isinstance(arg, dict):
        if "const" in arg:
            return ConstSpec(arg["const"])
        if "slots_of" in arg:
            return SlotsArg(arg["slots_of"])
        return DomainArg(arg["domain"]) if "domain" in arg else OrderArg(arg["order_of"])
    return arg
