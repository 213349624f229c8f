"""Faults a test injects into ``resolver check`` (test-only; documented in docs/usage.md).

``RESOLVER_CHECK_FAULT`` holds comma-separated ``RANK:KIND@STEP`` entries: at the start of
``STEP`` (one of :data:`~runtime.preflight.report.STEPS`), rank ``RANK`` does ``KIND``:

* ``die``: exits at once with code 3 (as a crash would);
* ``hang``: sleeps for ever (as a deadlock would);
* ``raise``: raises an exception the check does not expect (as a bug or a broken install would);
* ``wrong``: takes part, but its result of ``STEP`` is off by one (all_reduce, broadcast,
  all_gather, ring: a corrupted value, as a faulty link or device would give; engine: the loss
  after the step).
"""

from __future__ import annotations

import os
import time

__all__ = ["FAULT_VARIABLE", "fault_at"]

FAULT_VARIABLE = "RESOLVER_CHECK_FAULT"


def fault_at(rank: int, step: str) -> str | None:
    """The fault this rank is told to show at ``step`` (``die`` and ``hang`` happen here), or None."""
    for entry in os.environ.get(FAULT_VARIABLE, "").split(","):
        where, _, kind = entry.strip().partition(":")
        kind, _, at = kind.partition("@")
        if where.strip().isdigit() and int(where) == rank and at.strip() == step:
            kind = kind.strip()
            if kind == "die":
                os._exit(3)
            if kind == "raise":
                raise RuntimeError(f"injected failure at {step} ({FAULT_VARIABLE})")
            if kind == "hang":
                while True:
                    time.sleep(3600)
            return kind
    return None
