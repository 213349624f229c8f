"""The Apple MPS accelerator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from runtime.accelerators.base import Accelerator

# torch is imported by the methods that use it: `resolver run`'s own process asks the classes
# their facts (computes_on_cpu) without torch.
if TYPE_CHECKING:
    import torch

__all__ = ["MPSAccelerator"]


class MPSAccelerator(Accelerator):
    """Apple silicon GPU through Metal; there is exactly one device."""

    device_type = "mps"

    @classmethod
    def is_available(cls) -> bool:
        import torch

        return torch.backends.mps.is_available()

    @classmethod
    def device_count(cls) -> int:
        return 1 if cls.is_available() else 0

    def root_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        import torch

        super().root_device(local_rank, device_ids)
        return torch.device("mps", 0)
