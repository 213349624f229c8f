"""Horovod: one process per device, gradients averaged by Horovod's distributed optimizer.

The module's parameters and buffers and the optimizer's state are broadcast from rank 0 when
they are set up, so every rank starts from rank 0's values; ``horovod.torch.DistributedOptimizer``
then averages gradients across the ranks before each step. Horovod is imported when the strategy
is built, so this module loads without it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

import torch

from runtime.collectives.horovod import HorovodCollective, import_horovod
from runtime.collectives.rendezvous import Rendezvous
from runtime.errors import MissingDependencyError, RuntimeConfigError
from runtime.strategies.base import Strategy

__all__ = ["HorovodStrategy"]


class HorovodStrategy(Strategy):
    """Runs on Horovod's collective; ``setup_module_and_optimizer`` gives Horovod's distributed optimizer."""

    ranks_from_config = False  # the engine numbers the processes when it is set up
    optimizer_from_setup = (
        "Horovod averages gradients across ranks inside the horovod.torch.DistributedOptimizer that "
        "setup_module_and_optimizer returns; with another optimizer every rank would step on its own gradients "
        "and the replicas would drift apart"
    )

    def __init__(self, config: Any, **kwargs: Any) -> None:
        if importlib.util.find_spec("horovod") is None:
            raise MissingDependencyError("strategy 'horovod'", "horovod")
        super().__init__(config, **kwargs)
        if not isinstance(self.collective, HorovodCollective):
            raise RuntimeConfigError(
                f"strategy 'horovod' runs on the horovod collective, but the config names {config.collective!r}",
                hint="resolve the config with strategy='horovod' (it picks collective='horovod')",
            )

    # Horovod numbers the processes itself; once it is set up, its rank and size are the truth
    # (setup checks they match the config), e.g. for the distributed sampler.
    @property
    def global_rank(self) -> int:
        return self.collective.rank if self.collective.is_initialized else self.config.global_rank

    @property
    def world_size(self) -> int:
        return self.collective.world_size if self.collective.is_initialized else self.config.world_size

    def setup_environment(self, store: Any = None) -> None:  # its own rendezvous: no store
        """Select the device and join Horovod's job (its rendezvous comes from Horovod's runner)."""
        device = self.root_device
        self.accelerator.set_device(device)
        self.collective.setup(
            Rendezvous(
                rank=self.config.global_rank, world_size=self.config.world_size, timeout=self.timeout, device=device
            )
        )

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Start every rank from rank 0's parameters and buffers (no wrapper: Horovod hooks the optimizer)."""
        hvd = import_horovod()
        hvd.broadcast_parameters(module.state_dict(), root_rank=0)
        return module

    def setup_module_and_optimizer(
        self,
        module: torch.nn.Module,
        make_optimizer: Callable[[Iterator[torch.nn.Parameter]], torch.optim.Optimizer],
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """The module from rank 0, and ``horovod.torch.DistributedOptimizer`` around the optimizer
        (its state broadcast from rank 0), which averages gradients across ranks before each step."""
        hvd = import_horovod()
        module = self.setup_module(module)
        optimizer = make_optimizer(module.parameters())
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        distributed = hvd.DistributedOptimizer(optimizer, named_parameters=module.named_parameters(), op=hvd.Average)
        return module, distributed
