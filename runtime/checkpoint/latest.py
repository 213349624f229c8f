"""``latest_checkpoint``: the newest complete checkpoint in a folder."""

from __future__ import annotations

from pathlib import Path

from runtime.checkpoint.directories import COMPLETE_MARKER
from runtime.checkpoint.files import PathLike

__all__ = ["latest_checkpoint"]


def latest_checkpoint(folder: PathLike) -> Path | None:
    """The newest complete checkpoint among the entries of ``folder``, or ``None`` (also when it is missing).

    A checkpoint file is complete once it has its name (``TorchCheckpointIO`` writes a hidden temporary
    file and renames it); a checkpoint directory once it holds :data:`COMPLETE_MARKER`. Hidden entries
    (temporary files) and directories without the marker (a save that was cut short) are skipped. Newest
    means completed last (the file's, or the marker's, modification time; then the name).
    """
    base = Path(folder)
    if not base.is_dir():
        return None
    found: list[tuple[int, str, Path]] = []
    for entry in base.iterdir():
        if entry.name.startswith("."):
            continue
        evidence = entry / COMPLETE_MARKER if entry.is_dir() else entry
        try:
            found.append((evidence.stat().st_mtime_ns, entry.name, entry))
        except FileNotFoundError:
            continue  # a directory without its marker: not complete
    return max(found)[2] if found else None
