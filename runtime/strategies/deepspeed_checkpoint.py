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
    def __init__(self, directory: Path, weights_only: bool) -> None:
        super().__init__(None)
        self._directory = directory
        self._weights_only = weights_only
        self._records = deepspeed_records()

    def load(self, path: str, map_location: Any = None) -> Any:
        return load_torch_file(
            Path(path),
            weights_only=self._weights_only,
            map_location=map_location,
            checkpoint=self._directory,
            allowed=self._records,
        )


@contextmanager
def safe_checkpoint_engine(engine: Any, directory: Path, *, weights_only: bool) -> Iterator[None]:
    """While inside, ``engine`` loads its files through :func:`runtime.checkpoint.load_torch_file`."""
    own = engine.checkpoint_engine
    engine.checkpoint_engine = _SafeEngine(directory, weights_only)
    try:
        yield
    finally:
        engine.checkpoint_engine = own
