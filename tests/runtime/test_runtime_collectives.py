"""Collectives beyond the shared contract (``tests/contract``): set-up, and what each engine adds."""

from __future__ import annotations

import pytest
import torch

import runtime
from runtime.collectives import CollectiveMisuseError, HorovodCollective, SingleDeviceCollective, TorchCollective


def test_the_single_device_collective_holds_one_process() -> None:
    with pytest.raises(ValueError, match="rank 1 of 2.*'torch' collective"):
        SingleDeviceCollective().setup(rank=1, world_size=2)


def test_the_torch_collective_says_when_it_is_not_set_up() -> None:
    expected = r"^all_reduce: the torch collective is not set up.*\n  hint: .*strategy.launch"
    with pytest.raises(RuntimeError, match=expected):
        TorchCollective().all_reduce(torch.ones(1))


def test_misuse_errors_are_value_errors_and_exported() -> None:
    assert issubclass(runtime.CollectiveMisuseError, ValueError)
    collective = SingleDeviceCollective()
    collective.setup(rank=0, world_size=1)
    expected = "all_reduce: group must be a CollectiveGroup from collective.new_group"
    with pytest.raises(CollectiveMisuseError, match=expected):
        collective.all_reduce(torch.ones(1), group=[0])  # type: ignore[arg-type]


def adopt_users_group(strategy: runtime.Strategy) -> tuple[bool, float]:
    """A process group the user made before is adopted, used, and left in place at teardown."""
    collective = TorchCollective()
    collective.setup(rank=strategy.global_rank, world_size=strategy.world_size)
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
