"""``16-mixed`` and ``bf16-mixed``: float32 parameters, autocast in the forward pass."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from runtime.precision.base import Precision

__all__ = ["BFloat16MixedPrecision", "Float16MixedPrecision", "MixedPrecision"]


class MixedPrecision(Precision):
    """Parameters stay float32; ops inside :meth:`forward_context` autocast to ``dtype``.

    A gradient scaler guards float16 on CUDA against underflowing gradients; bfloat16 has
    float32's exponent range and needs none, and autocast on other devices does not use one.
    """

    dtype: ClassVar[torch.dtype]

    def __init__(self, device_type: str) -> None:
        super().__init__(device_type)
        self.scaler: torch.amp.GradScaler | None = None
        if self.dtype == torch.float16 and device_type == "cuda":
            self.scaler = torch.amp.GradScaler(device_type)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward(**kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> Any:
        if self.scaler is None:
            return optimizer.step(**kwargs)
        result = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return result

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


class Float16MixedPrecision(MixedPrecision):
    """float16 autocast (with loss scaling on CUDA)."""

    dtype = torch.float16


class BFloat16MixedPrecision(MixedPrecision):
    """bfloat16 autocast."""

    dtype = torch.bfloat16
