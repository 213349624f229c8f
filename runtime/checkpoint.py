"""CheckpointIO: how checkpoint files are written and read (which rank does it is the strategy's call)."""

from __future__ import annotations

import glob
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "COMPLETE_MARKER",
    "CheckpointIO",
    "TorchCheckpointIO",
    "latest_checkpoint",
    "mark_complete",
    "mark_incomplete",
]

PathLike = str | os.PathLike[str]

_umask_lock = threading.Lock()


def _umask() -> int:
    """The process's umask (reading it means setting it: done under a lock, restored at once)."""
    with _umask_lock:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


class CheckpointIO(ABC):
    """Reads and writes checkpoint files; knows nothing about ranks."""

    @abstractmethod
    def save(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        """Write ``checkpoint`` to ``path``."""

    @abstractmethod
    def load(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        """Read the checkpoint at ``path``, with tensors mapped to ``map_location``."""

    def remove(self, path: PathLike) -> None:
        """Delete the checkpoint at ``path`` (no error if it is gone)."""
        Path(path).unlink(missing_ok=True)


class TorchCheckpointIO(CheckpointIO):
    """``torch.save``/``torch.load`` files, written atomically (a crash never leaves half a file).

    ``weights_only=True`` (the default) loads only tensors and plain containers/numbers/strings,
    which is safe for files from elsewhere; pass ``False`` to load arbitrary pickled objects.
    """

    def __init__(self, *, weights_only: bool = True) -> None:
        self.weights_only = weights_only

    def save(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        """Write to a temporary file created exclusively in the target's folder, then rename it.

        The temporary name is unpredictable and the file is created with ``O_EXCL`` (mode 0600
        until written, then the mode a new file gets under the umask), so a file or symlink planted
        in the folder cannot redirect the write; the rename is atomic, so readers see the old
        checkpoint or the new one, never half of one.
        """
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        for stale in target.parent.glob(f".{glob.escape(target.name)}.*.partial"):
            stale.unlink(missing_ok=True)  # left by a writer that was killed mid-write (no one else writes this name)
        descriptor, partial = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
                os.fchmod(handle.fileno(), 0o666 & ~_umask())
            os.replace(partial, target)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise

    def load(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        source = Path(path)
        if not source.is_file():
            raise FileNotFoundError(f"no checkpoint at {source}")
        data: dict[str, Any] = torch.load(source, map_location=map_location, weights_only=self.weights_only)
        return data


#: The file a checkpoint directory (DeepSpeed's, FSDP's sharded one) gets once every rank has written
#: its part: rank 0 writes it last, after a barrier, and removes it before a new save into the directory.
COMPLETE_MARKER = ".complete"


def mark_incomplete(path: PathLike) -> None:
    """Before a save into the directory ``path``: it is not a complete checkpoint until :func:`mark_complete`."""
    (Path(path) / COMPLETE_MARKER).unlink(missing_ok=True)


def mark_complete(path: PathLike) -> None:
    """After every rank wrote its part of the directory ``path``: it is a complete checkpoint (atomically)."""
    marker = Path(path) / COMPLETE_MARKER
    partial = marker.with_name(f"{COMPLETE_MARKER}.partial")
    partial.write_text("every rank finished writing this checkpoint\n")
    os.replace(partial, marker)


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
