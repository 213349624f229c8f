"""The per-launch report folder: where it lives, and who removes it however the launch ends.

Every launch gets a fresh folder ``runtime-ranks-<pid>-<start>-<random>`` in the system's
temporary directory (``tempfile.gettempdir()``: ``$TMPDIR``, else ``/tmp``), private to the user
(mode 0700). It is removed

- when the launch returns or raises (also on Ctrl-C);
- when the launching process gets ``SIGTERM`` during the launch, at once, also while its main
  thread is blocked in a collective (:mod:`runtime._supervision.signals`): the ranks are stopped and
  the folder removed before the process exits with 143, the status a shell reports for SIGTERM;
- after ``SIGKILL`` (which no process can catch) by the next launch of the same user on this
  machine, which removes every such folder whose launching process (``<pid>`` started at
  ``<start>``) no longer exists; the OS's temporary-file cleaning removes it otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from runtime._protocol.rank_files import RankFiles
from runtime._supervision.signals import SIGTERM_EXIT_CODE, sigterm_guard

__all__ = ["FOLDER_PREFIX", "SIGTERM_EXIT_CODE", "report_folder", "sweep_stale_folders", "temporary_rank_files"]

FOLDER_PREFIX = "runtime-ranks-"


def _start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` ("0" where /proc is missing); "" if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ""
    except OSError:
        return "0"
    return stat.rsplit(")", 1)[1].split()[19]


def _process_exists(pid: int, start: str) -> bool:
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return _start_time(pid) == start


def sweep_stale_folders(directory: str | None = None) -> list[str]:
    """Remove this user's report folders whose launching process is gone; return their paths."""
    base = Path(directory or tempfile.gettempdir())
    removed: list[str] = []
    try:
        candidates = list(base.glob(f"{FOLDER_PREFIX}*"))
    except OSError:
        return removed
    for folder in candidates:
        parts = folder.name[len(FOLDER_PREFIX) :].split("-")
        if len(parts) < 3 or not parts[0].isascii() or not parts[0].isdecimal():
            continue
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not _process_exists(int(parts[0]), parts[1]):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


@contextlib.contextmanager
def report_folder() -> Iterator[str]:
    """A fresh private folder for one launch, removed however the launch ends (module docstring)."""
    sweep_stale_folders()
    pid = os.getpid()
    path = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{pid}-{_start_time(pid) or '0'}-")
    try:
        with sigterm_guard(path):
            yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def temporary_rank_files() -> Iterator[RankFiles]:
    """The rank files of one launch, in a fresh folder removed however the launch ends."""
    with report_folder() as directory:
        yield RankFiles.for_new_launch(directory)
