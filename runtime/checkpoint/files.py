"""CheckpointIO: how checkpoint files are written and read (which rank does it is the strategy's call)."""

from __future__ import annotations

import errno
import glob
import os
import pickle
import re
import tempfile
import threading
import zipfile
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from runtime.errors import CheckpointDamagedError, CheckpointNoSpaceError, CheckpointUntrustedError

__all__ = [
    "DAMAGED_HINT",
    "OPT_IN",
    "CheckpointIO",
    "PathLike",
    "TorchCheckpointIO",
    "load_torch_file",
    "no_space",
    "refused_object",
    "torch_file_problem",
]

PathLike = str | os.PathLike[str]

#: How a user loads a checkpoint they trust that holds more than tensors and plain data: the one opt-in,
#: for single files, FSDP's sharded directories and DeepSpeed's alike.
OPT_IN = "strategy.checkpoint_io = runtime.TorchCheckpointIO(weights_only=False) set before strategy.load_checkpoint"

#: What to do about a damaged checkpoint.
DAMAGED_HINT = "load an earlier checkpoint (strategy.latest_checkpoint(folder) returns the newest that verifies)"

# torch.save's format before torch 1.6 (not a zip archive): a pickled magic number first.
_LEGACY_START = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_ZIP_START = b"PK\x03\x04"

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

    def verify(self, path: PathLike) -> str | None:
        """Why the checkpoint file at ``path`` is not whole (``"is empty (0 bytes)"``), or ``None``; this
        base class cannot tell, and says ``None``. ``latest_checkpoint`` skips a file that is not whole."""
        return None


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
        except BaseException as exc:
            Path(partial).unlink(missing_ok=True)
            cause = no_space(exc)
            if cause is not None:  # torch says "unexpected pos 5696 vs 5588", the cause only in the chain
                raise CheckpointNoSpaceError(str(target), None, cause, "the partial file is removed") from exc
            raise

    def load(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        source = Path(path)
        if not source.is_file():
            raise FileNotFoundError(f"no checkpoint at {source}")
        data: dict[str, Any] = load_torch_file(source, weights_only=self.weights_only, map_location=map_location)
        return data

    def verify(self, path: PathLike) -> str | None:
        """Whether the file is a whole ``torch.save`` archive: every record's CRC-32 checked (torch's zip
        format carries one per record, so a file needs no side file to be checked)."""
        return torch_file_problem(Path(path))


def torch_file_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole ``torch.save`` file (said as the end of "the file ..."), or ``None``.

    A zip archive (torch's format since 1.6) is whole when it has its end record and every record
    matches its CRC-32; a file in torch's legacy format cannot be checked and passes.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            start = handle.read(len(_LEGACY_START))
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if size == 0:
        return "is empty (0 bytes)"
    if start.startswith(_LEGACY_START):
        return None
    if not zipfile.is_zipfile(path):
        if start.startswith(_ZIP_START):
            return f"is cut short ({size} bytes): the end of its zip archive (torch.save's format) is missing"
        return f"is not a torch checkpoint ({size} bytes, neither torch.save's zip archive nor its legacy format)"
    try:
        with zipfile.ZipFile(path) as archive:
            if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in archive.namelist()):
                return "is a zip archive without torch's data.pkl record: not a torch checkpoint"
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, ValueError) as exc:
        return f"is not a whole zip archive ({exc})"
    if bad is not None:
        return f"fails the CRC-32 check of its record {bad}: its bytes changed after it was written"
    return None


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
    problem = torch_file_problem(path)
    if problem is not None:
        raise CheckpointDamagedError(str(whole), part, problem, DAMAGED_HINT)
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        # torch's text advises weights_only=False (any file, trusted or not): the runtime's opt-in replaces it
        if weights_only:
            raise CheckpointUntrustedError(str(whole), part, refused_object(exc), OPT_IN) from None
        raise CheckpointDamagedError(str(whole), part, f"cannot be unpickled ({exc})", DAMAGED_HINT) from None
    except EOFError:  # a legacy-format file cut short (a zip archive is checked above)
        raise CheckpointDamagedError(str(whole), part, "ends early", DAMAGED_HINT) from None


def no_space(exc: BaseException) -> str | None:
    """The out-of-space error (``ENOSPC``, ``EDQUOT``) in ``exc`` or its causes, in words, or ``None``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"{current.strerror}" + (f" writing {current.filename}" if current.filename else "")
        current = current.__cause__ or current.__context__
    return None


def refused_object(exc: BaseException) -> str:
    """What torch's safe unpickler refused, in words (from its message: the global it would have loaded)."""
    found = re.search(r"GLOBAL (\S+) was not an allowed global", str(exc))
    if found:
        return f"a pickled reference to {found.group(1)}"
    return "pickled objects other than tensors and plain data"
