"""Collective: every distributed communication the runtime makes goes through one of these.

The public operations mirror ``torch.distributed`` (broadcast, all_reduce, reduce, all_gather,
gather, scatter, reduce_scatter, all_to_all, all_to_all_single, send/recv, barriers, object
operations, subgroups). They check their arguments here, once for every engine (types, ranks and
reduce ops in :mod:`runtime.collectives.arguments`, agreement between ranks in
:mod:`runtime.collectives.checks`), then call the engine's primitive: a subclass implements the
``_``-prefixed methods of :class:`~runtime.collectives.core.CollectiveCore`. Point-to-point and
object operations live in :mod:`runtime.collectives.point_to_point` and
:mod:`runtime.collectives.objects`. The shared contract test suite
(``tests/contract/collective_cases.py``) states what each operation does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Literal

import attrs
import torch

from runtime.collectives.arguments import (
    REDUCE_OPS,
    as_rank,
    bool_problem,
    overlap_problem,
    reduce_op_name,
    reduce_op_problem,
    root_problem,
    seconds_problem,
    tensor_list_problem,
    tensor_problem,
    type_name,
)
from runtime.collectives.checks import Call, Signature
from runtime.collectives.core import (
    CHECK_VARIABLE,
    OPERATIONS,
    CollectiveGroup,
    check_every_call,
    first,
    noted,
)
from runtime.collectives.errors import CollectiveArgumentTypeError, CollectiveMisuseError, CollectiveNotSupportedError
from runtime.collectives.handles import CollectiveHandle
from runtime.collectives.objects import ObjectOperations
from runtime.collectives.point_to_point import PointToPoint

__all__ = [
    "CHECK_VARIABLE",
    "OPERATIONS",
    "REDUCE_OPS",
    "Collective",
    "CollectiveGroup",
    "CollectiveHandle",
    "ReduceOp",
    "check_every_call",
]

#: A reduce op by name (any case; ``avg`` is ``mean``), or torch's ``torch.distributed.ReduceOp``.
ReduceOp = Literal["sum", "mean", "avg", "max", "min", "product", "band", "bor", "bxor"]

_SCATTER_HINT = (
    "scatter's first argument is this rank's output tensor; the source rank passes the chunks as "
    "scatter_list: scatter(output, scatter_list=[t0, t1, ...], src=0), the other ranks scatter(output, None, src=0)"
)


class Collective(PointToPoint, ObjectOperations):
    """Communication among the ``world_size`` processes of a run.

    Tensor operations work in place where the engine does and return the result, so
    ``x = collective.all_reduce(x)`` is always right. Between :meth:`setup` and
    :meth:`teardown`, :attr:`rank` and :attr:`world_size` describe this process; an operation
    called outside them raises :class:`~runtime.collectives.errors.CollectiveNotSetUpError`.

    Every operation takes an optional ``group`` (from :meth:`new_group`; default: all ranks).
    Ranks (``src``, ``dst``, ``new_group``'s) may be any integer with ``__index__`` (numpy's too).
    Every operation checks its arguments' types first, and before running, ranks compare their
    arguments (one small all-gather) so that wrong types, tensors of different shapes or dtypes, or
    disagreeing roots or ops, raise a :class:`~runtime.collectives.errors.CollectiveMisuseError`
    on every rank instead of hanging the engine. By default each distinct call (operation, group,
    op, root and tensor shapes and dtypes) is compared the first time this rank makes it, then
    trusted: a training loop pays for the comparison once. ``RUNTIME_CHECK_COLLECTIVES=every``
    compares every call; ``check_across_ranks = False`` skips the exchange (misuse is then
    undefined). An operation that fails after its comparison was skipped carries a note saying
    how to compare every call.

    ``async_op=True`` (tensor operations and barrier) returns a
    :class:`~runtime.collectives.handles.CollectiveHandle` whose ``wait()`` gives the result.

    An engine that lacks an operation (or a reduce op) lists it in :attr:`unsupported_operations`
    (:attr:`unsupported_reduce_ops`) with the reason; calling it raises
    :class:`~runtime.collectives.errors.CollectiveNotSupportedError` (a ``CollectiveMisuseError``).
    """

    # -- tensor operations ------------------------------------------------------------------------

    @noted
    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, group: CollectiveGroup | None = None, async_op: bool = False
    ) -> Any:
        """Every rank's ``tensor`` becomes rank ``src``'s."""
        g = self._group("broadcast", group, async_op)
        problem = first(
            tensor_problem("broadcast", "tensor", tensor, "sent by src, overwritten elsewhere"),
            overlap_problem("broadcast", "tensor", tensor),
            root_problem("src", src, g.ranks, "broadcast"),
        )
        self._agree("broadcast", g, Call(root=_root(src), signatures=(Signature.of(tensor),), problem=problem))
        return self._run("broadcast", async_op, tensor, int(src), g)

    @noted
    def all_reduce(
        self, tensor: torch.Tensor, op: ReduceOp = "sum", group: CollectiveGroup | None = None, async_op: bool = False
    ) -> Any:
        """Every rank's ``tensor`` becomes the element-wise reduction over the group's ranks."""
        g = self._group("all_reduce", group, async_op)
        call = self._reduction("all_reduce", op, tensor)
        self._agree("all_reduce", g, call)
        return self._run("all_reduce", async_op, tensor, REDUCE_OPS[call.op], g)

    @noted
    def reduce(
        self,
        tensor: torch.Tensor,
        dst: int = 0,
        op: ReduceOp = "sum",
        group: CollectiveGroup | None = None,
        async_op: bool = False,
    ) -> Any:
        """Rank ``dst``'s ``tensor`` becomes the reduction; on the other ranks ``tensor`` is
        returned with contents left unspecified (engines use it as scratch space)."""
        g = self._group("reduce", group, async_op)
        call = self._reduction("reduce", op, tensor)
        call = _evolve(call, root=_root(dst), problem=first(call.problem, root_problem("dst", dst, g.ranks, "reduce")))
        self._agree("reduce", g, call)
        return self._run("reduce", async_op, tensor, int(dst), REDUCE_OPS[call.op], g)

    @noted
    def all_gather(self, tensor: torch.Tensor, group: CollectiveGroup | None = None, async_op: bool = False) -> Any:
        """Every rank's ``tensor`` (same shape and dtype on all ranks), ordered by rank."""
        g = self._group("all_gather", group, async_op)
        problem = tensor_problem("all_gather", "tensor", tensor, "this rank's contribution")
        self._agree("all_gather", g, Call(signatures=(Signature.of(tensor),), problem=problem))
        return self._run("all_gather", async_op, tensor, g)

    @noted
    def gather(
        self, tensor: torch.Tensor, dst: int = 0, group: CollectiveGroup | None = None, async_op: bool = False
    ) -> Any:
        """On rank ``dst``, every rank's ``tensor`` ordered by rank; ``None`` on the other ranks."""
        g = self._group("gather", group, async_op)
        problem = first(tensor_problem("gather", "tensor", tensor, "this rank's contribution"),
                        root_problem("dst", dst, g.ranks, "gather"))  # fmt: skip
        self._agree("gather", g, Call(root=_root(dst), signatures=(Signature.of(tensor),), problem=problem))
        return self._run("gather", async_op, tensor, int(dst), g)

    @noted
    def scatter(
        self,
        tensor: torch.Tensor,
        scatter_list: Sequence[torch.Tensor] | None = None,
        src: int = 0,
        group: CollectiveGroup | None = None,
        async_op: bool = False,
    ) -> Any:
        """Rank ``i`` of the group gets ``scatter_list[i]`` from rank ``src``, written into ``tensor``
        (its output buffer, of that chunk's shape and dtype). Only ``src`` passes a list; its chunks
        all have one shape and dtype."""
        g = self._group("scatter", group, async_op)
        problem = first(
            tensor_problem("scatter", "tensor", tensor, "this rank's output buffer", _SCATTER_HINT),
            overlap_problem("scatter", "tensor", tensor),
            root_problem("src", src, g.ranks, "scatter"),
        )
        chunks: list[Signature] = [Signature(None, ())] * g.size
        if as_rank(src) == self._rank:
            problem = problem or tensor_list_problem("scatter", "scatter_list", scatter_list, "one chunk per rank")
            if problem is None and len(scatter_list) != g.size:  # type: ignore[arg-type]
                problem = CollectiveMisuseError(
                    f"scatter: the source rank passes one tensor per rank of the group ({g.size}) as "
                    f"scatter_list, got {len(scatter_list)}"  # type: ignore[arg-type]
                )
            elif problem is None:
                chunks = [Signature.of(t) for t in scatter_list]  # type: ignore[union-attr]
        elif scatter_list is not None:
            problem = problem or CollectiveMisuseError(
                f"scatter: only the source rank (src={src}) passes scatter_list; rank {self._rank} passed one "
                "(pass None on the other ranks)"
            )
        call = Call(root=_root(src), signatures=(Signature.of(tensor), *chunks), problem=problem)
        self._agree("scatter", g, call, "scatter")
        chunk_list = list(scatter_list) if scatter_list is not None else None
        return self._run("scatter", async_op, tensor, chunk_list, int(src), g)

    @noted
    def reduce_scatter(
        self, tensor: torch.Tensor, op: ReduceOp = "sum", group: CollectiveGroup | None = None, async_op: bool = False
    ) -> Any:
        """Reduce ``tensor`` over the group, then give its ``i``-th rank the ``i``-th of ``size``
        equal chunks along dimension 0 (whose length must divide by the group's size)."""
        g = self._group("reduce_scatter", group, async_op)
        call = self._reduction("reduce_scatter", op, tensor)
        if call.problem is None and (tensor.dim() == 0 or tensor.shape[0] % g.size):
            call = _evolve(call, problem=CollectiveMisuseError(
                f"reduce_scatter splits dimension 0 into {g.size} equal chunks, but the tensor has shape "
                f"{tuple(tensor.shape)}"
            ))  # fmt: skip
        self._agree("reduce_scatter", g, call)
        return self._run("reduce_scatter", async_op, tensor, REDUCE_OPS[call.op], g)

    @noted
    def all_to_all(
        self, tensors: Sequence[torch.Tensor], group: CollectiveGroup | None = None, async_op: bool = False
    ) -> Any:
        """Rank ``i`` sends ``tensors[j]`` to rank ``j``; returns what each rank sent here, by rank.
        Every tensor on every rank has the same shape and dtype."""
        g = self._group("all_to_all", group, async_op)
        problem = tensor_list_problem("all_to_all", "tensors", tensors, "one tensor for each rank of the group")
        tensors = list(tensors) if problem is None else []
        signatures = {Signature.of(t) for t in tensors}
        if problem is None and len(tensors) != g.size:
            problem = CollectiveMisuseError(
                f"all_to_all takes one tensor per rank of the group ({g.size}), got {len(tensors)}"
            )
        elif problem is None and len(signatures) > 1:
            problem = CollectiveMisuseError(
                "all_to_all needs tensors of one shape and dtype, got "
                + ", ".join(Signature.of(t).describe() for t in tensors)
            )
        signature = Signature.of(tensors[0]) if tensors else Signature(None, ())
        count = len(tensors) if problem is None else -1
        self._agree("all_to_all", g, Call(count=count, signatures=(signature,), problem=problem))
        return self._run("all_to_all", async_op, tensors, g)

    @noted
    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002  (torch's name)
        output_split_sizes: Sequence[int] | None = None,
        input_split_sizes: Sequence[int] | None = None,
        group: CollectiveGroup | None = None,
        async_op: bool = False,
    ) -> Any:
        """Split ``input`` along dimension 0 (``input_split_sizes[j]`` rows for rank ``j``; default: equal
        parts), send the parts, and write what each rank sent here into ``output``, in rank order
        (``output_split_sizes[i]`` rows from rank ``i``); returns ``output``. Rank ``i``'s
        ``input_split_sizes[j]`` must equal rank ``j``'s ``output_split_sizes[i]``."""
        g = self._group("all_to_all_single", group, async_op)
        problem = first(
            tensor_problem("all_to_all_single", "output", output, "the buffer the received rows are written to"),
            tensor_problem("all_to_all_single", "input", input, "the rows this rank sends"),
            overlap_problem("all_to_all_single", "output", output),
        )
        splits: tuple[list[int], list[int]] = ([-1] * g.size, [-1] * g.size)
        if problem is None:
            found = (
                _splits("input", input, input_split_sizes, g.size),
                _splits("output", output, output_split_sizes, g.size),
            )
            problem = first(*(p for _, p in found), _pair_problem(output, input))
            if problem is None:
                splits = (found[0][0], found[1][0])
                reason = self._splits_unsupported(splits[1], splits[0])
                if reason is not None:
                    problem = self._missing_with("all_to_all_single with these split sizes", reason)
        call = Call(
            signatures=(Signature.of(input), Signature.of(output)), problem=problem, extra=(*splits[0], *splits[1])
        )
        self._agree("all_to_all_single", g, call, "splits")
        return self._run("all_to_all_single", async_op, output, input, splits[1], splits[0], g)

    # -- barriers ---------------------------------------------------------------------------------

    @noted
    def barrier(self, group: CollectiveGroup | None = None, async_op: bool = False) -> Any:
        """Wait until every rank of the group has arrived (``async_op``: a handle to wait on)."""
        return self._run("barrier", async_op, self._group("barrier", group, async_op))

    @noted
    def monitored_barrier(
        self,
        group: CollectiveGroup | None = None,
        timeout: timedelta | float | None = None,
        wait_all_ranks: bool = False,
    ) -> None:
        """A barrier that gives up after ``timeout`` (seconds or a timedelta; default: the collective's
        timeout) and names the ranks that did not arrive: the group's first rank raises
        :class:`~runtime.collectives.errors.BarrierTimeoutError` with them (all of them with
        ``wait_all_ranks``, else the first it found), the others raise one naming that first rank.
        Launched ranks are then blamed by the launcher as hung, with their stacks."""
        g = self._group("monitored_barrier", group)
        problem = first(seconds_problem("monitored_barrier", "timeout", timeout),
                        bool_problem("monitored_barrier", "wait_all_ranks", wait_all_ranks))  # fmt: skip
        if problem is not None:
            raise problem
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        self._monitored_barrier(g, None if seconds is None else float(seconds), wait_all_ranks)

    # -- decisions --------------------------------------------------------------------------------

    def reduce_boolean_decision(
        self,
        decision: bool,
        all: bool = True,  # noqa: A002
        group: CollectiveGroup | None = None,
    ) -> bool:
        """Agree on a decision: ``all=True`` is true only if every rank says so, else if any does.
        ``decision`` is a bool (numpy's too) or a one-element tensor."""
        self._group("reduce_boolean_decision", group)
        if isinstance(decision, torch.Tensor) and decision.numel() == 1:
            decision = bool(decision.item())
        problem = first(
            None if type(decision).__name__ in ("bool", "bool_") else CollectiveArgumentTypeError(
                f"reduce_boolean_decision: decision must be a bool (or a one-element tensor), got "
                f"{type_name(decision)} {decision!r}", hint="pass bool(x) if that is what you mean"
            ),
            bool_problem("reduce_boolean_decision", "all", all),
        )  # fmt: skip
        # A rank with invalid arguments still takes part, voting -1, so that every rank raises together.
        vote = torch.tensor(-1 if problem else int(bool(decision)), dtype=torch.int32, device=self._device())
        votes = torch.stack(self.all_gather(vote, group)).tolist()  # one read from the device
        invalid = [r for r, v in zip((group or self.world).ranks, votes, strict=True) if v < 0]
        if invalid:
            raise problem or CollectiveMisuseError(
                f"reduce_boolean_decision: rank(s) {', '.join(map(str, invalid))} passed invalid arguments "
                "(see their error); no decision was made",
                hint="fix the call on those ranks as their error says",
            )
        count = sum(votes)
        return count == len(votes) if all else count > 0

    # -- helpers ----------------------------------------------------------------------------------

    def _reduction(self, operation: str, op: object, tensor: object) -> Call:
        """The call of a reducing operation; its ``op`` indexes :data:`REDUCE_OPS` (what the engine gets)."""
        name = reduce_op_name(op)
        problem = (
            tensor_problem(operation, "tensor", tensor, "reduced in place")
            or overlap_problem(operation, "tensor", tensor)
            or reduce_op_problem(op, tensor, operation, name)
            or self._op_support_problem(operation, name)
        )
        code = REDUCE_OPS.index(name) if name is not None else -1
        return Call(op=code, signatures=(Signature.of(tensor),), problem=problem)

    def _missing_with(self, operation: str, reason: str) -> CollectiveMisuseError:
        return CollectiveNotSupportedError(self.name, operation, reason, hint="use equal split sizes")


def _root(value: object) -> int:
    rank = as_rank(value)
    return rank if rank is not None and rank >= 0 else -1


def _evolve(call: Call, **changes: Any) -> Call:
    return attrs.evolve(call, **changes)


def _splits(
    name: str, tensor: torch.Tensor, sizes: object, size: int
) -> tuple[list[int], CollectiveMisuseError | None]:
    """The split sizes of ``tensor`` along dimension 0 (``sizes`` None: equal parts), or why not."""
    where = f"all_to_all_single: {name}"
    if tensor.dim() == 0:
        return [], CollectiveMisuseError(f"{where} is a scalar; it needs a dimension 0 to split (reshape it to (1,))")
    rows = tensor.shape[0]
    if sizes is None:
        if rows % size:
            return [], CollectiveMisuseError(
                f"{where} has {rows} rows, which do not split into {size} equal parts; pass "
                f"{name}_split_sizes (rows for each rank)"
            )
        return [rows // size] * size, None
    ranks = [as_rank(v) for v in sizes] if isinstance(sizes, Sequence) and not isinstance(sizes, str) else None
    values = [v for v in ranks if v is not None and v >= 0] if ranks is not None else []
    if ranks is None or len(values) != len(ranks):
        return [], CollectiveArgumentTypeError(
            f"{where}_split_sizes must be a list of integers >= 0 (rows for each rank), "
            f"got {type_name(sizes)} {sizes!r}",
            hint="pass one row count per rank of the group, or None for equal parts",
        )
    if len(values) != size or sum(values) != rows:
        return [], CollectiveMisuseError(
            f"{where}_split_sizes {values} must hold one size per rank of the group ({size}) adding up to "
            f"{name}.shape[0] ({rows})"
        )
    return values, None


def _pair_problem(output: torch.Tensor, input: torch.Tensor) -> CollectiveMisuseError | None:  # noqa: A002
    if output.dtype != input.dtype or output.shape[1:] != input.shape[1:]:
        return CollectiveMisuseError(
            f"all_to_all_single: output ({Signature.of(output).describe()}) must have input's dtype and its shape "
            f"past dimension 0 ({Signature.of(input).describe()})"
        )
    return None
