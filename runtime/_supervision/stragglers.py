"""Stragglers named while the job runs: a rank whose own work per step stays above the others'.

In a synchronous job every rank's step lasts as long as the slowest one's: the others wait for it in
their collectives. What tells the straggler is its own work, the time it spends outside collectives,
which each rank records at every step (:class:`~runtime._protocol.progress.RankProgress`'s ``work``).
The progress watchdog hands each look at the records (about one a second) to a :class:`StragglerWatch`.

A rank is named a straggler, once, on stderr, with its figures, when at every judgement for
:data:`PERSIST` seconds its own work per step is both :data:`RATIO` times the median of the other
ranks' and :data:`MARGIN` seconds per step above it. Its own work per step is taken over a window of
at least :data:`WINDOW_STEPS` steps and :data:`WINDOW_SECONDS` seconds, as the median of its figures
between consecutive looks. It is named again when it recovers (below :data:`RECOVERED_RATIO` times
the median, or under half the margin above it, for as long) or gets markedly worse (:data:`WORSE`
times the ratio it was named with, for as long); never at every look.

Together they keep a noisy machine quiet in a run whose ranks are alike: the ratio ignores the
jitter of small steps, the margin a ratio between tiny times, the window's median a burst shorter
than half the window (other processes taking the cores, a garbage collection), and the persistence
a longer one. The ranks are judged only once every one has stepped since the last judgement (ranks
that finished keep windows of different times), and a look that finds a rank inside a long
operation (a checkpoint being saved) starts every window afresh.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from runtime._protocol.progress import RankProgress

__all__ = [
    "MARGIN",
    "PERSIST",
    "RATIO",
    "RECOVERED_RATIO",
    "WINDOW_SECONDS",
    "WINDOW_STEPS",
    "WORSE",
    "StragglerWatch",
    "report_stragglers",
]

#: A straggler's own work per step is at least this many times the median of the other ranks'.
RATIO = 1.3
#: ... and at least this many seconds per step above it.
MARGIN = 0.002
#: Each figure is taken over at least this many steps ...
WINDOW_STEPS = 20
#: ... and at least this many seconds.
WINDOW_SECONDS = 5.0
#: A change (named, recovered, worse) holds at every look for this many seconds before it is reported.
PERSIST = 5.0
#: A named straggler has recovered below this many times the others' median.
RECOVERED_RATIO = 1.15
#: A named straggler is reported again when its ratio reaches this many times the one it was named with.
WORSE = 1.5
#: The most looks a rank's window keeps.
_HISTORY = 256


@attrs.define
class _Rank:
    """What is known of one rank's own work."""

    #: (look time, steps, own work in ns) at looks that saw a new step, oldest first.
    points: deque[tuple[float, int, int]] = attrs.field(factory=lambda: deque(maxlen=_HISTORY))
    #: The first point, for the whole run's figure.
    first: tuple[float, int, int] | None = None
    #: The ratio it was last reported with (``None``: not a straggler).
    named: float | None = None
    #: Since when the change to report has held (``None``: no change pending).
    since: float | None = None
    #: Its latest window: own work per step (seconds) and the steps it covers.
    window: tuple[float, int] | None = None
    #: The highest ratio it was reported with.
    worst: float | None = None


class StragglerWatch:
    """Stragglers from looks at the ranks' records (module docstring); ``hosts``: each rank's host."""

    def __init__(self, hosts: Mapping[int, str]) -> None:
        self.hosts = dict(hosts)
        self._ranks: dict[int, _Rank] = {}
        self._judged: dict[int, int] = {}  # each rank's steps at the last judgement
        #: Every report made, as printed.
        self.reports: list[str] = []

    def look(self, now: float, progress: Mapping[int, RankProgress]) -> list[str]:
        """Take the records as they are at ``now`` (monotonic seconds); the reports this look makes."""
        if any(record.long for record in progress.values()):
            for rank in self._ranks.values():  # a checkpoint's time is no step's work
                rank.points.clear()
                rank.window = rank.since = None
            return []
        for number, record in progress.items():
            rank = self._ranks.setdefault(number, _Rank())
            if record.steps and (not rank.points or record.steps > rank.points[-1][1]):
                point = (now, record.steps, record.work)
                rank.points.append(point)
                rank.first = rank.first or point
                rank.window = _window(rank.points)
        windows = {number: rank.window[0] for number, rank in self._ranks.items() if rank.window is not None}
        # Judged once every rank has stepped since the last judgement: a rank that finished (or stopped)
        # keeps its last window, which then compares other times than its peers'.
        latest = {number: rank.points[-1][1] for number, rank in self._ranks.items() if rank.points}
        if len(windows) < 2 or any(latest.get(number, 0) <= steps for number, steps in self._judged.items()):
            return []
        self._judged = latest
        reports = []
        for number, own in sorted(windows.items()):
            median = statistics.median(w for other, w in windows.items() if other != number)
            report = self._judge(number, own, median, now)
            if report is not None:
                reports.append(report)
        self.reports += reports
        return reports

    def _judge(self, number: int, own: float, median: float, now: float) -> str | None:
        rank = self._ranks[number]
        ratio = own / median if median > 0 else float("inf")
        if rank.named is None:
            change = ratio >= RATIO and own - median >= MARGIN
        else:
            recovered = ratio < RECOVERED_RATIO or own - median < MARGIN / 2
            change = recovered or ratio >= rank.named * WORSE
        if not change:
            rank.since = None
            return None
        rank.since = now if rank.since is None else rank.since
        if now - rank.since < PERSIST:
            return None
        rank.since = None
        figures = self._figures(number, own, median, ratio)
        if rank.named is None:
            rank.named = rank.worst = ratio
            return f"straggler: {figures}"
        if ratio >= rank.named * WORSE:
            rank.named, rank.worst = ratio, max(ratio, rank.worst or ratio)
            return f"straggler, worse: {figures}"
        rank.named = None
        return f"straggler recovered: {figures}"

    def _figures(self, number: int, own: float, median: float, ratio: float) -> str:
        window = self._ranks[number].window
        steps = window[1] if window is not None else 0
        times = "?" if ratio == float("inf") else f"{ratio:.1f}x"
        return (
            f"rank {number} (host {self.hosts.get(number, '?')}) spends {own * 1e3:.3g} ms per step in its own work "
            f"(outside collectives), {times} the other ranks' median of {median * 1e3:.3g} ms, over its last "
            f"{steps} steps"
        )

    def figures(self) -> dict[str, Any]:
        """Each rank's figures for the whole run so far, and the reports made: the run's report (JSON data)."""
        ranks = []
        for number, rank in sorted(self._ranks.items()):
            if rank.first is None or not rank.points:
                continue
            _, steps0, work0 = rank.first
            _, steps, work = rank.points[-1]
            per_step = (work - work0) / (steps - steps0) / 1e9 if steps > steps0 else None
            ranks.append({
                "rank": number,
                "host": self.hosts.get(number),
                "steps": steps,
                "own_work_ms_per_step": None if per_step is None else round(per_step * 1e3, 3),
                "straggler": rank.worst is not None,
                "worst_ratio": None if rank.worst is None else round(rank.worst, 2),
            })  # fmt: skip
        return {"ranks": ranks, "stragglers": [r["rank"] for r in ranks if r["straggler"]], "reports": self.reports}

    def summary(self) -> str | None:
        """One line naming the stragglers of the run, with each rank's own work per step; ``None``: none."""
        data = self.figures()
        if not data["stragglers"]:
            return None
        named = ", ".join(f"rank {rank}" for rank in data["stragglers"])
        work = ", ".join(
            f"rank {r['rank']} {r['own_work_ms_per_step']:.3g} ms" for r in data["ranks"]
            if r["own_work_ms_per_step"] is not None
        )  # fmt: skip
        return f"straggler(s) {named}; own work per step (outside collectives): {work}"


def _window(points: deque[tuple[float, int, int]]) -> tuple[float, int] | None:
    """Own work per step (seconds) over the latest window of points (module docstring), and its steps: the
    median of the figures between consecutive looks, so that a burst in under half the window moves it not."""
    now, steps, _ = points[-1]
    figures = []
    for (then, steps0, work0), (_, steps1, work1) in zip(reversed(list(points)[:-1]), reversed(points), strict=False):
        figures.append((work1 - work0) / (steps1 - steps0) / 1e9)
        if steps - steps0 >= WINDOW_STEPS and now - then >= WINDOW_SECONDS:
            return statistics.median(figures), steps - steps0
    return None


#: The run's report of each rank's own work, in the rank logs' folder.
REPORT_NAME = "progress.json"


def report_stragglers(watch: StragglerWatch | None, folder: Path | None, command: str) -> None:
    """After a run: each rank's figures into ``folder``/progress.json (the rank logs' folder, if any, once a
    step was made), and one line on stderr, from ``command``, when a straggler was named."""
    if watch is None:
        return
    data = watch.figures()
    written = None
    if folder is not None and data["ranks"]:
        written = folder / REPORT_NAME
        try:
            written.write_text(json.dumps(data, indent=1) + "\n")
        except OSError as exc:
            print(f"{command}: cannot write the ranks' figures to {written}: {exc.strerror or exc}", file=sys.stderr)
            written = None
    line = watch.summary()
    if line is not None:
        where = f" (each rank's figures: {written})" if written is not None else ""
        print(f"{command}: {line}{where}", file=sys.stderr, flush=True)
