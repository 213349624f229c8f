"""Accelerator: device logic only (availability, counting, picking and selecting a device), and the
facts about its device kind that strategies and precisions ask for (DDP's ``device_ids``, pinned
host memory, loss scaling for float16), so a new accelerator declares them in one place.

Everything about ranks, collectives and checkpoints belongs to the strategy, which owns an
accelerator; the accelerator passes nothing through to it. The process-group backend is not here:
the rules resolve it (``process_group_backend`` in the config) and the runtime reads the config.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

# torch is imported by the methods that use it: `resolver run`'s own process asks the classes
# their facts (computes_on_cpu) without torch.
if TYPE_CHECKING:
    import torch

__all__ = ["Accelerator"]


class Accelerator(ABC):
    """One kind of device. Subclasses are registered with :func:`runtime.register_accelerator`."""

    #: The ``torch.device`` type of this accelerator's devices (``"cpu"``, ``"cuda"``, ...).
    device_type: ClassVar[str]
    #: Whether host memory that stages tensors for this device (FSDP's CPU offload) is pinned
    #: (page-locked), which lets copies to the device run asynchronously. Only a device with memory
    #: of its own and a driver that pins gains from it.
    pin_memory: ClassVar[bool] = False
    #: Whether float16 autocast (``16-mixed``) on this device scales the loss with a
    #: ``torch.amp.GradScaler``, against float16 gradients underflowing to zero.
    float16_needs_grad_scaler: ClassVar[bool] = False
    #: Whether the processes compute on the host's CPU cores, so that how many ranks one machine runs
    #: well is bounded by its cores (the room checks before ranks start ask it).
    computes_on_cpu: ClassVar[bool] = False

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
        import torch

        if not 0 <= local_rank < len(device_ids):
            raise ValueError(f"local rank {local_rank} has no device: the config lists device_ids {list(device_ids)}")
        return torch.device(self.device_type, device_ids[local_rank])

    def ddp_device_ids(self, device: torch.device) -> list[int] | None:
        """``DistributedDataParallel``'s ``device_ids`` for a module on ``device``: ``None`` (the
        module's own device, as DDP wants for CPU modules) unless the device kind needs naming."""
        return None

    def set_device(self, device: torch.device) -> None:  # noqa: B027 (optional hook)
        """Make ``device`` the current device of this process (no-op where there is none)."""

    def teardown(self) -> None:  # noqa: B027 (optional hook)
        """Release per-process device state (no-op by default)."""
