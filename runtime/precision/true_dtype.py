"""``64-true``, ``16-true``, ``bf16-true``: parameters and computation in one dtype."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

import torch

from runtime._tensor_tree import map_tensors
from runtime.precision.base import Precision

__all__ = ["BFloat16TruePrecision", "DoublePrecision", "HalfTruePrecision", "TrueDtypePrecision"]


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Make ``dtype`` torch's default floating dtype inside the block."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class TrueDtypePrecision(Precision):
    """Modules are cast to ``dtype``, floating inputs too, and new tensors default to it."""

    dtype: ClassVar[torch.dtype]

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(dtype=self.dtype)

    def convert_input(self, data: Any) -> Any:
        return map_tensors(data, lambda t: t.to(self.dtype) if t.is_floating_point() else t)

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return default_dtype(self.dtype)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return default_dtype(self.dtype)


class DoublePrecision(TrueDtypePrecision):
    """float64 everywhere."""

    dtype = torch.float64


class HalfTruePrecision(TrueDtypePrecision):
    """float16 parameters and computation (no master weights, no loss scaling)."""

    dtype = torch.float16
    reduced = True


class BFloat16TruePrecision(TrueDtypePrecision):
    """bfloat16 parameters and computation."""

    dtype = torch.bfloat16
    reduced = True
