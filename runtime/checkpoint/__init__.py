"""Checkpoints: how files are written and read (:mod:`~runtime.checkpoint.files`), the mark a directory
gets once every rank wrote its part (:mod:`~runtime.checkpoint.directories`), and which one to resume
from (:mod:`~runtime.checkpoint.latest`). ``runtime.checkpoint.dcp`` (imported by FSDP only) reads
torch.distributed.checkpoint directories safely."""

from __future__ import annotations

from runtime.checkpoint.directories import (
    COMPLETE_MARKER,
    check_directory,
    directory_problem,
    discard_save,
    entries_before_save,
    mark_complete,
    mark_incomplete,
)
from runtime.checkpoint.files import OPT_IN, CheckpointIO, PathLike, TorchCheckpointIO, load_torch_file, no_space
from runtime.checkpoint.latest import latest_checkpoint

__all__ = [
    "COMPLETE_MARKER",
    "OPT_IN",
    "CheckpointIO",
    "PathLike",
    "TorchCheckpointIO",
    "check_directory",
    "directory_problem",
    "discard_save",
    "entries_before_save",
    "latest_checkpoint",
    "load_torch_file",
    "mark_complete",
    "mark_incomplete",
    "no_space",
]
