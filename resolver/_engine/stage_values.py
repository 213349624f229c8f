"""The value of one stage: its slots, in order, read as attributes (``placed.num_devices``).

Each stage's class is a plain subclass of one attrs class, made once per evaluator: cheap enough
for a process that resolves once.
"""

from __future__ import annotations

import functools
import re
from typing import Any

__all__ = ["field_name", "stage_class"]


def stage_class(stage: str) -> type:
    """A new class for ``stage``'s values (``PlacedStage``), holding its ``(field, value)`` pairs."""
    return type(_class_name(stage), (_stage_base(),), {"__slots__": ()})


@functools.cache
def _stage_base() -> type:
    import attrs

    @attrs.frozen(repr=False)
    class StageValue:
        """A stage's slots, in order, as ``(field, value)`` pairs; read as attributes."""

        _pairs: tuple[tuple[str, Any], ...]

        def __getattr__(self, name: str) -> Any:
            for field, value in object.__getattribute__(self, "_pairs"):
                if field == name:
                    return value
            raise AttributeError(f"{type(self).__name__!r} has no field {name!r}")

        def __repr__(self) -> str:
            return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self._pairs) + ")"

    return StageValue


def _class_name(stage: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", stage)) + "Stage"


def field_name(slot: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", slot)
