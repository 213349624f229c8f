"""Collectives (the built-ins are named in :mod:`runtime.catalog`)."""

from runtime.collectives.base import OPERATIONS, REDUCE_OPS, Collective, CollectiveGroup, ReduceOp
from runtime.collectives.errors import (
    BarrierTimeoutError,
    CollectiveArgumentTypeError,
    CollectiveMisuseError,
    CollectiveNotSetUpError,
    CollectiveNotSupportedError,
    ReduceOpDtypeError,
)
from runtime.collectives.handles import CollectiveHandle
from runtime.collectives.horovod import HorovodCollective
from runtime.collectives.rendezvous import Rendezvous
from runtime.collectives.single_device import SingleDeviceCollective
from runtime.collectives.torch_distributed import TorchCollective

__all__ = [
    "OPERATIONS",
    "REDUCE_OPS",
    "BarrierTimeoutError",
    "Collective",
    "CollectiveArgumentTypeError",
    "CollectiveGroup",
    "CollectiveHandle",
    "CollectiveMisuseError",
    "CollectiveNotSetUpError",
    "CollectiveNotSupportedError",
    "HorovodCollective",
    "ReduceOp",
    "ReduceOpDtypeError",
    "Rendezvous",
    "SingleDeviceCollective",
    "TorchCollective",
]
