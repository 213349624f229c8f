"""Check step 4: latency and bandwidth of each collective for a few message sizes.

As nccl-tests reports them: the time is the slowest rank's (an all_reduce of each rank's time
with ``max``), the algorithm bandwidth is the message size over that time, and the bus bandwidth
scales it by what each rank must move for that collective (all_reduce ``2(n-1)/n``, all_gather
``(n-1)/n`` of the gathered size, broadcast ``1``), so figures compare with the link's speed.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from runtime.collectives.base import Collective
from runtime.preflight.report import FAIL, OK, Check

__all__ = ["SIZES", "measure"]

#: Message sizes in bytes (float32 elements: a quarter of it).
SIZES = (8, 64 << 10, 4 << 20)


def _bus_factor(op: str, n: int) -> float:
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "broadcast": 1.0}[op]


def _run(c: Collective, op: str, tensor: torch.Tensor) -> None:
    if op == "all_reduce":
        c.all_reduce(tensor, op="sum")
    elif op == "broadcast":
        c.broadcast(tensor, src=0)
    else:
        c.all_gather(tensor)


def measure(collective: Collective, budget: float = 1.0) -> Check:
    """Time all_reduce, broadcast and all_gather for :data:`SIZES`; at most about ``budget`` seconds
    per operation and size (at least one timed iteration after one warm-up)."""
    c, n = collective, collective.world_size
    start = time.monotonic()
    figures: list[dict[str, Any]] = []
    try:
        for op in ("all_reduce", "broadcast", "all_gather"):
            for size in SIZES:
                tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=c.device)
                tick = time.perf_counter()
                _run(c, op, tensor)  # warm-up (connections, buffers), and an estimate of the time
                estimate = time.perf_counter() - tick
                # every rank runs the same count: rank 0's estimate decides it
                wanted = max(1, min(50, int(budget / len(SIZES) / 3 / max(estimate, 1e-6))))
                iterations = int(c.broadcast(torch.tensor([float(wanted)], device=c.device), src=0).item())
                tick = time.perf_counter()
                for _ in range(iterations):
                    _run(c, op, tensor)
                mine = torch.tensor([(time.perf_counter() - tick) / iterations], dtype=torch.float64)
                seconds = float(c.all_reduce(mine.to(c.device), op="max").item())
                size_bytes = tensor.numel() * 4 * (n if op == "all_gather" else 1)
                algbw = size_bytes / seconds / 1e9
                figures.append({"op": op, "bytes": size_bytes, "latency_us": seconds * 1e6, "algbw_gbps": algbw,
                                "busbw_gbps": algbw * _bus_factor(op, n), "iterations": iterations})  # fmt: skip
    except Exception as exc:
        return Check("speed", FAIL, f"rank {c.rank}: timing stopped: {type(exc).__name__}: {exc}".splitlines()[0],
                     echo=True, seconds=time.monotonic() - start)  # fmt: skip
    seconds = time.monotonic() - start
    return Check("speed", OK, "time per operation (slowest rank), algorithm and bus bandwidth", seconds=seconds,
                 figures=figures)  # fmt: skip
