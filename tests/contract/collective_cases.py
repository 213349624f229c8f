"""The contract every :class:`runtime.Collective` implementation passes: one case per behaviour.

A case is a plain function ``case(collective, rank, world_size) -> None`` that every rank of the
run calls with the same arguments (its collective set up, ``rank`` its global rank) and that
asserts what that rank must observe: results, shapes, dtypes, which ranks receive what, subgroups,
and the precise errors misuse raises (:class:`~runtime.CollectiveMisuseError` on *every* rank,
with the group still usable afterwards). Cases work for any world size from 1 up; a case that
needs more ranks says so (``min_world_size``) and is skipped below it. Tensors are created on
``collective.device``.

Plugging in a backend (one small test module, one launch per world size)
-----------------------------------------------------------------------
1. In each of your processes, after your collective's ``setup``, call::

       results = run_cases(collective)            # every case, in order; same dict on every rank

   It runs the cases one after another, exchanges each case's outcome between the ranks (with the
   collective's ``all_gather_object``) and returns ``{case name: CaseResult}``, combined over the
   ranks (a case passes only where it passed on every rank). Bring rank 0's dict back to pytest
   the way your launcher returns values (``strategy.launch`` returns rank 0's result).
2. In a pytest module, parametrize over :data:`CASE_NAMES` and call ``check(results, name)``,
   which fails with the ranks' tracebacks or skips with the reason. ``test_torch_contract.py``
   is the example: a module-scoped fixture launches once per world size.

A backend that cannot do an operation
-------------------------------------
It lists the operation in its class's ``unsupported_operations`` mapping (operation name ->
reason, names from :data:`runtime.collectives.OPERATIONS`) and leaves the ``_<operation>``
primitive unimplemented. Calling the operation then raises
:class:`~runtime.CollectiveNotSupportedError` naming the collective, the operation and the
reason. The case ``unsupported_operations_raise_precisely`` checks exactly that; every other case
that uses such an operation is skipped with the reason, so the report shows the limitation
instead of hiding it.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable

import pytest
import torch
from contract_support import (
    CASES,
    CaseResult,
    ContractCase,
    assert_still_usable,
    case,
    full,
    raises_on_every_rank,
    same,
)

from runtime.collectives import (
    OPERATIONS,
    Collective,
    CollectiveMisuseError,
    CollectiveNotSupportedError,
    ReduceOpDtypeError,
)

__all__ = ["CASES", "CASE_NAMES", "CaseResult", "ContractCase", "check", "run_cases"]


# -- broadcast ------------------------------------------------------------------------------------


@case("broadcast")
def broadcast_gives_every_rank_the_source_tensor(c: Collective, rank: int, world: int) -> None:
    for src in range(world):
        same(c.broadcast(full(c, 10.0 * rank + 1), src=src), full(c, 10.0 * src + 1))


@case("broadcast")
def broadcast_keeps_dtype_and_shape(c: Collective, rank: int, world: int) -> None:
    for dtype in (torch.int64, torch.int32, torch.float64):
        tensor = torch.arange(6, dtype=dtype, device=c.device).reshape(3, 2) * (rank + 1)
        same(c.broadcast(tensor, src=world - 1), torch.arange(6, dtype=dtype).reshape(3, 2) * world)


@case("broadcast")
def broadcast_rejects_a_source_outside_the_group(c: Collective, rank: int, world: int) -> None:
    for src in (world, -1):
        raises_on_every_rank(c, CollectiveMisuseError, rf"src={src} is not a rank of the group",
                             lambda src=src: c.broadcast(full(c, 0.0), src=src))  # fmt: skip


@case("broadcast", min_world_size=2)
def broadcast_rejects_shapes_that_differ_between_ranks(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, r"same shape and dtype on every rank.*rank 0: shape \(1,\)",
                         lambda: c.broadcast(full(c, 0.0, (rank + 1,))))  # fmt: skip


@case("broadcast", min_world_size=2)
def broadcast_rejects_dtypes_that_differ_between_ranks(c: Collective, rank: int, world: int) -> None:
    dtype = torch.float32 if rank == 0 else torch.float64
    raises_on_every_rank(c, CollectiveMisuseError, r"rank 0: shape \(2, 3\) float32; rank 1: shape \(2, 3\) float64",
                         lambda: c.broadcast(full(c, 0.0, dtype=dtype)))  # fmt: skip


@case("broadcast", min_world_size=2)
def broadcast_rejects_ranks_that_disagree_on_the_source(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, "disagree on the source/destination rank",
                         lambda: c.broadcast(full(c, 0.0), src=0 if rank == 0 else 1))  # fmt: skip


# -- all_reduce -----------------------------------------------------------------------------------


def _rank_values(c: Collective, rank: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    # rank r contributes [r + 1, -(r + 1), 2]: sum, max and min all differ
    return torch.tensor([rank + 1, -(rank + 1), 2], dtype=dtype, device=c.device)


def _expected(op: str, world: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    total = world * (world + 1) / 2
    values = {
        "sum": [total, -total, 2 * world],
        "mean": [total / world, -total / world, 2],
        "max": [world, -1, 2],
        "min": [1, -world, 2],
    }[op]
    return torch.tensor(values, dtype=dtype)


@case("all_reduce")
def all_reduce_gives_every_rank_the_reduction(c: Collective, rank: int, world: int) -> None:
    for op in ("sum", "mean", "max", "min"):
        same(c.all_reduce(_rank_values(c, rank), op), _expected(op, world))  # type: ignore[arg-type]


@case("all_reduce")
def all_reduce_keeps_the_dtype(c: Collective, rank: int, world: int) -> None:
    for dtype in (torch.int64, torch.int32):
        for op in ("sum", "max", "min"):
            same(c.all_reduce(_rank_values(c, rank, dtype), op), _expected(op, world, dtype))  # type: ignore[arg-type]
    same(c.all_reduce(_rank_values(c, rank, torch.float64), "mean"), _expected("mean", world, torch.float64))


@case("all_reduce")
def all_reduce_of_a_strided_view(c: Collective, rank: int, world: int) -> None:
    column = torch.full((3, 2), float(rank + 1), device=c.device)[:, 1]
    # XLA tensors have no strides: their views report contiguous, and the result is still checked.
    assert c.device.type == "xla" or not column.is_contiguous()
    same(c.all_reduce(column, "sum"), torch.full((3,), world * (world + 1) / 2))


@case("all_reduce")
def all_reduce_rejects_an_unknown_op(c: Collective, rank: int, world: int) -> None:
    match = "unknown reduce op 'median'; use one of sum, mean, max, min, product"
    raises_on_every_rank(c, CollectiveMisuseError, match, lambda: c.all_reduce(full(c, 1.0), "median"))  # type: ignore[arg-type]


@case("all_reduce")
def all_reduce_rejects_an_op_the_dtype_cannot_take(c: Collective, rank: int, world: int) -> None:
    ints = torch.ones(2, dtype=torch.int64, device=c.device)
    raises_on_every_rank(c, ReduceOpDtypeError, "'mean' needs a floating-point tensor, got int64",
                         lambda: c.all_reduce(ints, "mean"))  # fmt: skip
    assert issubclass(ReduceOpDtypeError, TypeError)
    flags = torch.ones(2, dtype=torch.bool, device=c.device)
    raises_on_every_rank(c, ReduceOpDtypeError, "cannot reduce a bool tensor", lambda: c.all_reduce(flags, "sum"))
    complex_values = torch.ones(2, dtype=torch.complex64)
    raises_on_every_rank(c, ReduceOpDtypeError, "'max' cannot order complex numbers",
                         lambda: c.all_reduce(complex_values, "max"))  # fmt: skip


@case("all_reduce", min_world_size=2)
def all_reduce_rejects_shapes_that_differ_between_ranks(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, r"all_reduce needs tensors of the same shape.*rank 1: shape \(4,\)",
                         lambda: c.all_reduce(full(c, 1.0, (3 + rank,))))  # fmt: skip


@case("all_reduce", min_world_size=2)
def all_reduce_rejects_ranks_that_disagree_on_the_op(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, "rank 0: sum; rank 1: max",
                         lambda: c.all_reduce(full(c, 1.0), "sum" if rank == 0 else "max"))  # fmt: skip


@case("all_reduce", min_world_size=2)
def a_misuse_on_one_rank_raises_on_every_rank(c: Collective, rank: int, world: int) -> None:
    op = "mean" if rank == world - 1 else "sum"
    tensor = torch.ones(2, dtype=torch.int64, device=c.device)
    expected = ReduceOpDtypeError if rank == world - 1 else CollectiveMisuseError
    match = "'mean' needs a floating-point tensor" if rank == world - 1 else rf"rank\(s\) {world - 1} passed invalid"
    raises_on_every_rank(c, expected, match, lambda: c.all_reduce(tensor, op))  # type: ignore[arg-type]


# -- reduce ---------------------------------------------------------------------------------------


@case("reduce")
def reduce_gives_the_destination_the_reduction(c: Collective, rank: int, world: int) -> None:
    for dst in range(world):
        for op in ("sum", "mean", "max", "min"):
            result = c.reduce(_rank_values(c, rank), dst=dst, op=op)  # type: ignore[arg-type]
            if rank == dst:
                same(result, _expected(op, world))
            else:
                assert result.shape == (3,) and result.dtype == torch.float32


@case("reduce")
def reduce_rejects_a_destination_outside_the_group(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, rf"dst={world} is not a rank of the group",
                         lambda: c.reduce(full(c, 1.0), dst=world))  # fmt: skip
    raises_on_every_rank(c, ReduceOpDtypeError, "'mean' needs a floating-point tensor",
                         lambda: c.reduce(torch.ones(2, dtype=torch.int32, device=c.device), op="mean"))  # fmt: skip


# -- all_gather / gather --------------------------------------------------------------------------


@case("all_gather")
def all_gather_gives_every_rank_all_tensors_by_rank(c: Collective, rank: int, world: int) -> None:
    for dtype in (torch.float32, torch.int64):
        gathered = c.all_gather(full(c, rank, (2, 3), dtype))
        assert isinstance(gathered, list) and len(gathered) == world
        for source, tensor in enumerate(gathered):
            same(tensor, torch.full((2, 3), source, dtype=dtype))


@case("all_gather", min_world_size=2)
def all_gather_rejects_shapes_that_differ_between_ranks(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, r"all_gather needs tensors of the same shape",
                         lambda: c.all_gather(full(c, 1.0, (2, rank + 1))))  # fmt: skip


@case("gather")
def gather_gives_only_the_destination_all_tensors_by_rank(c: Collective, rank: int, world: int) -> None:
    for dst in range(world):
        gathered = c.gather(full(c, 10 * rank, (3,), torch.int64), dst=dst)
        if rank == dst:
            assert gathered is not None and len(gathered) == world
            for source, tensor in enumerate(gathered):
                same(tensor, torch.full((3,), 10 * source, dtype=torch.int64))
        else:
            assert gathered is None


@case("gather")
def gather_rejects_a_destination_outside_the_group(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, r"dst=-2 is not a rank", lambda: c.gather(full(c, 1.0), dst=-2))


@case("gather", min_world_size=2)
def gather_rejects_dtypes_that_differ_between_ranks(c: Collective, rank: int, world: int) -> None:
    dtype = torch.int64 if rank == 1 else torch.float32
    raises_on_every_rank(c, CollectiveMisuseError, r"gather needs tensors of the same shape and dtype",
                         lambda: c.gather(full(c, 1.0, dtype=dtype)))  # fmt: skip


# -- scatter --------------------------------------------------------------------------------------


@case("scatter")
def scatter_gives_rank_i_the_sources_ith_tensor(c: Collective, rank: int, world: int) -> None:
    for src in range(world):
        chunks = [full(c, 100 * i + src, (2,)) for i in range(world)] if rank == src else None
        same(c.scatter(full(c, -1.0, (2,)), chunks, src=src), torch.full((2,), 100.0 * rank + src))


@case("scatter")
def scatter_rejects_a_list_of_the_wrong_length(c: Collective, rank: int, world: int) -> None:
    chunks = [full(c, 0.0, (2,))] * (world + 1) if rank == 0 else None
    match = (
        rf"one tensor per rank of the group \({world}\).*got {world + 1}"
        if rank == 0
        else r"rank\(s\) 0 passed invalid"
    )
    raises_on_every_rank(c, CollectiveMisuseError, match, lambda: c.scatter(full(c, 0.0, (2,)), chunks, src=0))


@case("scatter")
def scatter_rejects_chunks_that_do_not_fit_the_outputs(c: Collective, rank: int, world: int) -> None:
    chunks = [full(c, 0.0, (3,))] * world if rank == 0 else None
    raises_on_every_rank(c, CollectiveMisuseError, r"output shape \(2,\) float32, chunk shape \(3,\) float32",
                         lambda: c.scatter(full(c, 0.0, (2,)), chunks, src=0))  # fmt: skip


@case("scatter", min_world_size=2)
def scatter_rejects_a_list_on_another_rank_than_the_source(c: Collective, rank: int, world: int) -> None:
    chunks = [full(c, 0.0, (2,))] * world
    match = "only the source rank" if rank != 0 else r"passed invalid arguments"
    raises_on_every_rank(c, CollectiveMisuseError, match, lambda: c.scatter(full(c, 0.0, (2,)), chunks, src=0))


# -- reduce_scatter -------------------------------------------------------------------------------


@case("reduce_scatter")
def reduce_scatter_gives_rank_i_the_ith_chunk_of_the_reduction(c: Collective, rank: int, world: int) -> None:
    # rank r contributes arange(2 world) + 10 r, as rows of 3 equal values
    rows = (torch.arange(2 * world, dtype=torch.float32) + 10 * rank).repeat(3, 1).T.contiguous().to(c.device)
    base = torch.arange(2 * world, dtype=torch.float32)
    expected = {
        "sum": world * base + 10 * world * (world - 1) / 2,
        "mean": base + 10 * (world - 1) / 2,
        "max": base + 10 * (world - 1),
        "min": base,
    }
    for op, reduced in expected.items():
        result = c.reduce_scatter(rows.clone(), op)  # type: ignore[arg-type]
        same(result, reduced[2 * rank : 2 * rank + 2].repeat(3, 1).T)


@case("reduce_scatter")
def reduce_scatter_rejects_a_first_dimension_that_does_not_split(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, r"splits dimension 0 into \d+ equal chunks.*shape \(\)",
                         lambda: c.reduce_scatter(torch.tensor(1.0, device=c.device)))  # fmt: skip
    if world > 1:
        raises_on_every_rank(c, CollectiveMisuseError, rf"shape \({world + 1},\)",
                             lambda: c.reduce_scatter(full(c, 1.0, (world + 1,))))  # fmt: skip


# -- all_to_all -----------------------------------------------------------------------------------


@case("all_to_all")
def all_to_all_gives_rank_j_what_each_rank_addressed_to_it(c: Collective, rank: int, world: int) -> None:
    for dtype in (torch.float32, torch.int64):
        received = c.all_to_all([full(c, 10 * rank + j, (2, 2), dtype) for j in range(world)])
        assert len(received) == world
        for source, tensor in enumerate(received):
            same(tensor, torch.full((2, 2), 10 * source + rank, dtype=dtype))


@case("all_to_all")
def all_to_all_rejects_a_list_of_the_wrong_length(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, rf"one tensor per rank of the group \({world}\), got {world + 1}",
                         lambda: c.all_to_all([full(c, 0.0)] * (world + 1)))  # fmt: skip


@case("all_to_all", min_world_size=2)
def all_to_all_rejects_tensors_of_different_shapes(c: Collective, rank: int, world: int) -> None:
    tensors = [full(c, 0.0, (j + 1,)) for j in range(world)]
    raises_on_every_rank(c, CollectiveMisuseError, "one shape and dtype", lambda: c.all_to_all(tensors))
    across = [full(c, 0.0, (rank + 1,))] * world
    raises_on_every_rank(c, CollectiveMisuseError, r"same shape and dtype on every rank", lambda: c.all_to_all(across))


# -- send / recv ----------------------------------------------------------------------------------


@case("send", "recv", min_world_size=2)
def send_and_recv_carry_a_tensor_between_two_ranks(c: Collective, rank: int, world: int) -> None:
    # rank 0 sends to each other rank, which answers with the tensor doubled
    if rank == 0:
        for peer in range(1, world):
            c.send(torch.arange(4, dtype=torch.int64, device=c.device).reshape(2, 2) + peer, dst=peer)
        for peer in range(1, world):
            answer = c.recv(torch.empty(2, 2, dtype=torch.int64, device=c.device), src=peer)
            same(answer, (torch.arange(4).reshape(2, 2) + peer) * 2)
    else:
        received = c.recv(torch.zeros(2, 2, dtype=torch.int64, device=c.device), src=0)
        same(received, torch.arange(4).reshape(2, 2) + rank)
        c.send(received * 2, dst=0)


@case("send", "recv", min_world_size=2)
def send_and_recv_reject_tensors_that_do_not_match(c: Collective, rank: int, world: int) -> None:
    if rank == 0:
        with pytest.raises(CollectiveMisuseError, match=r"send to rank 1: it expects shape \(4,\) float32"):
            c.send(full(c, 1.0, (3,)), dst=1)
    elif rank == 1:
        with pytest.raises(CollectiveMisuseError, match=r"recv from rank 0: it sends shape \(3,\) float32"):
            c.recv(full(c, 0.0, (4,)), src=0)
    assert_still_usable(c)


@case("send", "recv")
def send_and_recv_reject_this_rank_and_ranks_outside_the_group(c: Collective, rank: int, world: int) -> None:
    with pytest.raises(CollectiveMisuseError, match=rf"dst={rank} is this rank itself"):
        c.send(full(c, 1.0), dst=rank)
    with pytest.raises(CollectiveMisuseError, match=rf"src={world} is not a rank of the group"):
        c.recv(full(c, 1.0), src=world)
    assert_still_usable(c)


# -- barrier and objects --------------------------------------------------------------------------


@case("barrier", "all_gather_object")
def barrier_returns_only_after_every_rank_arrived(c: Collective, rank: int, world: int) -> None:
    arrived = 0.0
    if rank == world - 1:
        time.sleep(0.2)
        arrived = time.time()
    c.barrier()
    left = time.time()
    times = c.all_gather_object((arrived, left))
    last_arrival = times[world - 1][0]
    assert all(left_at >= last_arrival for _, left_at in times), times


@case("broadcast_object")
def broadcast_object_gives_every_rank_the_sources_object(c: Collective, rank: int, world: int) -> None:
    for src in range(world):
        assert c.broadcast_object({"from": rank, "items": [rank] * 2}, src=src) == {"from": src, "items": [src] * 2}
    raises_on_every_rank(c, CollectiveMisuseError, rf"src={world} is not a rank",
                         lambda: c.broadcast_object("x", src=world))  # fmt: skip


@case("all_gather_object")
def all_gather_object_orders_objects_by_rank(c: Collective, rank: int, world: int) -> None:
    assert c.all_gather_object(("rank", rank, None)) == [("rank", r, None) for r in range(world)]


@case("all_gather")
def reduce_boolean_decision_agrees_on_all_or_any(c: Collective, rank: int, world: int) -> None:
    assert c.reduce_boolean_decision(rank == 0, all=False) is True
    assert c.reduce_boolean_decision(rank == 0, all=True) is (world == 1)
    assert c.reduce_boolean_decision(True, all=True) is True
    assert c.reduce_boolean_decision(False, all=False) is False


# -- subgroups ------------------------------------------------------------------------------------


@case("new_group", "all_reduce", "all_gather", "broadcast", "reduce", "gather", "scatter", "all_to_all", "barrier",
      "all_gather_object")  # fmt: skip
def every_operation_runs_within_a_subgroup(c: Collective, rank: int, world: int) -> None:
    evens = c.new_group(range(0, world, 2))
    odds = c.new_group(range(1, world, 2)) if world > 1 else None
    group = evens if rank % 2 == 0 else odds
    assert group is not None and rank in group.ranks
    members = group.ranks
    last = members[-1]
    same(c.all_reduce(full(c, rank + 1.0, (2,)), "sum", group=group), full(c, sum(m + 1.0 for m in members), (2,)))
    assert [int(t[0]) for t in c.all_gather(full(c, rank, (1,), torch.int64), group=group)] == list(members)
    same(c.broadcast(full(c, rank, (2,)), src=last, group=group), full(c, last, (2,)))
    reduced = c.reduce(full(c, rank, (2,)), dst=last, op="max", group=group)
    if rank == last:
        same(reduced, full(c, max(members), (2,)))
    gathered = c.gather(full(c, rank, (1,)), dst=members[0], group=group)
    assert (gathered is None) == (rank != members[0])
    if gathered is not None:
        assert [int(t[0]) for t in gathered] == list(members)
    chunks = [full(c, m, (1,)) for m in members] if rank == last else None
    same(c.scatter(full(c, -1.0, (1,)), chunks, src=last, group=group), full(c, rank, (1,)))
    swapped = c.all_to_all([full(c, 100 * rank + m, (1,)) for m in members], group=group)
    assert [int(t[0]) for t in swapped] == [100 * m + rank for m in members]
    c.barrier(group=group)
    assert c.all_gather_object(rank, group=group) == list(members)
    assert_still_usable(c)  # the whole world still works beside the groups


@case("new_group", "all_reduce", min_world_size=2)
def a_rank_outside_a_group_cannot_use_it(c: Collective, rank: int, world: int) -> None:
    first = c.new_group([0])
    if rank != 0:
        with pytest.raises(CollectiveMisuseError, match=rf"rank {rank} is not a member of the group of ranks 0"):
            c.all_reduce(full(c, 1.0), group=first)
    else:
        same(c.all_reduce(full(c, 1.0), group=first), full(c, 1.0))
    assert_still_usable(c)


@case("new_group", "broadcast", min_world_size=2)
def a_group_operation_takes_global_ranks_of_members_only(c: Collective, rank: int, world: int) -> None:
    tail = c.new_group(range(1, world))
    if rank >= 1:  # the members all raise; rank 0 is not involved
        with pytest.raises(CollectiveMisuseError, match=r"src=0 is not a rank of the group \(its global ranks are 1"):
            c.broadcast(full(c, 1.0), src=0, group=tail)
    assert_still_usable(c)


@case("new_group")
def new_group_rejects_ranks_that_do_not_exist_or_repeat(c: Collective, rank: int, world: int) -> None:
    for ranks in ([], [world], [0, 0], [-1]):
        with pytest.raises(CollectiveMisuseError, match=rf"new_group needs distinct ranks between 0 and {world - 1}"):
            c.new_group(ranks)
    assert_still_usable(c)


# -- declared limitations ---------------------------------------------------------------------------

_SAMPLE_CALLS: dict[str, Callable[[Collective], object]] = {
    "broadcast": lambda c: c.broadcast(full(c, 0.0)),
    "all_reduce": lambda c: c.all_reduce(full(c, 0.0)),
    "reduce": lambda c: c.reduce(full(c, 0.0)),
    "all_gather": lambda c: c.all_gather(full(c, 0.0)),
    "gather": lambda c: c.gather(full(c, 0.0)),
    "scatter": lambda c: c.scatter(full(c, 0.0), None, src=0),
    "reduce_scatter": lambda c: c.reduce_scatter(full(c, 0.0)),
    "all_to_all": lambda c: c.all_to_all([full(c, 0.0)] * c.world_size),
    "send": lambda c: c.send(full(c, 0.0), dst=(c.rank + 1) % c.world_size),
    "recv": lambda c: c.recv(full(c, 0.0), src=(c.rank + 1) % c.world_size),
    "barrier": lambda c: c.barrier(),
    "broadcast_object": lambda c: c.broadcast_object(None),
    "all_gather_object": lambda c: c.all_gather_object(None),
    "new_group": lambda c: c.new_group([0]),
    "all_to_all_single": lambda c: c.all_to_all_single(full(c, 0.0, (c.world_size,)), full(c, 0.0, (c.world_size,))),
    "recv_any": lambda c: c.recv_any(full(c, 0.0)),
    "isend": lambda c: c.isend(full(c, 0.0), dst=(c.rank + 1) % c.world_size),
    "irecv": lambda c: c.irecv(full(c, 0.0), src=(c.rank + 1) % c.world_size),
    "monitored_barrier": lambda c: c.monitored_barrier(timeout=5.0),
    "gather_object": lambda c: c.gather_object(None),
    "scatter_object_list": lambda c: c.scatter_object_list([None] * c.world_size if c.rank == 0 else None),
}


@case()
def unsupported_operations_raise_precisely(c: Collective, rank: int, world: int) -> None:
    declared = dict(type(c).unsupported_operations)
    assert set(declared) <= set(OPERATIONS), f"unknown operation names declared: {set(declared) - set(OPERATIONS)}"
    for operation, reason in declared.items():
        with pytest.raises(CollectiveNotSupportedError) as raised:
            _SAMPLE_CALLS[operation](c)
        assert (raised.value.operation, raised.value.reason) == (operation, reason)
        assert operation in str(raised.value) and reason in str(raised.value)


import cases_arguments  # noqa: E402, F401  (registers its cases, after the ones above)
import cases_operations  # noqa: E402, F401

CASE_NAMES: tuple[str, ...] = tuple(CASES)


# -- running --------------------------------------------------------------------------------------


def run_cases(collective: Collective, names: Iterable[str] | None = None) -> dict[str, CaseResult]:
    """Run the cases (all by default) in this rank; every rank of the run calls this together.

    Returns each case's result combined over the ranks (identical on every rank).
    """
    rank, world = collective.rank, collective.world_size
    # The cases state what the argument comparison catches when it compares every call
    # (RUNTIME_CHECK_COLLECTIVES=every); by default each distinct call is compared once.
    collective.check_every_call = True
    unsupported = dict(type(collective).unsupported_operations)
    # Outcomes travel in a group of their own where the engine has groups, so that a case that
    # left ranks at different operations of the world group does not garble the report.
    bookkeeping = collective.new_group(range(world)) if "new_group" not in unsupported else None
    first_failure = ""
    results: dict[str, CaseResult] = {}
    for name in CASE_NAMES if names is None else names:
        contract = CASES[name]
        missing = [op for op in contract.operations if op in unsupported]
        if world < contract.min_world_size:
            results[name] = CaseResult(
                name, "skipped", f"needs at least {contract.min_world_size} ranks, the run has {world}"
            )
            continue
        if missing:
            reasons = "; ".join(f"{op}: {unsupported[op]}" for op in missing)
            results[name] = CaseResult(
                name, "skipped", f"the {collective.name} collective declares unsupported {reasons}"
            )
            continue
        try:
            contract.function(collective, rank, world)
            outcome = ""
        except Exception:  # noqa: BLE001  (a failing case is a result, not the end of the run)
            outcome = traceback.format_exc()
        try:
            outcomes = collective.all_gather_object(outcome, group=bookkeeping)
        except Exception:  # noqa: BLE001
            outcomes = [f"could not exchange the outcome of {name}:\n{traceback.format_exc()}"]
        failures = [f"--- rank {r} ---\n{text}" for r, text in enumerate(outcomes) if text]
        if failures and first_failure:
            failures.insert(0, f"(case {first_failure} failed before this one: this may follow from it)")
        first_failure = first_failure or (name if failures else "")
        results[name] = CaseResult(name, "failed" if failures else "passed", "\n".join(failures))
    return results


def check(results: dict[str, CaseResult], name: str) -> None:
    """In a pytest test: fail with the ranks' tracebacks, skip with the reason, or pass."""
    result = results.get(name)
    if result is None:
        pytest.fail(f"case {name} was not run")
    elif result.status == "skipped":
        pytest.skip(result.detail)
    elif result.status == "failed":
        pytest.fail(f"case {name} failed:\n{result.detail}", pytrace=False)
