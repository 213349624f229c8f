"""A slow link among the ring's pairs: which pairs are markedly slower than their peers.

The ring (check step 3) times each pair of neighbouring ranks, one pair at a time, for a small and
a large message (:data:`~runtime.preflight.collectives.RING_SIZES`): a one-way time per size. A
pair across hosts is *slow* when, for some size, its time is more than :data:`SLOW_FACTOR` times
the median time of the pairs across hosts for that size **and** more than :data:`SLOW_FLOOR_US`
above it.

- Only pairs across hosts are judged, and only against each other: a link is a host pair (the
  network), and pairs on one host (shared memory, loopback) are always faster. Pairs on one host
  are shown, never flagged: there a "slow pair" is a rank that was descheduled for a moment, not a
  link (seen in CI: 3 ranks on 2 busy cores made one local pair 5 ms slower than its median in the
  best of three repeats). With fewer than three cross-host pairs nothing can stand out (two hosts
  have one link: the median of two is their mean, which neither exceeds three times).
- The floor keeps noise out: on a busy machine a rank that is descheduled for a moment makes a
  pair's time several times its median, by milliseconds (seen here: an 8 B message between two
  namespaces taking 2.3 ms against a median of 0.24 ms, in the best of three repeats), while a
  link that matters costs more: one negotiated at 1 Gb/s instead of 10 costs 7.5 ms more per MiB,
  and a congested or throttled link far more. The price: a link slower by less than the floor per
  MiB is not flagged (nccl-tests' ``sendrecv_perf`` between two hosts looks closer).

A slow link is a *warning*: the job would run, only slower, and a run whose placement makes some
pairs slower by design (PCIe against NVLink) must not fail its preflight. The report marks it so
it stands out, naming the pair's ranks and hosts with the figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["SLOW_FACTOR", "SLOW_FLOOR_US", "describe", "slow_pairs"]

#: A cross-host pair's one-way time must exceed the cross-host median by this factor ...
SLOW_FACTOR = 3.0
#: ... and by at least this many microseconds, to be flagged.
SLOW_FLOOR_US = 5000.0


def _same_host(figure: Mapping[str, Any]) -> bool:
    hosts = figure.get("hosts")
    if hosts and len(hosts) == 2:
        return hosts[0] == hosts[1]
    # "a->b (host->host)": figures from a rank that did not record the hosts separately
    inside = str(figure["pair"]).partition("(")[2].rstrip(")")
    left, _, right = inside.partition("->")
    return left == right


def slow_pairs(figures: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The slow pairs among the ring's ``figures`` (see the module's rule), in ring order.

    Each finding: ``pair`` (as the figures name it), ``ranks``/``hosts`` where the figures have
    them, and ``slow``: per size that crossed the threshold, the pair's latency and bandwidth and
    its kind's median latency and bandwidth.
    """
    figures = [f for f in figures if "pair" in f]
    by_group: dict[tuple[bool, int], list[Mapping[str, Any]]] = {}
    for figure in figures:
        by_group.setdefault((_same_host(figure), int(figure["bytes"])), []).append(figure)
    findings: dict[str, dict[str, Any]] = {}
    for (same_host, size), group in sorted(by_group.items(), key=lambda item: item[0][1]):
        if same_host or len(group) < 3:
            continue
        median_us = statistics.median(float(f["latency_us"]) for f in group)
        median_bw = statistics.median(float(f["busbw_gbps"]) for f in group)
        for figure in group:
            latency = float(figure["latency_us"])
            if latency > SLOW_FACTOR * median_us and latency - median_us > SLOW_FLOOR_US:
                finding = findings.setdefault(str(figure["pair"]), _finding(figure, same_host))
                finding["slow"].append(
                    {
                        "bytes": size,
                        "latency_us": latency,
                        "median_latency_us": median_us,
                        "busbw_gbps": float(figure["busbw_gbps"]),
                        "median_busbw_gbps": median_bw,
                    }
                )
    order: dict[str, int] = {}
    for index, figure in enumerate(figures):
        order.setdefault(str(figure["pair"]), index)
    return sorted(findings.values(), key=lambda finding: order[finding["pair"]])


def _finding(figure: Mapping[str, Any], same_host: bool) -> dict[str, Any]:
    finding: dict[str, Any] = {"pair": str(figure["pair"]), "kind": "same host" if same_host else "across hosts",
                               "slow": []}  # fmt: skip
    for key in ("ranks", "hosts"):
        if key in figure:
            finding[key] = list(figure[key])
    return finding


def describe(findings: Sequence[Mapping[str, Any]]) -> str:
    """One clause per slow pair, with the size, its figures and its kind's median, for the report."""
    parts = []
    for finding in findings:
        worst = max(finding["slow"], key=lambda s: s["latency_us"] / max(s["median_latency_us"], 1e-9))
        parts.append(
            f"slow link {finding['pair']}: {_size(worst['bytes'])} takes {worst['latency_us']:.0f} us one way, "
            f"{worst['busbw_gbps']:.3g} GB/s (median of the pairs {finding['kind']}: "
            f"{worst['median_latency_us']:.0f} us, {worst['median_busbw_gbps']:.3g} GB/s)"
        )
    return "; ".join(parts)


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"
