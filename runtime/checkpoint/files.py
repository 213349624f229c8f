"""CheckpointIO: how checkpoint files are written and read (which rank does it is the strategy's call)."""

from __future__ import annotations

import glob
import os
import pickle
import re
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from runtime.errors import CheckpointDamagedError, CheckpointUntrustedError

__all__ = ["OPT_IN", "CheckpointIO", "PathLike", "TorchCheckpointIO", "load_torch_file", "refused_object"]

PathLike = str | os.PathLike[str]

#: How a user loads a checkpoint they trust that holds more than tensors and plain data: the one opt-in,
#: for single files, FSDP's sharded directories and DeepSpeed's alike.
OPT_IN = "strategy.checkpoint_io = runtime.TorchCheckpointIO(weights_only=False) set before strategy.load_checkpoint"

_umask_lock = threading.Lock()


def _umask() -> int:
    """The process's umask (reading it means setting it: done under a lock, restored at once)."""
    with _umask_lock:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


class CheckpointIO(ABC):
    """Reads and writes checkpoint files; knows nothing about ranks."""

    #: ``True``: loading builds only tensors and plain data (containers, numbers, strings), never an
    #: arbitrary pickled object, so a planted file cannot run code. The strategies' own directory
    #: checkpoints (FSDP's sharded one, DeepSpeed's) follow this setting of the strategy's checkpoint_io too.
    weights_only: bool = True

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
    which is safe for files from elsewhere; pass ``False`` to load arbitrary pickled objects from
    files you trust (this also opens FSDP's sharded and DeepSpeed's checkpoints that way).
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
        data: dict[str, Any] = load_torch_file(source, weights_only=self.weights_only, map_location=map_location)
        return data


def load_torch_file(
    path: Path,
    *,
    weights_only: bool,
    map_location: Any = None,
    checkpoint: Path | None = None,
    allowed: Sequence[type] = (),
) -> Any:
    """``torch.load`` of ``path`` (a part of the checkpoint ``checkpoint``, or the whole of it), refused
    with :class:`~runtime.errors.CheckpointUntrustedError` when ``weights_only`` and the file holds more than
    tensors, plain data and the ``allowed`` classes (an engine's own plain records)."""
    whole = checkpoint if checkpoint is not None else path
    part = os.path.relpath(path, whole) if checkpoint is not None else str(path)
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        # torch's text advises weights_only=False (any file, trusted or not): the runtime's opt-in replaces it
        if weights_only:
            raise CheckpointUntrustedError(str(whole), part, refused_object(exc), OPT_IN) from None
        raise CheckpointDamagedError(
            str(whole), part, f"cannot be unpickled ({exc})", "load an earlier checkpoint"
        ) from None


def refused_object(exc: BaseException) -> str:
    """What torch's safe unpickler refused, in words (from its message: the global it would have loaded)."""
    found = re.search(r"GLOBAL (\S+) was not an allowed global", str(exc))
    if found:
        return f"a pickled reference to {found.group(1)}"
    return "pickled objects other than tensors and plain data"
