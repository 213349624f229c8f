"""Argument checks every collective shares, and how ranks compare their arguments before an operation.

Engines hang (gloo waits for bytes that never come) or corrupt memory when ranks pass tensors of
different shapes or dtypes, or disagree on the root rank or the reduce op. So before an operation
each rank describes its arguments as a small int64 vector (a :class:`Call`), the group all-gathers
the vectors, and every rank reaches the same verdict: either all go ahead, or all raise the same
:class:`~runtime.collectives.errors.CollectiveMisuseError`. A problem only one rank can see (an
invalid ``src`` on that rank) travels in the vector too, so the other ranks raise instead of waiting.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import attrs
import torch

from runtime.collectives.arguments import REDUCE_OPS, check_reduce_op, reduce_op_problem, root_problem
from runtime.collectives.errors import CollectiveMisuseError

__all__ = [
    "REDUCE_OPS",
    "Call",
    "Pairing",
    "Signature",
    "check_reduce_op",
    "reduce_op_problem",
    "root_problem",
    "verdict",
]

# Every torch dtype, in an order all processes with the same torch agree on.
_DTYPES: tuple[torch.dtype, ...] = tuple(
    sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)
)
_DTYPE_CODE = {dtype: code for code, dtype in enumerate(_DTYPES)}
#: Which signatures of the exchanged calls must agree (see :func:`verdict`).
Pairing = Literal["same", "scatter", "splits"]
_MAX_DIMS = 8
_SIGNATURE_LENGTH = 2 + _MAX_DIMS
_ABSENT = -1


@functools.lru_cache(maxsize=256)
def _encode_signature(dtype: torch.dtype | None, shape: tuple[int, ...]) -> tuple[int, ...]:
    if dtype is None:
        return (_ABSENT,) * _SIGNATURE_LENGTH
    dims = list(shape)
    if len(dims) > _MAX_DIMS:  # fold the trailing dimensions: the element count still has to agree
        tail = 1
        for d in dims[_MAX_DIMS - 1 :]:
            tail *= d
        dims = [*dims[: _MAX_DIMS - 1], tail]
    return (_DTYPE_CODE[dtype], len(shape), *dims, *[0] * (_MAX_DIMS - len(dims)))


@attrs.frozen
class Signature:
    """A tensor's dtype and shape (``dtype is None``: no tensor at that place)."""

    dtype: torch.dtype | None
    shape: tuple[int, ...]

    @classmethod
    def of(cls, tensor: object) -> Signature:
        """``tensor``'s signature; anything else (None, a wrong type) is "no tensor"."""
        return cls(tensor.dtype, tuple(tensor.shape)) if isinstance(tensor, torch.Tensor) else cls(None, ())

    def encode(self) -> tuple[int, ...]:
        return _encode_signature(self.dtype, self.shape)

    @classmethod
    def decode(cls, values: Sequence[int]) -> Signature:
        if values[0] == _ABSENT:
            return cls(None, ())
        ndim = values[1]
        return cls(_DTYPES[values[0]], tuple(values[2 : 2 + min(ndim, _MAX_DIMS)]))

    def describe(self) -> str:
        if self.dtype is None:
            return "no tensor"
        return f"shape {self.shape} {str(self.dtype).removeprefix('torch.')}"


@attrs.frozen
class Call:
    """What one rank passed to an operation, in a form ranks can exchange as one int64 vector.

    ``op`` is an index into :data:`REDUCE_OPS` (or -1), ``root`` the ``src``/``dst`` rank (or -1),
    ``count`` a list's length (or -1), ``extra`` operation-specific integers (split sizes; every
    rank passes as many), ``signatures`` the tensors' dtypes and shapes; ``problem`` is this
    rank's own complaint about its arguments (travels as a flag; the rank keeps the text).
    """

    op: int = -1
    root: int = -1
    count: int = -1
    signatures: tuple[Signature, ...] = ()
    problem: CollectiveMisuseError | None = attrs.field(default=None, eq=False)
    extra: tuple[int, ...] = ()

    def key(self) -> tuple[Any, ...]:
        """What identifies this call among the calls a rank made (hashable, cheap)."""
        return (self.op, self.root, self.count, self.extra, tuple(s.encode() for s in self.signatures))

    def encode(self, device: torch.device) -> torch.Tensor:
        values = [int(self.problem is not None), self.op, self.root, self.count, len(self.extra), *self.extra]
        for signature in self.signatures:
            values.extend(signature.encode())
        return torch.tensor(values, dtype=torch.int64, device=device)

    @classmethod
    def decode(cls, tensor: torch.Tensor) -> tuple[bool, Call]:
        values = [int(v) for v in tensor.tolist()]
        start = 5 + values[4]
        signatures = tuple(
            Signature.decode(values[i : i + _SIGNATURE_LENGTH]) for i in range(start, len(values), _SIGNATURE_LENGTH)
        )
        call = cls(op=values[1], root=values[2], count=values[3], signatures=signatures, extra=tuple(values[5:start]))
        return bool(values[0]), call


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks))


def _each(ranks: Sequence[int], texts: Sequence[str]) -> str:
    return "; ".join(f"rank {rank}: {text}" for rank, text in zip(ranks, texts, strict=True))


def verdict(
    operation: str,
    ranks: Sequence[int],
    calls: Sequence[tuple[bool, Call]],
    own: Call,
    *,
    pairing: Pairing = "same",
) -> CollectiveMisuseError | None:
    """The error every rank raises for these exchanged calls, or None when they fit together.

    ``pairing`` says which signatures must agree: ``same`` (every rank's list equal), ``scatter``
    (rank ``i``'s output and the root's ``i``-th list entry; the root's list has one per rank),
    ``splits`` (``all_to_all_single``: what rank ``i`` sends rank ``j`` is what ``j`` expects from ``i``).
    """
    troubled = [rank for rank, (flag, _) in zip(ranks, calls, strict=True) if flag]
    if troubled:
        if own.problem is not None:
            return own.problem
        return CollectiveMisuseError(
            f"{operation}: rank(s) {_ranks(troubled)} passed invalid arguments (see their error); "
            "no rank ran the operation",
            hint=f"fix the call on rank(s) {_ranks(troubled)} as their error says",
        )
    decoded = [call for _, call in calls]
    ops = {call.op for call in decoded}
    if len(ops) > 1:
        names = [REDUCE_OPS[call.op] for call in decoded]
        return CollectiveMisuseError(
            f"{operation}: ranks disagree on the reduce op ({_each(ranks, names)}); every rank must pass the same op"
        )
    roots = {call.root for call in decoded}
    if len(roots) > 1:
        return CollectiveMisuseError(
            f"{operation}: ranks disagree on the source/destination rank "
            f"({_each(ranks, [str(call.root) for call in decoded])}); every rank must pass the same one"
        )
    if pairing == "scatter":
        return _scatter_verdict(operation, ranks, decoded)
    if pairing == "splits":
        return _splits_verdict(operation, ranks, decoded)
    counts = {call.count for call in decoded}
    if len(counts) > 1:
        return CollectiveMisuseError(
            f"{operation}: ranks passed lists of different lengths "
            f"({_each(ranks, [str(call.count) for call in decoded])}); each must hold {len(ranks)} tensors"
        )
    if len({call.signatures for call in decoded}) > 1:
        described = [", ".join(s.describe() for s in call.signatures) for call in decoded]
        return CollectiveMisuseError(
            f"{operation} needs tensors of the same shape and dtype on every rank of the group, but got "
            f"{_each(ranks, described)}",
            hint="pad or reshape so that every rank passes the same shape, and cast to one dtype",
        )
    return None


def _scatter_verdict(operation: str, ranks: Sequence[int], calls: Sequence[Call]) -> CollectiveMisuseError | None:
    root_call = calls[list(ranks).index(calls[0].root)]
    chunks = root_call.signatures[1:]
    wrong = [
        f"rank {rank}: output {call.signatures[0].describe()}, chunk {chunk.describe()}"
        for rank, call, chunk in zip(ranks, calls, chunks, strict=True)
        if call.signatures[0] != chunk
    ]
    if wrong:
        return CollectiveMisuseError(
            f"{operation}: each rank's output tensor must have the shape and dtype of its chunk in the "
            f"source rank's scatter_list, but {'; '.join(wrong)}"
        )
    if len(set(chunks)) > 1:  # engines send equal pieces: gloo fails on the source, the others would wait
        return CollectiveMisuseError(
            f"{operation}: the source rank's scatter_list must hold chunks of one shape and dtype (engines "
            f"scatter equal pieces), but it holds {_each(ranks, [chunk.describe() for chunk in chunks])}",
            hint="pad the chunks to one shape (and cast to one dtype), or send each rank its own piece with "
            "broadcast_object / send",
        )
    return None


def _splits_verdict(operation: str, ranks: Sequence[int], calls: Sequence[Call]) -> CollectiveMisuseError | None:
    """``all_to_all_single``: ``extra`` holds a rank's input splits, then its output splits."""
    size = len(ranks)
    inputs = {call.signatures[0] for call in calls}
    dtypes = {s.dtype for s in inputs}
    trailing = {s.shape[1:] for s in inputs}
    if len(dtypes) > 1 or len(trailing) > 1:
        described = [call.signatures[0].describe() for call in calls]
        return CollectiveMisuseError(
            f"{operation} needs inputs of one dtype and the same shape past dimension 0 on every rank, but got "
            f"{_each(ranks, described)}"
        )
    wrong = [
        f"rank {ranks[i]} sends {calls[i].extra[j]} rows to rank {ranks[j]}, which expects {calls[j].extra[size + i]}"
        for i in range(size)
        for j in range(size)
        if calls[i].extra[j] != calls[j].extra[size + i]
    ]
    if wrong:
        return CollectiveMisuseError(
            f"{operation}: the split sizes do not match between ranks: {'; '.join(wrong[:6])}"
            f"{' ...' if len(wrong) > 6 else ''}",
            hint="rank i's input_split_sizes[j] must equal rank j's output_split_sizes[i] (exchange the sizes "
            "first, e.g. with all_to_all_single of a tensor of sizes)",
        )
    return None
