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
With ``RECOVERY_PLAIN=1`` the ranks run the same steps in torch alone (:func:`train_plain`). Before
its launch each rank prints ``START <time> restart=<TORCHELASTIC_RESTART_COUNT> rank=<RANK> host=...``.
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


def train_plain(out: Path, step_seconds: float) -> None:
    """``RECOVERY_PLAIN=1``: the same steps in torch alone (``init_process_group`` from torchrun's
    variables, ``DistributedDataParallel``, rank 0's ``torch.save`` renamed into place, a barrier), to
    time a launcher without this project's runtime in the ranks."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    path = out / "plain.pt"
    step = 0
    if path.exists():
        saved = torch.load(path)
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step = saved["step"] + 1
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    where = f"rank={rank} restart={restart} host={socket.gethostname()} pid={os.getpid()}"
    while True:
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                       path.with_suffix(".partial"))  # fmt: skip
            os.replace(path.with_suffix(".partial"), path)
        dist.barrier()
        print(f"STEP {time.time():.3f} step={step} world={world} {where}", flush=True)
        step += 1
        time.sleep(step_seconds)


if __name__ == "__main__":
    out, step_seconds = Path(sys.argv[1]), float(sys.argv[2])
    # Which attempt the launcher says this is, before the rendezvous (what --verbose shows of a round).
    attempt, rank = os.environ.get("TORCHELASTIC_RESTART_COUNT"), os.environ.get("RANK")
    print(f"START {time.time():.3f} restart={attempt} rank={rank} host={socket.gethostname()}", flush=True)
    if os.environ.get("RECOVERY_PLAIN") == "1":
        train_plain(out, step_seconds)
    elif os.environ.get("RESOLVER_CONFIG"):  # resolver run: what its command line said
        runtime.launch(train, out, step_seconds)
    else:  # torchrun: this round's shape
        per_node = int(os.environ["LOCAL_WORLD_SIZE"])
        nodes = int(os.environ["WORLD_SIZE"]) // per_node
        runtime.launch(train, out, step_seconds, accelerator="cpu", devices=per_node, num_nodes=nodes, strategy="ddp")
