"""Contract cases for the reduce ops beyond sum/mean/max/min and the newer operations: asynchronous
operations, tags, ``recv_any``, ``isend``/``irecv``, ``all_to_all_single``, ``gather_object``,
``scatter_object_list``, ``monitored_barrier``. Registered into ``contract_support.CASES``."""

# The misuse calls pass wrong types on purpose.
# mypy: disable-error-code="arg-type, list-item, misc"

from __future__ import annotations

import functools
import operator
import re

import pytest
import torch
import torch.distributed as dist
from contract_support import assert_still_usable, case, full, raises_on_every_rank, same

from runtime.collectives import (
    REDUCE_OPS,
    Collective,
    CollectiveHandle,
    CollectiveMisuseError,
    CollectiveNotSupportedError,
    ReduceOpDtypeError,
)

# -- reduce ops -----------------------------------------------------------------------------------

_COMBINE = {
    "sum": operator.add, "product": operator.mul, "max": max, "min": min,
    "band": operator.and_, "bor": operator.or_, "bxor": operator.xor,
}  # fmt: skip


def _values(rank: int) -> list[int]:
    # distinct bits, signs and magnitudes per rank, so that every op gives a different answer
    return [rank + 1, 3 * rank + 2, 1 << rank, -(rank + 1)]


def _reduced(op: str, world: int) -> list[int]:
    columns = zip(*(_values(r) for r in range(world)), strict=True)
    return [functools.reduce(_COMBINE[op], column) for column in columns]


def _unsupported(c: Collective, op: str, call: object) -> bool:
    """Where the engine declares ``op`` unsupported: check it raises precisely, and say so."""
    reason = type(c).unsupported_reduce_ops.get(op)
    if reason is None:
        return False
    match = rf"the {c.name} collective cannot do '\w+': no '{op}' reduction \({re.escape(reason)}\)"
    raises_on_every_rank(c, CollectiveNotSupportedError, match, call)
    return True


@case("all_reduce")
def all_reduce_takes_every_reduce_op(c: Collective, rank: int, world: int) -> None:
    for op in REDUCE_OPS:
        if op == "mean" or _unsupported(c, op, lambda op=op: c.all_reduce(full(c, 1, (4,), torch.int64), op)):
            continue
        for dtype in (torch.int64, torch.int32):
            tensor = torch.tensor(_values(rank), dtype=dtype, device=c.device)
            same(c.all_reduce(tensor, op), torch.tensor(_reduced(op, world), dtype=dtype))
    floats = torch.tensor([rank + 2.0, 0.5], device=c.device)
    if not _unsupported(c, "product", lambda: c.all_reduce(full(c, 1.0), "product")):
        expected = torch.tensor([float(functools.reduce(operator.mul, range(2, world + 2))), 0.5**world])
        same(c.all_reduce(floats, "product"), expected)


@case("all_reduce")
def reduce_ops_are_named_in_any_case_or_by_torch(c: Collective, rank: int, world: int) -> None:
    values = torch.tensor([rank + 1.0, -rank], device=c.device)
    total = world * (world + 1) / 2
    same(c.all_reduce(values.clone(), "SUM"), torch.tensor([total, -(world - 1) * world / 2]))
    same(c.all_reduce(values.clone(), "avg"), torch.tensor([total / world, -(world - 1) / 2]))
    same(c.all_reduce(values.clone(), "Avg"), torch.tensor([total / world, -(world - 1) / 2]))
    same(c.all_reduce(values.clone(), dist.ReduceOp.MAX), torch.tensor([float(world), 0.0]))
    same(c.all_reduce(values.clone(), dist.ReduceOp(dist.ReduceOp.MIN)), torch.tensor([1.0, -(world - 1.0)]))
    raises_on_every_rank(c, CollectiveMisuseError, "unknown reduce op .*PREMUL_SUM",
                         lambda: c.all_reduce(values.clone(), dist.ReduceOp.PREMUL_SUM))  # fmt: skip


@case("all_reduce")
def bitwise_ops_refuse_floating_point_tensors(c: Collective, rank: int, world: int) -> None:
    for op in ("band", "bor", "bxor"):
        if type(c).unsupported_reduce_ops.get(op):
            continue
        match = rf"'{op}' is bitwise and needs an integer or bool tensor, got float32"
        raises_on_every_rank(c, ReduceOpDtypeError, match, lambda op=op: c.all_reduce(full(c, 1.0), op))
    raises_on_every_rank(c, ReduceOpDtypeError, "'product' cannot reduce a bool tensor",
                         lambda: c.all_reduce(torch.ones(2, dtype=torch.bool, device=c.device), "product"))  # fmt: skip


@case("reduce", "reduce_scatter")
def reduce_and_reduce_scatter_take_the_new_ops(c: Collective, rank: int, world: int) -> None:
    if not _unsupported(c, "product", lambda: c.reduce(full(c, 1.0), op="product")):
        result = c.reduce(torch.tensor(_values(rank), device=c.device), dst=world - 1, op="product")
        if rank == world - 1:
            same(result, torch.tensor(_reduced("product", world), dtype=torch.int64))
    if not _unsupported(c, "bor", lambda: c.reduce_scatter(full(c, 1, (world,), torch.int64), "bor")):
        rows = torch.tensor([1 << rank] * 2 * world, device=c.device)
        same(c.reduce_scatter(rows, "bor"), torch.full((2,), (1 << world) - 1))


# -- asynchronous operations ----------------------------------------------------------------------


def _handle(result: object) -> CollectiveHandle[object]:
    assert isinstance(result, CollectiveHandle), f"async_op=True returned {type(result).__name__}, not a handle"
    return result


@case("all_reduce", "broadcast", "all_gather", "reduce", "gather", "scatter", "reduce_scatter", "all_to_all",
      "all_to_all_single", "barrier")  # fmt: skip
def async_operations_return_a_handle_whose_wait_gives_the_result(c: Collective, rank: int, world: int) -> None:
    handle = _handle(c.all_reduce(full(c, rank + 1.0, (3,)), async_op=True))
    total = world * (world + 1) / 2
    same(handle.wait(), full(c, total, (3,)))
    assert handle.is_completed()
    same(handle.wait(), full(c, total, (3,)))  # a second wait gives the same
    column = torch.full((3, 2), float(rank), device=c.device)[:, 1]
    same(_handle(c.all_reduce(column, "mean", async_op=True)).wait(), torch.full((3,), (world - 1) / 2))
    same(_handle(c.broadcast(full(c, rank, (2,)), src=world - 1, async_op=True)).wait(), full(c, world - 1, (2,)))
    gathered = _handle(c.all_gather(full(c, rank, (1,)), async_op=True)).wait()
    assert [float(t[0]) for t in gathered] == list(range(world))
    reduced = _handle(c.reduce(full(c, rank, (2,)), dst=0, op="max", async_op=True)).wait()
    if rank == 0:
        same(reduced, full(c, world - 1, (2,)))
    gathered = _handle(c.gather(full(c, rank, (1,)), dst=0, async_op=True)).wait()
    assert (gathered is None) == (rank != 0)
    chunks = [full(c, i, (2,)) for i in range(world)] if rank == 0 else None
    same(_handle(c.scatter(full(c, -1.0, (2,)), chunks, async_op=True)).wait(), full(c, rank, (2,)))
    rows = torch.ones(world, 2, device=c.device)
    same(_handle(c.reduce_scatter(rows, async_op=True)).wait(), torch.full((1, 2), float(world)))
    swapped = _handle(c.all_to_all([full(c, 10 * rank + j, (1,)) for j in range(world)], async_op=True)).wait()
    assert [float(t[0]) for t in swapped] == [10 * i + rank for i in range(world)]
    single = torch.arange(world, dtype=torch.float32, device=c.device) + 10 * rank
    out = torch.empty(world, device=c.device)
    same(
        _handle(c.all_to_all_single(out, single, async_op=True)).wait(),
        torch.tensor([10.0 * i + rank for i in range(world)]),
    )
    assert _handle(c.barrier(async_op=True)).wait() is None


@case("all_reduce")
def async_op_must_be_a_bool(c: Collective, rank: int, world: int) -> None:
    raises_on_every_rank(c, CollectiveMisuseError, "all_reduce: async_op must be True or False, got str",
                         lambda: c.all_reduce(full(c, 1.0), async_op="yes"))  # fmt: skip


# -- point to point -------------------------------------------------------------------------------


@case("send", "recv", min_world_size=2)
def send_and_recv_match_by_tag(c: Collective, rank: int, world: int) -> None:
    if rank == 0:
        c.send(full(c, 5.0, (2,)), dst=1, tag=7)
        with pytest.raises(CollectiveMisuseError, match="tag must be an integer >= 0"):
            c.send(full(c, 5.0, (2,)), dst=1, tag=-1)
    elif rank == 1:
        same(c.recv(full(c, 0.0, (2,)), src=0, tag=7), full(c, 5.0, (2,)))
    assert_still_usable(c)


@case("isend", "irecv", min_world_size=2)
def isend_and_irecv_exchange_tensors_and_match_by_tag(c: Collective, rank: int, world: int) -> None:
    if rank in (0, 1):
        peer = 1 - rank
        # both ranks send first, then receive: with synchronous send/recv this order would deadlock
        sends = [c.isend(full(c, 10 * rank + tag, (3,)), dst=peer, tag=tag) for tag in (1, 2)]
        # received in the other order than sent: the tags tell the messages apart
        late = c.irecv(full(c, 0.0, (3,)), src=peer, tag=2)
        early = c.irecv(full(c, 0.0, (3,)), src=peer, tag=1)
        same(late.wait(), full(c, 10 * peer + 2, (3,)))
        same(early.wait(), full(c, 10 * peer + 1, (3,)))
        for handle in sends:
            assert handle.wait() is None and handle.is_completed()
    assert_still_usable(c)


@case("send", "recv_any", min_world_size=2)
def recv_any_receives_from_whichever_rank_sends_and_names_it(c: Collective, rank: int, world: int) -> None:
    if rank == 0:
        senders = []
        for _ in range(1, world):
            tensor, sender = c.recv_any(full(c, 0.0, (2,)), tag=3)
            same(tensor, full(c, 100.0 + sender, (2,)))
            senders.append(sender)
        assert sorted(senders) == list(range(1, world))
    else:
        c.send(full(c, 100.0 + rank, (2,)), dst=0, tag=3)
    assert_still_usable(c)


# -- all_to_all_single ----------------------------------------------------------------------------


@case("all_to_all_single")
def all_to_all_single_splits_rows_equally_or_by_sizes(c: Collective, rank: int, world: int) -> None:
    rows = torch.arange(2 * world, dtype=torch.int64, device=c.device).reshape(world, 2) + 100 * rank
    out = torch.empty(world, 2, dtype=torch.int64, device=c.device)
    expected = torch.stack([torch.arange(2 * rank, 2 * rank + 2) + 100 * i for i in range(world)])
    same(c.all_to_all_single(out, rows), expected)
    if c.name == "xla":
        return  # unequal splits are declared unsupported there (all_to_all_single_rejects_mismatched_splits)
    # rank i sends j + 1 rows to rank j, each row holding 10 i + j
    sent = torch.cat([torch.full((j + 1,), 10.0 * rank + j, device=c.device) for j in range(world)])
    received = torch.empty(world * (rank + 1), device=c.device)
    result = c.all_to_all_single(received, sent, [rank + 1] * world, [j + 1 for j in range(world)])
    same(result, torch.cat([torch.full((rank + 1,), 10.0 * i + rank) for i in range(world)]))


@case("all_to_all_single")
def all_to_all_single_rejects_splits_that_do_not_fit(c: Collective, rank: int, world: int) -> None:
    rows = full(c, 0.0, (world, 2))
    raises_on_every_rank(
        c,
        CollectiveMisuseError,
        r"input_split_sizes \[.*\] must hold one size per rank",
        lambda: c.all_to_all_single(rows.clone(), rows, input_split_sizes=[world + 1] * world),
    )
    raises_on_every_rank(c, CollectiveMisuseError, "must have input's dtype",
                         lambda: c.all_to_all_single(rows.long(), rows))  # fmt: skip
    if world > 1 and c.name != "xla":
        # rank 0 sends everything to rank 0, but rank 0 expects equal parts
        splits = [world] + [0] * (world - 1) if rank == 0 else None
        raises_on_every_rank(c, CollectiveMisuseError, "split sizes do not match between ranks: rank 0 sends",
                             lambda: c.all_to_all_single(rows.clone(), rows, input_split_sizes=splits))  # fmt: skip


# -- objects and barriers -------------------------------------------------------------------------


@case("gather_object")
def gather_object_gives_only_the_destination_every_object(c: Collective, rank: int, world: int) -> None:
    for dst in range(world):
        gathered = c.gather_object({"rank": rank}, dst=dst)
        assert gathered == ([{"rank": r} for r in range(world)] if rank == dst else None)
    raises_on_every_rank(c, CollectiveMisuseError, rf"dst={world} is not a rank", lambda: c.gather_object(1, dst=world))


@case("scatter_object_list")
def scatter_object_list_gives_rank_i_the_ith_object(c: Collective, rank: int, world: int) -> None:
    for src in range(world):
        objects = [("for", i, "from", src) for i in range(world)] if rank == src else None
        assert c.scatter_object_list(objects, src=src) == ("for", rank, "from", src)
    wrong = [1] * (world + 1) if rank == 0 else None
    match = rf"one object per rank of the group \({world}\).*got {world + 1}" if rank == 0 else r"rank\(s\) 0 passed"
    raises_on_every_rank(c, CollectiveMisuseError, match, lambda: c.scatter_object_list(wrong, src=0))


@case("monitored_barrier")
def monitored_barrier_returns_when_every_rank_arrived(c: Collective, rank: int, world: int) -> None:
    c.monitored_barrier(timeout=30.0)
    c.monitored_barrier(timeout=30.0, wait_all_ranks=True)
    says = r"monitored_barrier: timeout=-1 is not positive; a timeout is a number of seconds from 0.001 \(1 ms\)"
    with pytest.raises(CollectiveMisuseError, match=says):
        c.monitored_barrier(timeout=-1)
    assert_still_usable(c)


@case()
def unsupported_reduce_ops_are_declared_with_reasons(c: Collective, rank: int, world: int) -> None:
    declared = dict(type(c).unsupported_reduce_ops)
    assert set(declared) <= set(REDUCE_OPS), f"unknown reduce ops declared: {set(declared) - set(REDUCE_OPS)}"
    assert all(isinstance(reason, str) and reason for reason in declared.values())
    assert issubclass(CollectiveNotSupportedError, CollectiveMisuseError)
