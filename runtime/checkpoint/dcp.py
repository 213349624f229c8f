"""torch.distributed.checkpoint (DCP) directories, read the safe way, with its failures as the runtime's errors.

torch reads a DCP directory's ``.metadata`` with plain ``pickle.load`` and every non-tensor item of the
shards with ``torch.load(weights_only=False)``: a planted file there runs code. Unless the strategy's
checkpoint_io trusts pickles, ``.metadata`` is read here with an unpickler that builds only DCP's own
metadata records, and non-tensor items with ``weights_only=True`` (tensors torch already loads so).
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from runtime.checkpoint.files import DAMAGED_HINT, OPT_IN, refused_object
from runtime.errors import CheckpointDamagedError, CheckpointError, CheckpointUntrustedError

__all__ = ["METADATA", "load_dcp", "rank_failures"]

#: The file of a DCP directory that describes where every item is.
METADATA = ".metadata"


# What DCP's metadata file holds (torch 2.x): its records, the shapes, dtypes and layouts in them, the path
# it was saved to.
_METADATA_GLOBALS = frozenset(
    {
        *(
            ("torch.distributed.checkpoint.metadata", name)
            for name in (
                "Metadata",
                "TensorStorageMetadata",
                "BytesStorageMetadata",
                "ChunkStorageMetadata",
                "TensorProperties",
                "MetadataIndex",
                "StorageMeta",
                "_MEM_FORMAT_ENCODING",
            )
        ),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("collections", "OrderedDict"),
        *(("pathlib", name) for name in ("Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")),
    }
)


class _Refused(pickle.UnpicklingError):
    """A global the metadata unpickler does not build."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _METADATA_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _Refused(f"GLOBAL {module}.{name} was not an allowed global")


def _read_metadata(path: Path, weights_only: bool) -> Metadata:
    file = path / METADATA
    try:
        with open(file, "rb") as handle:
            metadata = _MetadataUnpickler(handle).load() if weights_only else pickle.load(handle)  # noqa: S301
    except FileNotFoundError:
        raise CheckpointDamagedError(str(path), METADATA, "is missing", DAMAGED_HINT) from None
    except _Refused as exc:
        raise CheckpointUntrustedError(str(path), METADATA, refused_object(exc), OPT_IN) from None
    except Exception as exc:  # noqa: BLE001 (whatever malformed bytes make the unpickler raise)
        problem = f"cannot be read ({type(exc).__name__}: {exc})"
        raise CheckpointDamagedError(str(path), METADATA, problem, DAMAGED_HINT) from None
    if not isinstance(metadata, Metadata):
        problem = f"holds a {type(metadata).__name__}, not DCP's metadata"
        raise CheckpointDamagedError(str(path), METADATA, problem, DAMAGED_HINT)
    return metadata


class _Reader(FileSystemReader):
    """DCP's file reader, with the metadata read beforehand (safely, and so that a failure to read it is
    the runtime's error on every rank, not DCP's fallback to per-rank metadata files)."""

    def __init__(self, path: Path, metadata: Metadata) -> None:
        super().__init__(os.fspath(path))
        self._metadata = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if getattr(self._metadata, "storage_meta", None) is None:
            self._metadata.storage_meta = StorageMeta()
        self._metadata.storage_meta.load_id = self.load_id  # type: ignore[union-attr]
        return self._metadata


class _Planner(DefaultLoadPlanner):
    """DCP's load planner, reading non-tensor items with ``weights_only=True`` unless pickles are trusted."""

    def __init__(self, path: Path, weights_only: bool) -> None:
        super().__init__()
        self._path = path
        self._weights_only = weights_only

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        if self._weights_only:
            try:
                item = torch.load(value, weights_only=True)
            except pickle.UnpicklingError as exc:
                part = self.metadata.storage_data[read_item.storage_index].relative_path  # type: ignore[union-attr]
                raise CheckpointUntrustedError(str(self._path), part, refused_object(exc), OPT_IN) from None
            # Plain data now: written again, the base class's unrestricted load of it builds nothing else.
            value = io.BytesIO()
            torch.save(item, value)
            value.seek(0)
        super().load_bytes(read_item, value)


def load_dcp(state_dict: dict[str, Any], path: Path, *, weights_only: bool) -> None:
    """``dcp.load`` of the directory ``path`` into ``state_dict`` (in place), the safe way unless not
    ``weights_only``; a failure on any rank is raised on every rank as a :class:`CheckpointError`."""
    metadata = _read_metadata(path, weights_only)
    _check_extents(path, metadata)
    try:
        dcp.load(state_dict, storage_reader=_Reader(path, metadata), planner=_Planner(path, weights_only))
    except CheckpointException as exc:
        raise _load_error(path, rank_failures(exc)) from None


def _check_extents(path: Path, metadata: Metadata) -> None:
    """Every shard file the metadata names is there and long enough for its items (a check that needs no
    list of checksums, for directories an older version marked, or none marked)."""
    needed: dict[str, int] = {}
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        relative = getattr(info, "relative_path", None)
        if isinstance(relative, str):
            needed[relative] = max(needed.get(relative, 0), int(info.offset) + int(info.length))
    for relative, end in sorted(needed.items()):
        try:
            size = (path / relative).stat().st_size
        except FileNotFoundError:
            raise CheckpointDamagedError(str(path), relative, "is missing", DAMAGED_HINT) from None
        if size < end:
            problem = f"is cut short: {size} bytes, its items end at byte {end}"
            raise CheckpointDamagedError(str(path), relative, problem, DAMAGED_HINT)


def rank_failures(exc: CheckpointException) -> dict[int, BaseException]:
    """Each failed rank's exception in a DCP ``CheckpointException`` (a ``BaseException``, which the
    runtime's callers would take for an interruption)."""
    failures: dict[int, BaseException] = {}
    for rank, failure in sorted(exc.failures.items()):
        failures[rank] = failure[0] if isinstance(failure, tuple) else failure  # (exception, stack) pairs
    return failures


def _load_error(path: Path, failures: dict[int, BaseException]) -> CheckpointError:
    for failure in failures.values():
        if isinstance(failure, CheckpointError):
            return failure
    rank, failure = next(iter(failures.items()))
    if isinstance(failure, FileNotFoundError) and failure.filename:
        return CheckpointDamagedError(str(path), os.path.relpath(failure.filename, path), "is missing", DAMAGED_HINT)
    # no torch text about weights_only=False, whatever torch's reader said
    detail = (
        type(failure).__name__
        if isinstance(failure, pickle.UnpicklingError)
        else f"{type(failure).__name__}: {failure}"
    )
    return CheckpointDamagedError(str(path), str(path), f"could not be read on rank {rank} ({detail})", DAMAGED_HINT)
