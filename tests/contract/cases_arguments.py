"""Contract cases for argument checks: every public operation, called with arguments of the wrong
type or naming the wrong rank, raises a precise error on every rank (naming the operation and the
argument) before any rank communicates; numpy integers work as ranks; expanded tensors are refused
before communicating; scatter's chunks must share one shape.

:data:`SWEEP` lists, for each public method of :class:`runtime.Collective`, one correct call and
its misuses; ``tests/runtime/collectives/test_runtime_collective_sweep.py`` checks that it names every public
method (a new method without an entry fails there) and calls each before set-up and after teardown.
"""

# The misuse calls pass wrong types on purpose.
# mypy: disable-error-code="arg-type, list-item, misc"

from __future__ import annotations

import re
from collections.abc import Callable

import attrs
import numpy as np
import pytest
import torch
from contract_support import assert_still_usable, case, full, raises_on_every_rank, same

from runtime.collectives import (
    Collective,
    CollectiveArgumentTypeError,
    CollectiveGroup,
    CollectiveMisuseError,
    CollectiveNotSupportedError,
)

__all__ = ["SWEEP", "Misuse", "Sweep"]

Call = Callable[[Collective], object]


@attrs.frozen
class Misuse:
    """A wrong call and the message (a regular expression) its error must match."""

    call: Call
    match: str


@attrs.frozen
class Sweep:
    """One public method: a correct call (used before set-up / after teardown), wrong types, a wrong rank."""

    call: Call
    wrong_types: tuple[Misuse, ...]
    wrong_rank: Misuse


def _outside(c: Collective) -> CollectiveGroup:
    """A group this rank is not a member of."""
    return CollectiveGroup((c.world_size,))


def _next(c: Collective) -> int:
    return (c.rank + 1) % c.world_size


def _t(c: Collective, n: int = 2) -> torch.Tensor:
    return full(c, 0.0, (n,))


_NOT_MEMBER = r"rank \d+ is not a member of the group of ranks"


def _member(operation: str, call: Call) -> Misuse:
    return Misuse(call, rf"{operation}: {_NOT_MEMBER}")


SWEEP: dict[str, Sweep] = {
    "new_group": Sweep(
        lambda c: c.new_group([0]),
        (
            Misuse(lambda c: c.new_group(3), r"new_group: ranks must be a sequence of global ranks.*got int 3"),
            Misuse(lambda c: c.new_group([0.5]), r"new_group needs distinct ranks .*0\.5 is not a rank"),
        ),
        Misuse(lambda c: c.new_group([c.world_size]), r"new_group needs distinct ranks between 0 and"),
    ),
    "broadcast": Sweep(
        lambda c: c.broadcast(_t(c)),
        (
            Misuse(lambda c: c.broadcast([_t(c)]), r"broadcast: tensor must be a torch\.Tensor .*got list"),
            Misuse(
                lambda c: c.broadcast(3.0),
                r"broadcast: tensor must be a torch\.Tensor .*got float.*torch\.tensor\(3\.0",
            ),
            Misuse(lambda c: c.broadcast(_t(c), src=0.0), r"broadcast: src must be an integer rank.*got float 0\.0"),
            Misuse(lambda c: c.broadcast(_t(c), group=[0]), r"broadcast: group must be a CollectiveGroup .*got list"),
        ),
        Misuse(lambda c: c.broadcast(_t(c), src=c.world_size), r"broadcast: src=\d+ is not a rank of the group"),
    ),
    "all_reduce": Sweep(
        lambda c: c.all_reduce(_t(c)),
        (
            Misuse(lambda c: c.all_reduce([_t(c)]), r"all_reduce: tensor must be a torch\.Tensor .*got list"),
            Misuse(lambda c: c.all_reduce(1), r"all_reduce: tensor must be a torch\.Tensor .*got int"),
            Misuse(
                lambda c: c.all_reduce(np.ones(2)), r"all_reduce: tensor must be a torch\.Tensor .*got numpy\.ndarray"
            ),
            Misuse(lambda c: c.all_reduce(_t(c), op=3), r"all_reduce: unknown reduce op 3"),
        ),
        _member("all_reduce", lambda c: c.all_reduce(_t(c), group=_outside(c))),
    ),
    "reduce": Sweep(
        lambda c: c.reduce(_t(c)),
        (
            Misuse(lambda c: c.reduce((_t(c),)), r"reduce: tensor must be a torch\.Tensor .*got tuple"),
            Misuse(lambda c: c.reduce(_t(c), dst="0"), r"reduce: dst must be an integer rank.*got str"),
        ),
        Misuse(lambda c: c.reduce(_t(c), dst=-1), r"reduce: dst=-1 is not a rank of the group"),
    ),
    "all_gather": Sweep(
        lambda c: c.all_gather(_t(c)),
        (
            Misuse(
                lambda c: c.all_gather([_t(c)] * c.world_size), r"all_gather: tensor must be a torch\.Tensor .*got list"
            ),
            Misuse(lambda c: c.all_gather(None), r"all_gather: tensor must be a torch\.Tensor .*got None"),
        ),
        _member("all_gather", lambda c: c.all_gather(_t(c), group=_outside(c))),
    ),
    "gather": Sweep(
        lambda c: c.gather(_t(c)),
        (
            Misuse(lambda c: c.gather([_t(c)]), r"gather: tensor must be a torch\.Tensor .*got list"),
            Misuse(
                lambda c: c.gather(_t(c), dst=torch.tensor(0.5)),
                r"gather: dst must be an integer rank.*got torch\.Tensor.*int\(x\)",
            ),
        ),
        Misuse(lambda c: c.gather(_t(c), dst=c.world_size), r"gather: dst=\d+ is not a rank of the group"),
    ),
    "scatter": Sweep(
        lambda c: c.scatter(_t(c), [_t(c)] * c.world_size if c.rank == 0 else None),
        (
            Misuse(
                lambda c: c.scatter([_t(c)] * c.world_size, src=0),
                r"scatter: tensor must be a torch\.Tensor \(this rank's output buffer\), got list"
                r".*scatter_list=\[t0, t1",
            ),
            Misuse(
                lambda c: c.scatter(_t(c), _t(c) if c.rank == 0 else None),
                r"scatter: scatter_list must be a list of torch\.Tensor|passed invalid",
            ),
            Misuse(
                lambda c: c.scatter(_t(c), [1.0] * c.world_size if c.rank == 0 else None),
                r"scatter: scatter_list must hold torch\.Tensor items .*scatter_list\[0\] is float|passed invalid",
            ),
        ),
        Misuse(lambda c: c.scatter(_t(c), None, src=c.world_size), r"scatter: src=\d+ is not a rank of the group"),
    ),
    "reduce_scatter": Sweep(
        lambda c: c.reduce_scatter(_t(c, c.world_size)),
        (
            Misuse(lambda c: c.reduce_scatter([_t(c)]), r"reduce_scatter: tensor must be a torch\.Tensor .*got list"),
            Misuse(lambda c: c.reduce_scatter(_t(c, c.world_size), op=None), r"reduce_scatter: unknown reduce op None"),
        ),
        _member("reduce_scatter", lambda c: c.reduce_scatter(_t(c), group=_outside(c))),
    ),
    "all_to_all": Sweep(
        lambda c: c.all_to_all([_t(c)] * c.world_size),
        (
            Misuse(
                lambda c: c.all_to_all(_t(c, c.world_size)),
                r"all_to_all: tensors must be a list of torch\.Tensor .*got torch\.Tensor.*unbind",
            ),
            Misuse(lambda c: c.all_to_all([1] * c.world_size), r"all_to_all: tensors must hold torch\.Tensor items"),
        ),
        _member("all_to_all", lambda c: c.all_to_all([_t(c)], group=_outside(c))),
    ),
    "all_to_all_single": Sweep(
        lambda c: c.all_to_all_single(_t(c, c.world_size), _t(c, c.world_size)),
        (
            Misuse(lambda c: c.all_to_all_single([_t(c)], _t(c)), r"all_to_all_single: output must be a torch\.Tensor"),
            Misuse(
                lambda c: c.all_to_all_single(_t(c, c.world_size), _t(c, c.world_size), input_split_sizes=1.0),
                r"all_to_all_single: input_split_sizes must be a list of integers",
            ),
        ),
        _member("all_to_all_single", lambda c: c.all_to_all_single(_t(c), _t(c), group=_outside(c))),
    ),
    "send": Sweep(
        lambda c: c.send(_t(c), dst=_next(c)),
        (
            Misuse(lambda c: c.send([_t(c)], dst=_next(c)), r"send: tensor must be a torch\.Tensor .*got list"),
            Misuse(lambda c: c.send(_t(c), dst=_next(c), tag="a"), r"send: tag must be an integer >= 0.*got str"),
        ),
        Misuse(lambda c: c.send(_t(c), dst=c.rank), r"send: dst=\d+ is this rank itself"),
    ),
    "recv": Sweep(
        lambda c: c.recv(_t(c), src=_next(c)),
        (
            Misuse(lambda c: c.recv(2, src=_next(c)), r"recv: tensor must be a torch\.Tensor .*got int"),
            Misuse(lambda c: c.recv(_t(c), src=None), r"recv: src must be an integer rank, got None.*use recv_any"),
        ),
        Misuse(lambda c: c.recv(_t(c), src=c.world_size), r"recv: src=\d+ is not a rank of the group"),
    ),
    "recv_any": Sweep(
        lambda c: c.recv_any(_t(c)),
        (
            Misuse(lambda c: c.recv_any([_t(c)]), r"recv_any: tensor must be a torch\.Tensor .*got list"),
            Misuse(lambda c: c.recv_any(_t(c), tag=1.5), r"recv_any: tag must be an integer >= 0"),
        ),
        _member("recv_any", lambda c: c.recv_any(_t(c), group=_outside(c))),
    ),
    "isend": Sweep(
        lambda c: c.isend(_t(c), dst=_next(c)),
        (
            Misuse(lambda c: c.isend({"a": 1}, dst=_next(c)), r"isend: tensor must be a torch\.Tensor .*got dict"),
            Misuse(lambda c: c.isend(_t(c), dst="1"), r"isend: dst must be an integer rank"),
        ),
        Misuse(lambda c: c.isend(_t(c), dst=c.world_size), r"isend: dst=\d+ is not a rank of the group"),
    ),
    "irecv": Sweep(
        lambda c: c.irecv(_t(c), src=_next(c)),
        (
            Misuse(lambda c: c.irecv([_t(c)], src=_next(c)), r"irecv: tensor must be a torch\.Tensor .*got list"),
            Misuse(lambda c: c.irecv(_t(c), src=_next(c), tag=None), r"irecv: tag must be an integer >= 0"),
        ),
        Misuse(lambda c: c.irecv(_t(c), src=-3), r"irecv: src=-3 is not a rank of the group"),
    ),
    "barrier": Sweep(
        lambda c: c.barrier(),
        (
            Misuse(lambda c: c.barrier(group=c.world.ranks), r"barrier: group must be a CollectiveGroup .*got tuple"),
            Misuse(lambda c: c.barrier(async_op=1), r"barrier: async_op must be True or False, got int"),
        ),
        _member("barrier", lambda c: c.barrier(group=_outside(c))),
    ),
    "monitored_barrier": Sweep(
        lambda c: c.monitored_barrier(timeout=5.0),
        (
            Misuse(
                lambda c: c.monitored_barrier(timeout="5"), r"monitored_barrier: timeout='5' is not a number of seconds"
            ),
            Misuse(
                lambda c: c.monitored_barrier(wait_all_ranks=None),
                r"monitored_barrier: wait_all_ranks must be True or False",
            ),
        ),
        _member("monitored_barrier", lambda c: c.monitored_barrier(group=_outside(c))),
    ),
    "broadcast_object": Sweep(
        lambda c: c.broadcast_object(1),
        (Misuse(lambda c: c.broadcast_object(1, src=[0]), r"broadcast_object: src must be an integer rank.*got list"),),
        Misuse(
            lambda c: c.broadcast_object(1, src=c.world_size), r"broadcast_object: src=\d+ is not a rank of the group"
        ),
    ),
    "all_gather_object": Sweep(
        lambda c: c.all_gather_object(1),
        (
            Misuse(
                lambda c: c.all_gather_object(1, group="world"), r"all_gather_object: group must be a CollectiveGroup"
            ),
        ),
        _member("all_gather_object", lambda c: c.all_gather_object(1, group=_outside(c))),
    ),
    "gather_object": Sweep(
        lambda c: c.gather_object(1),
        (Misuse(lambda c: c.gather_object(1, dst=1.0), r"gather_object: dst must be an integer rank.*got float"),),
        Misuse(lambda c: c.gather_object(1, dst=c.world_size), r"gather_object: dst=\d+ is not a rank of the group"),
    ),
    "scatter_object_list": Sweep(
        lambda c: c.scatter_object_list([1] * c.world_size if c.rank == 0 else None),
        (
            Misuse(
                lambda c: c.scatter_object_list(5 if c.rank == 0 else None),
                r"scatter_object_list: the source rank passes objects, a list .*got int|passed invalid",
            ),
        ),
        Misuse(lambda c: c.scatter_object_list(None, src=c.world_size), r"scatter_object_list: src=\d+ is not a rank"),
    ),
    "reduce_boolean_decision": Sweep(
        lambda c: c.reduce_boolean_decision(True),
        (
            Misuse(
                lambda c: c.reduce_boolean_decision("yes"), r"reduce_boolean_decision: decision must be a bool.*got str"
            ),
            Misuse(
                lambda c: c.reduce_boolean_decision(True, all="no"),
                r"reduce_boolean_decision: all must be True or False",
            ),
        ),
        _member("reduce_boolean_decision", lambda c: c.reduce_boolean_decision(True, group=_outside(c))),
    ),
}


@case()
def every_public_operation_checks_argument_types_and_ranks_first(c: Collective, rank: int, world: int) -> None:
    # Every rank makes the same wrong call: each raises, none communicates, the group stays usable.
    unsupported = type(c).unsupported_operations
    for name, sweep in SWEEP.items():
        if name in unsupported:
            with pytest.raises(CollectiveNotSupportedError, match=rf"the {c.name} collective cannot do '{name}'"):
                sweep.wrong_types[0].call(c)
            continue
        for misuse in (*sweep.wrong_types, sweep.wrong_rank):
            with pytest.raises(CollectiveMisuseError, match=re.compile(misuse.match, re.DOTALL)) as raised:
                misuse.call(c)  # the message names the operation and the argument (the match) ...
            assert "\n  hint: " in str(raised.value), (
                f"{name}: the error says no fix: {raised.value}"
            )  # ... and the fix
            assert_still_usable(c)


@case("all_reduce", "scatter", min_world_size=2)
def a_wrong_type_on_one_rank_raises_on_every_rank(c: Collective, rank: int, world: int) -> None:
    tensor: object = [full(c, 1.0)] if rank == 1 else full(c, 1.0)
    expected = CollectiveArgumentTypeError if rank == 1 else CollectiveMisuseError
    match = "all_reduce: tensor must be a torch.Tensor" if rank == 1 else r"rank\(s\) 1 passed invalid arguments"
    raises_on_every_rank(c, expected, match, lambda: c.all_reduce(tensor))
    # the mistake of the issue: the chunks passed where the output tensor belongs, on the source only
    chunks = [full(c, 1.0)] * world
    output: object = chunks if rank == 0 else full(c, 0.0)
    match = r"scatter: tensor must be a torch\.Tensor" if rank == 0 else r"rank\(s\) 0 passed invalid arguments"
    raises_on_every_rank(c, CollectiveMisuseError, match, lambda: c.scatter(output, None, src=0))
    assert issubclass(CollectiveArgumentTypeError, TypeError)


@case("broadcast", "all_reduce", "reduce", "gather", "scatter", "send", "recv", "new_group", "broadcast_object")
def numpy_integers_are_ranks(c: Collective, rank: int, world: int) -> None:
    last = np.int64(world - 1)
    same(c.broadcast(full(c, rank, (2,)), src=last), full(c, world - 1, (2,)))
    reduced = c.reduce(full(c, 1.0, (2,)), dst=np.int32(0))
    if rank == 0:
        same(reduced, full(c, world, (2,)))
    picked = int(np.argmax([0] * (world - 1) + [1]))  # what np.argmax returns: numpy.int64
    assert c.gather(full(c, 1.0), dst=np.argmax([0] * (world - 1) + [1])) is not None or rank != picked
    chunks = [full(c, i, (1,)) for i in range(world)] if rank == world - 1 else None
    same(c.scatter(full(c, -1.0, (1,)), chunks, src=last), full(c, rank, (1,)))
    assert c.broadcast_object(rank, src=last) == world - 1
    if "new_group" not in type(c).unsupported_operations:
        group = c.new_group([np.int64(r) for r in range(world)])
        assert group.ranks == tuple(range(world)) and all(type(r) is int for r in group.ranks)
    with pytest.raises(CollectiveMisuseError, match="src must be an integer rank"):
        c.broadcast(full(c, 0.0), src=np.float64(0))
    if world > 1 and "send" not in type(c).unsupported_operations and rank in (0, 1):
        if rank == 0:
            c.send(full(c, 4.0, (1,)), dst=np.int64(1))
        else:
            same(c.recv(full(c, 0.0, (1,)), src=np.int64(0)), full(c, 4.0, (1,)))
    assert_still_usable(c)


@case("broadcast", "all_reduce", "reduce", "scatter")
def expanded_tensors_are_refused_before_communicating(c: Collective, rank: int, world: int) -> None:
    if c.device.type == "xla":
        return  # XLA tensors have no strides: an expanded XLA tensor is a copy
    expanded = torch.zeros(1, device=c.device).expand(3)
    match = r"writes its result into tensor, but tensor is an expanded view \(stride 0 along dimension 0.*\.clone\(\)"
    raises_on_every_rank(c, CollectiveMisuseError, "broadcast " + match, lambda: c.broadcast(expanded))
    raises_on_every_rank(c, CollectiveMisuseError, "all_reduce " + match, lambda: c.all_reduce(expanded))
    raises_on_every_rank(c, CollectiveMisuseError, "reduce " + match, lambda: c.reduce(expanded))
    # the clone works (and an expanded tensor is fine where nothing is written into it)
    same(c.all_reduce(expanded.clone()), torch.zeros(3))
    same(torch.stack(c.all_gather(expanded)), torch.zeros(world, 3))


@case("scatter", min_world_size=2)
def scatter_rejects_chunks_of_different_shapes_on_every_rank(c: Collective, rank: int, world: int) -> None:
    # each chunk fits its rank's output, but engines scatter equal pieces (gloo fails on the source only)
    chunks = [full(c, 0.0, (i + 1,)) for i in range(world)] if rank == 0 else None
    match = r"scatter_list must hold chunks of one shape and dtype.*rank 1: shape \(2,\)"
    raises_on_every_rank(c, CollectiveMisuseError, match, lambda: c.scatter(full(c, 0.0, (rank + 1,)), chunks, src=0))
    dtypes = (
        [full(c, 0.0, (2,), torch.float64 if i == 1 else torch.float32) for i in range(world)] if rank == 0 else None
    )
    output = full(c, 0.0, (2,), torch.float64 if rank == 1 else torch.float32)
    raises_on_every_rank(c, CollectiveMisuseError, r"chunks of one shape and dtype.*float64",
                         lambda: c.scatter(output, dtypes, src=0))  # fmt: skip
