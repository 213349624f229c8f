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
    accelerator = accelerator_class()
    precision = PRECISIONS.get(config.precision)(accelerator)
    collective = COLLECTIVES.get(config.collective)()
    cluster_environment = CLUSTER_ENVIRONMENTS.get(config.cluster_environment)(config)
    strategy_class = STRATEGIES.get(config.strategy)
    options = strategy_class.structure_options(config)
    launcher = None
    if config.launcher is not None:
        launcher = LAUNCHERS.get(config.launcher)(
            config,
            cluster_environment,
            timeout=options.timeout,
            rank_output=options.rank_output,
            max_restarts=options.max_restarts,
            on_cpu=accelerator.computes_on_cpu,
        )
    elif options.max_restarts and launched_config() is None:
        # Processes started by torchrun, SLURM, MPI...: restarts are theirs. One process: nothing restarts it.
        started_by = config.cluster_environment if cluster_environment.starts_processes else None
        if started_by is None:
            raise RuntimeConfigError(
                f"max_restarts={options.max_restarts}: a run of one process ({config.strategy!r}) has no launcher "
                "to restart it",
                hint="drop max_restarts, or run on several devices (e.g. strategy='ddp_spawn')",
            )
        check_max_restarts(options.max_restarts, num_nodes=config.num_nodes, started_by=started_by)
    return strategy_class(
        config,
        accelerator=accelerator,
        precision=precision,
        collective=collective,
        launcher=launcher,
        cluster_environment=cluster_environment,
        options=options,
        build=build,  # each rank its launcher starts builds its own strategy with it
    )
