"""Functions that run inside the ranks of the resume tests (module level, picklable): training on a
numbered dataset through ``ResumableBatchSampler``, saving the data position with every checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from runtime import Strategy
from runtime.dataloaders import ResumableBatchSampler

BATCH = 2


def dataset(samples: int) -> TensorDataset:
    """``samples`` numbered samples: (index, x, y), the same in every process."""
    x = torch.randn(samples, 4, generator=torch.Generator().manual_seed(7))
    return TensorDataset(torch.arange(samples), x, x.sum(dim=1, keepdim=True))


def model_and_optimizer(strategy: Strategy, adam: bool = False) -> tuple[Any, Any]:
    """A seeded linear model with SGD (momentum), or Adam."""
    torch.manual_seed(0)
    if adam:
        return strategy.setup_module_and_optimizer(torch.nn.Linear(4, 1), lambda p: torch.optim.Adam(p, lr=0.05))
    return strategy.setup_module_and_optimizer(
        torch.nn.Linear(4, 1), lambda parameters: torch.optim.SGD(parameters, lr=0.05, momentum=0.9)
    )


def cpu(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in weights.items()}


def train(
    strategy: Strategy,
    folder: str,
    *,
    samples: int,
    until: int,
    fault_at: int | None = None,
    save_every_step: bool = True,
    adam: bool = False,
) -> dict[str, Any]:
    """Resume from ``folder``'s newest checkpoint (if any) and train on ``samples`` samples until the run
    has consumed ``until``, saving after every step (or only at the end). Rank 1 of the first attempt
    raises just before the step that would start at sample ``fault_at``. Returns the loaded weights, the
    indices every rank saw, the final weights."""
    model, optimizer = model_and_optimizer(strategy, adam)
    state: dict[str, Any] = {"model": model, "optimizer": optimizer}
    consumed, loaded = 0, None
    latest = strategy.latest_checkpoint(folder)
    if latest is not None:
        consumed = strategy.load_checkpoint(latest, state)["consumed"]
        loaded = cpu(strategy.full_state_dict(model))
    data, seen = dataset(samples), []
    while consumed < until:
        sampler = ResumableBatchSampler(
            data, batch_size=BATCH, num_replicas=strategy.world_size, rank=strategy.global_rank, consumed=consumed
        )
        for step, (index, x, y) in enumerate(DataLoader(data, batch_sampler=sampler)):
            if consumed == fault_at and strategy.global_rank == 1 and strategy.restart_count == 0:
                raise RuntimeError(f"the fault: rank 1 at sample {consumed}")
            seen.extend(index.tolist())
            loss = torch.nn.functional.mse_loss(model(strategy.to_device(x)), strategy.to_device(y))
            strategy.backward(loss)
            strategy.optimizer_step(optimizer)
            optimizer.zero_grad()
            consumed = sampler.consumed_after(step + 1)
            if save_every_step or consumed >= until:
                strategy.save_checkpoint(Path(folder) / f"at-{consumed:04d}", {**state, "consumed": consumed})
            if consumed >= until:
                break
    return {
        "loaded": loaded,
        "seen": sorted(i for rank in strategy.collective.all_gather_object(seen) for i in rank),
        "final": cpu(strategy.full_state_dict(model)),
        "restart_count": strategy.restart_count,
        "pid": os.getpid(),
    }


def save_then_load(strategy: Strategy, checkpoints: dict[str, str], adam: bool = False) -> dict[str, Any]:
    """Load each of ``checkpoints`` (name: path) into a fresh model; the full weights each holds then."""
    loaded = {}
    for name, path in checkpoints.items():
        model, optimizer = model_and_optimizer(strategy, adam)
        with torch.no_grad():
            for parameter in strategy.unwrap_module(model).parameters():
                parameter.fill_(0.5)  # not the saved weights, nor the seeded ones
        extras = strategy.load_checkpoint(path, {"model": model, "optimizer": optimizer})
        loaded[name] = {"weights": cpu(strategy.full_state_dict(model)), "consumed": extras["consumed"]}
    return loaded
