"""The training script the SLURM tests run in every task: ``python slurm_train.py DEVICES [NUM_NODES]``.

It trains a small regression model through ``runtime.launch`` (DDP on CPU, gloo) and every rank
prints one line, ``RANK_REPORT {json}``: its config, the loss after each epoch (averaged over
the ranks), its host's name and when it started and took its first step. torch is imported inside
the training function, so flags that disagree with the job fail before torch loads, within a
second or two.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

STARTED = time.time()  # as soon as the interpreter runs this file: the job's overhead ends here

import runtime  # noqa: E402


def train(strategy: runtime.Strategy, epochs: int) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)  # the same data in every rank
    x = torch.randn(256, 8, generator=generator)
    y = x @ torch.randn(8, 1, generator=generator) + 0.5
    loader = strategy.process_dataloader(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True), "train")
    torch.manual_seed(0)
    model = strategy.setup_module(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    first_step_at: float | None = None
    losses: list[float] = []
    for epoch in range(epochs):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            strategy.backward(loss)
            strategy.optimizer_step(optimizer)
            optimizer.zero_grad()
            first_step_at = first_step_at or time.time()
            total += torch.stack([loss.detach() * len(targets), torch.tensor(float(len(targets)))])
        total = strategy.collective.all_reduce(total, "sum")  # every rank's samples: one loss for all
        losses.append(float(total[0] / total[1]))
    report: dict[str, Any] = {
        "config": strategy.config.to_dict(with_provenance=False),
        "global_rank": strategy.global_rank,
        "host": socket.gethostname(),
        "world_size": strategy.world_size,
        "cluster": type(strategy.cluster_environment).__name__,
        "rendezvous": [strategy.cluster_environment.main_address, strategy.cluster_environment.main_port],
        "slurm_procid": os.environ.get("SLURM_PROCID"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "under_resolver_run": "RESOLVER_CONFIG" in os.environ,
        "losses": losses,
        "samples": float(total[1]),  # the last epoch's, summed over the ranks: the whole data set once
        "started_at": STARTED,
        "first_step_at": first_step_at,
    }
    print("RANK_REPORT " + json.dumps(report) + "\n", end="", flush=True)


if __name__ == "__main__":
    num_nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    runtime.launch(
        train, 3, accelerator="cpu", devices=int(sys.argv[1]), num_nodes=num_nodes, strategy="ddp", timeout=120
    )
