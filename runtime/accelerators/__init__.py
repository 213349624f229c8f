"""Accelerators: device logic only. The built-ins are named in :mod:`runtime.catalog`."""

from runtime.accelerators.base import Accelerator
from runtime.accelerators.cpu import CPUAccelerator
from runtime.accelerators.cuda import CUDAAccelerator
from runtime.accelerators.mps import MPSAccelerator

__all__ = ["Accelerator", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator"]
