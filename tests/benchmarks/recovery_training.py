"""One rank of the recovery benchmark (``recovery.py``): ``python recovery_training.py OUT_DIR STEP_SECONDS``.

A tiny model trained by DDP over gloo on the CPU, forever (the benchmark stops it): after every step
global rank 0 saves a checkpoint (``OUT_DIR/checkpoints/latest``) that every rank waits for, and at
start every rank resumes from it, so a restarted or shrunk group goes on from the step after the last
one saved. Each rank prints one line per step::

    STEP <time.time()> step=<n> world=<world size> rank=<global rank> restart=<attempt> host=<name> pid=<pid>

then sleeps ``STEP_SECONDS`` (the step's pace, the same under every launcher). Under ``resolver run``
the launch takes what its command line said (``runtime.launch`` without flags); under torchrun
(``RESOLVER_CONFIG`` unset) the script passes the shape torchrun gave this round: ``LOCAL_WORLD_SIZE``
ranks per node on ``WORLD_SIZE / LOCAL_WORLD_SIZE`` nodes, so an elastic round of another size works.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))

import torch  # noqa: E402

import runtime  # noqa: E402


def train(strategy: runtime.Strategy, out: Path, step_seconds: float) -> None:
    torch.manual_seed(0)
    model, optimizer = strategy.setup_module_and_optimizer(
        torch.nn.Linear(8, 1), lambda parameters: torch.optim.SGD(parameters, lr=0.01)
    )
    state = {"model": model, "optimizer": optimizer}
    folder = out / "checkpoints"
    latest = strategy.latest_checkpoint(folder)
    step = 0 if latest is None else strategy.load_checkpoint(latest, state)["step"] + 1
    rank, restart = strategy.global_rank, strategy.restart_count
    where = f"rank={rank} restart={restart} host={socket.gethostname()} pid={os.getpid()}"
    while True:
        x = torch.randn(4, 8)
        strategy.backward(model(x).pow(2).mean())
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()
        strategy.save_checkpoint(folder / "latest", {**state, "step": step})
        print(f"STEP {time.time():.3f} step={step} world={strategy.world_size} {where}", flush=True)
        step += 1
        time.sleep(step_seconds)


if __name__ == "__main__":
    out, step_seconds = Path(sys.argv[1]), float(sys.argv[2])
    # Which attempt the launcher says this is, before the rendezvous (what --verbose shows of a round).
    attempt, rank = os.environ.get("TORCHELASTIC_RESTART_COUNT"), os.environ.get("RANK")
    print(f"START {time.time():.3f} restart={attempt} rank={rank} host={socket.gethostname()}", flush=True)
    if os.environ.get("RESOLVER_CONFIG"):  # resolver run: what its command line said
        runtime.launch(train, out, step_seconds)
    else:  # torchrun: this round's shape
        per_node = int(os.environ["LOCAL_WORLD_SIZE"])
        nodes = int(os.environ["WORLD_SIZE"]) // per_node
        runtime.launch(train, out, step_seconds, accelerator="cpu", devices=per_node, num_nodes=nodes, strategy="ddp")
