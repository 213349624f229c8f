"""``32-true``: float32 everywhere, the default."""

from __future__ import annotations

from runtime.precision.base import Precision
from runtime.registry import register_precision

__all__ = ["FullPrecision"]


@register_precision("32-true")
class FullPrecision(Precision):
    """float32 parameters, inputs and computation; nothing is cast."""
