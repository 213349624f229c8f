"""Checkpoint directories (DeepSpeed's, FSDP's sharded one): the mark rank 0 adds once every rank wrote,
with the list of what they wrote (each file's size and CRC-32), so a damaged directory can be told.

Directories marked by versions before that list (a ``.complete`` of one line of text) are taken as
complete, as they were then, without a check of their files: they are still read the safe way, and a
damaged file is reported when it is loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path

from runtime.checkpoint.files import DAMAGED_HINT, PathLike
from runtime.errors import CheckpointDamagedError

__all__ = [
    "COMPLETE_MARKER",
    "check_directory",
    "directory_problem",
    "discard_save",
    "entries_before_save",
    "mark_complete",
    "mark_incomplete",
]

#: The file a checkpoint directory (DeepSpeed's, FSDP's sharded one) gets once every rank has written
#: its part: rank 0 writes it last, after a barrier, and removes it before a new save into the directory.
COMPLETE_MARKER = ".complete"

_FORMAT = 1
_BLOCK = 1 << 22


def mark_incomplete(path: PathLike) -> None:
    """Before a save into the directory ``path``: it is not a complete checkpoint until :func:`mark_complete`."""
    (Path(path) / COMPLETE_MARKER).unlink(missing_ok=True)


def mark_complete(path: PathLike) -> None:
    """After every rank wrote its part of the directory ``path``: it is a complete checkpoint (atomically).

    The mark lists every file in the directory with its size and CRC-32 (read once, here, on the rank
    that marks it).
    """
    directory = Path(path)
    marker = directory / COMPLETE_MARKER
    partial = marker.with_name(f"{COMPLETE_MARKER}.partial")
    files = {name: {"size": size, "crc32": crc} for name, size, crc in _contents(directory)}
    record = {"note": "every rank finished writing this checkpoint", "format": _FORMAT, "files": files}
    partial.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(partial, marker)


def directory_problem(path: PathLike) -> tuple[str, str] | None:
    """The first file of the checkpoint directory ``path`` that is not as it was written, and how, or ``None``.

    ``(part, problem)``: the mark is missing (``part`` is the mark), or a listed file is missing, has
    another size or another CRC-32. A mark without the list (written by an older version) passes.
    """
    directory = Path(path)
    try:
        text = (directory / COMPLETE_MARKER).read_text()
    except FileNotFoundError:
        return COMPLETE_MARKER, "is missing: its save did not finish"
    except (OSError, UnicodeDecodeError) as exc:
        return COMPLETE_MARKER, f"cannot be read ({exc})"
    try:
        record = json.loads(text)
    except ValueError:
        return None  # an older version's mark: no list to check against
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        return COMPLETE_MARKER, "is not a list of the checkpoint's files"
    for name, written in sorted(files.items()):
        problem = _file_problem(directory / name, written)
        if problem is not None:
            return name, problem
    return None


def check_directory(path: PathLike) -> None:
    """Raise :class:`~runtime.errors.CheckpointDamagedError` if the directory has a mark and is not as it lists;
    a directory without a mark (written elsewhere than by this runtime's save) is not checked."""
    directory = Path(path)
    if not (directory / COMPLETE_MARKER).exists():
        return
    problem = directory_problem(directory)
    if problem is not None:
        raise CheckpointDamagedError(str(directory), problem[0], problem[1], DAMAGED_HINT)


def _file_problem(file: Path, written: object) -> str | None:
    if not isinstance(written, dict):
        return "has no size and CRC-32 in the mark"
    try:
        size = file.lstat().st_size
    except FileNotFoundError:
        return f"is missing (it was written: {written.get('size')} bytes)"
    if not file.is_file() or file.is_symlink():
        return "is not the regular file that was written"
    if size != written.get("size"):
        return f"is {size} bytes, {written.get('size')} when written"
    if _crc32(file) != written.get("crc32"):
        return "fails its CRC-32 check: its bytes changed after it was written"
    return None


def _contents(directory: Path) -> list[tuple[str, int, int]]:
    found = []
    for root, _dirs, names in os.walk(directory):
        for name in names:
            file = Path(root) / name
            relative = file.relative_to(directory).as_posix()
            if relative in (COMPLETE_MARKER, f"{COMPLETE_MARKER}.partial") or file.is_symlink():
                continue
            found.append((relative, file.stat().st_size, _crc32(file)))
    return sorted(found)


def _crc32(file: Path) -> int:
    crc = 0
    with open(file, "rb") as handle:
        while block := handle.read(_BLOCK):
            crc = zlib.crc32(block, crc)
    return crc


def entries_before_save(path: PathLike) -> list[str] | None:
    """The names in the directory ``path`` before a save into it (``None``: it does not exist), for
    :func:`discard_save`."""
    directory = Path(path)
    return sorted(entry.name for entry in directory.iterdir()) if directory.is_dir() else None


def discard_save(path: PathLike, before: list[str] | None) -> str:
    """Remove what a failed save wrote into the directory ``path``: all of it if the save made it, else
    the entries it added (files it overwrote cannot be restored, and the directory stays unmarked).
    Returns what was done, in words."""
    directory = Path(path)
    if before is None:
        shutil.rmtree(directory, ignore_errors=True)
        return f"the partly written {directory} is removed"
    kept = set(before)
    for entry in directory.iterdir() if directory.is_dir() else ():
        if entry.name not in kept:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    return f"what the save added to {directory} is removed (it is not a complete checkpoint)"
