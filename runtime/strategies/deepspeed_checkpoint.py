"""DeepSpeed's checkpoint files, read the runtime's way (imported once DeepSpeed is).

DeepSpeed's own checkpoint engine loads every file with ``torch.load(weights_only=False)``: a planted
``mp_rank_00_model_states.pt`` runs code. While the strategy loads, the engine's ``checkpoint_engine`` is
one whose ``load`` is :func:`runtime.checkpoint.load_torch_file`: ``weights_only=True`` (unless the
strategy's checkpoint_io trusts pickles), allowing the few plain DeepSpeed records its files hold.

A ZeRO checkpoint (stages 1 to 3) holds one optimizer partition per data-parallel rank and loads only on
that many ranks; :func:`check_world_size` says so before DeepSpeed's own load fails, with the conversion
to DeepSpeed's universal checkpoint, which loads on any number.
"""

from __future__ import annotations

import importlib
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

from runtime.checkpoint import load_torch_file
from runtime.errors import CheckpointError

__all__ = ["check_world_size", "deepspeed_records", "safe_checkpoint_engine"]

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


# One optimizer partition per data-parallel rank: zero_pp_rank_{rank}_mp_rank_{model rank}_optim_states.pt
# (bf16_zero_pp_rank_... under bf16), in the folder of the tag that ``latest`` names.
_PARTITION = re.compile(r"zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")


def saved_world_size(directory: Path) -> tuple[str, int] | None:
    """The tag ``directory/latest`` names and how many ranks wrote its ZeRO partitions (``None``: no tag,
    or no partitions, as without ZeRO, whose checkpoint loads on any number of ranks)."""
    latest = directory / "latest"
    if not latest.is_file():
        return None
    tag = latest.read_text().strip()
    ranks = {
        int(found.group(1))
        for file in (directory / tag).glob("*_optim_states.pt")
        if (found := _PARTITION.search(file.name))
    }
    return (tag, max(ranks) + 1) if ranks else None


def check_world_size(directory: Path, world_size: int) -> None:
    """Raise :class:`~runtime.errors.CheckpointError` if ZeRO partitions of another number of ranks than
    ``world_size`` are in ``directory``, naming both and the command that converts it."""
    saved = saved_world_size(directory)
    if saved is None or saved[1] == world_size:
        return
    tag, ranks = saved
    universal = directory.with_name(f"{directory.name}-universal")
    command = shlex.join(
        [
            "python", "-m", "deepspeed.checkpoint.ds_to_universal", "--inject_missing_state",
            "--input_folder", str(directory / tag), "--output_folder", str(universal / tag),
        ]
    )  # fmt: skip
    raise CheckpointError(
        str(directory),
        f"the DeepSpeed checkpoint at {directory} was saved by {ranks} ranks and this run has {world_size}: a ZeRO "
        "checkpoint holds one optimizer partition per rank and loads only on as many ranks as saved it",
        hint=f"run on {ranks} ranks, or convert it once to DeepSpeed's universal checkpoint, which loads on any "
        f"number of ranks (optimizers of Adam's family: the conversion reads exp_avg and exp_avg_sq): {command}; then "
        f"load {universal} with the strategy option extra_config={{'checkpoint': {{'load_universal': True}}}}",
    )
