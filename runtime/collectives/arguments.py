"""What a rank can check about its own arguments before it communicates: types, ranks, reduce ops.

Each check returns the error (or ``None``) instead of raising: the collective puts it in the
description its rank exchanges (:class:`~runtime.collectives.checks.Call`), so that the other
ranks of the group raise too instead of waiting in the engine for a rank that will never come.
Messages name the operation, the argument, what it expects and what it got.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

from resolver._runtime_interface import timeout_problem
from runtime.collectives.errors import CollectiveArgumentTypeError, CollectiveMisuseError, ReduceOpDtypeError

__all__ = [
    "REDUCE_OPS",
    "REDUCE_OP_ALIASES",
    "as_rank",
    "bool_problem",
    "check_reduce_op",
    "overlap_problem",
    "rank_problem",
    "reduce_op_name",
    "reduce_op_problem",
    "root_problem",
    "seconds_problem",
    "tensor_list_problem",
    "tensor_problem",
    "type_name",
]

#: The reduction names every collective accepts (its engine may lack some: see ``unsupported_reduce_ops``).
REDUCE_OPS: tuple[str, ...] = ("sum", "mean", "max", "min", "product", "band", "bor", "bxor")
#: Other names for them (torch's ``ReduceOp`` names, lower-cased, included).
REDUCE_OP_ALIASES: dict[str, str] = {"avg": "mean", "prod": "product"}

_BITWISE = ("band", "bor", "bxor")
_NAMES = {
    spelling: canonical
    for alias, canonical in [*((n, n) for n in REDUCE_OPS), *REDUCE_OP_ALIASES.items()]
    for spelling in (alias, alias.upper())
}


def type_name(value: object) -> str:
    """``value``'s type as a message shows it (``list``, ``numpy.float64``, ``None``)."""
    if value is None:
        return "None"
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module in ("builtins", "") else f"{module.split('.')[0]}.{kind.__qualname__}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def tensor_problem(operation: str, name: str, value: object, role: str, hint: str = "") -> CollectiveMisuseError | None:
    """Why ``value`` cannot be the tensor argument ``name`` (``role``: what it is for)."""
    if isinstance(value, torch.Tensor):
        return None
    if not hint and isinstance(value, (list, tuple)):
        hint = f"pass one tensor as {name}, not a {type_name(value)}"
    elif not hint and isinstance(value, (int, float, complex, bool)):
        hint = f"wrap the number in a tensor: torch.tensor({value!r}, device=collective.device)"
    elif not hint:
        hint = f"pass a torch.Tensor (created on collective.device) as {name}"
        if type(value).__module__.split(".")[0] == "numpy":
            hint += ": torch.from_numpy(array).to(collective.device)"
    return CollectiveArgumentTypeError(
        f"{operation}: {name} must be a torch.Tensor ({role}), got {type_name(value)} {_shown(value)}", hint=hint
    )


def tensor_list_problem(operation: str, name: str, value: object, role: str) -> CollectiveMisuseError | None:
    """Why ``value`` cannot be the list of tensors ``name``."""
    if isinstance(value, torch.Tensor) or not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        hint = (
            "pass a list: [t0, t1, ...] (or list(tensor.unbind(0)) to split a tensor along dimension 0)"
            if isinstance(value, torch.Tensor)
            else "pass a list of tensors, one per rank of the group"
        )
        return CollectiveArgumentTypeError(
            f"{operation}: {name} must be a list of torch.Tensor ({role}), got {type_name(value)}", hint=hint
        )
    wrong = [(i, item) for i, item in enumerate(value) if not isinstance(item, torch.Tensor)]
    if wrong:
        i, item = wrong[0]
        return CollectiveArgumentTypeError(
            f"{operation}: {name} must hold torch.Tensor items ({role}), but {name}[{i}] is "
            f"{type_name(item)} {_shown(item)}",
            hint="make every item a tensor (torch.tensor(x, device=collective.device))",
        )
    return None


def as_rank(value: object) -> int | None:
    """``value`` as a rank: any integer (``int``, ``numpy.int64``, anything with ``__index__``) but a bool."""
    if isinstance(value, bool):  # an int to Python, never meant as a rank (numpy's bool has no __index__)
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def rank_problem(operation: str, name: str, value: object) -> CollectiveMisuseError | None:
    """Why ``value`` is not an integer at all (a rank's type); :func:`root_problem` checks membership."""
    if as_rank(value) is not None:
        return None
    hint = "pass int(x)" if isinstance(value, (float, torch.Tensor)) else "pass a global rank of the group, e.g. 0"
    return CollectiveArgumentTypeError(
        f"{operation}: {name} must be an integer rank (int, or any integer with __index__ such as numpy.int64), "
        f"got {type_name(value)} {_shown(value)}",
        hint=hint,
    )


def root_problem(name: str, root: object, ranks: Sequence[int], operation: str = "") -> CollectiveMisuseError | None:
    """Why ``root`` (a ``src``/``dst`` global rank) cannot be used in a group of ``ranks``."""
    prefix = f"{operation}: " if operation else ""
    if as_rank(root) is None:
        problem = rank_problem(operation or "the operation", name, root)
        assert problem is not None
        return problem
    if operator.index(root) not in ranks:  # type: ignore[arg-type]
        return CollectiveMisuseError(
            f"{prefix}{name}={root!r} is not a rank of the group (its global ranks are {', '.join(map(str, ranks))})",
            hint=f"pass one of them as {name}",
        )
    return None


def bool_problem(operation: str, name: str, value: object) -> CollectiveMisuseError | None:
    if isinstance(value, bool):
        return None
    return CollectiveArgumentTypeError(
        f"{operation}: {name} must be True or False, got {type_name(value)} {_shown(value)}",
        hint=f"pass {name}=bool(x) if that is what you mean",
    )


def seconds_problem(operation: str, name: str, value: object) -> CollectiveMisuseError | None:
    """Why ``value`` is not a timeout (None, or seconds or a timedelta in the range every timeout
    has: :mod:`resolver._domain.timeouts`)."""
    if value is None:
        return None
    problem = timeout_problem(value, f"{operation}: {name}={_shown(value)}", allow_timedelta=True)
    if problem is None:
        return None
    return CollectiveArgumentTypeError(
        problem,
        hint=f"e.g. {name}=30.0 or {name}=datetime.timedelta(seconds=30), or leave it unset for the collective's "
        "timeout",
    )


def overlap_problem(operation: str, name: str, tensor: object) -> CollectiveMisuseError | None:
    """Why the operation cannot write its result into ``tensor``: an expanded view (stride 0), whose
    elements share memory, cannot hold one value per element."""
    if not isinstance(tensor, torch.Tensor) or tensor.is_contiguous() or tensor.device.type == "xla":
        return None  # a contiguous tensor has no dimension of stride 0 with more than one element
    shared = [d for d, (size, stride) in enumerate(zip(tensor.shape, tensor.stride(), strict=True))
              if stride == 0 and size > 1]  # fmt: skip
    if not shared:
        return None
    return CollectiveMisuseError(
        f"{operation} writes its result into {name}, but {name} is an expanded view (stride 0 along dimension "
        f"{shared[0]}, shape {tuple(tensor.shape)}): its elements share memory and cannot each hold a value",
        hint=f"pass {name}.clone() (or .contiguous()) and use the tensor the operation returns",
    )


def reduce_op_name(op: object) -> str | None:
    """The canonical name of ``op`` (a name in any case, an alias, or torch's ``ReduceOp``), or None."""
    if isinstance(op, str):
        known = _NAMES.get(op)  # the common spellings, without string work on every call
        if known is not None:
            return known
        name = op.strip().lower()
    else:
        op = getattr(op, "op", op)  # a torch.distributed.ReduceOp wraps its RedOpType
        if type(op).__name__ != "RedOpType":
            return None
        name = str(op.name).lower()  # type: ignore[attr-defined]
    name = REDUCE_OP_ALIASES.get(name, name)
    return name if name in REDUCE_OPS else None


def reduce_op_problem(
    op: object, tensor: object, operation: str = "", name: str | None = None
) -> CollectiveMisuseError | None:
    """Why ``op`` cannot reduce ``tensor`` (None when it can); ``name``: ``reduce_op_name(op)`` if known."""
    prefix = f"{operation}: " if operation else ""
    name = name or reduce_op_name(op)
    if name is None:
        known = ", ".join([*REDUCE_OPS, *REDUCE_OP_ALIASES])
        return CollectiveMisuseError(
            f"{prefix}unknown reduce op {op!r}; use one of {known} (any case), or a torch.distributed.ReduceOp",
            hint="e.g. op='sum' or op=torch.distributed.ReduceOp.SUM",
        )
    if not isinstance(tensor, torch.Tensor):
        return None  # the tensor's own check says so
    dtype = str(tensor.dtype).removeprefix("torch.")
    if tensor.dtype == torch.bool and name in ("sum", "mean", "product"):
        return ReduceOpDtypeError(
            f"{prefix}reduce op {name!r} cannot reduce a bool tensor (the result would not fit in bool); "
            "convert it (tensor.int()) to count, or use 'max'/'bor' (any) or 'min'/'band' (all)"
        )
    if name == "mean" and not (tensor.is_floating_point() or tensor.is_complex()):
        return ReduceOpDtypeError(
            f"{prefix}reduce op 'mean' needs a floating-point tensor, got {dtype}; "
            "convert it (tensor.float()) or reduce with 'sum'"
        )
    if name in ("max", "min", "product") and tensor.is_complex():
        what = "order complex numbers" if name != "product" else "multiply complex numbers on every engine"
        return ReduceOpDtypeError(
            f"{prefix}reduce op {name!r} cannot {what} ({dtype}); reduce tensor.abs() or the real "
            "and imaginary parts (torch.view_as_real) instead"
        )
    if name in _BITWISE and (tensor.is_floating_point() or tensor.is_complex()):
        return ReduceOpDtypeError(
            f"{prefix}reduce op {name!r} is bitwise and needs an integer or bool tensor, got {dtype}; "
            "convert it to an integer dtype first, or use 'max'/'min'"
        )
    return None


def check_reduce_op(op: object, tensor: torch.Tensor) -> None:
    """Raise :func:`reduce_op_problem`'s error, if any."""
    problem = reduce_op_problem(op, tensor)
    if problem is not None:
        raise problem
