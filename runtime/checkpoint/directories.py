"""Checkpoint directories (DeepSpeed's, FSDP's sharded one): the mark rank 0 adds once every rank wrote."""

from __future__ import annotations

import os
from pathlib import Path

from runtime.checkpoint.files import PathLike

__all__ = ["COMPLETE_MARKER", "mark_complete", "mark_incomplete"]

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
