"""Collectives. Importing this package registers ``torch`` and ``single_device``."""

from runtime.collectives.base import REDUCE_OPS, Collective, ReduceOp
from runtime.collectives.single_device import SingleDeviceCollective
from runtime.collectives.torch_distributed import TorchCollective

__all__ = ["REDUCE_OPS", "Collective", "ReduceOp", "SingleDeviceCollective", "TorchCollective"]
