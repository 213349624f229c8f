"""``32-true``: float32 everywhere, the default."""

from __future__ import annotations

from runtime.precision.base import Precision

__all__ = ["FullPrecision"]


class FullPrecision(Precision):
    """float32 parameters, inputs and computation; nothing is cast."""
