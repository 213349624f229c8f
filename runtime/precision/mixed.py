"""``16-mixed`` and ``bf16-mixed``: float32 parameters, autocast in the forward pass."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from runtime.precision.base import Precision

if TYPE_CHECKING:
    from runtime.accelerators.base import Accelerator

__all__ = ["BFloat16MixedPrecision", "Float16MixedPrecision", "MixedPrecision"]


class MixedPrecision(Precision):
    """Parameters stay float32; ops inside :meth:`forward_context` autocast to ``dtype``.

    A gradient scaler guards float16 against underflowing gradients where the accelerator says it
    needs one (``float16_needs_grad_scaler``: CUDA); bfloat16 has float32's exponent range and
    needs none.
    """

    dtype: ClassVar[torch.dtype]
    reduced = True

    def __init__(self, accelerator: Accelerator) -> None:
        super().__init__(accelerator)
        self.scaler: torch.amp.GradScaler | None = None
        self.teardown()

    def teardown(self) -> None:
        """A new scaler: the next run's scale starts where a new run's does, not where this one's ended."""
        if self.dtype == torch.float16 and self.accelerator.float16_needs_grad_scaler:
            self.scaler = torch.amp.GradScaler(self.device_type)

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
    """float16 autocast (with loss scaling where the accelerator needs it: CUDA)."""

    dtype = torch.float16


class BFloat16MixedPrecision(MixedPrecision):
    """bfloat16 autocast."""

    dtype = torch.bfloat16
