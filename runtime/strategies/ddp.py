"""Distributed data parallel: one replica per process, gradients averaged in the backward pass.

One class for every way of starting the processes (seed 002): ``ddp_spawn``/``ddp_fork`` are
this strategy with the ``spawn``/``fork`` launcher.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from torch.nn.parallel import DistributedDataParallel

from runtime.strategies.base import Strategy
from runtime.strategies.options import StrategyOptions

__all__ = ["DDPOptions", "DDPStrategy"]


@attrs.frozen(kw_only=True)
class DDPOptions(StrategyOptions):
    """``DistributedDataParallel``'s own arguments; ``None`` leaves DDP's default."""

    broadcast_buffers: bool | None = None
    init_sync: bool | None = None
    bucket_cap_mb: float | None = None
    find_unused_parameters: bool | None = None
    check_reduction: bool | None = None
    gradient_as_bucket_view: bool | None = None
    static_graph: bool | None = None
    skip_all_reduce_unused_params: bool | None = None
    batched_grad_copy: bool | None = None
    forward_sync_buffers: bool | None = None
    dim: int | None = None


_DDP_ARGUMENTS = tuple(a.name for a in attrs.fields(DDPOptions) if a.name not in attrs.fields_dict(StrategyOptions))


class DDPStrategy(Strategy):
    """Wraps modules in :class:`~torch.nn.parallel.DistributedDataParallel`.

    ``DistributedDataParallel``'s arguments (``find_unused_parameters``, ``static_graph``,
    ``gradient_as_bucket_view``, ``bucket_cap_mb``, ``broadcast_buffers``, ...) are strategy
    options (:class:`DDPOptions`).
    """

    Options = DDPOptions

    def __init__(self, config: Any, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        given = {name: getattr(self.options, name) for name in _DDP_ARGUMENTS}
        self.ddp_options: dict[str, Any] = {name: value for name, value in given.items() if value is not None}

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        device_ids = self.accelerator.ddp_device_ids(self.root_device)
        return DistributedDataParallel(module, device_ids=device_ids, **self.ddp_options)

    def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.module if isinstance(module, DistributedDataParallel) else module
