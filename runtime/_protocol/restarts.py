"""Restarting every local rank after one fails, up to ``max_restarts`` times (torchrun's ``--max-restarts``).

Each attempt is a whole launch: fresh rank processes (the ``subprocess`` launcher calls the
function again in the launching process), a fresh report folder and a fresh rendezvous at the same
address and port. Only the failure of a rank's work (:class:`~runtime.errors.RankFailedError`: an
exception, a non-zero exit, a death by signal) starts another attempt; a timeout, a configuration
error and a ``KeyboardInterrupt``/``SIGTERM`` of the launching process end the run at once. The
failure is reported on stderr before each restart; after the last attempt it is raised as it would
be without restarts. The ranks see the attempt in ``TORCHELASTIC_RESTART_COUNT`` (0 first) and the
limit in ``TORCHELASTIC_MAX_RESTARTS`` (``Strategy.restart_count`` reads the former).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from runtime.errors import RankFailedError, RuntimeConfigError

__all__ = [
    "MAX_RESTARTS_VARIABLE",
    "RESTART_COUNT_VARIABLE",
    "check_max_restarts",
    "restart_count",
    "restart_variables",
    "run_attempts",
]

#: The attempt a rank belongs to: 0 for the first, N after N restarts (torchrun's name).
RESTART_COUNT_VARIABLE = "TORCHELASTIC_RESTART_COUNT"
#: How many restarts the run allows (torchrun's name).
MAX_RESTARTS_VARIABLE = "TORCHELASTIC_MAX_RESTARTS"

R = TypeVar("R")


def restart_variables(attempt: int, max_restarts: int) -> dict[str, str]:
    """The variables that tell a rank of attempt ``attempt`` (0 first) where it stands."""
    return {RESTART_COUNT_VARIABLE: str(attempt), MAX_RESTARTS_VARIABLE: str(max_restarts)}


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """This process's attempt: ``TORCHELASTIC_RESTART_COUNT`` (set by ``resolver run``, torchrun and
    the runtime's launchers when restarts are allowed), 0 when unset or unreadable."""
    text = (os.environ if environ is None else environ).get(RESTART_COUNT_VARIABLE, "0")
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def check_max_restarts(
    max_restarts: int, *, num_nodes: int, started_by: str | None, restart_hint: str = "", rendezvous: bool = False
) -> None:
    """Refuse restarts the launch cannot do: ``started_by`` names what started the processes (torchrun,
    SLURM, ...) when it was not this launch, ``restart_hint`` how to have it restart them (its cluster
    environment's :attr:`~runtime.cluster.base.ClusterEnvironment.restart_hint`); and several nodes need a
    rendezvous they all agree on (``rendezvous``: this launch has one, torch's elastic rendezvous that
    ``resolver run`` joins on every node)."""
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise RuntimeConfigError(
            f"max_restarts={max_restarts!r} is not a number of restarts", hint="pass a whole number, 0 or more"
        )
    if max_restarts == 0:
        return
    if started_by is not None:
        raise RuntimeConfigError(
            f"max_restarts={max_restarts} asks this launch to restart failed ranks, but the processes were started "
            f"by {started_by!r} (the cluster environment), so restarts belong to it",
            hint=f"drop max_restarts here and {restart_hint}",
        )
    if num_nodes > 1 and not rendezvous:
        raise RuntimeConfigError(
            f"max_restarts={max_restarts} with {num_nodes} nodes: a strategy's launch restarts one node's ranks, "
            "with no rendezvous to bring the nodes' attempts together",
            hint="start each node with `resolver run --nnodes N --rdzv-endpoint HOST:PORT --max-restarts K "
            "script.py`, or with a script calling runtime.launch(fn, num_nodes=N, max_restarts=K, "
            "master_addr=HOST, master_port=PORT) (torch's elastic rendezvous restarts every node together), or drop "
            "max_restarts",
        )


def run_attempts(attempt: Callable[[int], R], max_restarts: int, who: str) -> R:
    """``attempt(0)``, then again with 1, 2, ... after each :class:`RankFailedError`, at most
    ``max_restarts`` times; the last failure is raised. ``who`` prefixes the report on stderr."""
    for number in range(max_restarts + 1):
        try:
            return attempt(number)
        except RankFailedError as problem:
            if number == max_restarts:
                raise
            report_restart(problem, number + 1, max_restarts, who)
    raise AssertionError("unreachable")  # the loop returns or raises


def report_restart(problem: object, restart: int, max_restarts: int, who: str) -> None:
    """Say on stderr which rank failed and how (its traceback too), and that restart ``restart`` begins."""
    print(
        f"{who}: {problem}\n{who}: restarting every local rank (restart {restart} of {max_restarts}, "
        f"at {time.strftime('%H:%M:%S')})",
        file=sys.stderr,
        flush=True,
    )
