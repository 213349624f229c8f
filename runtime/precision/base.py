"""Precision: how modules, inputs, the forward pass and the backward pass treat dtypes."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch

if TYPE_CHECKING:
    from runtime.accelerators.base import Accelerator

__all__ = ["Precision"]

#: What :meth:`Precision.forward_context` returns: a no-op context manager, reusable and re-entrant.
NO_CONTEXT = contextlib.nullcontext()


class Precision:
    """The neutral precision: full float32, nothing cast, plain backward and step.

    Subclasses (registered with :func:`runtime.register_precision`) override the hooks below.
    A precision is made for the run's ``accelerator``, which it asks for device facts (whether
    float16 needs a gradient scaler); ``device_type`` is its ``torch.device`` type, for autocast.
    """

    #: Whether the computation runs in a float narrower than float32 (float16, bfloat16): its results
    #: agree with a float32 computation only to that float's rounding.
    reduced: ClassVar[bool] = False

    def __init__(self, accelerator: Accelerator) -> None:
        self.accelerator = accelerator
        self.device_type: str = accelerator.device_type

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast a module's parameters and buffers as this precision requires (in place)."""
        return module

    def convert_input(self, data: Any) -> Any:
        """Cast floating-point input tensors as this precision requires."""
        return data

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Create modules inside this to get parameters in the right dtype from the start."""
        return contextlib.nullcontext()

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Run the forward pass (and loss) inside this."""
        return NO_CONTEXT  # entered once a step: one shared no-op context, not a new one each time

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Back-propagate ``loss``."""
        loss.backward(**kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> Any:
        """Step ``optimizer`` (a scaler may skip the step after inf/nan gradients)."""
        return optimizer.step(**kwargs)

    def state_dict(self) -> dict[str, Any]:
        """State to checkpoint (e.g. a gradient scaler's); empty when there is none."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def teardown(self) -> None:  # noqa: B027 (optional hook)
        """Drop the state of the run that ended (a scaler's), so the next run starts afresh."""
