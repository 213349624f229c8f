"""The part of :class:`~runtime.strategies.base.Strategy` a training step calls: the module and its optimizer
set up, data moved to the device, the backward pass and the optimizer step, each rank's data loader.

It keeps what set-up learned (the optimizers it made, the parameters it replaced), so that an optimizer
over the parameters from before set-up is refused at its first step (``runtime.strategies.guard``).
``Strategy`` inherits it; a strategy overrides these methods on its own class.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch.utils.data import DataLoader

from runtime._protocol.progress import step as record_step
from runtime._tensor_tree import map_tensors
from runtime.dataloaders import is_shuffled, with_distributed_sampler
from runtime.errors import DataLoaderWarning
from runtime.strategies.guard import DataLoaderUse, guard_methods

if TYPE_CHECKING:
    from runtime.launchers.base import Launcher
    from runtime.precision.base import Precision

__all__ = ["SETUP_CALL", "ModulesAndData"]

#: The call that sets up a module and its optimizer together (what misuse errors show).
SETUP_CALL = (
    "model, optimizer = strategy.setup_module_and_optimizer(model, lambda params: torch.optim.SGD(params, lr=0.01))"
)


class ModulesAndData:
    """Setting up modules and optimizers, moving data, stepping, and each rank's data loader."""

    #: Why ``optimizer_step`` takes only an optimizer from :meth:`setup_module_and_optimizer` (``None``:
    #: any optimizer over the set-up module's parameters works).
    optimizer_from_setup: ClassVar[str | None] = None
    #: What :meth:`setup_module` does to the module's parameters that leaves the old ones behind (for
    #: the error about an optimizer made before it).
    replaces_parameters: ClassVar[str] = "setting the module up made new parameter tensors"

    _precision: Precision
    _launcher: Launcher | None
    _set_up_optimizers: weakref.WeakSet[Any]
    # id -> optimizer that passed its first optimizer_step's check (a dict, not a WeakSet: looked up on
    # every step, where WeakSet's Python-level __contains__ is a call layer of its own)
    _checked_optimizers: dict[int, weakref.ref[Any]]
    # id -> parameter that setup_module replaced (by id: tensors compare elementwise, not by identity)
    _replaced_parameters: dict[int, weakref.ref[torch.Tensor]]

    if TYPE_CHECKING:  # the strategy's identity, which Strategy defines

        @property
        def root_device(self) -> torch.device: ...

        @property
        def global_rank(self) -> int: ...

        @property
        def world_size(self) -> int: ...

        @property
        def use_distributed_sampler(self) -> bool: ...

    def _forget_set_up(self) -> None:
        """Forget the optimizers and parameters set up (a new strategy, or one torn down to run again)."""
        self._set_up_optimizers = weakref.WeakSet()
        self._checked_optimizers = {}
        self._replaced_parameters = {}

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast ``module`` for the precision, move it to :attr:`root_device` and wrap it as needed.

        Make the optimizer afterwards, from the returned module's parameters (or use
        :meth:`setup_module_and_optimizer`): FSDP shards parameters into new tensors, XLA moves them
        into new ones, and an optimizer made before would update tensors the module no longer uses.
        """
        before = list(module.parameters())
        module = self._precision.convert_module(module)
        module = module.to(self.root_device)
        wrapped = self.wrap_module(module)
        self._remember_replaced(before, wrapped)
        return wrapped

    def _remember_replaced(self, before: list[torch.nn.Parameter], module: torch.nn.Module) -> None:
        """Note the parameters set-up replaced, so :meth:`optimizer_step` can refuse an optimizer over them."""
        kept = {id(p) for p in module.parameters()}
        self._replaced_parameters.update({id(p): weakref.ref(p) for p in before if id(p) not in kept})

    def _optimizer_problem(self, optimizer: Any) -> tuple[str, str] | None:
        """Why ``optimizer_step`` cannot step ``optimizer``, or ``None``: asked on its first step only (the
        guard's optimizer check skips one recorded in ``_checked_optimizers``, which this fills)."""
        setup_call = SETUP_CALL
        if self.optimizer_from_setup is not None and optimizer not in self._set_up_optimizers:
            return (
                f"this optimizer was not made by strategy.setup_module_and_optimizer: {self.optimizer_from_setup}",
                f"{setup_call}, then pass that optimizer to optimizer_step",
            )
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                ref = self._replaced_parameters.get(id(parameter))
                if ref is not None and ref() is parameter:
                    return (
                        "this optimizer holds the module's parameters from before strategy.setup_module "
                        f"({self.replaces_parameters}); the set-up module no longer uses them, so stepping it would "
                        "leave the model unchanged",
                        "make the optimizer after setup_module, from the module it returns: "
                        "model = strategy.setup_module(model); "
                        f"optimizer = torch.optim.SGD(model.parameters(), lr=0.01); or in one call: {setup_call}",
                    )
        self._checked_optimizers[id(optimizer)] = weakref.ref(optimizer)
        return None

    def setup_module_and_optimizer(
        self,
        module: torch.nn.Module,
        make_optimizer: Callable[[Iterator[torch.nn.Parameter]], torch.optim.Optimizer],
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """Set up ``module`` and an optimizer over its set-up parameters, the same way for every
        strategy: ``make_optimizer(parameters)`` builds it (e.g. ``lambda p: torch.optim.SGD(p, lr=0.1)``).

        FSDP needs the optimizer made from the sharded parameters, DeepSpeed wraps both in its
        engine; use the module and optimizer this returns.
        """
        module = self.setup_module(module)
        return module, make_optimizer(module.parameters())

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """The strategy's wrapper around a module already on its device (none by default)."""
        return module

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, Any]:
        """The module's complete state dict on every rank (sharding strategies gather it)."""
        return dict(self.unwrap_module(module).state_dict())

    def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """The user's module inside whatever :meth:`wrap_module` put around it."""
        return module

    def to_device(self, data: Any) -> Any:
        """Move the tensors in ``data`` to :attr:`root_device`, cast as the precision requires."""
        device = self.root_device
        moved = map_tensors(data, lambda tensor: tensor.to(device))
        return self._precision.convert_input(moved)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Back-propagate ``loss`` (the precision may scale it)."""
        self._precision.backward(loss, **kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> Any:
        """Step ``optimizer`` (the precision may unscale gradients or skip the step)."""
        return self._precision.optimizer_step(optimizer, **kwargs)

    def heartbeat(self) -> None:
        """Tell the progress watchdog this rank is making progress, in a loop that makes no optimizer step
        and runs no collective (evaluation, saving, data preparation). Costs a store into shared memory."""
        record_step()

    def process_dataloader(self, dataloader: DataLoader[Any], use: DataLoaderUse) -> DataLoader[Any]:
        """The loader this rank should iterate for ``use`` (``train``, ``val``, ``test``, ``predict``).

        With more than one process and ``use_distributed_sampler``, a copy of ``dataloader`` with
        a ``DistributedSampler`` over ``world_size`` replicas, positioned at this rank; only the
        training loader is shuffled, and only if the original was. All other loader arguments
        are kept. Call ``loader.sampler.set_epoch(epoch)`` every epoch to reshuffle.
        """
        self._warn_about_loader(dataloader, use)
        if not self.use_distributed_sampler or self.world_size == 1:
            return dataloader
        return with_distributed_sampler(
            dataloader,
            num_replicas=self.world_size,
            rank=self.global_rank,
            shuffle=use == "train" and is_shuffled(dataloader),
        )

    def _warn_about_loader(self, dataloader: DataLoader[Any], use: str) -> None:
        workers = dataloader.num_workers
        spawned = self._launcher is not None and self._launcher.start_method == "spawn"
        if spawned and workers > 0 and not dataloader.persistent_workers:
            warnings.warn(
                DataLoaderWarning(
                    f"the {use} DataLoader starts {workers} worker process(es) inside ranks that were "
                    "themselves spawned: every epoch pays the spawn start-up again",
                    hint="pass persistent_workers=True to the DataLoader, or use strategy='ddp' (the subprocess "
                    "launcher)",
                ),
                stacklevel=3,
            )
        if use != "train" and is_shuffled(dataloader) and self.use_distributed_sampler and self.world_size > 1:
            warnings.warn(
                f"the {use} DataLoader shuffles, but {use} data is not shuffled across ranks",
                DataLoaderWarning,
                stacklevel=3,
            )


guard_methods(ModulesAndData)  # the misuse checks, as on Strategy's own methods
