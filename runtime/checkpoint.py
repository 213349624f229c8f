"""CheckpointIO: how checkpoint files are written and read (which rank does it is the strategy's call)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import torch

__all__ = ["CheckpointIO", "TorchCheckpointIO"]

PathLike = str | os.PathLike[str]


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
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        torch.save(checkpoint, partial)
        os.replace(partial, target)

    def load(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        source = Path(path)
        if not source.is_file():
            raise FileNotFoundError(f"no checkpoint at {source}")
        data: dict[str, Any] = torch.load(source, map_location=map_location, weights_only=self.weights_only)
        return data
