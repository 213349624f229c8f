"""The XLA accelerator (TPU, or XLA on CPU/GPU through PJRT): device logic on torch_xla.

Importing this module imports torch_xla. The runtime imports it only when a config names the
``xla`` accelerator (see :mod:`runtime.catalog`), so other runs never load torch_xla.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Sequence

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

from runtime.accelerators.base import Accelerator
from runtime.errors import RuntimeConfigError

__all__ = ["XLAAccelerator", "runtime_initialized", "xla_device", "xla_sync"]


def runtime_initialized() -> bool:
    """Whether this process already started torch_xla's runtime (then it can no longer spawn replicas)."""
    return bool(torch_xla._XLAC._xla_runtime_is_initialized())


def xla_device() -> torch.device:
    """The XLA device torch_xla assigned to this process (or replica thread)."""
    # torch_xla.device() is the current spelling; xm.xla_device() the older one.
    device = getattr(torch_xla, "device", None)
    return device() if device is not None else xm.xla_device()


def xla_sync() -> None:
    """Cut the lazily recorded graph here and run it (a step boundary)."""
    sync = getattr(torch_xla, "sync", None)
    if sync is not None:
        sync()
    else:
        xm.mark_step()


_COUNT_IN_CHILD = "import torch_xla.runtime as xr; print(xr.global_runtime_device_count())"


@functools.lru_cache(maxsize=1)
def _device_count_from_a_child() -> int:
    # Asking the runtime starts it, and a process whose runtime has started cannot spawn replicas
    # any more: a short-lived child asks instead (its output's last line is the count).
    result = subprocess.run(
        [sys.executable, "-c", _COUNT_IN_CHILD], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not lines[-1].isascii() or not lines[-1].isdigit():
        raise RuntimeConfigError(
            f"torch_xla's runtime could not count its devices (exit code {result.returncode}):\n"
            f"{result.stderr.strip()[-2000:]}",
            hint="set PJRT_DEVICE (CPU, TPU or CUDA) to a device this machine has",
        )
    return int(lines[-1])


class XLAAccelerator(Accelerator):
    """XLA devices through torch_xla's PJRT runtime (``PJRT_DEVICE`` picks TPU, CPU or CUDA).

    Each replica process (or thread, on XLA:CPU) owns one device, which torch_xla assigns: the
    root device is the one the runtime made current, whatever ``device_ids`` says.
    """

    device_type = "xla"

    @classmethod
    def is_available(cls) -> bool:
        # Importing torch_xla selects a PJRT device (it falls back to CPU), so this is cheap and
        # leaves the runtime unstarted.
        return xr.device_type() is not None

    @classmethod
    def device_count(cls) -> int:
        """The devices torch_xla's runtime sees (asked in a child process until this one's runtime runs)."""
        if runtime_initialized():
            return int(xr.global_runtime_device_count())
        return _device_count_from_a_child()

    def root_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        super().root_device(local_rank, device_ids)
        return xla_device()

    def set_device(self, device: torch.device) -> None:
        if device.type != "xla":
            raise RuntimeConfigError(f"the XLA accelerator cannot make {device} current: it is not an XLA device")
        current = xla_device()
        if current != device:
            raise RuntimeConfigError(
                f"torch_xla assigned {current} to this replica, but it was asked to use {device}",
                hint="let torch_xla's launcher place replicas (strategy='xla'), one device each",
            )

    def teardown(self) -> None:
        # Finish what is queued on the device so nothing runs after the rank returns.
        xm.wait_device_ops()
