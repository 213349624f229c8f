"""``resolver check`` with the ``xla`` launcher: the replicas torch_xla starts run the check.

torch_xla's launcher starts one replica per XLA device and numbers them itself, so the check
cannot start its ranks as processes the way :mod:`runtime.preflight.local` does: it launches
:func:`_replica` through the strategy's own launcher, each replica takes its rank from
torch_xla's runtime and runs the steps (:func:`~runtime.preflight.rank.check_rank`) with a store
on a free port of this machine, and rank 0 returns every replica's state. The collectives run on
the XLA collective; the ring is skipped (XLA has no point-to-point messages), and so is speed
(XLA records collectives lazily into each replica's graph, so a time per call would measure graph
building and compilation, not the link). The engine step takes one step through the XLA strategy.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from resolver import ResolvedConfig
from runtime.preflight.report import CheckReport, RankState, merge

if TYPE_CHECKING:
    from runtime.strategies.base import Strategy

__all__ = ["check_xla"]

#: Seconds torch_xla may take to start the replicas and compile the engine step, beyond the steps' timeouts.
STARTUP_ALLOWANCE = 120.0


def _replica(strategy: Strategy, timeout: float, port: int, folder: str) -> list[dict[str, Any]] | None:
    """One replica's check (module level: the launcher pickles it by name). ``strategy`` is the
    replica's, set up by the launcher: its config has the rank torch_xla's runtime gave. Its state
    goes to ``folder`` after every step, so a replica that fails or hangs is named with its step."""
    from runtime.preflight.rank import check_rank

    config = strategy.config
    _, everyone = check_rank(config, "127.0.0.1", port, timeout=timeout,
                             state_file=str(Path(folder) / f"rank-{config.global_rank}.json"),
                             source="a free port of this machine (the XLA replicas' check store)",
                             strategy=strategy)  # fmt: skip
    return None if everyone is None else [state.to_dict() for state in everyone]


def check_xla(config: ResolvedConfig, *, timeout: float) -> CheckReport:
    """Launch the check in torch_xla's replicas and merge rank 0's view of every replica; a replica
    that raised, died or hung (the launcher's error) is named with the step it was in."""
    from runtime._protocol.ports import find_free_port
    from runtime.build import build
    from runtime.errors import LaunchTimeoutError, RankFailedError
    from runtime.preflight.local import _read_state
    from runtime.preflight.report import STEPS

    started = time.monotonic()
    strategy = build(config, timeout=STARTUP_ALLOWANCE + timeout * len(STEPS))  # bounds the launch
    folder = Path(tempfile.mkdtemp(prefix="resolver-check-"))
    try:
        try:
            found = strategy.launch(_replica, timeout, find_free_port(), str(folder))
            if found is None:  # rank 0 gathers every replica's state: only the other replicas return None
                raise RuntimeError("the XLA check's rank 0 returned no replica states")
            states = [RankState.from_dict(s) for s in found]
        except (RankFailedError, LaunchTimeoutError) as exc:
            states = []
            for rank in range(config.world_size):
                state = _read_state(folder / f"rank-{rank}.json", rank)
                if isinstance(exc, RankFailedError) and rank == exc.rank:
                    last = str(exc).splitlines()[0][:300]  # "rank N failed: ExceptionType: message"
                    state = attrs.evolve(state, exit=exc.exit_code if exc.exit_code is not None else 1, output=last)
                elif isinstance(exc, LaunchTimeoutError) and rank in exc.ranks:
                    state = attrs.evolve(state, stopped=True)
                else:
                    state = attrs.evolve(state, exit=0 if state.current == "done" else None)
                states.append(state)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return merge(states, config.world_size, timeout=timeout, summary=config.summary(),
                 seconds=time.monotonic() - started)  # fmt: skip
