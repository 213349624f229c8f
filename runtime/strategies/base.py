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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from runtime._protocol.gc_pause import collector_paused
from runtime._protocol.peers import record_finished
from runtime._protocol.rank_environment import rendezvous_timeout
from runtime._protocol.restarts import restart_count
from runtime.checkpoint import CheckpointIO, TorchCheckpointIO
from runtime.collectives.rendezvous import Rendezvous
from runtime.errors import PeerStoppedAnsweringError, stamp_failure_time, users_frames_only
from runtime.launchers._launching import launch_ranks
from runtime.preemption import PreemptionState, agree, catching, finish, recording_saves
from runtime.strategies._checkpoints import Checkpoints
from runtime.strategies._modules_and_data import SETUP_CALL, ModulesAndData
from runtime.strategies.guard import BUILT, DATALOADER_USES, DataLoaderUse, guard_methods
from runtime.strategies.options import StrategyOptions, structure_options

if TYPE_CHECKING:
    from resolver import ResolvedConfig
    from runtime.accelerators.base import Accelerator
    from runtime.cluster.base import ClusterEnvironment
    from runtime.collectives.base import Collective
    from runtime.launchers.base import Launcher
    from runtime.precision.base import Precision

__all__ = ["DATALOADER_USES", "SETUP_CALL", "DataLoaderUse", "Strategy"]

R = TypeVar("R")
#: The keyword names of :meth:`Strategy.assemble`'s component classes, in order.
_PART_NAMES = ("accelerator", "precision", "collective", "cluster_environment", "launcher")


class Strategy(ModulesAndData, Checkpoints):
    """How one process of a run does its part. Register subclasses with :func:`runtime.register_strategy`.

    :func:`runtime.build` constructs it from a ``ResolvedConfig``: the components come from the
    registries, and ``config.strategy_options`` are structured into the class's :attr:`Options`
    (an attrs class; a strategy with options of its own subclasses
    :class:`~runtime.strategies.options.StrategyOptions`) and available as :attr:`options`.

    Here: its components, its rank, and running a launch and a rank. What a training step calls (modules,
    optimizers, data) is :class:`~runtime.strategies._modules_and_data.ModulesAndData`'s; saving and loading
    checkpoints :class:`~runtime.strategies._checkpoints.Checkpoints`'.
    """

    #: The options this strategy takes (declared once; ``runtime.build`` structures them).
    Options: ClassVar[type[StrategyOptions]] = StrategyOptions
    #: Whether the config gives this process's ranks before set-up (``False``: the engine assigns them
    #: when the environment is set up, so rank-dependent calls wait for it).
    ranks_from_config: ClassVar[bool] = True
    #: Whether every method works without set-up too (one process, nothing to join: ``single_device``).
    usable_unset: ClassVar[bool] = False

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
        self._forget_set_up()  # the optimizers and parameters set up (ModulesAndData)
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
            self._forget_set_up()
            self._preemption = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rank {self.global_rank}/{self.world_size}, device={self.root_device}, "
            f"precision={self._config.precision}, launcher={self._config.launcher})"
        )


guard_methods(Strategy)  # its parts' methods are guarded where they are defined
