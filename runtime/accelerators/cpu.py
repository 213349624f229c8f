"""The CPU accelerator."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from runtime.accelerators.base import Accelerator

# torch is imported by the methods that use it: `resolver run`'s own process asks the classes
# their facts (computes_on_cpu) without torch.
if TYPE_CHECKING:
    import torch

__all__ = ["CPUAccelerator"]


class CPUAccelerator(Accelerator):
    """Processes on CPU; every local rank uses ``torch.device("cpu")``."""

    device_type = "cpu"
    computes_on_cpu = True

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def device_count(cls) -> int:
        return os.cpu_count() or 1

    def root_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        import torch

        # device_ids on CPU only count processes (0..n-1); there is one CPU device.
        super().root_device(local_rank, device_ids)
        return torch.device("cpu")
