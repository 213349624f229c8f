"""DDP training where rank 1 stops at step 3: ``python peer_gone.py sigkill|skip``, each rank started on
its own as srun and torchrun start them (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` set;
rank 0 hosts the rendezvous store, as under srun). ``sigkill``: rank 1 kills itself (kill -9, as the
out-of-memory killer does); ``sigkill@0``: rank 0 does, and the store goes with it; ``skip``: rank 1
returns from its work without calling backward (a misuse)."""

from __future__ import annotations

import os
import signal
import sys

import torch

import runtime


def train(strategy: runtime.Strategy, mode: str) -> str:
    model = strategy.setup_module(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000):
        if step == 3 and mode == "sigkill@0" and strategy.global_rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == 3 and mode != "sigkill@0" and strategy.global_rank == 1:
            if mode == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            return "rank 1 left before its backward"
        strategy.backward(model(torch.ones(4, 8)).square().mean())
        strategy.optimizer_step(optimizer)
    return "done"


if __name__ == "__main__":
    runtime.launch(train, sys.argv[1], devices=2, strategy="ddp", accelerator="cpu")
