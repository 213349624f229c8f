"""A strategy's launch: which way each rank of the run goes in (:meth:`runtime.Strategy.launch` hands it here).

Three cases, one entry (:func:`runtime._protocol.launched_rank.enter_rank`) for all: without a
launcher this process is the rank (torchrun, SLURM or MPI started it, or the run is one process); in a
process a launcher already started (a re-run script), this must be the launch it was started for; else
the launcher starts the ranks, each entering with a strategy of its own made of this one's classes
(:data:`RankMaker`), but for a rank it runs in this process (``Launcher.runs_first_rank_here``), which
enters with this very strategy.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from runtime._protocol.launched_rank import RankStrategy, check_worker_entry, enter_rank
from runtime._protocol.rank_environment import launched_config
from runtime.preemption import exit_if_preempted, settle_preempted

if TYPE_CHECKING:
    from resolver import ResolvedConfig
    from runtime.cluster.base import ClusterEnvironment
    from runtime.launchers.base import Launcher

__all__ = ["LaunchingStrategy", "RankMaker", "launch_ranks"]

#: How a rank that a launcher starts makes its own strategy from its ``RESOLVER_CONFIG`` (picklable: it
#: travels to spawned ranks).
RankMaker = Callable[["ResolvedConfig"], RankStrategy]


class LaunchingStrategy(RankStrategy, Protocol):
    """What a launch asks of the strategy that launches (``runtime.strategies.base.Strategy``, above this
    module: a protocol here rather than an import of it)."""

    @property
    def launcher(self) -> Launcher | None: ...

    @property
    def cluster_environment(self) -> ClusterEnvironment: ...


def launch_ranks(
    strategy: LaunchingStrategy,
    make_rank: RankMaker,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run ``fn(strategy, *args, **kwargs)`` in every rank of ``strategy``'s run; return rank 0's result here."""
    config = strategy.config
    launcher = strategy.launcher
    if launcher is None:
        strategy.cluster_environment.check_started_by_cluster()  # before waiting for the others
        # A PeerStoppedAnsweringError goes up as it is: Strategy.launch shows it with the user's frames only.
        result = enter_rank(fn, args, kwargs, strategy=strategy)
        return settle_preempted(result, config, strategy.cluster_environment)
    if launched_config() is not None:
        # A worker (a re-run script, a `resolver run` rank): this must be the launch it was started
        # for, checked inside the entry so that a wrong call is reported.
        wanted = f"a launch of {config.strategy!r} on {config.num_devices} device(s)"
        check = functools.partial(check_worker_entry, config, wanted)
        result = enter_rank(fn, args, kwargs, build=make_rank, check=check)
        return exit_if_preempted(result, int(os.environ.get("RANK", "0")))
    if launcher.runs_first_rank_here:
        # This process is the node's first rank, for each attempt: the strategy it was given runs it (its
        # teardown drops what a run left in it, so a restart or a second launch starts afresh).
        return launcher.launch(enter_rank, fn, args, kwargs, strategy=strategy)
    return launcher.launch(enter_rank, fn, args, kwargs, build=make_rank)
