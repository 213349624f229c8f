"""The runtime on a real CUDA device: what this machine's resolution picks, training under every
single-GPU strategy and precision, checkpoints, and the collective over NCCL.

Skipped without CUDA (CI has no GPU); run on a machine with one:
``python -m pytest -m gpu -q``. With one GPU, ``ddp``/``fsdp`` run a process group of one on NCCL.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

import resolver  # noqa: E402
import runtime  # noqa: E402

PRECISIONS = ["32-true", "bf16-mixed", "16-mixed", "bf16-true"]
#: The dtype a Linear layer's parameters have inside the strategy, by precision.
PARAM_DTYPES = {
    "32-true": torch.float32,
    "bf16-mixed": torch.float32,
    "16-mixed": torch.float32,
    "bf16-true": torch.bfloat16,
}


def _train(strategy: runtime.Strategy, steps: int, checkpoint: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model, optimizer = strategy.setup_module_and_optimizer(model, lambda p: torch.optim.SGD(p, lr=0.05))
    x, y = strategy.to_device(torch.randn(256, 32)), strategy.to_device(torch.randn(256, 1))
    losses = []
    for _ in range(steps):
        with strategy.precision.forward_context():
            loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()
        losses.append(loss.item())
    strategy.save_checkpoint(checkpoint, {"model": model, "optimizer": optimizer, "losses": losses})
    loaded = strategy.load_checkpoint(checkpoint, {"model": model, "optimizer": optimizer})
    params = [p for p in model.parameters()]
    return {
        "losses": losses,
        "loaded_losses": loaded["losses"],
        "device": str(strategy.root_device),
        "param_devices": sorted({str(getattr(p, "device", "?")) for p in params}),
        "param_dtypes": sorted({str(p.dtype) for p in params}),
        "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
    }


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("strategy", ["single_device", "ddp", "fsdp"])
def test_training_on_one_gpu(strategy: str, precision: str, tmp_path: Path) -> None:
    config = resolver.resolve(accelerator="auto", devices=1, strategy=strategy, precision=precision)
    assert config.accelerator == "cuda"
    assert config.process_group_backend == (None if strategy == "single_device" else "nccl")
    result = runtime.build(config).launch(_train, 30, str(tmp_path / "ckpt.pt"))
    losses = result["losses"]
    assert all(loss == loss for loss in losses), losses  # no NaN
    assert losses[-1] < losses[0] * 0.9, losses
    assert result["loaded_losses"] == losses
    assert result["device"] == "cuda:0"
    assert result["param_devices"] == ["cuda:0"]
    assert result["param_dtypes"] == [str(PARAM_DTYPES[precision])]
    assert result["backend"] == config.process_group_backend


def _collectives(strategy: runtime.Strategy) -> dict[str, Any]:
    collective = strategy.collective
    t = torch.arange(4, dtype=torch.float32, device=strategy.root_device)
    out: dict[str, Any] = {"device": str(collective.device)}
    out["all_reduce"] = collective.all_reduce(t.clone()).tolist()
    out["broadcast"] = collective.broadcast(t.clone(), 0).tolist()
    out["all_gather"] = [x.tolist() for x in collective.all_gather(t.clone())]
    out["reduce_scatter"] = collective.reduce_scatter(t.clone()).tolist()
    out["all_to_all"] = [x.tolist() for x in collective.all_to_all([t.clone()])]
    collective.barrier()
    out["object"] = collective.broadcast_object({"a": 1}, 0)
    return out


def test_collective_over_nccl() -> None:
    config = resolver.resolve(accelerator="cuda", devices=1, strategy="ddp")
    result = runtime.build(config).launch(_collectives)
    assert result["device"] == "cuda:0"
    assert result["all_reduce"] == [0.0, 1.0, 2.0, 3.0]
    assert result["broadcast"] == [0.0, 1.0, 2.0, 3.0]
    assert result["all_gather"] == [[0.0, 1.0, 2.0, 3.0]]
    assert result["reduce_scatter"] == [0.0, 1.0, 2.0, 3.0]
    assert result["all_to_all"] == [[0.0, 1.0, 2.0, 3.0]]
    assert result["object"] == {"a": 1}


def test_more_devices_than_gpus_is_a_conflict_naming_the_count() -> None:
    count = torch.cuda.device_count()
    with pytest.raises(resolver.ResolutionError) as caught:
        resolver.resolve(accelerator="cuda", devices=count + 1)
    assert str(count) in str(caught.value)


def test_explain_on_this_machine_picks_cuda() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "resolver", "explain", "--devices", "1"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0].split()
    assert first[:2] == ["accelerator", "cuda"], done.stdout


def _newer_collectives(strategy: runtime.Strategy) -> dict[str, Any]:
    collective = strategy.collective
    device = strategy.root_device
    out: dict[str, Any] = {}
    handle = collective.all_reduce(torch.ones(3, device=device), op="product", async_op=True)
    out["async_product"] = handle.wait().tolist()
    out["async_completed"] = handle.is_completed()
    target = torch.empty(4, device=device)
    out["all_to_all_single"] = collective.all_to_all_single(target, torch.arange(4.0, device=device)).tolist()
    out["gather_object"] = collective.gather_object({"rank": strategy.global_rank}, 0)
    out["scatter_object_list"] = collective.scatter_object_list(["only"], 0)
    out["avg"] = collective.all_reduce(torch.full((2,), 3.0, device=device), op="avg").tolist()
    refused = {}
    for name, call in {
        "bor": lambda: collective.all_reduce(torch.ones(2, dtype=torch.int32, device=device), op="bor"),
        "monitored_barrier": lambda: collective.monitored_barrier(timeout=5),
    }.items():
        try:
            call()
            refused[name] = None
        except runtime.CollectiveMisuseError as exc:
            refused[name] = f"{type(exc).__name__}: {exc}"
    out["refused"] = refused
    return out


def test_the_newer_collective_operations_over_nccl() -> None:
    config = resolver.resolve(accelerator="cuda", devices=1, strategy="ddp")
    result = runtime.build(config).launch(_newer_collectives)
    assert result["async_product"] == [1.0, 1.0, 1.0] and result["async_completed"]
    assert result["all_to_all_single"] == [0.0, 1.0, 2.0, 3.0]
    assert result["gather_object"] == [{"rank": 0}]
    assert result["scatter_object_list"] == "only"
    assert result["avg"] == [3.0, 3.0]
    # What NCCL lacks is refused by name, before anything is sent (None: it ran, which NCCL may also allow).
    for name, message in result["refused"].items():
        assert message is None or "nccl" in message.lower(), (name, message)


def _guarded(strategy: runtime.Strategy) -> str:
    """DDP on CUDA keeps the parameter objects: an optimizer made before setup_module still steps."""
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = strategy.setup_module(model)
    loss = model(strategy.to_device(torch.ones(2, 4))).sum()
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    return "stepped"


def test_ddp_on_cuda_does_not_refuse_an_optimizer_made_before_setup_module() -> None:
    config = resolver.resolve(accelerator="cuda", devices=1, strategy="ddp")
    assert runtime.build(config).launch(_guarded) == "stepped"
