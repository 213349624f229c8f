"""The ``xla`` and ``single_xla`` strategies: data parallel replicas on XLA devices (torch_xla).

One replica per XLA device, each with a full copy of the model. Gradients are averaged across
replicas inside the optimizer step (``xm.optimizer_step``, through :class:`XLAPrecision`), not
by a module wrapper. XLA records operations lazily and runs them at *sync points*: the optimizer
step, every batch of a loader from :meth:`XLAStrategy.process_dataloader`, checkpoint saving, and
:meth:`XLAStrategy.sync` wherever else the loop needs results (e.g. after an evaluation pass).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
import torch
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader
from torch_xla.distributed.parallel_loader import MpDeviceLoader

from runtime._tensor_tree import map_tensors
from runtime.accelerators.xla import xla_sync
from runtime.checkpoint import PathLike, TorchCheckpointIO
from runtime.cluster.xla import XLAEnvironment
from runtime.collectives.rendezvous import Rendezvous
from runtime.errors import RuntimeConfigError
from runtime.precision.xla import XLAPrecision
from runtime.strategies.base import DataLoaderUse, Strategy

__all__ = ["SingleXLAStrategy", "XLACheckpointIO", "XLADeviceLoader", "XLAStrategy"]


class XLACheckpointIO(TorchCheckpointIO):
    """Checkpoints of XLA tensors: written as CPU tensors, read back onto the requested device."""

    def save(self, checkpoint: dict[str, Any], path: PathLike) -> None:
        xla_sync()  # run what is pending, so the values copied out are current
        super().save(map_tensors(checkpoint, lambda tensor: tensor.detach().cpu()), path)

    def load(self, path: PathLike, map_location: Any = None) -> dict[str, Any]:
        data = super().load(path, map_location="cpu")
        if map_location is None or torch.device(map_location).type == "cpu":
            return data
        moved: dict[str, Any] = map_tensors(data, lambda tensor: tensor.to(map_location))
        return moved


class XLADeviceLoader(MpDeviceLoader):
    """torch_xla's device loader: batches arrive on the XLA device (uploaded in the background, a
    sync point per batch), cast as the precision requires. The wrapped loader's attributes
    (``sampler``, ``dataset``, ``batch_size``, ...) stay reachable, so
    ``loader.sampler.set_epoch(epoch)`` works."""

    def __init__(
        self, loader: DataLoader[Any], device: torch.device, convert: Callable[[Any], Any] | None = None
    ) -> None:
        super().__init__(loader, device)
        self.loader = loader
        self.convert = convert

    def __iter__(self) -> Iterator[Any]:
        batches = super().__iter__()
        return batches if self.convert is None else map(self.convert, batches)

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "_loader"):  # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)


class XLAStrategy(Strategy):
    """Replicas started by torch_xla's launcher, one per XLA device; ranks come from its runtime.

    The XLA cluster environment supplies this replica's ranks when the environment is set up;
    a runtime that started a different number of replicas than the config expects is an error.
    Checkpoints go through :class:`XLACheckpointIO`: rank 0 writes CPU copies of the tensors.
    """

    ranks_from_config = False  # the engine numbers the processes when it is set up
    replaces_parameters = "moving a module onto an XLA device makes new parameter tensors there"

    def __init__(self, config: Any, **kwargs: Any) -> None:
        precision = kwargs.pop("precision")
        if not isinstance(precision, XLAPrecision):
            precision = XLAPrecision(precision)
        kwargs.setdefault("checkpoint_io", XLACheckpointIO())
        super().__init__(config, precision=precision, **kwargs)

    def setup_environment(self, store: Any = None) -> None:  # its own rendezvous: no store
        """Take this replica's ranks from torch_xla's runtime, then check in with the collective."""
        environment = self.cluster_environment
        if isinstance(environment, XLAEnvironment):
            world_size = environment.world_size()
            if world_size != self.config.world_size:
                raise RuntimeConfigError(
                    f"the config expects world_size {self.config.world_size}, but torch_xla's runtime runs "
                    f"{world_size} replica(s)",
                    hint="resolve the flags where the work runs (with the same PJRT_DEVICE and device "
                    "count variables, e.g. CPU_NUM_DEVICES), or pass devices to match",
                )
            self._config = attrs.evolve(
                self.config,
                global_rank=environment.global_rank(),
                local_rank=environment.local_rank(),
                node_rank=environment.node_rank(),
            )
        device = self.root_device
        self.accelerator.set_device(device)
        self.collective.setup(Rendezvous(rank=self.global_rank, world_size=self.world_size, device=device))

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast for the precision, move to this replica's device, and start every replica from
        rank 0's parameters."""
        module = super().setup_module(module)
        if self.world_size > 1:
            xm.broadcast_master_param(module)
        return module

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> Any:
        """Average gradients over the replicas, step, and run the step's graph (a sync point)."""
        return self._precision.optimizer_step(optimizer, **kwargs)

    def sync(self) -> None:
        """Run the operations recorded so far on the device (XLA is lazy until a sync point)."""
        xla_sync()

    def process_dataloader(self, dataloader: DataLoader[Any], use: DataLoaderUse) -> Any:
        """This replica's shard of ``dataloader`` (see :meth:`Strategy.process_dataloader`), as an
        :class:`XLADeviceLoader` that uploads batches to the device, casts them for the precision
        and syncs once per batch."""
        sharded = super().process_dataloader(dataloader, use)
        return XLADeviceLoader(sharded, self.root_device, self.precision.convert_input)


class SingleXLAStrategy(XLAStrategy):
    """One process on one XLA device; nothing to launch, the collective is a group of one."""

    def __init__(self, config: Any, **kwargs: Any) -> None:
        if config.world_size != 1:
            raise RuntimeConfigError(
                f"the single_xla strategy runs one process, but the config has world_size {config.world_size}; "
                "several XLA devices need strategy 'xla'"
            )
        super().__init__(config, **kwargs)
