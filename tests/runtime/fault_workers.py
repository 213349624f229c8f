"""Faults injected into launched ranks (module level, so the spawn launcher can pickle them).

Importing this module replaces the ``cpu`` accelerator with one whose ``set_device`` can fail or
hang on a chosen rank (``RUNTIME_TEST_DEVICE_FAULT=fail:1`` or ``hang:1``): a fault after the
rank reached ``launch()`` but before it joined the process group. ``late-hang:1`` hangs on the
second selection, the one the strategy makes while it joins (after the rank told its launcher it
arrived): a rank that hangs in the rendezvous; ``late-fail:1`` fails there. Only the fault scripts import
it, in their own processes.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch
from runtime_workers import record_pid, wait_for_pids

import runtime
from runtime.accelerators.cpu import CPUAccelerator

DEVICE_FAULT = "RUNTIME_TEST_DEVICE_FAULT"


@runtime.register_accelerator("cpu", replace=True)
class FlakyCPUAccelerator(CPUAccelerator):
    """The CPU, with a device that fails or hangs on the rank ``RUNTIME_TEST_DEVICE_FAULT`` names."""

    selections = 0

    def set_device(self, device: torch.device) -> None:
        kind, _, rank = os.environ.get(DEVICE_FAULT, "").partition(":")
        FlakyCPUAccelerator.selections += 1
        if kind.startswith("late-") and os.environ.get("RANK") == rank and FlakyCPUAccelerator.selections == 2:
            if kind == "late-fail":
                raise OSError(f"rank {rank}: device went away while joining")
            time.sleep(600)
        if rank and os.environ.get("RANK") == rank:
            if kind == "fail":
                raise OSError(f"rank {rank}: device went away while being selected")
            if kind == "hang":
                time.sleep(600)
        super().set_device(device)


def fault(strategy: runtime.Strategy, kind: str, out: str) -> str:
    """Rank 1 does ``kind`` while rank 0 waits for it in a barrier.

    ``KIND@0`` (``skip@0``, ``hang@0``) turns the roles round: rank 0 does it while rank 1 waits
    for it in an all_reduce (under ``ddp`` rank 0 is the launching process itself).
    """
    record_pid(Path(out), strategy)
    kind, _, faulty = kind.partition("@")
    if kind == "train-sigstop":
        return train_until_rank_1_stops(strategy, out)
    if faulty == "0":
        if strategy.global_rank == 0:
            wait_for_pids(Path(out), strategy.world_size)
            time.sleep(0.3)  # let rank 1 enter the all_reduce
            if kind == "skip":
                return "rank 0 skipped the all_reduce"
            if kind == "hang":
                time.sleep(600)
        strategy.collective.all_reduce(torch.ones(1))
        return "done"
    if strategy.global_rank == 1:
        wait_for_pids(Path(out), strategy.world_size)
        time.sleep(0.3)  # let rank 0 enter the barrier
        if kind == "raise":
            raise ValueError("rank 1 cannot go on: bad batch 42")
        if kind == "raise-hinted":  # an error that carries its fix, as the runtime's own errors do
            raise runtime.RuntimeConfigError("rank 1 cannot go on: bad batch 42", hint="drop batch 42 from the data")
        if kind == "exit3":
            os._exit(3)
        if kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "skip":
            return "rank 1 skipped the barrier"
        if kind == "hang":
            time.sleep(600)
        if kind == "sigstop":
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen: it cannot even dump its stack
    strategy.collective.barrier()
    return "done"


def train_until_rank_1_stops(strategy: runtime.Strategy, out: str) -> str:
    """DDP training steps; at the third, rank 1 freezes itself (``SIGSTOP``) while rank 0 goes on into
    its backward pass, where it waits for rank 1's gradients in an all-reduce torch runs (not the runtime)."""
    model = strategy.setup_module(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    wait_for_pids(Path(out), strategy.world_size)
    for step in range(1_000_000):
        if step == 3 and strategy.global_rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        strategy.backward(model(torch.ones(4, 8)).square().mean())
        strategy.optimizer_step(optimizer)
    return "done"
