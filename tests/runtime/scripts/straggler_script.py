"""Training whose ranks are alike, or whose rank 1 takes 4x the others' time in its own work.

``python straggler_script.py LAUNCHER KIND STEPS``: LAUNCHER is ``ddp`` or ``ddp_spawn`` (the script
launches two ranks) or ``run`` (``resolver run`` started it). KIND is ``alike`` (every rank's step
sleeps 10 ms besides its compute), ``busy`` (every rank's step computes for 10 ms of wall time
instead: both ranks compete for the cores with whatever else runs) or ``slow`` (rank 1 sleeps 40 ms
instead of 10: a straggler). Each step
all-reduces the gradients and makes an optimizer step. The launching process prints ``DONE``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[2])]  # runtime_workers, the repository

import torch  # noqa: E402

import runtime  # noqa: E402

#: Each rank's own work besides its compute, in seconds.
BASE = 0.010


def train(strategy: runtime.Strategy, kind: str, steps: int) -> str:
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    pause = 4 * BASE if kind == "slow" and strategy.global_rank == 1 else BASE
    for _ in range(steps):
        if kind == "busy":
            end = time.monotonic() + pause
            while time.monotonic() < end:
                pass
        else:
            time.sleep(pause)
        loss = model(torch.ones(16, 64)).square().mean()
        loss.backward()
        for parameter in model.parameters():
            assert parameter.grad is not None
            strategy.collective.all_reduce(parameter.grad, op="mean")
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()
    return "done"


def main() -> None:
    launcher, kind, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if launcher == "run":
        runtime.launch(train, kind, steps)
    else:
        runtime.launch(train, kind, steps, devices=2, strategy=launcher)
        print("DONE", flush=True)


if __name__ == "__main__":  # ddp_spawn imports this file again in each rank
    main()
