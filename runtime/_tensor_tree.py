"""Apply a function to every tensor inside nested lists, tuples, named tuples and dicts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["map_tensors"]


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A copy of ``obj`` with ``fn`` applied to each tensor; other leaves are kept as they are."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # named tuple
        return type(obj)(*(map_tensors(item, fn) for item in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(item, fn) for item in obj)
    if isinstance(obj, Mapping):
        mapped = {key: map_tensors(value, fn) for key, value in obj.items()}
        try:
            return type(obj)(mapped)  # type: ignore[call-arg]
        except TypeError:
            return mapped
    return obj
