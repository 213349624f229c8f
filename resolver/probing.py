"""Cheap facts about the real machine, for :meth:`resolver.Environment.probe`.

Nothing here imports torch unless the NVIDIA driver is loaded and its device list cannot be read
from ``/proc``; package availability is answered by ``importlib.util.find_spec`` without imports.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

_NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _apply_visible_devices(total: int, environ: Mapping[str, str]) -> int:
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return total
    count = 0
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry or (entry.lstrip("-").isdigit() and not 0 <= int(entry) < total):
            break  # CUDA ignores everything from the first invalid ordinal on
        count += 1
    return min(count, total)


def cuda_device_count(environ: Mapping[str, str]) -> int:
    """Visible CUDA devices: the driver's device list, filtered by ``CUDA_VISIBLE_DEVICES``."""
    if _NVIDIA_PROC.is_dir():
        try:
            total = sum(1 for _ in _NVIDIA_PROC.iterdir())
        except OSError:
            total = 0
        if total:
            return _apply_visible_devices(total, environ)
    if Path("/dev/nvidiactl").exists() and module_available("torch"):
        import torch  # the only way left; happens on containers without /proc/driver/nvidia

        return int(torch.cuda.device_count())
    return 0


def mps_available() -> bool:
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return False
    return module_available("torch")


def xla_device_count(environ: Mapping[str, str]) -> int:
    """TPU chips visible through /dev/accel* or /dev/vfio; XLA on CPU when PJRT_DEVICE=CPU."""
    if not module_available("torch_xla"):
        return 0
    accel = list(Path("/dev").glob("accel*"))
    if accel:
        return len(accel)
    vfio = [p for p in Path("/dev/vfio").glob("*") if p.name != "vfio"] if Path("/dev/vfio").is_dir() else []
    if vfio:
        return len(vfio)
    if environ.get("PJRT_DEVICE", "").upper() == "CPU":
        return int(environ.get("CPU_NUM_DEVICES", "1") or 1)
    return 0


def is_interactive() -> bool:
    """True inside a notebook or an interactive interpreter (no ``__main__.__file__``)."""
    main = sys.modules.get("__main__")
    if main is None:
        return False
    if hasattr(sys, "ps1"):
        return True
    return not hasattr(main, "__file__") and "ipykernel" in sys.modules


def fork_available() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()
