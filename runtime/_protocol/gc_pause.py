"""The runtime sets a rank up with Python's cyclic garbage collector paused.

Importing torch leaves some 170,000 objects that no full collection has looked at yet, so a
process's first few thousand allocations after it start one (90 ms on the 2-core development
machine). Resolving, building the strategy and joining the process group make that many, all of
them long-lived: without the pause, every rank paid that collection on its way to the rendezvous,
where the others wait for it, and where a raw torch script pays it later, in its first steps.
The collection is not skipped, only not started by the set-up; the user's function runs with the
collector as it was before the set-up.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block; restore its state after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
