"""The runtime: builds a strategy from a ``ResolvedConfig`` and runs distributed work with it.

Build and launch::

    import resolver, runtime

    config = resolver.resolve(devices=2, strategy="ddp")
    strategy = runtime.build(config)
    result = strategy.launch(train, epochs)        # train(strategy, epochs) in every rank

or in one call: ``runtime.launch(train, epochs, devices=2, strategy="ddp")``. See
``docs/runtime.md``.
"""

from runtime import accelerators as _accelerators  # noqa: F401  (registers the built-ins)
from runtime import cluster as _cluster  # noqa: F401
from runtime import collectives as _collectives  # noqa: F401
from runtime import launchers as _launchers  # noqa: F401
from runtime import optional_engines as _optional_engines  # noqa: F401
from runtime import precision as _precision  # noqa: F401
from runtime import strategies as _strategies  # noqa: F401
from runtime.accelerators.base import Accelerator
from runtime.build import build
from runtime.checkpoint import CheckpointIO, TorchCheckpointIO
from runtime.cluster.base import ClusterEnvironment
from runtime.collectives.base import Collective, CollectiveGroup
from runtime.collectives.errors import CollectiveMisuseError, CollectiveNotSupportedError
from runtime.errors import (
    DataLoaderWarning,
    LaunchTimeoutError,
    MissingDependencyError,
    PortInUseError,
    RankFailedError,
    RuntimeConfigError,
)
from runtime.launch import launch
from runtime.launchers.base import Launcher
from runtime.launchers.rank_output import RankOutput
from runtime.precision.base import Precision
from runtime.rank_environment import launched_config
from runtime.registry import (
    register_accelerator,
    register_cluster_environment,
    register_collective,
    register_launcher,
    register_precision,
    register_strategy,
)
from runtime.script import run_script
from runtime.strategies.base import Strategy
from runtime.strategies.options import StrategyOptions


def _answer_stack_requests_from_the_start() -> None:
    """In a launched rank, answer the launcher's stack requests from import on, not only from launch()."""
    from runtime.launchers.reports import RankReports
    from runtime.rank_environment import launched_config

    reports = RankReports.from_environment()
    config = launched_config() if reports is not None else None
    if reports is not None and config is not None:
        reports.answer_stack_requests(config.global_rank)


_answer_stack_requests_from_the_start()

__all__ = [
    "Accelerator",
    "CheckpointIO",
    "ClusterEnvironment",
    "Collective",
    "CollectiveGroup",
    "CollectiveMisuseError",
    "CollectiveNotSupportedError",
    "DataLoaderWarning",
    "LaunchTimeoutError",
    "Launcher",
    "MissingDependencyError",
    "PortInUseError",
    "Precision",
    "RankFailedError",
    "RankOutput",
    "RuntimeConfigError",
    "Strategy",
    "StrategyOptions",
    "TorchCheckpointIO",
    "build",
    "launch",
    "launched_config",
    "register_accelerator",
    "register_cluster_environment",
    "register_collective",
    "register_launcher",
    "register_precision",
    "register_strategy",
    "run_script",
]
