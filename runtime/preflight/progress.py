"""``resolver check``'s steps shown as they pass, before the report: the local launcher reads its
ranks' state files while it waits (each rank writes its after every step) and hands each step that
every rank has finished to a reporter, once, in :data:`~runtime.preflight.report.STEPS` order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from runtime.preflight.report import FAIL, OK, SKIP, STEPS, WARN, Check, RankState

__all__ = ["Progress", "StepReporter", "progress_line"]

#: Called with a step's outcome across this node's ranks (its name, status and seconds since the check
#: started); the CLI prints it.
StepReporter = Callable[[Check, float], None]

#: Seconds between two reads of the state files.
POLL = 0.1


class Progress:
    """Call it while the ranks run: reports each step that every rank in ``ranks`` has finished."""

    def __init__(self, ranks: Sequence[int], read: Callable[[int], RankState], reporter: StepReporter) -> None:
        self.ranks = list(ranks)
        self.read = read
        self.reporter = reporter
        self.started = time.monotonic()
        self.shown = 0  # the steps reported so far (a prefix of STEPS)
        self.last_read = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last_read < POLL or self.shown == len(STEPS):
            return
        self.last_read = now
        checks = [{c.name: c for c in self.read(r).checks} for r in self.ranks]
        while self.shown < len(STEPS):
            name = STEPS[self.shown]
            entries = [mine[name] for mine in checks if name in mine]
            if len(entries) < len(checks):
                return
            statuses = {entry.status for entry in entries}
            status = next(s for s in (FAIL, WARN, OK, SKIP) if s in statuses)
            self.reporter(Check(name, status), now - self.started)
            self.shown += 1


def progress_line(check: Check, seconds: float) -> str:
    """``resolver check: ok   rendezvous    3.2 s``: one step as it passed (seconds since the check began)."""
    mark = {OK: "ok  ", FAIL: "FAIL", SKIP: "skip", WARN: "WARN"}[check.status]
    return f"resolver check: {mark} {check.name:<11} {seconds:5.1f} s"
