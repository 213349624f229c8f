"""The runtime: builds a strategy from a ``ResolvedConfig`` and runs distributed work with it.

Build and launch::

    import resolver, runtime

    config = resolver.resolve(devices=2, strategy="ddp")
    strategy = runtime.build(config)
    result = strategy.launch(train, epochs)        # train(strategy, epochs) in every rank

or in one call: ``runtime.launch(train, epochs, devices=2, strategy="ddp")``. See
``docs/runtime.md``.

Every public name is imported on first access, and the built-in components are registered on
each registry's first use (:mod:`runtime.registry`): a process that only starts scripts
(``resolver run``) does not import torch.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if importlib.util.find_spec("torch") is None:
    raise ImportError("the runtime needs torch, which is not installed")

if TYPE_CHECKING:
    # explicit re-exports (name as name), for type checkers
    from runtime.accelerators.base import Accelerator as Accelerator
    from runtime.checkpoint import CheckpointIO as CheckpointIO
    from runtime.checkpoint import TorchCheckpointIO as TorchCheckpointIO
    from runtime.cluster.base import ClusterEnvironment as ClusterEnvironment
    from runtime.collectives.base import Collective as Collective
    from runtime.collectives.base import CollectiveGroup as CollectiveGroup
    from runtime.collectives.errors import BarrierTimeoutError as BarrierTimeoutError
    from runtime.collectives.errors import CollectiveArgumentTypeError as CollectiveArgumentTypeError
    from runtime.collectives.errors import CollectiveMisuseError as CollectiveMisuseError
    from runtime.collectives.errors import CollectiveNotSetUpError as CollectiveNotSetUpError
    from runtime.collectives.errors import CollectiveNotSupportedError as CollectiveNotSupportedError
    from runtime.collectives.errors import ReduceOpDtypeError as ReduceOpDtypeError
    from runtime.collectives.handles import CollectiveHandle as CollectiveHandle
    from runtime.collectives.rendezvous import Rendezvous as Rendezvous
    from runtime.errors import CheckpointDamagedError as CheckpointDamagedError
    from runtime.errors import CheckpointError as CheckpointError
    from runtime.errors import CheckpointNoSpaceError as CheckpointNoSpaceError
    from runtime.errors import CheckpointUntrustedError as CheckpointUntrustedError
    from runtime.errors import DataLoaderError as DataLoaderError
    from runtime.errors import DataLoaderWarning as DataLoaderWarning
    from runtime.errors import HintedError as HintedError
    from runtime.errors import LaunchError as LaunchError
    from runtime.errors import LaunchTimeoutError as LaunchTimeoutError
    from runtime.errors import MissingDependencyError as MissingDependencyError
    from runtime.errors import PeerLostError as PeerLostError
    from runtime.errors import PeerStoppedAnsweringError as PeerStoppedAnsweringError
    from runtime.errors import PortInUseError as PortInUseError
    from runtime.errors import PreemptedError as PreemptedError
    from runtime.errors import ProgressTimeoutError as ProgressTimeoutError
    from runtime.errors import RankFailedError as RankFailedError
    from runtime.errors import RendezvousTimeoutError as RendezvousTimeoutError
    from runtime.errors import RendezvousWaitError as RendezvousWaitError
    from runtime.errors import RuntimeConfigError as RuntimeConfigError
    from runtime.errors import StrategyArgumentError as StrategyArgumentError
    from runtime.errors import StrategyMisuseError as StrategyMisuseError
    from runtime.global_zero import is_global_zero as is_global_zero
    from runtime.launchers.base import Launcher as Launcher
    from runtime.launchers.rank_output import RankOutput as RankOutput
    from runtime.precision.base import Precision as Precision
    from runtime.preflight import check as check
    from runtime.rank_context import launched_config as launched_config
    from runtime.registry import register_accelerator as register_accelerator
    from runtime.registry import register_cluster_environment as register_cluster_environment
    from runtime.registry import register_collective as register_collective
    from runtime.registry import register_launcher as register_launcher
    from runtime.registry import register_precision as register_precision
    from runtime.registry import register_strategy as register_strategy
    from runtime.script import run_script as run_script
    from runtime.strategies.base import Strategy as Strategy
    from runtime.strategies.options import StrategyOptions as StrategyOptions
    from runtime.strategies.xla import XLACheckpointIO as XLACheckpointIO

# Imported here, not on first access: they share their name with their module, which would
# otherwise take their place as an attribute once something imports it. Neither imports torch.
from runtime.build import build as build  # noqa: E402
from runtime.launch import launch as launch  # noqa: E402

#: Each public name (but build and launch) and the module that defines it.
_MODULES = {
    "Accelerator": "runtime.accelerators.base",
    "BarrierTimeoutError": "runtime.collectives.errors",
    "CheckpointDamagedError": "runtime.errors",
    "CheckpointError": "runtime.errors",
    "CheckpointIO": "runtime.checkpoint",
    "CheckpointNoSpaceError": "runtime.errors",
    "CheckpointUntrustedError": "runtime.errors",
    "ClusterEnvironment": "runtime.cluster.base",
    "Collective": "runtime.collectives.base",
    "CollectiveArgumentTypeError": "runtime.collectives.errors",
    "CollectiveGroup": "runtime.collectives.base",
    "CollectiveHandle": "runtime.collectives.handles",
    "CollectiveMisuseError": "runtime.collectives.errors",
    "CollectiveNotSetUpError": "runtime.collectives.errors",
    "CollectiveNotSupportedError": "runtime.collectives.errors",
    "DataLoaderError": "runtime.errors",
    "DataLoaderWarning": "runtime.errors",
    "HintedError": "runtime.errors",
    "LaunchError": "runtime.errors",
    "LaunchTimeoutError": "runtime.errors",
    "Launcher": "runtime.launchers.base",
    "MissingDependencyError": "runtime.errors",
    "PeerLostError": "runtime.errors",
    "PeerStoppedAnsweringError": "runtime.errors",
    "PortInUseError": "runtime.errors",
    "PreemptedError": "runtime.errors",
    "ProgressTimeoutError": "runtime.errors",
    "Precision": "runtime.precision.base",
    "RankFailedError": "runtime.errors",
    "Rendezvous": "runtime.collectives.rendezvous",
    "RankOutput": "runtime.launchers.rank_output",
    "ReduceOpDtypeError": "runtime.collectives.errors",
    "RendezvousTimeoutError": "runtime.errors",
    "RendezvousWaitError": "runtime.errors",
    "RuntimeConfigError": "runtime.errors",
    "Strategy": "runtime.strategies.base",
    "StrategyArgumentError": "runtime.errors",
    "StrategyMisuseError": "runtime.errors",
    "StrategyOptions": "runtime.strategies.options",
    "TorchCheckpointIO": "runtime.checkpoint",
    "XLACheckpointIO": "runtime.strategies.xla",  # needs torch_xla: importing it without raises ImportError
    "check": "runtime.preflight",
    "is_global_zero": "runtime.global_zero",
    "launched_config": "runtime.rank_context",
    "register_accelerator": "runtime.registry",
    "register_cluster_environment": "runtime.registry",
    "register_collective": "runtime.registry",
    "register_launcher": "runtime.registry",
    "register_precision": "runtime.registry",
    "register_strategy": "runtime.registry",
    "run_script": "runtime.script",
}

# XLACheckpointIO is left out of the star-import list: it needs torch_xla (runtime.XLACheckpointIO imports it).
__all__ = sorted([*(name for name in _MODULES if name != "XLACheckpointIO"), "build", "launch"])


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")  # a subpackage: runtime.strategies
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _answer_stack_requests_from_the_start() -> None:
    """In a launched rank, answer the launcher's stack requests from import on, not only from launch()."""
    from runtime._protocol.rank_environment import launched_config
    from runtime._protocol.rank_files import RankFiles

    reports = RankFiles.from_environment()
    config = launched_config() if reports is not None else None
    if reports is not None and config is not None:
        reports.answer_stack_requests(config.global_rank)


_answer_stack_requests_from_the_start()
