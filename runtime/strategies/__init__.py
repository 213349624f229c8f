"""Strategies. Importing this package registers ``single_device`` and ``ddp``."""

from runtime.strategies.base import DATALOADER_USES, DataLoaderUse, Strategy
from runtime.strategies.ddp import DDPStrategy
from runtime.strategies.single_device import SingleDeviceStrategy

__all__ = ["DATALOADER_USES", "DDPStrategy", "DataLoaderUse", "SingleDeviceStrategy", "Strategy"]
