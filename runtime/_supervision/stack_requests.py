"""Asking rank processes for their Python stacks, and naming those that cannot answer.

A rank answers ``STACK_SIGNAL`` through :mod:`faulthandler`, even while it is blocked in a collective.
A process that cannot run at all does not: one stopped by ``SIGSTOP`` or ``SIGTSTP`` (state ``T``),
held by a debugger (``t``), or blocked in the kernel (``D``). Its silence is what names it: among
ranks that time out together, the ones that answered were running, the silent one is frozen.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from runtime._protocol import flight_recorder
from runtime._protocol.rank_files import STACK_SIGNAL, RankFiles
from runtime._supervision.rank_processes import RankProcess, process_state
from runtime.errors import SilentRank

__all__ = ["request_stacks"]

#: Seconds to wait for the stacks; a process in a state that cannot answer is given up after the first.
STACK_WAIT = 1.0
#: ...and one that runs (a slow answer on a busy machine) only after this many.
SLOW_STACK_WAIT = 3.0
_POLL_INTERVAL = 0.05
#: Process states (``/proc/<pid>/stat``) that cannot answer: stopped, stopped by a debugger, blocked in the kernel.
_CANNOT_ANSWER = frozenset({"T", "t", "D"})


def request_stacks(
    reports: RankFiles, processes: Mapping[int, RankProcess]
) -> tuple[dict[int, str], dict[int, SilentRank]]:
    """The Python stack of each rank process that answers, and the pid and state of each that does not.

    Only a rank that registered the stack handler is asked (the signal would kill any other).
    """
    asked = {rank: p for rank, p in processes.items() if reports.answers_stack_requests(rank)}
    if STACK_SIGNAL is None or not asked:
        return {}, {}
    for process in asked.values():
        process.send_signal(STACK_SIGNAL)
    start = time.monotonic()
    answered: set[int] = set()
    silent: dict[int, SilentRank] = {}
    while len(answered) + len(silent) < len(asked):
        answered.update(rank for rank in asked if reports.read_stack(rank).strip())
        time.sleep(_POLL_INTERVAL)
        waited = time.monotonic() - start
        if waited >= STACK_WAIT:
            states = {rank: process_state(p.pid) for rank, p in asked.items() if rank not in answered}
            silent = {rank: SilentRank(asked[rank].pid, state) for rank, state in states.items()
                      if state in _CANNOT_ANSWER or waited >= SLOW_STACK_WAIT}  # fmt: skip
    time.sleep(_POLL_INTERVAL)  # let a dump that is still being written finish
    stacks = {rank: flight_recorder.without_own_thread(reports.read_stack(rank)) for rank in answered}
    # One that exited meanwhile was not frozen.
    return stacks, {rank: process for rank, process in silent.items() if asked[rank].poll() is None}
