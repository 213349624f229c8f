"""Launchers. Importing this package registers ``subprocess``, ``spawn`` and ``fork``."""

from runtime.launchers.base import Launcher
from runtime.launchers.horovod import HorovodLauncher
from runtime.launchers.multiprocessing import ForkLauncher, MultiprocessingLauncher, SpawnLauncher
from runtime.launchers.subprocess_script import SubprocessScriptLauncher

__all__ = [
    "ForkLauncher",
    "HorovodLauncher",
    "Launcher",
    "MultiprocessingLauncher",
    "SpawnLauncher",
    "SubprocessScriptLauncher",
]
