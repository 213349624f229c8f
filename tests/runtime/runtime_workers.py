"""Functions that run inside launched ranks (module level, so the spawn launcher can pickle them)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from runtime import Strategy


def _start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (None when there is none)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: starttime, counted after the command name


def this_process() -> str:
    """``pid:start-time``: names this process even after its pid is reused (pids wrap quickly)."""
    return f"{os.getpid()}:{_start_time(os.getpid())}"


def process_is_gone(process: str) -> bool:
    """True when the process named by :func:`this_process` no longer exists (reaped, not a zombie)."""
    pid, start = process.split(":")
    return _start_time(int(pid)) != start


def record_pid(directory: Path, strategy: Strategy) -> None:
    (directory / f"pid-{strategy.global_rank}").write_text(this_process())


def recorded_pids(directory: Path) -> list[str]:
    return [p.read_text() for p in sorted(directory.glob("pid-*"))]


def identity(strategy: Strategy) -> dict[str, Any]:
    """What a rank knows about itself."""
    variables = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR")
    return {
        "global_rank": strategy.global_rank,
        "local_rank": strategy.local_rank,
        "world_size": strategy.world_size,
        "pid": os.getpid(),
        "env": {name: os.environ.get(name) for name in variables},
        "config_rank": json.loads(os.environ["RESOLVER_CONFIG"])["global_rank"],
        "use_distributed_sampler": strategy.use_distributed_sampler,
    }


def gather_identities(strategy: Strategy) -> list[dict[str, Any]]:
    return strategy.collective.all_gather_object(identity(strategy))


def exercise_collectives(strategy: Strategy, out: Path) -> None:
    """Every collective operation on rank-dependent inputs; results saved for the test to check."""
    c = strategy.collective
    r = strategy.global_rank
    results: dict[str, Any] = {}
    results["broadcast"] = c.broadcast(torch.full((3,), float(r + 1)), src=1)
    for op in ("sum", "mean", "max", "min"):
        results[f"all_reduce_{op}"] = c.all_reduce(torch.tensor([r + 1.0, 10.0 * (r + 1)]), op)
    results["all_reduce_int_sum"] = c.all_reduce(torch.tensor([r + 1], dtype=torch.int64), "sum")
    results["all_gather"] = c.all_gather(torch.tensor([r, r * r], dtype=torch.float32))
    results["reduce_scatter_sum"] = c.reduce_scatter(torch.arange(4, dtype=torch.float32) + 10 * r, "sum")
    results["reduce_scatter_mean"] = c.reduce_scatter(torch.arange(4, dtype=torch.float32) + 10 * r, "mean")
    results["reduce_scatter_max"] = c.reduce_scatter(torch.arange(4, dtype=torch.float32) * (r + 1), "max")
    results["broadcast_object"] = c.broadcast_object({"from": r, "items": [r] * 2}, src=1)
    results["all_gather_object"] = c.all_gather_object(("rank", r))
    results["any_true"] = c.reduce_boolean_decision(r == 0, all=False)
    results["all_true"] = c.reduce_boolean_decision(r == 0, all=True)
    results["all_agree"] = c.reduce_boolean_decision(True, all=True)
    results["none_true"] = c.reduce_boolean_decision(False, all=False)
    if r == 1:
        time.sleep(0.5)
    start = time.monotonic()
    c.barrier()
    results["barrier_wait"] = time.monotonic() - start
    torch.save(results, out / f"collectives-{r}.pt")


def shard_indices(strategy: Strategy, size: int, out: Path) -> None:
    """Iterate the train and val loaders of a dataset of ``size`` items; save the indices seen."""
    dataset = list(range(size))
    seen: dict[str, list[int]] = {}
    for use, shuffle in (("train", True), ("val", False)):
        loader = strategy.process_dataloader(DataLoader(dataset, batch_size=3, shuffle=shuffle), use)
        seen[use] = [int(i) for batch in loader for i in batch]
    (out / f"shards-{strategy.global_rank}.json").write_text(json.dumps(seen))


def checkpoint_round_trip(strategy: Strategy, path: str) -> list[bool]:
    """Rank 0 saves a trained model and optimizer; every rank loads them into fresh objects."""
    torch.manual_seed(strategy.global_rank)  # different weights per rank before loading
    model = strategy.setup_module(torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss = model(torch.ones(3, 4)).sum()
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    strategy.save_checkpoint(path, {"model": model, "optimizer": optimizer, "step": 7})

    fresh = strategy.setup_module(torch.nn.Linear(4, 2))
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    loaded = strategy.load_checkpoint(path, {"model": fresh, "optimizer": fresh_optimizer})
    weights = torch.cat([p.detach().flatten() for p in strategy.unwrap_module(fresh).parameters()])
    rank0_weights = strategy.collective.broadcast(weights.clone(), src=0)
    checks = [
        loaded["step"] == 7,
        torch.equal(weights, rank0_weights),  # every rank loaded rank 0's file
        all(
            torch.equal(a, b)
            for a, b in zip(
                strategy.unwrap_module(model).state_dict().values(),
                strategy.unwrap_module(fresh).state_dict().values(),
                strict=True,
            )
        ),
        bool(fresh_optimizer.state_dict()["state"]),  # momentum buffers restored
    ]
    return strategy.collective.all_gather_object(all(checks))


def wait_for_pids(directory: Path, count: int, timeout: float = 30.0) -> None:
    """Wait until ``count`` ranks recorded their pid (so the test can check all of them later)."""
    deadline = time.monotonic() + timeout
    while len(list(directory.glob("pid-*"))) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def fail_on_rank(strategy: Strategy, failing_rank: int, pid_dir: str) -> str:
    record_pid(Path(pid_dir), strategy)
    if strategy.global_rank == failing_rank:
        wait_for_pids(Path(pid_dir), strategy.world_size)
        raise ValueError(f"rank {failing_rank} cannot go on: bad batch 42")
    strategy.collective.barrier()  # waits for the failing rank, which never arrives
    return "unreachable"


def hang_on_rank(strategy: Strategy, hanging_rank: int, pid_dir: str) -> str:
    record_pid(Path(pid_dir), strategy)
    if strategy.global_rank == hanging_rank:
        time.sleep(600)
    return "done"


def return_rank_tensor(strategy: Strategy, scale: float) -> dict[str, Any]:
    return {"rank": strategy.global_rank, "tensor": torch.arange(3) * scale, "process": this_process()}
