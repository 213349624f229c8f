"""Work functions the Horovod tests run in every rank (importable by Horovod's fresh interpreters)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from runtime import Strategy


def run_contract(strategy: Strategy) -> Any:
    from collective_cases import run_cases

    return run_cases(strategy.collective)


def identity(strategy: Strategy, pid_dir: str) -> dict[str, Any]:
    import horovod.torch as hvd

    Path(pid_dir, f"{strategy.global_rank}.pid").write_text(str(os.getpid()))
    seen = strategy.collective.all_gather_object((strategy.global_rank, hvd.rank(), hvd.size(), hvd.local_rank()))
    return {"rank": strategy.global_rank, "world_size": strategy.world_size, "seen": seen}


def fail_on_rank_1(strategy: Strategy, pid_dir: str) -> str:
    Path(pid_dir, f"{strategy.global_rank}.pid").write_text(str(os.getpid()))
    strategy.collective.barrier()
    if strategy.global_rank == 1:
        raise ValueError("rank 1 cannot go on")
    strategy.collective.barrier()  # rank 0 waits here for a rank that is gone
    return "unreachable"


def train(strategy: Strategy, steps: int = 30) -> dict[str, Any]:
    torch.manual_seed(1234 + strategy.global_rank)  # different initial weights per rank on purpose
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    module, optimizer = strategy.setup_module_and_optimizer(model, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=generator)
    y = (x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])).tanh()
    loader = strategy.process_dataloader(DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True), "train")
    losses: list[float] = []
    for epoch in range(steps // len(loader) + 1):
        loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(module(xb), yb)
            strategy.backward(loss)
            strategy.optimizer_step(optimizer)
            losses.append(float(strategy.collective.all_reduce(loss.detach().clone(), op="mean")))
    flat = torch.cat([p.detach().flatten() for p in module.parameters()])
    everyone = strategy.collective.all_gather(flat)
    return {
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "identical": all(torch.equal(everyone[0], other) for other in everyone[1:]),
        "sampler": (loader.sampler.num_replicas, loader.sampler.rank),  # type: ignore[attr-defined]
        "batches": len(loader),
    }


def optimizer_of_ones_own(strategy: Strategy) -> str:
    """The DDP habit under Horovod: setup_module, then a plain torch optimizer (no gradient averaging)."""
    from runtime.errors import StrategyMisuseError

    module = strategy.setup_module(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    strategy.backward(module(torch.ones(2, 4)).sum())
    try:
        strategy.optimizer_step(optimizer)
    except StrategyMisuseError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "stepped"
