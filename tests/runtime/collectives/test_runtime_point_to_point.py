"""Point-to-point messages pair in any combination: ``send`` or ``isend`` with ``recv``, ``irecv`` or
``recv_any``, as in torch.distributed; a shape or dtype mismatch raises the same checked error in every
pairing, on both ranks. Two real processes over gloo."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import runtime
from runtime.collectives import Collective, CollectiveMisuseError

pytestmark = pytest.mark.timeout(240)

PAIRINGS = ["send/recv", "send/irecv", "isend/recv", "isend/irecv", "isend/recv_any"]


def _send(c: Collective, how: str, tensor: torch.Tensor, tag: int = 0) -> None:
    if how == "send":
        c.send(tensor, dst=1, tag=tag)
    else:
        assert c.isend(tensor, dst=1, tag=tag).wait() is None


def _recv(c: Collective, how: str, tensor: torch.Tensor, tag: int = 0) -> torch.Tensor:
    if how == "recv":
        return c.recv(tensor, src=0, tag=tag)
    if how == "recv_any":
        received, sender = c.recv_any(tensor, tag=tag)
        assert sender == 0
        return received
    return c.irecv(tensor, src=0, tag=tag).wait()


def _outcome(call: Callable[[], object]) -> str:
    try:
        result = call()
    except CollectiveMisuseError as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return "ok" if result is None else str(result.tolist() if isinstance(result, torch.Tensor) else result)


def exchange(strategy: runtime.Strategy, pairing: str) -> list[dict[str, str]]:
    """Rank 0 sends with one call, rank 1 receives with the other: a match, a shape mismatch, a dtype
    mismatch of the same size in bytes, then a match again (the pair still works); both ranks' outcomes."""
    c = strategy.collective
    sending, receiving = pairing.split("/")
    shapes = {"match": ((4,), (4,)), "shape": ((3,), (4,)), "again": ((4,), (4,))}
    out: dict[str, str] = {}
    for case, (sent, expected) in shapes.items():
        if c.rank == 0:
            out[case] = _outcome(lambda sent=sent: _send(c, sending, torch.arange(float(sent[0]))))
        else:
            buffer = torch.full(expected, -1.0)
            out[case] = _outcome(lambda buffer=buffer: _recv(c, receiving, buffer))
            out[case + " buffer"] = str(buffer.tolist())
    if c.rank == 0:
        out["dtype"] = _outcome(lambda: _send(c, sending, torch.ones(4, dtype=torch.float32), tag=5))
    else:
        out["dtype"] = _outcome(lambda: _recv(c, receiving, torch.zeros(4, dtype=torch.int32), tag=5))
    return c.all_gather_object(out)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_every_pairing_of_sending_and_receiving_calls_exchanges_the_tensor_or_raises_on_both_ranks(
    pairing: str,
) -> None:
    sending, receiving = pairing.split("/")
    sender, receiver = runtime.launch(exchange, pairing, accelerator="cpu", devices=2, strategy="ddp_fork", timeout=30)
    assert (sender["match"], receiver["match"]) == ("ok", "[0.0, 1.0, 2.0, 3.0]")
    assert sender["shape"] == (
        f"CollectiveMisuseError: {sending} to rank 1: it expects shape (4,) float32, but this rank sends "
        "shape (3,) float32; the receiver discarded the data"
    )
    assert receiver["shape"] == (
        f"CollectiveMisuseError: {receiving} from rank 0: it sends shape (3,) float32, but the receiving tensor "
        "has shape (4,) float32; the tensor was left unchanged"
    )
    assert receiver["shape buffer"] == "[-1.0, -1.0, -1.0, -1.0]"
    assert (sender["again"], receiver["again"]) == ("ok", "[0.0, 1.0, 2.0, 3.0]")
    assert sender["dtype"].startswith(f"CollectiveMisuseError: {sending} to rank 1: it expects shape (4,) int32")
    assert receiver["dtype"].startswith(
        f"CollectiveMisuseError: {receiving} from rank 0: it sends shape (4,) float32, but the receiving tensor "
        "has shape (4,) int32"
    )


def orders_as_torch_does(strategy: runtime.Strategy) -> dict[str, object]:
    """Orders that torch.distributed allows, because isend/irecv start at once."""
    c = strategy.collective
    rank, peer = c.rank, 1 - c.rank
    out: dict[str, object] = {}
    # rank 0 starts receiving, then sends synchronously; rank 1 sends, then receives: the data of
    # rank 1's send must be received before rank 0 ever waits on its handle
    if rank == 0:
        pending = c.irecv(torch.zeros(2), src=peer)
        c.send(torch.full((2,), 7.0), dst=peer)
        out["irecv before send"] = pending.wait().tolist()
    else:
        c.send(torch.full((2,), 3.0), dst=peer)
        out["irecv before send"] = c.recv(torch.zeros(2), src=peer).tolist()
    # rank 0 starts receiving before rank 1 sends anything: rank 1 answers only what it received
    if rank == 0:
        pending = c.irecv(torch.zeros(2), src=peer, tag=3)
        c.send(torch.full((2,), 2.0), dst=peer, tag=4)
        out["answer"] = pending.wait().tolist()
    else:
        c.send(c.recv(torch.zeros(2), src=peer, tag=4) * 5, dst=peer, tag=3)
    # the sender waits for its isend while the receiver does something else before waiting
    if rank == 0:
        c.isend(torch.full((3,), 1.0), dst=peer, tag=2).wait()
        c.barrier()
    else:
        pending = c.irecv(torch.zeros(3), src=peer, tag=2)
        c.barrier()
        out["isend waited first"] = pending.wait().tolist()
    # two messages with one tag, of different shapes, waited on in the reverse order
    if rank == 0:
        sends = [c.isend(torch.full((n,), float(n)), dst=peer, tag=9) for n in (1, 2)]
        for handle in sends:
            handle.wait()
    else:
        first, second = c.irecv(torch.zeros(1), src=peer, tag=9), c.irecv(torch.zeros(2), src=peer, tag=9)
        out["same tag"] = [second.wait().tolist(), first.wait().tolist()]
    return {"rank": rank, **out, "gathered": c.all_gather_object(out)}


def test_checked_messages_allow_the_orders_torch_allows() -> None:
    result = runtime.launch(orders_as_torch_does, accelerator="cpu", devices=2, strategy="ddp_fork", timeout=30)
    zero, one = result["gathered"]
    assert zero["irecv before send"] == [3.0, 3.0] and one["irecv before send"] == [7.0, 7.0]
    assert zero["answer"] == [10.0, 10.0]
    assert one["isend waited first"] == [1.0, 1.0, 1.0]
    assert one["same tag"] == [[2.0, 2.0], [1.0]]
