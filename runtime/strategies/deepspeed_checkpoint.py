"""DeepSpeed's checkpoint files, read the runtime's way (imported once DeepSpeed is).

DeepSpeed's own checkpoint engine loads every file with ``torch.load(weights_only=False)``: a planted
``mp_rank_00_model_states.pt`` runs code. While the strategy loads, the engine's ``checkpoint_engine`` is
one whose ``load`` is :func:`runtime.checkpoint.load_torch_file`: ``weights_only=True`` (unless the
strategy's checkpoint_io trusts pickles), allowing the few plain DeepSpeed records its files hold.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

from runtime.checkpoint import load_torch_file

__all__ = ["deepspeed_records", "safe_checkpoint_engine"]

# The classes DeepSpeed's checkpoint files hold besides tensors and plain data (0.19: the loss scaler in the
# optimizer states, ZeRO's stage as an enum, the fragment addresses of stage 1 and 2's parameter map). Plain
# records: building one runs no code of the file's choosing.
_RECORDS = (
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
    ("deepspeed.utils.tensor_fragment", "fragment_address"),
)


def deepspeed_records() -> list[type]:
    """Those of :data:`_RECORDS` this DeepSpeed has."""
    found = []
    for module_name, name in _RECORDS:
        try:
            found.append(getattr(importlib.import_module(module_name), name))
        except (ImportError, AttributeError):
            continue
    return found


class _SafeEngine(TorchCheckpointEngine):  # type: ignore[misc]
    def __init__(self, directory: Path, weights_only: bool, zipfile_serialization: bool) -> None:
        super().__init__(None)
        self.zipfile_serialization = zipfile_serialization  # as the engine's own (zip: CRC-checked records)
        self._directory = directory
        self._weights_only = weights_only
        self._records = deepspeed_records()
        #: The first write that failed (the rest are skipped): the strategy tells every rank after the save.
        self.failure: BaseException | None = None

    def save(self, state_dict: Any, path: str) -> None:
        if self.failure is not None:
            return
        try:
            # through a Python file, not torch's C++ stream, whose failure says "iostream error" and drops ENOSPC
            with open(path, "wb") as handle:
                torch.save(state_dict, handle, _use_new_zipfile_serialization=self.zipfile_serialization)
        except Exception as exc:  # noqa: BLE001 (raised on every rank by the strategy once all are done)
            self.failure = exc
            Path(path).unlink(missing_ok=True)

    def copy_recovery_scripts(self, copy: Any, save_path: str) -> None:
        """DeepSpeed copies its zero_to_fp32.py scripts outside its checkpoint engine (rank 0): a failure
        there is noted like a failed write."""
        if self.failure is not None:
            return
        try:
            copy(save_path)
        except OSError as exc:
            self.failure = exc

    def load(self, path: str, map_location: Any = None) -> Any:
        return load_torch_file(
            Path(path),
            weights_only=self._weights_only,
            map_location=map_location,
            checkpoint=self._directory,
            allowed=self._records,
        )


@contextmanager
def safe_checkpoint_engine(engine: Any, directory: Path, *, weights_only: bool) -> Iterator[_SafeEngine]:
    """While inside, ``engine`` loads its files through :func:`runtime.checkpoint.load_torch_file`, and a
    failed write is noted in the yielded engine's ``failure`` instead of raised."""
    own = engine.checkpoint_engine
    swapped = _SafeEngine(directory, weights_only, bool(getattr(own, "zipfile_serialization", True)))
    engine.checkpoint_engine = swapped
    copy = getattr(engine, "_copy_recovery_script", None)
    if copy is not None:
        engine._copy_recovery_script = lambda save_path: swapped.copy_recovery_scripts(copy, save_path)
    try:
        yield swapped
    finally:
        engine.checkpoint_engine = own
        if copy is not None:
            del engine._copy_recovery_script  # the class's own again
