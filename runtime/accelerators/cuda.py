"""The CUDA accelerator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.accelerators.base import Accelerator

# torch is imported by the methods that use it: `resolver run`'s own process asks the classes
# their facts (computes_on_cpu) without torch.
if TYPE_CHECKING:
    import torch

__all__ = ["CUDAAccelerator"]


class CUDAAccelerator(Accelerator):
    """NVIDIA (or ROCm) GPUs; local rank ``i`` drives ``cuda:device_ids[i]``."""

    device_type = "cuda"
    pin_memory = True
    float16_needs_grad_scaler = True

    @classmethod
    def is_available(cls) -> bool:
        import torch

        return torch.cuda.is_available()

    @classmethod
    def device_count(cls) -> int:
        import torch

        return torch.cuda.device_count()

    def ddp_device_ids(self, device: torch.device) -> list[int] | None:
        # DDP on a single-GPU module wants that GPU named.
        return [device.index]

    def set_device(self, device: torch.device) -> None:
        import torch

        if not self.is_available():
            raise RuntimeError(
                f"the config places this process on {device}, but torch sees no CUDA device "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})"
            )
        torch.cuda.set_device(device)

    def teardown(self) -> None:
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
