"""Work the XLA tests run on XLA:CPU, in launched replicas or fresh processes (module level: picklable)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import resolver
import runtime
from runtime import Strategy


def regression_data(samples: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 4, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))


def train(strategy: Strategy, epochs: int = 5) -> dict[str, Any]:
    """Linear regression through the strategy: module, loader, backward, optimizer step."""
    torch.manual_seed(0)
    model = strategy.setup_module(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = strategy.process_dataloader(DataLoader(regression_data(), batch_size=16), "train")
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            x = strategy.to_device(x)
            with strategy.precision.forward_context():
                loss = torch.nn.functional.mse_loss(model(x), strategy.to_device(y))
            strategy.backward(loss)
            strategy.optimizer_step(optimizer)
            optimizer.zero_grad()
            losses.append(float(loss.item()))
    return {
        "losses": losses,
        "device": str(strategy.root_device),
        "parameter_device": str(next(model.parameters()).device),
        "dtype": str(next(model.parameters()).dtype),
        "loader": type(loader).__name__,
        "strategy": type(strategy).__name__,
    }


def who_am_i(strategy: Strategy) -> dict[str, Any]:
    return {
        "rank": strategy.global_rank,
        "world_size": strategy.world_size,
        "device": str(strategy.root_device),
        "collective": type(strategy.collective).__name__,
    }


def fail_on_rank(strategy: Strategy, failing_rank: int) -> str:
    if strategy.global_rank == failing_rank:
        raise ValueError(f"replica {strategy.global_rank} fails on purpose")
    return "finished"


def sum_over_replicas(strategy: Strategy) -> float:
    """Needs a real multi-replica all_reduce."""
    value = torch.tensor([float(strategy.global_rank + 1)], device=strategy.root_device)
    return float(strategy.collective.all_reduce(value).item())


def every_collective_operation(strategy: Strategy) -> dict[str, Any]:
    """Each operation of the XLA collective at world size 1, with what it returned (on CPU)."""
    c = strategy.collective
    device = c.device
    x = torch.arange(6, dtype=torch.float32, device=device).reshape(2, 3)
    out: dict[str, Any] = {"device": str(device), "world_size": c.world_size}
    out["all_reduce_sum"] = c.all_reduce(x.clone(), "sum").cpu().tolist()
    out["all_reduce_mean"] = c.all_reduce(x.clone(), "mean").cpu().tolist()
    out["all_reduce_max_int"] = c.all_reduce(torch.tensor([3, -1], device=device), "max").cpu().tolist()
    out["reduce"] = c.reduce(x.clone(), dst=0).cpu().tolist()
    out["broadcast"] = c.broadcast(x.clone(), src=0).cpu().tolist()
    out["all_gather"] = [t.cpu().tolist() for t in c.all_gather(x)]
    gathered = c.gather(x, dst=0)
    out["gather"] = None if gathered is None else [t.cpu().tolist() for t in gathered]
    out["scatter"] = c.scatter(torch.zeros(2, 3, device=device), [x * 2], src=0).cpu().tolist()
    out["reduce_scatter"] = c.reduce_scatter(x.clone(), "sum").cpu().tolist()
    out["all_to_all"] = [t.cpu().tolist() for t in c.all_to_all([x])]
    c.barrier()
    out["broadcast_object"] = c.broadcast_object({"epoch": 3}, src=0)
    out["all_gather_object"] = c.all_gather_object(("rank", c.rank))
    out["decision_all"] = c.reduce_boolean_decision(True, all=True)
    out["decision_any_false"] = c.reduce_boolean_decision(False, all=False)
    world = c.new_group([0])
    out["group_all_reduce"] = c.all_reduce(x.clone(), "sum", group=world).cpu().tolist()
    for name in ("send", "recv"):
        try:
            getattr(c, name)(x, 0)
        except NotImplementedError as exc:
            out[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
    return out


def checkpoint_round_trip(strategy: Strategy, directory: str) -> dict[str, Any]:
    """Train a step, save, load into a fresh model and optimizer: the same state comes back."""
    torch.manual_seed(0)
    model = strategy.setup_module(torch.nn.Linear(3, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss = model(strategy.to_device(torch.ones(4, 3))).sum()
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    path = Path(directory) / "ckpt.pt"
    strategy.save_checkpoint(path, {"model": model, "optimizer": optimizer, "step": 1})
    on_disk = torch.load(path, map_location="cpu", weights_only=True)
    fresh = strategy.setup_module(torch.nn.Linear(3, 2))
    fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=0.01)
    loaded = strategy.load_checkpoint(path, {"model": fresh, "optimizer": fresh_optimizer})
    return {
        "devices_on_disk": sorted({str(t.device) for t in on_disk["model"].values()}),
        "step": loaded["step"],
        "loaded_device": str(next(fresh.parameters()).device),
        "same_weights": all(
            torch.equal(a.cpu(), b.cpu()) for a, b in zip(model.parameters(), fresh.parameters(), strict=True)
        ),
        "same_optimizer_step": int(fresh_optimizer.state_dict()["state"][0]["step"]),
    }


def wrapped_loader(strategy: Strategy) -> dict[str, Any]:
    loader = DataLoader(regression_data(10), batch_size=4, shuffle=True)
    wrapped = strategy.process_dataloader(loader, "train")
    batches = [(x.device.type, tuple(x.shape), str(x.dtype)) for x, _ in wrapped]
    return {
        "type": type(wrapped).__name__,
        "length": len(wrapped),
        "batches": batches,
        "batch_size": wrapped.batch_size,
        "same_dataset": wrapped.dataset is loader.dataset,
    }


def on_one_device(fn: Any, *args: Any, precision: str = "32-true") -> Any:
    """Run ``fn(strategy, *args)`` with ``single_xla`` as resolved here, in this process."""
    config = resolver.resolve(accelerator="xla", devices=1, precision=precision)
    return runtime.build(config).launch(fn, *args)


def sleep_forever(strategy: Strategy) -> None:
    import time

    time.sleep(3600)


def optimizer_made_before_setup(strategy: Strategy) -> dict[str, Any]:
    """Step an optimizer made over the CPU module's parameters, before setup_module moved it to the device."""
    from runtime.errors import StrategyMisuseError

    model = torch.nn.Linear(4, 1)
    early = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [id(p) for p in model.parameters()]
    module = strategy.setup_module(model)
    same = before == [id(p) for p in module.parameters()]
    strategy.backward(module(strategy.to_device(torch.ones(2, 4))).sum())
    try:
        strategy.optimizer_step(early)
    except StrategyMisuseError as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "same_parameters": same}
    return {"error": None, "same_parameters": same}


def step_graph_counts(strategy: Strategy, steps: int = 6) -> dict[str, dict[str, Any]]:
    """What torch_xla counted over ``steps`` training steps (after 3 untimed ones) of the runtime's step
    and of the same loop written with torch_xla alone (``xm.optimizer_step(optimizer, barrier=True)``),
    each loop keeping its loss until the step ends: compilations, graph executions and syncs, the
    tensors each step's graph holds, device buffers made, and operations that fell back to the CPU."""
    import torch_xla.core.xla_model as xm

    device = strategy.root_device
    x, y = torch.randn(8, 4).to(device), torch.randn(8, 1).to(device)
    torch.manual_seed(0)
    model, optimizer = strategy.setup_module_and_optimizer(torch.nn.Linear(4, 1), lambda p: torch.optim.SGD(p, lr=0.1))
    torch.manual_seed(0)
    raw_model = torch.nn.Linear(4, 1).to(device)
    raw_optimizer = torch.optim.SGD(raw_model.parameters(), lr=0.1)

    def ours() -> None:
        with strategy.precision.forward_context():
            loss = torch.nn.functional.mse_loss(model(x), y)
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()

    def raw() -> None:
        loss = torch.nn.functional.mse_loss(raw_model(x), y)
        loss.backward()
        xm.optimizer_step(raw_optimizer, barrier=True)
        raw_optimizer.zero_grad()

    return {name: graph_counts(step, steps) for name, step in (("ours", ours), ("raw", raw))}


def graph_counts(step: Callable[[], Any], steps: int, warm: int = 3) -> dict[str, Any]:
    """What torch_xla counted over ``steps`` calls of ``step`` (after ``warm`` uncounted ones):
    compilations, graph executions and syncs, the tensors each graph holds, device buffers made,
    and operations that fell back to the CPU (``tests/benchmarks/xla_step_breakdown.py`` prints it too)."""
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as metrics

    for _ in range(warm):
        step()
    xm.wait_device_ops()
    metrics.clear_all()
    for _ in range(steps):
        step()
    xm.wait_device_ops()
    graph_sizes = metrics.metric_data("TensorsGraphSize")
    compile_time = metrics.metric_data("CompileTime")
    return {
        "compilations": compile_time[0] if compile_time else 0,
        "executions": metrics.counter_value("ExecuteComputation"),
        "syncs": metrics.counter_value("MarkStep"),
        "graph_tensors": sorted({int(size) for _, size in graph_sizes[2]}) if graph_sizes else [],
        "device_buffers": metrics.counter_value("CreateDataHandles"),
        "cpu_fallbacks": {n: metrics.counter_value(n) for n in metrics.counter_names() if n.startswith("aten::")},
    }
