"""After a DDP run, print how many gloo threads the process still has (0: the group is gone)."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import runtime  # noqa: E402


def gloo_threads() -> int:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{task}/comm").read_text())
        except OSError:
            pass
    return sum("gloo" in name for name in names)


def step(strategy: runtime.Strategy) -> int:
    model = strategy.setup_module(torch.nn.Linear(4, 1))  # DDP imports torch.distributed.nn here
    model(torch.ones(2, 4)).sum().backward()
    return gloo_threads()


during = runtime.launch(step, devices=1, strategy="ddp", timeout=60)
print(f"GLOO-THREADS during={during} after={gloo_threads()}", flush=True)
