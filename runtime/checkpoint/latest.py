"""``latest_checkpoint``: the newest checkpoint in a folder that is complete and verifies."""

from __future__ import annotations

import sys
from pathlib import Path

from runtime.checkpoint.directories import COMPLETE_MARKER, directory_problem
from runtime.checkpoint.files import CheckpointIO, PathLike, TorchCheckpointIO

__all__ = ["latest_checkpoint"]


def latest_checkpoint(
    folder: PathLike, checkpoint_io: CheckpointIO | None = None, *, report: bool = True
) -> Path | None:
    """The newest checkpoint among the entries of ``folder`` that verifies, or ``None`` (also when it is missing).

    A checkpoint file verifies when ``checkpoint_io.verify`` finds it whole (``TorchCheckpointIO``, the
    default: a zip archive whose records match their CRC-32; it gets its name only once written, by a
    rename); a checkpoint directory when it holds :data:`COMPLETE_MARKER` and every file that lists is
    there with its size and CRC-32. Hidden entries (temporary files) are passed over. Newest means
    completed last (the file's, or the mark's, modification time; then the name). With ``report``, each
    newer entry skipped, and why, is said on stderr.
    """
    base = Path(folder)
    if not base.is_dir():
        return None
    verifier = checkpoint_io if checkpoint_io is not None else TorchCheckpointIO()
    candidates: list[tuple[int, str, Path]] = []
    for entry in base.iterdir():
        if entry.name.startswith("."):
            continue
        evidence = entry / COMPLETE_MARKER if entry.is_dir() else entry
        try:
            candidates.append((evidence.stat().st_mtime_ns, entry.name, entry))
        except FileNotFoundError:  # a directory without its mark: by the directory's own time
            try:
                candidates.append((entry.stat().st_mtime_ns, entry.name, entry))
            except FileNotFoundError:
                continue
    for _, _, entry in sorted(candidates, reverse=True):
        if entry.is_dir():
            found = directory_problem(entry)
            problem = None if found is None else f"its {found[0]} {found[1]}"
        else:
            problem = verifier.verify(entry)
            problem = None if problem is None else f"it {problem}"
        if problem is None:
            return entry
        if report:
            print(f"latest_checkpoint: skipped {entry}: {problem}", file=sys.stderr, flush=True)
    return None
