"""Check step 5: one training step of a tiny model through the run's real strategy.

The same calls a training loop makes (``build`` the strategy from the config,
``setup_module_and_optimizer``, ``backward``, ``optimizer_step``, ``full_state_dict``), on the
process group the check already made (the strategy's collective adopts it). Every rank trains on
its own slice of a global batch every rank can rebuild; the weights after the step and the loss
after it must match a single-process step on the whole batch (mean loss, plain SGD: the data
parallel average of the gradients is the same step), so an engine that reduces wrongly, or not
at all, is caught here and not after hours of training.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from resolver import ResolvedConfig
from runtime.preflight.faults import fault_at
from runtime.preflight.report import FAIL, OK, Check

if TYPE_CHECKING:
    from runtime.strategies.base import Strategy

__all__ = ["engine_step"]

_IN, _ROWS, _LR = 8, 4, 0.1


def _model() -> torch.nn.Module:
    generator = torch.Generator().manual_seed(1234)
    model = torch.nn.Linear(_IN, 1)
    with torch.no_grad():
        model.weight.copy_(torch.randn(model.weight.shape, generator=generator))
        model.bias.copy_(torch.randn(model.bias.shape, generator=generator))
    return model


def _batch(world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch: ``_ROWS`` rows per rank, the same on every rank. The targets are near the
    model's first outputs, so the gradient's norm stays well under 1: an engine that clips
    gradients at norm 1 (DeepSpeed's usual setting) takes the same step as plain SGD."""
    generator = torch.Generator().manual_seed(99)
    x = torch.randn(world * _ROWS, _IN, generator=generator)
    with torch.no_grad():
        y = _model()(x) + 0.05 * torch.randn(world * _ROWS, 1, generator=generator)
    return x, y


def _reference(world: int) -> tuple[dict[str, torch.Tensor], float]:
    """One SGD step in this process on the whole batch: the weights after it and the loss after it."""
    model, (x, y) = _model(), _batch(world)
    optimizer = torch.optim.SGD(model.parameters(), lr=_LR)
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    with torch.no_grad():
        loss = float(torch.nn.functional.mse_loss(model(x), y))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, loss


def _sgd(parameters: Iterator[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(parameters, lr=_LR)


def engine_step(config: ResolvedConfig, timeout: float, strategy: Strategy | None = None) -> Check:
    """The engine check for this rank: build the strategy (or use ``strategy``, one a launcher set
    up for this rank: the XLA replicas'), take one step, compare with the reference."""
    from runtime.build import build

    rank, world, host = config.global_rank, config.world_size, socket.gethostname()
    fault = fault_at(rank, "engine")
    start = time.monotonic()
    own = strategy is None
    try:
        if strategy is None:
            strategy = build(config, timeout=timeout)
            strategy.setup_environment()  # adopts the check's process group
        try:
            module, optimizer = strategy.setup_module_and_optimizer(_model(), _sgd)
            x, y = _batch(world)
            mine = slice(rank * _ROWS, (rank + 1) * _ROWS)
            device = strategy.root_device
            xs, ys = x[mine].to(device), y[mine].to(device)
            loss = torch.nn.functional.mse_loss(module(xs).float(), ys)
            strategy.backward(loss)
            strategy.optimizer_step(optimizer)
            with torch.no_grad():
                after = torch.nn.functional.mse_loss(module(xs).float(), ys).detach().reshape(1).to(device)
            total = strategy.collective.all_reduce(after, op="sum")
            distributed_loss = float(total.item()) / world
            weights = {k: v.detach().float().cpu() for k, v in strategy.full_state_dict(module).items()}
        finally:
            if own:
                strategy.teardown()
    except Exception as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        return Check("engine", FAIL, f"rank {rank} ({host}): one {config.strategy} step failed: "
                     f"{type(exc).__name__}: {text}"[:400], (rank,), (host,),
                     fix=f"the {config.strategy} strategy cannot train here: see the error; the same call fails "
                     "in training", echo=True, seconds=time.monotonic() - start)  # fmt: skip
    expected_weights, expected_loss = _reference(world)
    if fault == "wrong":
        distributed_loss += 1.0
    tolerance = 1e-4 if config.precision in ("32-true", "64-true") else 5e-2
    problems = [
        name
        for name, value in expected_weights.items()
        if name not in weights or not torch.allclose(weights[name], value, rtol=tolerance, atol=tolerance)
    ]
    if abs(distributed_loss - expected_loss) > 10 * tolerance * abs(expected_loss) + 1e-7:
        problems.append(f"the loss after the step ({distributed_loss:.6g}, single process: {expected_loss:.6g})")
    seconds = time.monotonic() - start
    if problems:
        return Check("engine", FAIL, f"rank {rank} ({host}): one {config.strategy} step differs from a "
                     f"single-process step in {', '.join(problems)}", (rank,), (host,),
                     fix="the strategy does not average the gradients across ranks as training expects: "
                     "check its options (and the engine's version)", seconds=seconds)  # fmt: skip
    return Check("engine", OK, f"one {config.strategy} step of a tiny model: loss {distributed_loss:.6g}, the "
                 f"same as one process ({expected_loss:.6g}), {seconds:.1f} s", seconds=seconds)  # fmt: skip
