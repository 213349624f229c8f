"""``build(config)``: a ``ResolvedConfig`` in, the strategy with all its components out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from resolver import ResolvedConfig
from runtime._protocol.rank_environment import launched_config
from runtime._protocol.restarts import check_max_restarts
from runtime.errors import RuntimeConfigError
from runtime.registry import (
    ACCELERATORS,
    CLUSTER_ENVIRONMENTS,
    COLLECTIVES,
    LAUNCHERS,
    PRECISIONS,
    STRATEGIES,
)

if TYPE_CHECKING:
    from runtime.strategies.base import Strategy

__all__ = ["build"]


def build(config: ResolvedConfig, **strategy_options: Any) -> Strategy:
    """Construct the strategy ``config`` describes, for the process ``config``'s ranks name.

    Every component is looked up by the name in the config in its registry (strategies,
    accelerators, precisions, collectives, launchers, cluster environments). Keyword arguments
    are strategy options (e.g. ``use_distributed_sampler=False``, ``timeout=60``,
    ``find_unused_parameters=True``); they are merged into ``config.strategy_options`` so the
    ranks a launcher starts receive them too, and structured into the strategy's declared
    ``Options`` class (an unknown option or a wrong type is a ``RuntimeConfigError``).
    """
    if strategy_options:
        config = attrs.evolve(config, strategy_options={**config.strategy_options, **strategy_options})
    accelerator_class = ACCELERATORS.get(config.accelerator)
    if not accelerator_class.is_available():
        raise RuntimeConfigError(
            f"the config runs on accelerator {config.accelerator!r}, which this machine does not have",
            hint="resolve the flags on the machine that runs the work (or pass accelerator='cpu')",
        )
    # looked up in this order, so that of two missing packages the same one is named first
    precision_class = PRECISIONS.get(config.precision)
    collective_class = COLLECTIVES.get(config.collective)
    cluster_class = CLUSTER_ENVIRONMENTS.get(config.cluster_environment)
    strategy_class = STRATEGIES.get(config.strategy)
    strategy = strategy_class.assemble(
        config,
        accelerator=accelerator_class,
        precision=precision_class,
        collective=collective_class,
        cluster_environment=cluster_class,
        launcher=None if config.launcher is None else LAUNCHERS.get(config.launcher),
    )
    max_restarts = strategy.options.max_restarts
    if config.launcher is None and max_restarts and launched_config() is None:
        # Processes started by torchrun, SLURM, MPI...: restarts are theirs. One process: nothing restarts it.
        started_by = config.cluster_environment if strategy.cluster_environment.starts_processes else None
        if started_by is None:
            raise RuntimeConfigError(
                f"max_restarts={max_restarts}: a run of one process ({config.strategy!r}) has no launcher "
                "to restart it",
                hint="drop max_restarts, or run on several devices (e.g. strategy='ddp_spawn')",
            )
        check_max_restarts(
            max_restarts,
            num_nodes=config.num_nodes,
            started_by=started_by,
            restart_hint=strategy.cluster_environment.restart_hint,
        )
    return strategy
