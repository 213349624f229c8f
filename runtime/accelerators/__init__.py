"""Accelerators: device logic only. Importing this package registers the built-in ones."""

from runtime.accelerators.base import Accelerator
from runtime.accelerators.cpu import CPUAccelerator
from runtime.accelerators.cuda import CUDAAccelerator
from runtime.accelerators.mps import MPSAccelerator

__all__ = ["Accelerator", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator"]
