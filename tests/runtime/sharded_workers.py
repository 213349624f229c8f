"""Functions that run inside the ranks of FSDP and DeepSpeed tests (module level, picklable)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from runtime import Strategy

STEPS = 30


def small_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))


def batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's data: a linear target, different inputs on every rank."""
    generator = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 8, generator=generator)
    return x, x @ torch.linspace(-1.0, 1.0, 8).unsqueeze(1)


def sgd(parameters: Any, momentum: float = 0.9) -> torch.optim.Optimizer:
    return torch.optim.SGD(parameters, lr=0.02, momentum=momentum)


def train(strategy: Strategy, model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    x, y = strategy.to_device(batch(strategy.global_rank))
    losses = []
    for _ in range(steps):
        with strategy.precision.forward_context():
            loss = nn.functional.mse_loss(model(x).float(), y.float())
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def identical_on_every_rank(strategy: Strategy, state: dict[str, torch.Tensor]) -> bool:
    """Whether every rank holds exactly rank 0's tensors."""
    everyone = strategy.collective.all_gather_object({k: v.detach().cpu() for k, v in state.items()})
    return all(
        other.keys() == everyone[0].keys() and all(torch.equal(other[k], everyone[0][k]) for k in other)
        for other in everyone
    )


def train_and_gather(strategy: Strategy) -> dict[str, Any]:
    """Train; report the losses, whether the gathered parameters agree, and how they are held."""
    model, optimizer = strategy.setup_module_and_optimizer(small_model(), sgd)
    losses = train(strategy, model, optimizer, STEPS)
    full = strategy.full_state_dict(model)
    first = next(iter(strategy.unwrap_module(model).parameters()))
    return {
        "losses": losses,
        "identical": identical_on_every_rank(strategy, full),
        "full_shapes": {k: tuple(v.shape) for k, v in full.items()},
        "parameter_type": type(first).__name__,
        "parameter_dtype": str(first.dtype),
        "full": {k: v.detach().cpu().float() for k, v in full.items()},
    }


def checkpoint_round_trip(strategy: Strategy, path: str, momentum: float = 0.9) -> dict[str, Any]:
    """Train, save; load into a differently initialised model and optimizer; then both train on
    identically: equal parameters afterwards mean weights *and* optimizer state came back.
    ``momentum=0``: plain SGD, whose state has no per-parameter tensors (only its settings)."""
    model, optimizer = strategy.setup_module_and_optimizer(small_model(seed=0), partial(sgd, momentum=momentum))
    train(strategy, model, optimizer, 5)
    strategy.save_checkpoint(path, {"model": model, "optimizer": optimizer, "step": 5, "note": "saved"})
    saved = strategy.full_state_dict(model)

    # A different learning rate: loading must bring the saved one back.
    fresh, fresh_optimizer = strategy.setup_module_and_optimizer(
        small_model(seed=1), lambda p: torch.optim.SGD(p, lr=0.5, momentum=momentum)
    )
    extras = strategy.load_checkpoint(path, {"model": fresh, "optimizer": fresh_optimizer})
    loaded = strategy.full_state_dict(fresh)
    train(strategy, model, optimizer, 3)
    train(strategy, fresh, fresh_optimizer, 3)
    after, fresh_after = strategy.full_state_dict(model), strategy.full_state_dict(fresh)
    return {
        "weights_restored": all(torch.equal(saved[k], loaded[k]) for k in saved),
        "optimizer_restored": all(torch.allclose(after[k], fresh_after[k]) for k in after),
        "extras": {k: extras[k] for k in ("step", "note")},
        "saved": {k: v.detach().cpu().float() for k, v in saved.items()},
        "identical": identical_on_every_rank(strategy, loaded),
    }


def sharded_memory(strategy: Strategy, layers: int, width: int) -> dict[str, int]:
    """Bytes this rank holds for parameters, gradients and Adam's state after one step, against
    what one unsharded replica holds (storage sizes: a view into a full tensor counts in full)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    full_parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    model, optimizer = strategy.setup_module_and_optimizer(model, lambda p: torch.optim.Adam(p, lr=1e-3))
    x = torch.randn(4, width)
    strategy.backward(model(x).square().mean())
    strategy.optimizer_step(optimizer)

    storages: dict[int, int] = {}  # storage address -> bytes (several tensors may share one buffer)

    def hold(tensor: torch.Tensor | None) -> None:
        if tensor is None or tensor.dim() == 0:
            return
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        storage = local.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()

    for p in model.parameters():
        hold(p)
        hold(p.grad)
        for value in optimizer.state[p].values():
            hold(value if torch.is_tensor(value) else None)
    held = sum(storages.values())
    # one replica: parameters, gradients and Adam's two moments, each the size of the parameters
    return {"held": held, "unsharded": 4 * full_parameters}


def wrapped_with(strategy: Strategy) -> dict[str, Any]:
    """What FSDP was given (module units and policies), for tests of the options."""
    model = strategy.setup_module(small_model())
    fsdp_kwargs = strategy.fsdp_kwargs  # type: ignore[attr-defined]
    return {
        "policies": {k: type(v).__name__ for k, v in fsdp_kwargs.items()},
        "param_dtype": str(getattr(fsdp_kwargs.get("mp_policy"), "param_dtype", None)),
        "units": [name for name, m in model.named_modules() if type(m).__name__.startswith("FSDP")],
        "autocasts": type(strategy.precision.forward_context()).__name__,
        "losses": train(strategy, model, sgd(model.parameters()), 10),
    }


def shard_indices(strategy: Strategy, size: int, out: Path) -> None:
    from runtime_workers import shard_indices as ddp_shard_indices

    ddp_shard_indices(strategy, size, out)


def optimizer_orders(strategy: Strategy) -> dict[str, dict[str, Any]]:
    """Train with the optimizer made before ``setup_module`` (over the original parameters), and after
    it from the original module object and from the returned one: the losses, or the error."""
    from runtime.errors import StrategyMisuseError

    def run(order: str) -> dict[str, Any]:
        model = small_model()
        if order == "made before setup_module":
            optimizer = sgd(model.parameters())
            module = strategy.setup_module(model)
        else:
            module = strategy.setup_module(model)
            optimizer = sgd((model if "original" in order else module).parameters())
        try:
            return {"losses": train(strategy, module, optimizer, 20)}
        except StrategyMisuseError as exc:  # raised on every rank alike, before the engine steps
            return {"error": f"{type(exc).__name__}: {exc}"}

    orders = (
        "made before setup_module",
        "made after, from the original module",
        "made after, from the returned module",
    )
    return {order: run(order) for order in orders}
