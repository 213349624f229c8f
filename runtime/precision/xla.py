"""Precision on XLA: the run's precision, with the optimizer step taken through torch_xla."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
import torch_xla.core.xla_model as xm

from runtime.errors import RuntimeConfigError
from runtime.precision.base import NO_CONTEXT, Precision
from runtime.precision.mixed import MixedPrecision

__all__ = ["XLAPrecision"]

# float64 is emulated or missing on TPUs; autocast has no XLA scaler path here.
_UNSUPPORTED_DTYPES = (torch.float64,)


class XLAPrecision(Precision):
    """Wraps the config's precision (``32-true``, ``16-true`` or ``bf16-true``) for XLA replicas.

    Casting modules and inputs is the wrapped precision's; :meth:`optimizer_step` goes through
    ``xm.optimizer_step``, which averages the gradients over all replicas before stepping and
    ends the step's graph, so every replica applies the same update.
    """

    def __init__(self, inner: Precision) -> None:
        super().__init__(inner.accelerator)  # the xla strategy runs on the xla accelerator only (rules)
        dtype = getattr(inner, "dtype", None)
        if isinstance(inner, MixedPrecision) or dtype in _UNSUPPORTED_DTYPES:
            raise RuntimeConfigError(
                f"precision {type(inner).__name__} is not supported on XLA",
                hint="XLA takes '32-true', '16-true' or 'bf16-true'",
            )
        self.inner = inner
        # The precisions XLA takes back-propagate the loss as it is (no scaler); a subclass may not.
        self._inner_backward_is_plain = type(inner).backward is Precision.backward
        self._inner_forward_is_plain = type(inner).forward_context is Precision.forward_context

    @property
    def dtype(self) -> torch.dtype:
        """The dtype parameters and computation use."""
        return getattr(self.inner, "dtype", torch.float32)

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return self.inner.convert_module(module)

    def convert_input(self, data: Any) -> Any:
        return self.inner.convert_input(data)

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self.inner.module_init_context()

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        if self._inner_forward_is_plain:
            return NO_CONTEXT  # what the inner precision returns, one call layer less on every step
        return self.inner.forward_context()

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        if self._inner_backward_is_plain:
            loss.backward(**kwargs)  # what the inner precision would do, one call layer less on every step
        else:
            self.inner.backward(loss, **kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> Any:
        # barrier=True ends the graph here: the step runs now, not at some later read.
        return xm.optimizer_step(optimizer, barrier=True, optimizer_args=kwargs)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def teardown(self) -> None:
        self.inner.teardown()
