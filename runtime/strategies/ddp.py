"""Distributed data parallel: one replica per process, gradients averaged in the backward pass.

One class for every way of starting the processes (seed 002): ``ddp_spawn``/``ddp_fork`` are
this strategy with the ``spawn``/``fork`` launcher.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from runtime.registry import register_strategy
from runtime.strategies.base import Strategy

__all__ = ["DDPStrategy"]

# What the strategy decides itself rather than taking as an option.
_DECIDED_BY_STRATEGY = frozenset({"self", "module", "device_ids", "output_device", "process_group"})


def _ddp_option_names() -> frozenset[str]:
    parameters = inspect.signature(DistributedDataParallel.__init__).parameters
    return frozenset(parameters) - _DECIDED_BY_STRATEGY


@register_strategy("ddp")
class DDPStrategy(Strategy):
    """Wraps modules in :class:`~torch.nn.parallel.DistributedDataParallel`.

    Any ``DistributedDataParallel`` argument (``find_unused_parameters``, ``static_graph``,
    ``gradient_as_bucket_view``, ``bucket_cap_mb``, ``broadcast_buffers``, ...) can be given
    as a strategy option.
    """

    def __init__(self, config: Any, **kwargs: Any) -> None:
        ddp_names = _ddp_option_names()
        ddp_options = {key: kwargs.pop(key) for key in list(kwargs) if key in ddp_names}
        super().__init__(config, **kwargs)
        self.ddp_options: dict[str, Any] = ddp_options

    @classmethod
    def option_names(cls) -> frozenset[str]:
        return super().option_names() | _ddp_option_names()

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        device = self.root_device
        device_ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=device_ids, **self.ddp_options)

    def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.module if isinstance(module, DistributedDataParallel) else module
