"""Check step 3: each collective through the run's ``Collective``, with its values checked.

Every rank contributes values it and its peers can predict (rank ``r`` holds ``r + 1``), so a
wrong result is found on the rank that got it, and a point-to-point ring (each rank to the next
and back) names a broken link as the pair of ranks and hosts it joins.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from runtime.collectives.base import Collective
from runtime.preflight.faults import fault_at
from runtime.preflight.report import FAIL, OK, Check

__all__ = ["ELEMENTS", "check_operation", "ring"]

#: Elements per tensor in the value checks (enough to span more than one gloo chunk is not needed).
ELEMENTS = 1024


def _fill(collective: Collective, value: float) -> torch.Tensor:
    return torch.full((ELEMENTS,), float(value), dtype=torch.float32, device=collective.device)


def _wrong(values: torch.Tensor, expected: float) -> float | None:
    """The first value that is not ``expected``, or None."""
    values = values.cpu()  # an XLA tensor is computed here, and nonzero() needs no device support
    bad = (values != expected).nonzero()
    return None if bad.numel() == 0 else float(values[bad[0]].item())


def _all_reduce(c: Collective, fault: str | None) -> str | None:
    got = c.all_reduce(_fill(c, c.rank + 1), op="sum")
    if fault == "wrong":
        got += 1
    expected = c.world_size * (c.world_size + 1) / 2
    bad = _wrong(got, expected)
    if bad is not None:
        return f"got {bad:g}, expected {expected:g} (the sum of 1..{c.world_size}, rank r adding r + 1)"
    return None


def _broadcast(c: Collective, fault: str | None) -> str | None:
    got = c.broadcast(_fill(c, 42.0 if c.rank == 0 else -1.0), src=0)
    if fault == "wrong":
        got += 1
    bad = _wrong(got, 42.0)
    return None if bad is None else f"got {bad:g} from rank 0's broadcast, expected 42"


def _all_gather(c: Collective, fault: str | None) -> str | None:
    parts = c.all_gather(_fill(c, c.rank + 1))
    for peer, part in enumerate(parts):
        if fault == "wrong" and peer == 0:
            part = part + 1
        bad = _wrong(part, peer + 1)
        if bad is not None:
            return f"got {bad:g} as rank {peer}'s part, expected {peer + 1}"
    return None


def _barrier(c: Collective, fault: str | None) -> str | None:
    c.barrier()
    return None


OPERATIONS: Mapping[str, Callable[[Collective, str | None], str | None]] = {
    "barrier": _barrier,
    "all_reduce": _all_reduce,
    "broadcast": _broadcast,
    "all_gather": _all_gather,
}


def _error_text(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def check_operation(collective: Collective, name: str, timeout: float) -> Check:
    """Run collective ``name`` once and check what this rank got.

    A wrong value blames this rank (it received it); an exception (a peer gone, the timeout) is
    marked as an echo: the rank that caused it is named by its own entry or by the launcher.
    """
    rank, host = collective.rank, socket.gethostname()
    fault = fault_at(rank, name)
    start = time.monotonic()
    try:
        problem = OPERATIONS[name](collective, fault)
    except Exception as exc:
        seconds = time.monotonic() - start
        waited = " (the timeout)" if seconds >= timeout * 0.9 else ""
        return Check(name, FAIL, f"rank {rank} ({host}): {name} failed after {seconds:.1f} s{waited}: "
                     f"{_error_text(exc)}", fix="a peer rank failed or stopped answering: see its line",
                     echo=True, seconds=seconds)  # fmt: skip
    seconds = time.monotonic() - start
    if problem is not None:
        return Check(name, FAIL, f"rank {rank} ({host}): {problem}", (rank,), (host,),
                     fix=f"the data reached rank {rank} corrupted: check that host's device and network "
                     "(run the check again to see whether it is stable)", seconds=seconds)  # fmt: skip
    return Check(name, OK, f"{collective.world_size} ranks, values checked, {seconds * 1e3:.1f} ms", seconds=seconds)


def _pair(a: int, b: int, hosts: Mapping[int, str]) -> str:
    return f"{a}->{b} ({hosts.get(a, '?')}->{hosts.get(b, '?')})"


RING_SIZES = (8, 1 << 20)


def ring(collective: Collective, hosts: Mapping[int, str], timeout: float, repeats: int = 3) -> Check:
    """Each rank sends to the next and gets it back (phase ``i``: rank ``i`` with ``i + 1``), one
    pair at a time, with its values checked and its round trip timed for :data:`RING_SIZES`.

    Returns this rank's view; a failure names the pair it happened in (both ranks and hosts).
    Figures: per pair (measured by the pair's first rank), the latency (half the round trip) and
    bandwidth for each size.
    """
    c, rank, world = collective, collective.rank, collective.world_size
    fault = fault_at(rank, "ring")
    figures: list[dict[str, Any]] = []
    start = time.monotonic()
    phases = sorted({(rank - 1) % world, rank})  # where this rank takes part: answering, then starting
    for phase in phases:
        first, second = phase, (phase + 1) % world
        pair = _pair(first, second, hosts)
        try:
            for size in RING_SIZES:
                elements = max(1, size // 4)
                if rank == first:
                    best = float("inf")
                    for _ in range(repeats):
                        sent = torch.full((elements,), float(first + 1), device=c.device)
                        tick = time.perf_counter()
                        c.send(sent, second)
                        back = c.recv(torch.empty_like(sent), second)
                        best = min(best, time.perf_counter() - tick)
                        if fault == "wrong":
                            back += 1
                        bad = _wrong(back, first + 1 + 1000)
                        if bad is not None:
                            return _ring_fail(f"pair {pair}: rank {first} got {bad:g} back, expected "
                                              f"{first + 1001}", first, second, hosts, start)  # fmt: skip
                    one_way = best / 2
                    figures.append({"pair": pair, "ranks": [first, second],
                                    "hosts": [hosts.get(first, "?"), hosts.get(second, "?")],
                                    "bytes": elements * 4, "latency_us": one_way * 1e6,
                                    "busbw_gbps": elements * 4 / one_way / 1e9})  # fmt: skip
                else:
                    for _ in range(repeats):
                        got = c.recv(torch.empty((elements,), device=c.device), first)
                        c.send(got + 1000, first)
        except Exception as exc:
            return _ring_fail(f"pair {pair}: {_error_text(exc)} on rank {rank}", first, second, hosts, start,
                              echo=True)  # fmt: skip
    seconds = time.monotonic() - start
    return Check("ring", OK, f"{world} pairs, each rank to the next and back", seconds=seconds, figures=figures)


def _ring_fail(detail: str, first: int, second: int, hosts: Mapping[int, str], start: float,
               echo: bool = False) -> Check:  # fmt: skip
    return Check("ring", FAIL, detail, (first, second), (hosts.get(first, "?"), hosts.get(second, "?")),
                 fix=f"the link between {hosts.get(first, '?')} and {hosts.get(second, '?')} fails: check the "
                 "network between them (firewall on the ports gloo/NCCL open, interface choice: "
                 "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)", echo=echo, seconds=time.monotonic() - start)  # fmt: skip
