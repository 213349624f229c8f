"""Train a small regression model with any strategy the flags resolve to.

    python examples/train.py --devices 2 --strategy ddp --epochs 5
    python examples/train.py --devices 2 --strategy ddp_spawn --precision bf16-mixed
    python examples/train.py --devices 2 --strategy fsdp
    python examples/train.py --devices 2 --strategy deepspeed      # with the deepspeed extra
    NODE_RANK=0 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 python examples/train.py --devices 2 --num-nodes 2
    python examples/train.py --num-nodes 1:2 --max-restarts 3 --master-addr 10.0.0.1 --master-port 29400  # each node

Rank 0 prints the loss of every epoch, then one JSON line (prefixed ``RESULT``) with the
initial and final loss and a checksum of every rank's full parameters (gathered from the shards
under FSDP and DeepSpeed), identical on every rank.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import runtime  # noqa: E402
from runtime import Strategy  # noqa: E402


def synthetic_regression(samples: int = 256, features: int = 8, seed: int = 0) -> TensorDataset:
    """y = x @ w + b + noise, with a fixed w and b: the same dataset in every rank."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    true_weight = torch.randn(features, 1, generator=generator)
    y = x @ true_weight + 0.5 + 0.01 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(x, y)


def parameter_checksum(strategy: Strategy, model: torch.nn.Module) -> str:
    """A digest of the full parameters; every rank takes part (a sharding strategy gathers them)."""
    digest = hashlib.sha256()
    for name, value in sorted(strategy.full_state_dict(model).items()):
        digest.update(name.encode())
        digest.update(value.detach().to("cpu", torch.float64).numpy().tobytes())
    return digest.hexdigest()[:16]


def dataset_loss(strategy: Strategy, model: torch.nn.Module, loader: DataLoader[Any]) -> float:
    """Mean squared error over this rank's shard, averaged over ranks."""
    total = torch.zeros(2, dtype=torch.float64, device=strategy.root_device)
    with torch.no_grad():
        for x, y in loader:
            x, y = strategy.to_device((x, y))
            with strategy.precision.forward_context():
                loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum")
            total += torch.stack(
                [loss.double(), torch.tensor(float(y.numel()), dtype=torch.float64, device=total.device)]
            )
    total = strategy.collective.all_reduce(total, "sum")
    return float(total[0] / total[1])


def train(strategy: Strategy, epochs: int, lr: float, batch_size: int) -> dict[str, Any]:
    torch.manual_seed(0)  # identical initial weights in every rank (DDP also broadcasts them)
    dataset = synthetic_regression()
    train_loader = strategy.process_dataloader(DataLoader(dataset, batch_size=batch_size, shuffle=True), "train")
    eval_loader = strategy.process_dataloader(DataLoader(dataset, batch_size=64), "val")
    with strategy.precision.module_init_context():
        network = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    # In this order for every strategy: FSDP and DeepSpeed need the optimizer made over their parameters.
    model, optimizer = strategy.setup_module_and_optimizer(
        network, lambda parameters: torch.optim.SGD(parameters, lr=lr)
    )

    initial_loss = dataset_loss(strategy, model, eval_loader)
    if strategy.is_global_zero:
        print(f"{strategy!r}\ninitial loss {initial_loss:.4f}", flush=True)
    for epoch in range(epochs):  # each pass over train_loader is the next epoch, reshuffled
        model.train()
        for x, y in train_loader:
            x, y = strategy.to_device((x, y))
            with strategy.precision.forward_context():
                loss = torch.nn.functional.mse_loss(model(x), y)
            strategy.backward(loss)
            strategy.optimizer_step(optimizer)
            optimizer.zero_grad()
        epoch_loss = dataset_loss(strategy, model, eval_loader)
        if strategy.is_global_zero:
            print(f"epoch {epoch + 1}/{epochs} loss {epoch_loss:.4f}", flush=True)

    checksums = strategy.collective.all_gather_object(parameter_checksum(strategy, model))
    summary = {
        "initial_loss": initial_loss,
        "final_loss": epoch_loss if epochs else initial_loss,
        "world_size": strategy.world_size,
        "strategy": strategy.config.strategy,
        "launcher": strategy.config.launcher,
        "precision": strategy.config.precision,
        "checksums": checksums,
    }
    if strategy.is_global_zero:
        print("RESULT " + json.dumps(summary, sort_keys=True), flush=True)
    return summary


def _nodes(text: str) -> int | tuple[int, int]:
    least, _, most = text.partition(":")
    return (int(least), int(most)) if most else int(least)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--devices", default="auto")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--num-nodes", type=_nodes, default=1, help="N, or MIN:MAX (nodes that come and go)")
    parser.add_argument("--max-restarts", type=int, default=0, help="restarts of every node's ranks after a failure")
    parser.add_argument("--master-addr", default=None, help="the address of the node that hosts the rendezvous")
    parser.add_argument("--master-port", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=None, help="seconds before hung ranks are stopped")
    args = parser.parse_args(argv)
    runtime.launch(
        train,
        args.epochs,
        args.lr,
        args.batch_size,
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        precision=args.precision,
        num_nodes=args.num_nodes,
        timeout=args.timeout,
        max_restarts=args.max_restarts,
        master_addr=args.master_addr,
        master_port=args.master_port,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
