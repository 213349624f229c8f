"""Launchers. The built-in ones are named in :mod:`runtime.catalog` and imported on the first
look-up of :data:`runtime.registry.LAUNCHERS`.

The classes are importable from here; each is imported on first access, so that the modules a
process that only starts scripts uses (supervision, rank output) do not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # explicit re-exports (name as name), for type checkers
    from runtime.launchers.base import Launcher as Launcher
    from runtime.launchers.horovod import HorovodLauncher as HorovodLauncher
    from runtime.launchers.multiprocessing import ForkLauncher as ForkLauncher
    from runtime.launchers.multiprocessing import MultiprocessingLauncher as MultiprocessingLauncher
    from runtime.launchers.multiprocessing import SpawnLauncher as SpawnLauncher
    from runtime.launchers.subprocess import SubprocessScriptLauncher as SubprocessScriptLauncher

#: Each public name and the module that defines it.
_MODULES = {
    "ForkLauncher": "runtime.launchers.multiprocessing",
    "HorovodLauncher": "runtime.launchers.horovod",
    "Launcher": "runtime.launchers.base",
    "MultiprocessingLauncher": "runtime.launchers.multiprocessing",
    "SpawnLauncher": "runtime.launchers.multiprocessing",
    "SubprocessScriptLauncher": "runtime.launchers.subprocess",
}

__all__ = sorted(_MODULES)


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
