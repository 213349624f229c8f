"""Strategy: the hub the user's code talks to (seed 001).

A strategy owns the run's components: an :class:`~runtime.accelerators.base.Accelerator`
(device logic), a :class:`~runtime.precision.base.Precision`, a
:class:`~runtime.collectives.base.Collective` (all communication), a
:class:`~runtime.launchers.base.Launcher` (or ``None`` when the cluster started the processes),
a :class:`~runtime.cluster.base.ClusterEnvironment` and a :class:`~runtime.checkpoint.CheckpointIO`.
It knows this process's rank from the ``ResolvedConfig`` and decides what rank-dependent work
means: which device, how a module is wrapped, which shard of the data, who writes checkpoints.
"""

from __future__ import annotations

import functools
import os
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch
from torch.utils.data import DataLoader

from runtime._protocol.gc_pause import collector_paused
from runtime._protocol.peers import record_finished
from runtime._protocol.progress import step as record_step
from runtime._protocol.rank_environment import rendezvous_timeout
from runtime._protocol.restarts import restart_count
from runtime._tensor_tree import map_tensors
from runtime.checkpoint import CheckpointIO, TorchCheckpointIO, latest_checkpoint
from runtime.collectives.rendezvous import Rendezvous
from runtime.dataloaders import is_shuffled, with_distributed_sampler
from runtime.errors import (
    DataLoaderWarning,
    PeerStoppedAnsweringError,
    stamp_failure_time,
    users_frames_only,
)
from runtime.launchers._launching import launch_ranks
from runtime.preemption import PreemptionState, agree, catching, finish, recording_saves
from runtime.strategies.guard import BUILT, DATALOADER_USES, DataLoaderUse, guard_methods
from runtime.strategies.options import StrategyOptions, structure_options

if TYPE_CHECKING:
    from resolver import ResolvedConfig
    from runtime.accelerators.base import Accelerator
    from runtime.cluster.base import ClusterEnvironment
    from runtime.collectives.base import Collective
    from runtime.launchers.base import Launcher
    from runtime.precision.base import Precision

__all__ = ["DATALOADER_USES", "DataLoaderUse", "Strategy"]

R = TypeVar("R")
#: The keyword names of :meth:`Strategy.assemble`'s component classes, in order.
_PART_NAMES = ("accelerator", "precision", "collective", "cluster_environment", "launcher")
#: The call that sets up a module and its optimizer together (what misuse errors show).
SETUP_CALL = (
    "model, optimizer = strategy.setup_module_and_optimizer(model, lambda params: torch.optim.SGD(params, lr=0.01))"
)


class Strategy:
    """How one process of a run does its part. Register subclasses with :func:`runtime.register_strategy`.

    :func:`runtime.build` constructs it from a ``ResolvedConfig``: the components come from the
    registries, and ``config.strategy_options`` are structured into the class's :attr:`Options`
    (an attrs class; a strategy with options of its own subclasses
    :class:`~runtime.strategies.options.StrategyOptions`) and available as :attr:`options`.
    """

    #: The options this strategy takes (declared once; ``runtime.build`` structures them).
    Options: ClassVar[type[StrategyOptions]] = StrategyOptions
    #: Why ``optimizer_step`` takes only an optimizer from :meth:`setup_module_and_optimizer` (``None``:
    #: any optimizer over the set-up module's parameters works).
    optimizer_from_setup: ClassVar[str | None] = None
    #: Whether the config gives this process's ranks before set-up (``False``: the engine assigns them
    #: when the environment is set up, so rank-dependent calls wait for it).
    ranks_from_config: ClassVar[bool] = True
    #: Whether every method works without set-up too (one process, nothing to join: ``single_device``).
    usable_unset: ClassVar[bool] = False
    #: What :meth:`setup_module` does to the module's parameters that leaves the old ones behind (for
    #: the error about an optimizer made before it).
    replaces_parameters: ClassVar[str] = "setting the module up made new parameter tensors"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "save_checkpoint" in cls.__dict__:  # a save after agreed pre-emption names the checkpoint
            cls.save_checkpoint = recording_saves(cls.__dict__["save_checkpoint"])  # type: ignore[method-assign]
        guard_methods(cls)  # the misuse checks (runtime.strategies.guard) cover overrides too

    def __init__(
        self,
        config: ResolvedConfig,
        *,
        accelerator: Accelerator,
        precision: Precision,
        collective: Collective,
        launcher: Launcher | None,
        cluster_environment: ClusterEnvironment,
        checkpoint_io: CheckpointIO | None = None,
        options: StrategyOptions | None = None,
    ) -> None:
        self._config = config
        #: The component classes :meth:`assemble` made this strategy of (``None``: made by hand).
        self._parts: tuple[Any, ...] | None = None
        self._accelerator = accelerator
        self._precision = precision
        self._collective = collective
        self._launcher = launcher
        self._cluster_environment = cluster_environment
        self.checkpoint_io: CheckpointIO = checkpoint_io if checkpoint_io is not None else TorchCheckpointIO()
        self.options: Any = options if options is not None else self.structure_options(config)
        collective.check_across_ranks = self.options.check_collectives
        self._lifecycle = BUILT  # built -> set up -> torn down (runtime.strategies.guard)
        self._set_up_optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        # id -> optimizer that passed its first optimizer_step's check (a dict, not a WeakSet: looked up on
        # every step, where WeakSet's Python-level __contains__ is a call layer of its own)
        self._checked_optimizers: dict[int, weakref.ref[Any]] = {}
        # id -> parameter that setup_module replaced (by id: tensors compare elementwise, not by identity)
        self._replaced_parameters: dict[int, weakref.ref[torch.Tensor]] = {}
        self._preemption: PreemptionState | None = None  # while the work runs with preemption_signal set

    @classmethod
    def assemble(
        cls,
        config: ResolvedConfig,
        accelerator: type[Accelerator],
        precision: type[Precision],
        collective: type[Collective],
        cluster_environment: type[ClusterEnvironment],
        launcher: type[Launcher] | None,
    ) -> Strategy:
        """A strategy of this class for ``config``, with a new component of each class given.

        :func:`runtime.build` gives the classes the config names; each rank a launch starts gives its
        launching strategy's own (so a strategy made by hand launches ranks like itself).
        """
        device = accelerator()
        precision_plugin = precision(device)
        communication = collective()
        cluster = cluster_environment(config)
        options = cls.structure_options(config)
        starter = None
        if launcher is not None:
            starter = launcher(
                config,
                cluster,
                timeout=options.timeout,
                rank_output=options.rank_output,
                max_restarts=options.max_restarts,
                on_cpu=device.computes_on_cpu,
            )
        strategy = cls(
            config,
            accelerator=device,
            precision=precision_plugin,
            collective=communication,
            launcher=starter,
            cluster_environment=cluster,
            options=options,
        )
        # What each rank it launches assembles from: a strategy may wrap a component it was given (DeepSpeed's
        # precision), whose class is then not the one to make the rank's from.
        strategy._parts = (accelerator, precision, collective, cluster_environment, launcher)
        return strategy

    @classmethod
    def structure_options(cls, config: ResolvedConfig) -> StrategyOptions:
        """``config.strategy_options`` as this class's :attr:`Options` (a clear error if they do not fit)."""
        return structure_options(config.strategy, cls.Options, config.strategy_options)

    @property
    def use_distributed_sampler(self) -> bool:
        return bool(self.options.use_distributed_sampler)

    @property
    def timeout(self) -> float | None:
        return self.options.timeout

    @property
    def restart_count(self) -> int:
        """Which attempt of the run this is: 0 first, N after N restarts (``TORCHELASTIC_RESTART_COUNT``,
        set by ``resolver run --max-restarts``, ``launch(..., max_restarts=N)`` and torchrun)."""
        return restart_count()

    # -- components and identity --------------------------------------------------------------

    @property
    def config(self) -> ResolvedConfig:
        """The resolved config this strategy was built from (with this process's ranks)."""
        return self._config

    @property
    def accelerator(self) -> Accelerator:
        return self._accelerator

    @property
    def precision(self) -> Precision:
        return self._precision

    @property
    def collective(self) -> Collective:
        return self._collective

    @property
    def launcher(self) -> Launcher | None:
        """``None`` when the processes were started outside (torchrun, srun, ...) or there is one."""
        return self._launcher

    @property
    def cluster_environment(self) -> ClusterEnvironment:
        return self._cluster_environment

    @property
    def global_rank(self) -> int:
        return self._config.global_rank

    @property
    def local_rank(self) -> int:
        return self._config.local_rank

    @property
    def node_rank(self) -> int:
        return self._config.node_rank

    @property
    def world_size(self) -> int:
        return self._config.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def root_device(self) -> torch.device:
        """The device this process computes on."""
        return self._accelerator.root_device(self.local_rank, self._config.device_ids)

    # -- running ------------------------------------------------------------------------------

    def launch(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run ``fn(strategy, *args, **kwargs)`` in every rank; return rank 0's result here.

        Each rank gets its own strategy, of this class with new components of this one's classes, for
        this one's config with that rank's ``global_rank``/``local_rank``; a rank the launcher runs in this
        process (the ``ddp`` launcher's rank 0) gets this one. Its environment is set up (device selected,
        process group joined) before ``fn`` runs and torn down after.
        :func:`runtime.launchers._launching.launch_ranks` runs the launch.
        """
        try:
            return launch_ranks(self, self._rank_maker(), fn, args, kwargs)  # type: ignore[no-any-return]
        except PeerStoppedAnsweringError as exc:
            if self._launcher is not None:
                raise
            # this process is the rank: its message says it all, so the user's lines, not the runtime's
            # (caught here, where the user called, so that no frame of the launch stands above it)
            raise users_frames_only(exc) from None

    def _rank_maker(self) -> Callable[[ResolvedConfig], Strategy]:
        """How each rank a launcher starts makes its own strategy: :meth:`assemble` with this one's classes."""
        parts = self._parts or (
            type(self._accelerator),
            type(self._precision),
            type(self._collective),
            type(self._cluster_environment),
            None if self._launcher is None else type(self._launcher),
        )
        return functools.partial(type(self).assemble, **dict(zip(_PART_NAMES, parts, strict=True)))

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run ``fn(self, *args, **kwargs)`` in this process as this strategy's rank.

        With the option ``preemption_signal``, the signal sets this rank's flag while ``fn`` runs, and
        when the ranks agreed on it (:meth:`preempted`) the result is a :class:`runtime.preemption.Preempted`.
        """
        with collector_paused():
            self.setup_environment()
        try:
            with catching(self) as self._preemption:
                result = fn(self, *args, **kwargs)
                record_finished(self.global_rank)  # a peer still waiting for this rank learns it skipped a call
                return finish(self, self._preemption, result)
        except BaseException as exc:
            stamp_failure_time(exc)
            raise
        finally:
            self.teardown()

    def setup_environment(self, store: Any = None) -> None:
        """Select this process's device and join the collective. ``store``: a key-value store every
        rank has already met in (``resolver check``'s), joined through instead of opening one (the
        ranks then wait for each other there no longer than :attr:`timeout`)."""
        device = self.root_device
        self._accelerator.set_device(device)
        self._collective.setup(
            Rendezvous(
                rank=self.global_rank,
                world_size=self.world_size,
                backend=self._config.process_group_backend,
                master_addr=self._cluster_environment.main_address,
                master_port=self._cluster_environment.main_port,
                timeout=self.timeout,
                device=device,
                rendezvous_timeout=rendezvous_timeout(self._config) if store is None else self.timeout,
                store=store,
            )
        )

    def preempted(self, step: int | None = None) -> bool:
        """Whether the run is being pre-empted: ``True`` on every rank at the same call once any rank got
        the ``preemption_signal`` (an ``all_reduce`` of the ranks' flags; call it on every rank, once a
        step). Then save a checkpoint and return. ``step`` names the step in the end message (default:
        how many checks came before). Always ``False``, with no exchange, without ``preemption_signal``."""
        return agree(self, self._preemption, step)

    def teardown(self) -> None:
        """Leave the collective and release device state. What the strategy and its components learned during
        the run goes too (the optimizers and parameters set up, the collective's agreed calls, a scaler), so
        that the same strategy can run again (a restarted attempt, a second launch) as a new one would."""
        try:
            self._collective.teardown()
            self._accelerator.teardown()
        finally:
            self._precision.teardown()
            self._set_up_optimizers = weakref.WeakSet()
            self._checked_optimizers.clear()
            self._replaced_parameters.clear()
            self._preemption = None

    # -- modules and data ---------------------------------------------------------------------

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

    # -- checkpoints --------------------------------------------------------------------------

    def save_checkpoint(self, path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
        """Global rank 0 writes ``state`` to ``path``; every rank then waits until it is written (and raises
        rank 0's error alike if the write failed: ``CheckpointNoSpaceError`` for a full disk).

        Modules and optimizers in ``state`` are saved as their ``state_dict()`` (modules
        unwrapped first, so the file loads into a plain module).
        """
        from runtime.strategies.checkpoint_saving import settle_save

        checkpoint = {key: self._saveable(value) for key, value in state.items()}
        failure: BaseException | None = None
        if self.is_global_zero:
            try:
                self.checkpoint_io.save(checkpoint, path)
            except Exception as exc:  # noqa: BLE001 (every rank raises it alike, in settle_save)
                failure = exc
        settle_save(self, path, failure, None, directory=False)  # the barrier: every rank learns the outcome

    def load_checkpoint(self, path: str | os.PathLike[str], state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Read the checkpoint on every rank (onto :attr:`root_device`) and return it.

        Modules and optimizers in ``state`` get their saved state loaded in place.
        """
        checkpoint = self.checkpoint_io.load(path, map_location=self.root_device)
        for key, target in (state or {}).items():
            if key not in checkpoint:
                raise KeyError(f"the checkpoint at {path} has no entry {key!r} (it has {sorted(checkpoint)})")
            if isinstance(target, torch.nn.Module):
                self.unwrap_module(target).load_state_dict(checkpoint[key])
            elif isinstance(target, torch.optim.Optimizer):
                target.load_state_dict(checkpoint[key])
        return checkpoint

    def latest_checkpoint(self, folder: str | os.PathLike[str]) -> Path | None:
        """The newest complete checkpoint saved into ``folder`` (one :meth:`save_checkpoint` path per
        entry: ``folder/epoch-3.ckpt``, or a directory for DeepSpeed and sharded FSDP), or ``None``.

        A save cut short (a rank killed while writing) is skipped: its file never got its name, or its
        directory never got the mark rank 0 adds once every rank has written; so is a damaged one (a file
        :attr:`checkpoint_io` does not verify, a directory whose files are not as the mark lists), and rank 0
        says on stderr which and why (:func:`runtime.checkpoint.latest_checkpoint`).
        """
        return latest_checkpoint(folder, self.checkpoint_io, report=self.global_rank == 0)

    def _saveable(self, value: Any) -> Any:
        if isinstance(value, torch.nn.Module):
            return self.unwrap_module(value).state_dict()
        if isinstance(value, torch.optim.Optimizer):
            return value.state_dict()
        return value

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rank {self.global_rank}/{self.world_size}, device={self.root_device}, "
            f"precision={self._config.precision}, launcher={self._config.launcher})"
        )


Strategy.save_checkpoint = recording_saves(Strategy.save_checkpoint)  # type: ignore[method-assign]
guard_methods(Strategy)
