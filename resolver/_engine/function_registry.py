"""The registry of named, pure functions that rules may call (``set = { x = { fn = ... } }``), and
the check of a rule's call against a function's signature.

Domain-free: the built-in functions are in :mod:`resolver._domain.functions`, which registers them here
when imported. Register more with :func:`register_function`.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from types import NoneType, UnionType
from typing import Any

from resolver._engine.slot_types import PYTHON_CLASS

__all__ = ["FUNCTIONS", "READS_UNSET", "InvalidInput", "call_problem", "register_function", "slots_problem"]

FUNCTIONS: dict[str, Callable[..., Any]] = {}
#: Functions called with unset (None) arguments too; any other function of an unset value is unset.
READS_UNSET: set[str] = set()


class InvalidInput(Exception):
    """A function's input cannot be interpreted; carries the fix."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def register_function(name: str, *, reads_unset: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` under ``name`` for use in rule files. Functions must be pure.

    A function of an unset slot is unset without being called, unless ``reads_unset``: then it is
    called with None for each unset argument (e.g. to name the variables that are missing).
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        FUNCTIONS[name] = fn
        if reads_unset:
            READS_UNSET.add(name)
        else:
            READS_UNSET.discard(name)
        return fn

    return decorate


def _accepts(annotation: Any, kind: type) -> bool:
    """Whether a parameter annotated ``annotation`` takes values of Python type ``kind``."""
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (UnionType, typing.Union):
        return any(_accepts(a, kind) for a in typing.get_args(annotation) if a is not NoneType)
    target = origin if origin is not None else annotation
    if target is bool:
        return kind is bool
    try:
        return issubclass(kind, target)
    except TypeError:
        return True  # an annotation this check cannot read: the function checks at run time


def slots_problem(name: str, position: int, written: int) -> str | None:
    """Why ``{ slots_of }`` cannot be argument ``position`` (from 0) of ``written`` in a call of
    function ``name``, or None. It is several arguments (the names, then one value per slot), so it
    must be the last argument and fill the function's last named parameter and its ``*args``."""
    fn = FUNCTIONS.get(name)
    if fn is None:
        return None  # call_problem names the unknown function
    parameters = list(inspect.signature(fn).parameters.values())
    named = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    if not varargs or position != len(named) - 1 or position != written - 1:
        wanted = ", ".join(p.name if p.kind is not p.VAR_POSITIONAL else "*" + p.name for p in parameters)
        return (
            f"function {name!r} takes ({wanted}), but the rule passes {{ slots_of }} as argument "
            f"{position + 1} of {written}: it must be the last, for the last named parameter and the *args"
        )
    return None


def call_problem(name: str, args: Sequence[tuple[str, Any]]) -> str | None:
    """Why a rule's call of function ``name`` cannot work, or None: checked when the table loads.

    Each argument is ``("slot", slot_type)`` (a slot of that declared type, ``"any"`` unknown) or
    ``("const", value)``. The count must fit the signature and each type the parameter's hint.
    """
    fn = FUNCTIONS.get(name)
    if fn is None:
        return f"unknown function {name!r}; registered: {', '.join(sorted(FUNCTIONS))}"
    signature = inspect.signature(fn)
    try:
        bound = signature.bind(*range(len(args)))
    except TypeError:
        wanted = ", ".join(signature.parameters)
        return f"function {name!r} takes ({wanted}), but the rule passes {len(args)} argument(s)"
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable hints of a user's function: checked at run time
        hints = {}
    for parameter, position in bound.arguments.items():
        if not isinstance(position, int):
            continue  # *args: not checked
        annotation = hints.get(parameter, Any)
        kind, info = args[position]
        if kind == "slot":
            if info not in PYTHON_CLASS:
                continue
            python_type = PYTHON_CLASS[info]
            shown = f"a slot of type {info}"
        else:
            python_type = tuple if isinstance(info, list) else type(info)
            shown = f"{info!r}"
        if not _accepts(annotation, python_type):
            wanted = getattr(annotation, "__name__", str(annotation))
            return f"function {name!r}: argument {parameter!r} takes {wanted}, but the rule passes {shown}"
    return None
