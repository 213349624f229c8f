"""Strategies (the built-ins are named in :mod:`runtime.catalog`). ``deepspeed`` imports DeepSpeed
only when set up, so importing this needs no DeepSpeed."""

from runtime.strategies.base import DATALOADER_USES, DataLoaderUse, Strategy
from runtime.strategies.ddp import DDPOptions, DDPStrategy
from runtime.strategies.deepspeed import DeepSpeedOptions, DeepSpeedStrategy
from runtime.strategies.fsdp import FSDPOptions, FSDPStrategy
from runtime.strategies.horovod import HorovodStrategy
from runtime.strategies.options import StrategyOptions
from runtime.strategies.single_device import SingleDeviceStrategy

__all__ = [
    "DATALOADER_USES",
    "DDPOptions",
    "DDPStrategy",
    "DataLoaderUse",
    "DeepSpeedOptions",
    "DeepSpeedStrategy",
    "FSDPOptions",
    "FSDPStrategy",
    "HorovodStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "StrategyOptions",
]
