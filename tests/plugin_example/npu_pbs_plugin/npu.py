"""The NPU as the runtime drives it: a made-up device, declared in full as a real one is.

Everything the runtime asks of a device is answered here: the ``torch.device`` its tensors live on
(DDP's, FSDP's device mesh, DeepSpeed's accelerator, the preflight's test tensors, the pre-emption
flag all take it from :meth:`root_device`), whether the ranks compute on the host's cores (the room
checks before ranks start), DDP's ``device_ids``, pinned memory, the grad scaler, selecting and
releasing the device. Its process-group backend is the rule file's (``rules/npu.toml``: gloo).

This NPU is made up so that it runs anywhere: its memory is the host's, so its tensors are CPU
tensors. Where a real NPU's class calls its driver (selecting the device, releasing its memory),
this one writes what it was asked to the file ``NPU_TRACE`` names, if any, one line per call, so
its tests can see that the runtime drove this class and not the CPU's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from runtime.accelerators.base import Accelerator

# torch is imported by the methods that use it: `resolver run`'s own process asks the class its
# facts (computes_on_cpu) without torch.
if TYPE_CHECKING:
    import torch


def _visible() -> list[str]:
    return [entry.strip() for entry in os.environ.get("NPU_VISIBLE_DEVICES", "").split(",") if entry.strip()]


def _trace(event: str) -> None:
    path = os.environ.get("NPU_TRACE")
    if path:
        with open(path, "a", encoding="utf-8") as trace:  # one short line: appends from ranks do not interleave
            trace.write(f"rank {os.environ.get('RANK', '0')} pid {os.getpid()}: {event}\n")


class NPUAccelerator(Accelerator):
    """Local rank ``i`` drives NPU ``device_ids[i]``, whose tensors are host tensors (a made-up NPU)."""

    #: The torch.device type of its tensors: the host's memory, as this NPU has no memory of its own.
    device_type = "cpu"
    #: Its ranks compute on the host's cores: one machine runs as many ranks well as it has cores.
    computes_on_cpu = True
    #: Host memory staging its tensors is its own memory: nothing to gain from pinning it.
    pin_memory = False
    #: float16 autocast here keeps float32 gradients' range: no loss scaling.
    float16_needs_grad_scaler = False

    @classmethod
    def is_available(cls) -> bool:
        return cls.device_count() > 0

    @classmethod
    def device_count(cls) -> int:
        return len(_visible())

    def root_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        import torch

        super().root_device(local_rank, device_ids)  # the local rank must have an NPU id
        return torch.device(self.device_type)  # every NPU's tensors are host tensors

    def ddp_device_ids(self, device: torch.device) -> list[int] | None:
        return None  # DDP takes a host module's own device

    def set_device(self, device: torch.device) -> None:
        _trace(f"NPUAccelerator.set_device({device})")

    def teardown(self) -> None:
        _trace("NPUAccelerator.teardown()")
