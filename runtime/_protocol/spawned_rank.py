"""A rank started with ``spawn`` re-imports the main script: a ``launch()`` that is not under
``if __name__ == "__main__":`` runs again there, while the rank is still starting.

:mod:`multiprocessing` marks a spawned process as inheriting while it imports the main script (and
unpickles the function it will run); a ``launch()`` reached then is that re-run. It stops the rank with
an error naming the cause and the fix, reported to the launcher through the report folder the launcher
named in :data:`SPAWNED_RANK_VARIABLE` (the rank's own variables only arrive after its start).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Iterator

from runtime._protocol.rank_environment import environ_patch
from runtime._protocol.rank_files import RankFiles, mark_as_plain
from runtime.errors import RuntimeConfigError

__all__ = ["SPAWNED_RANK_VARIABLE", "check_not_reimported", "spawning"]

#: ``RANK:REPORT_DIR`` of a rank being spawned, set while the launcher starts it.
SPAWNED_RANK_VARIABLE = "RUNTIME_SPAWNED_RANK"


@contextlib.contextmanager
def spawning(rank: int, report_directory: str) -> Iterator[None]:
    """Start a spawned rank inside this block: it can report a re-run ``launch()`` (:func:`check_not_reimported`)."""
    with environ_patch({SPAWNED_RANK_VARIABLE: f"{rank}:{report_directory}"}):
        yield


def check_not_reimported() -> None:
    """Stop a spawned process that reached ``launch()`` while importing its main script (see the module docstring)."""
    if not getattr(multiprocessing.current_process(), "_inheriting", False):
        return
    main = getattr(sys.modules.get("__mp_main__"), "__file__", None)
    script = f"the main script ({os.path.basename(main)})" if main else "the main script"
    error = RuntimeConfigError(
        f"launch() ran again in a process that spawn started (a rank): spawn starts a fresh Python that "
        f"re-imports {script}, so a launch() at the script's top level runs again in every rank",
        hint='put the launch() call under `if __name__ == "__main__":`',
    )
    mark_as_plain(error)
    rank, _, directory = os.environ.get(SPAWNED_RANK_VARIABLE, "").partition(":")
    if not (rank.isdigit() and os.path.isdir(directory)):
        raise error  # spawned by someone else (a DataLoader's spawned workers): Python prints it
    RankFiles(directory).write_error(int(rank), error)
    raise SystemExit(1)  # reported: the launcher shows it
