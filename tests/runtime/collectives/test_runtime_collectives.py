"""Collectives beyond the shared contract (``tests/contract``): set-up, and what each engine adds."""

from __future__ import annotations

import pytest
import torch

import runtime
from runtime.collectives import CollectiveMisuseError, HorovodCollective, SingleDeviceCollective, TorchCollective
from runtime.collectives.rendezvous import Rendezvous


def test_the_single_device_collective_holds_one_process() -> None:
    with pytest.raises(ValueError, match="rank 1 of 2.*'torch' collective"):
        SingleDeviceCollective().setup(Rendezvous(rank=1, world_size=2))


def test_the_torch_collective_says_when_it_is_not_set_up() -> None:
    expected = r"^all_reduce: the torch collective is not set up.*\n  hint: .*strategy.launch"
    with pytest.raises(RuntimeError, match=expected):
        TorchCollective().all_reduce(torch.ones(1))


def test_misuse_errors_are_value_errors_and_exported() -> None:
    assert issubclass(runtime.CollectiveMisuseError, ValueError)
    collective = SingleDeviceCollective()
    collective.setup(Rendezvous(rank=0, world_size=1))
    expected = "all_reduce: group must be a CollectiveGroup from collective.new_group"
    with pytest.raises(CollectiveMisuseError, match=expected):
        collective.all_reduce(torch.ones(1), group=[0])  # type: ignore[arg-type]


def adopt_users_group(strategy: runtime.Strategy) -> tuple[bool, float]:
    """A process group the user made before is adopted, used, and left in place at teardown."""
    collective = TorchCollective()
    collective.setup(Rendezvous(rank=strategy.global_rank, world_size=strategy.world_size))
    total = collective.all_reduce(torch.tensor([1.0]))
    collective.teardown()
    return collective.is_initialized, float(total)


def test_an_existing_process_group_is_adopted_and_left_in_place() -> None:
    still_there, total = runtime.launch(
        adopt_users_group, accelerator="cpu", devices=2, strategy="ddp_fork", timeout=60
    )
    assert still_there and total == 2.0


def test_horovod_declares_what_it_lacks_and_says_so_before_needing_horovod() -> None:
    """Horovod runs in CI's own phase; its declarations are checked here (no Horovod needed to raise)."""
    collective = HorovodCollective()
    calls = {
        "send": lambda: collective.send(torch.ones(1), dst=1),
        "recv": lambda: collective.recv(torch.ones(1), src=1),
        "recv_any": lambda: collective.recv_any(torch.ones(1)),
        "isend": lambda: collective.isend(torch.ones(1), dst=1),
        "irecv": lambda: collective.irecv(torch.ones(1), src=1),
        "monitored_barrier": lambda: collective.monitored_barrier(timeout=1.0),
    }
    assert set(HorovodCollective.unsupported_operations) == set(calls)
    for name, call in calls.items():
        with pytest.raises(CollectiveMisuseError, match=rf"the horovod collective cannot do '{name}': Horovod"):
            call()
    assert set(HorovodCollective.unsupported_reduce_ops) == {"band", "bor", "bxor"}


def unchecked_operations(strategy: runtime.Strategy) -> dict[str, object]:
    """With the comparison across ranks off, the operations still work and wrong types still raise."""
    c = strategy.collective
    c.check_across_ranks = False
    rank = strategy.global_rank
    out: dict[str, object] = {}
    if rank == 0:
        tensor, sender = c.recv_any(torch.zeros(2), tag=4)
        out["recv_any"] = (tensor.tolist(), sender)
        c.send(torch.full((2,), 7.0), dst=1)
    else:
        c.send(torch.full((2,), 5.0), dst=0, tag=4)
        out["recv"] = c.recv(torch.zeros(2), src=0).tolist()
    rows = torch.arange(3.0) + 10 * rank  # rank 0 sends 1 row to rank 0 and 2 to rank 1; rank 1 the reverse
    sizes = [1, 2] if rank == 0 else [2, 1]
    received = torch.zeros(3)
    out["all_to_all_single"] = c.all_to_all_single(received, rows, [1, 2] if rank == 0 else [2, 1], sizes).tolist()
    try:
        c.all_reduce([torch.ones(1)])  # type: ignore[arg-type]
    except CollectiveMisuseError as exc:
        out["wrong_type"] = str(exc).splitlines()[0]
    out["still_works"] = float(c.all_reduce(torch.ones(1)))
    return out if rank == 0 else {}


def test_without_the_comparison_across_ranks_operations_work_and_wrong_types_still_raise() -> None:
    out = runtime.launch(unchecked_operations, accelerator="cpu", devices=2, strategy="ddp_fork", timeout=60)
    assert out["recv_any"] == ([5.0, 5.0], 1)
    assert out["all_to_all_single"] == [0.0, 10.0, 11.0]
    assert out["wrong_type"] == "all_reduce: tensor must be a torch.Tensor (reduced in place), got list [tensor([1.])]"
    assert out["still_works"] == 2.0
