"""Launches that stall: ``python tests/benchmarks/launch_stalls.py [--launches N] [--launchers ...] [--over S]``.

Runs ``N`` (default 200) launches of a function that returns at once on 2 CPU ranks, one after the
other in this process, for each launcher (``ddp_fork``, ``ddp_spawn``), and counts those that took
over ``--over`` seconds (default 1) or failed. The control, in rounds alternating with ours, is raw
``torch.multiprocessing`` with the same start method: ``init_process_group`` over ``tcp://`` (rank 0
hosts torch's store) and ``destroy_process_group``. One untimed launch of each side comes first
(imports, first-time costs). Issue 37: a rank that reached rank 0's store before it listened was
refused, and torch's client then backed off for 0.25 s to seconds before trying again; a rank that
left right after joining made its peer's gloo connection fail. Not a test: how many launches stall
depends on the machine and its load; read ours against the control of the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))

import runtime  # noqa: E402
from runtime._protocol.ports import find_free_port  # noqa: E402

START_METHODS = {"ddp_fork": "fork", "ddp_spawn": "spawn"}


def returns_at_once(strategy: runtime.Strategy) -> int:
    return strategy.global_rank


def _raw_rank(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    dist.destroy_process_group()


def ours(launcher: str) -> None:
    runtime.launch(returns_at_once, accelerator="cpu", devices=2, strategy=launcher)


def control(launcher: str) -> None:
    mp.start_processes(_raw_rank, args=(find_free_port(),), nprocs=2, start_method=START_METHODS[launcher])


def timed(launch: Callable[[str], None], launcher: str) -> float | None:
    """Seconds the launch took, ``None`` if it failed."""
    start = time.monotonic()
    try:
        launch(launcher)
    except Exception as exc:  # counted, and the first line shown
        print(f"  failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)
        return None
    return time.monotonic() - start


def summary(name: str, seconds: list[float | None], over: float) -> str:
    done = sorted(s for s in seconds if s is not None)
    slow = [round(s, 2) for s in seconds if s is not None and s > over]
    failed = sum(s is None for s in seconds)
    spread = f"median {statistics.median(done):.3f} s, max {done[-1]:.2f} s" if done else "none finished"
    return f"{name}: {len(slow)}/{len(seconds)} over {over:g} s, {failed} failed ({spread}); slow: {slow}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--launchers", nargs="+", choices=sorted(START_METHODS), default=["ddp_fork", "ddp_spawn"])
    parser.add_argument("--over", type=float, default=1.0, help="a launch longer than this many seconds stalled")
    options = parser.parse_args()
    for launcher in options.launchers:
        print(f"{launcher}: {options.launches} launches per side, load average {os.getloadavg()[0]:.1f}", flush=True)
        for launch in (ours, control):
            timed(launch, launcher)  # untimed: imports, first-time costs
        results: dict[str, list[float | None]] = {"ours": [], "control": []}
        for number in range(options.launches):
            sides = (("ours", ours), ("control", control))
            for name, launch in sides if number % 2 == 0 else sides[::-1]:
                results[name].append(timed(launch, launcher))
        print(summary(f"{launcher} ours", results["ours"], options.over))
        print(summary(f"{launcher} control (raw torch, {START_METHODS[launcher]})", results["control"], options.over))
        print(f"  load average after: {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":  # spawned ranks import this file again
    main()
