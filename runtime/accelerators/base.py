"""Accelerator: device logic only (availability, counting, picking and selecting a device).

Everything about ranks, collectives and checkpoints belongs to the strategy, which owns an
accelerator; the accelerator passes nothing through to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import torch

__all__ = ["Accelerator"]


class Accelerator(ABC):
    """One kind of device. Subclasses are registered with :func:`runtime.register_accelerator`."""

    #: The ``torch.device`` type of this accelerator's devices (``"cpu"``, ``"cuda"``, ...).
    device_type: ClassVar[str]

    @classmethod
    @abstractmethod
    def is_available(cls) -> bool:
        """Whether this process can use the device kind at all."""

    @classmethod
    @abstractmethod
    def device_count(cls) -> int:
        """How many devices of this kind the process sees."""

    def root_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        """The device the process with ``local_rank`` drives: ``device_ids[local_rank]``."""
        if not 0 <= local_rank < len(device_ids):
            raise ValueError(f"local rank {local_rank} has no device: the config lists device_ids {list(device_ids)}")
        return torch.device(self.device_type, device_ids[local_rank])

    def set_device(self, device: torch.device) -> None:  # noqa: B027 (optional hook)
        """Make ``device`` the current device of this process (no-op where there is none)."""

    def teardown(self) -> None:  # noqa: B027 (optional hook)
        """Release per-process device state (no-op by default)."""
