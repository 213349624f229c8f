"""Strategies. Importing this package registers ``single_device`` and ``ddp``."""

from runtime.strategies.base import DATALOADER_USES, DataLoaderUse, Strategy
from runtime.strategies.ddp import DDPOptions, DDPStrategy
from runtime.strategies.options import StrategyOptions
from runtime.strategies.single_device import SingleDeviceStrategy

__all__ = [
    "DATALOADER_USES",
    "DDPOptions",
    "DDPStrategy",
    "StrategyOptions",
    "DataLoaderUse",
    "SingleDeviceStrategy",
    "Strategy",
]
