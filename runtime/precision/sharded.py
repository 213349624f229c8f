"""Precision under a sharding engine: FSDP's mixed-precision policy and DeepSpeed's config do the casting.

The precision plugins (``runtime.precision``) stay the single place that says what a precision
means (:attr:`MixedPrecision.dtype`, :attr:`TrueDtypePrecision.dtype`); these functions translate
them for the engines, and :class:`EnginePrecision` stands in for the plugin where the engine
casts the forward pass itself (so no autocast is added on top).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch

from runtime._tensor_tree import map_tensors
from runtime.precision.base import Precision
from runtime.precision.mixed import MixedPrecision
from runtime.precision.true_dtype import TrueDtypePrecision

__all__ = ["EnginePrecision", "deepspeed_precision_config", "fsdp_mixed_precision_policy"]


def fsdp_mixed_precision_policy(precision: Precision) -> Any:
    """FSDP's ``MixedPrecisionPolicy`` for a precision plugin, or None when FSDP need not cast.

    ``*-mixed``: sharded parameters stay float32; FSDP all-gathers them in the low dtype for the
    forward and backward, reduces gradients in float32 and returns float32 outputs.
    ``*-true`` and ``32-true``: the module itself has the dtype (the plugin converts it).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if isinstance(precision, MixedPrecision):
        return MixedPrecisionPolicy(param_dtype=precision.dtype, reduce_dtype=torch.float32, output_dtype=torch.float32)
    return None


def deepspeed_precision_config(precision: Precision) -> dict[str, Any]:
    """The ``fp16``/``bf16`` sections of a DeepSpeed config for a precision plugin.

    DeepSpeed keeps float32 master weights in its optimizer and runs the module in the low dtype
    in both cases, so ``16-mixed``/``16-true`` and ``bf16-mixed``/``bf16-true`` map to the same
    section (``fp16`` gets DeepSpeed's dynamic loss scaling).
    """
    dtype = _low_dtype(precision)
    if dtype == torch.float16:
        return {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}}
    if dtype == torch.bfloat16:
        return {"bf16": {"enabled": True}}
    return {}


def _low_dtype(precision: Precision) -> torch.dtype | None:
    if isinstance(precision, MixedPrecision | TrueDtypePrecision):
        return precision.dtype
    return None


class EnginePrecision(Precision):
    """Wraps a precision plugin for an engine that casts the forward pass itself.

    Modules are converted as the plugin says (``*-true`` casts them; ``*-mixed`` leaves float32
    for the engine), there is no autocast, and ``cast_inputs`` (DeepSpeed, whose module runs in
    the low dtype) casts floating inputs to it. Backward, step and state are the plugin's.
    """

    def __init__(self, inner: Precision, *, cast_inputs: bool = False, convert_module: bool = True) -> None:
        super().__init__(inner.accelerator)
        self.inner = inner
        self._input_dtype = _low_dtype(inner) if cast_inputs else None
        self._convert_module = convert_module

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return self.inner.convert_module(module) if self._convert_module else module

    def convert_input(self, data: Any) -> Any:
        dtype = self._input_dtype
        if dtype is None:
            return self.inner.convert_input(data)
        return map_tensors(data, lambda t: t.to(dtype) if t.is_floating_point() else t)

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self.inner.module_init_context()

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.inner.backward(loss, **kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> Any:
        return self.inner.optimizer_step(optimizer, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def teardown(self) -> None:
        self.inner.teardown()
