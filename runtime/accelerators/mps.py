"""The Apple MPS accelerator."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from runtime.accelerators.base import Accelerator

__all__ = ["MPSAccelerator"]


class MPSAccelerator(Accelerator):
    """Apple silicon GPU through Metal; there is exactly one device."""

    device_type = "mps"

    @classmethod
    def is_available(cls) -> bool:
        return torch.backends.mps.is_available()

    @classmethod
    def device_count(cls) -> int:
        return 1 if cls.is_available() else 0

    def root_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        super().root_device(local_rank, device_ids)
        return torch.device("mps", 0)
