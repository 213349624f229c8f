"""Watching rank processes: first failure wins, the rest are stopped, nothing is left behind.

A :class:`Supervisor` waits on the processes of one launch without polling: it sleeps until a
process exits (its sentinel: a ``pidfd`` for a ``Popen``), a rank rings the launch's doorbell
(it wrote a report: joined, finished, error), :meth:`Supervisor.stop` is called, or a deadline
comes. When one exits with an error it stops
the others (``SIGTERM``, then ``SIGKILL`` after a grace period) and reaps every one; at the
launch deadline, or at the rendezvous deadline for ranks that never reached the rendezvous, it
asks the ranks still running for their Python stacks, then stops them (a rank that cannot answer,
stopped by ``SIGSTOP`` or blocked in the kernel, is named by its silence:
:mod:`~runtime._supervision.stack_requests`).

What happened, and which rank is blamed for it, is an :class:`~runtime._supervision.outcome.Outcome`.

A rank that runs inside the launching process (the ``subprocess`` launcher's rank 0, an
:class:`~runtime._supervision.in_process_rank.InProcessRank`) takes part in the launch timeout: at the
deadline its stack is taken with the others', and unless it waits in a collective (stopping its
peers ends that) it is interrupted before its peers are stopped.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from runtime._protocol import flight_recorder
from runtime._protocol.rank_files import RankFiles, abandon_rendezvous, supervising, where_waiting
from runtime._supervision.in_process_rank import InProcessRank
from runtime._supervision.outcome import Failure, Outcome
from runtime._supervision.progress_watchdog import ProgressWatchdog
from runtime._supervision.rank_processes import (
    GRACE,
    MultiprocessingRank,
    PopenRank,
    RankProcess,
    stop_processes,
)
from runtime._supervision.stack_requests import request_stacks

if TYPE_CHECKING:
    from runtime._supervision.progress_exchange import ProgressExchange

__all__ = [
    "Failure",
    "MultiprocessingRank",
    "Outcome",
    "PopenRank",
    "RankProcess",
    "Supervisor",
    "stop_processes",
]

#: Only where a process offers no sentinel (no pidfd: Linux before 5.3, other systems).
_POLL_INTERVAL = 0.05
_GRACE = GRACE
_SETTLE = 1.0
_EXITING_GRACE = 10.0


class Supervisor:
    """Watches the rank processes of one launch until all have exited (see the module docstring).

    :meth:`watch` may run on a helper thread while the launching process runs a rank itself;
    :meth:`add_failure` records that rank's failure and :meth:`stop` (from any thread) makes it
    stop the processes that are still running. ``rendezvous_timeout`` bounds the time until
    every rank has reported that it reached the rendezvous (:meth:`RankFiles.mark_joined`).
    ``in_process`` is that rank, which the launch timeout covers too (module docstring).
    """

    def __init__(
        self,
        processes: Mapping[int, RankProcess],
        reports: RankFiles,
        timeout: float | None,
        *,
        rendezvous_timeout: float | None = None,
        grace: float = _GRACE,
        doorbell: int | None = None,
        in_process: InProcessRank | None = None,
        progress_timeout: float | None = None,
    ) -> None:
        self.processes = dict(processes)
        self.in_process = in_process
        self.reports = reports
        self.timeout = timeout
        self.grace = grace
        self.outcome = Outcome(local_ranks=frozenset([*processes, *([in_process.rank] if in_process else [])]))
        now = time.monotonic()
        self._deadline = None if timeout is None else now + timeout
        self._rendezvous_timeout = rendezvous_timeout
        self._rendezvous_deadline = None if rendezvous_timeout is None else now + rendezvous_timeout
        # progress_timeout: the progress watchdog's least deadline (None or 0: off; progress_watchdog.py)
        self._watchdog = ProgressWatchdog(reports.directory, sorted(self.outcome.local_ranks), progress_timeout, now)
        self._joined: set[int] = set()
        self._last_alive: dict[int, float] = {rank: time.time() for rank in self.processes}
        self._stop_requested = threading.Event()
        self._detached = False
        self._stopped: set[int] = set()
        # The doorbell: ranks (and stop()/detach()) write a byte to wake watch() at once.
        self._doorbell = doorbell
        self._bell_read, self._bell_write = os.pipe()
        os.set_blocking(self._bell_write, False)
        self._changed = threading.Condition()
        self._watching = True
        supervising(True)  # a rank in this process polls in its rendezvous wait (abandon_rendezvous)

    def add_failure(self, failure: Failure) -> None:
        """Record the failure of a rank that is not one of the watched processes."""
        self.outcome.failures.append(failure)
        self._ring()

    def add_departure(self, rank: int) -> None:
        """Record that the work of a rank that is not one of the watched processes returned (just now)."""
        self.outcome.departures.append(Failure(rank, time.time(), None, "left the run", ""))

    def judge_progress_across(self, peers: ProgressExchange) -> None:
        """Make the progress watchdog judge the other nodes' ranks too, as ``peers`` shares them."""
        self._watchdog.peers = peers

    def stop(self) -> None:
        """Ask :meth:`watch` to stop every process still running."""
        self._stop_requested.set()
        self._ring()

    def detach(self) -> None:
        """Make :meth:`watch` return at once, leaving the processes running (they finished their work)."""
        self._detached = True
        self._ring()

    def wait_for(self, condition: Callable[[], bool], timeout: float | None = None) -> bool:
        """Block the calling thread until ``condition()`` holds, re-checked whenever :meth:`watch`
        wakes (a process exited, a rank reported, a deadline passed) and once it has returned."""
        with self._changed:
            return self._changed.wait_for(lambda: condition() or not self._watching, timeout) and condition()

    def time_left(self) -> float | None:
        """Seconds until the launch timeout (``None``: no timeout)."""
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def _ring(self) -> None:
        try:
            os.write(self._bell_write, b"!")
        except (BlockingIOError, OSError):
            pass  # full (it will be read) or closed (watch() returned)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def watch(self) -> Outcome:
        try:
            self._watch()
        finally:
            with self._changed:
                self._watching = False
                self._changed.notify_all()
            supervising(False)
            self.outcome.stragglers = self._watchdog.stragglers
            self._watchdog.close()
            os.close(self._bell_read)
            os.close(self._bell_write)
        return self.outcome

    def _watch(self) -> None:
        running = dict(self.processes)
        settle_until: float | None = None
        while running and not self._detached:
            self._collect_exits(running)
            self._notify()
            if not running:
                break
            now = time.monotonic()
            wait: float | None = None
            if self.outcome.failures or self._stop_requested.is_set():
                # A rank that fails makes its peers fail a moment later; give the first one time
                # to write its report (and exit) before the rest are stopped.
                settle_until = settle_until if settle_until is not None else now + _SETTLE
                if now >= settle_until:
                    self._name_stuck_ranks(running)
                    self._stop(running)
                    continue
                wait = settle_until - now
            elif self._deadline is not None and now >= self._deadline:
                self._time_out(running, tuple(sorted(running)), launch_deadline=True)
                continue
            elif self._rendezvous_deadline is not None and now >= self._rendezvous_deadline:
                absent = tuple(sorted(rank for rank in running if not self._has_joined(rank)))
                if absent:
                    self.outcome.rendezvous_timeout = self._rendezvous_timeout
                    self._time_out(running, absent)
                    continue
                self._rendezvous_deadline = None
                continue
            elif (stall := self._watchdog.check(now, lambda rank: self._work_returned(rank, running))) is not None:
                self.outcome.stall = stall
                self._time_out(running, tuple(sorted(running)), launch_deadline=True)
                continue
            else:
                deadlines = [d - now for d in (self._deadline, self._rendezvous_deadline, self._watchdog.next_check)
                             if d is not None]  # fmt: skip
                wait = min(deadlines) if deadlines else None
            self._wait_for_event(running, wait)

    def _wait_for_event(self, running: Mapping[int, RankProcess], wait: float | None) -> None:
        """Sleep until a process exits, a bell rings, or ``wait`` seconds pass (no polling)."""
        sentinels = [process.sentinel() for process in running.values()]
        if any(sentinel is None for sentinel in sentinels):
            wait = _POLL_INTERVAL if wait is None else min(wait, _POLL_INTERVAL)
        bells = [self._bell_read] + ([self._doorbell] if self._doorbell is not None else [])
        ready = multiprocessing.connection.wait([s for s in sentinels if s is not None] + bells, wait)
        # Every process that has not exited was alive until now; one that exited did so just now.
        seen = time.time()
        for rank in running:
            self._last_alive[rank] = seen
        for bell in bells:
            if bell in ready:
                try:
                    os.read(bell, 4096)
                except (BlockingIOError, OSError):
                    pass

    def _has_joined(self, rank: int) -> bool:
        if rank not in self._joined and self.reports.has_joined(rank):
            self._joined.add(rank)
        return rank in self._joined

    def _time_out(
        self, running: dict[int, RankProcess], ranks: tuple[int, ...], *, launch_deadline: bool = False
    ) -> None:
        self.outcome.timed_out_at = time.time()
        own = self.in_process if launch_deadline and self.in_process is not None else None
        own_stack = own.stack() if own is not None else ""  # "" once its work returned: it is not late
        self.outcome.timed_out_ranks = tuple(sorted({*ranks, own.rank})) if own is not None and own_stack else ranks
        self._stopped.update(ranks)
        stacks = self._collect_stacks({rank: running[rank] for rank in ranks})
        if self.outcome.stall is not None and self.outcome.stall.nodes is not None:  # across hosts, before the stop
            self.outcome.stall.nodes.stacks_taken(stacks, self.outcome.stall.progress)
        if own is not None and own_stack:
            stacks[own.rank] = own_stack
            self.outcome.flight_recorder[own.rank] = flight_recorder.dump()  # this process: read here
            # A wait in a collective ends when its peers are stopped; plain Python only by an interrupt.
            if where_waiting(own_stack) is None:
                own.interrupt()
        self.outcome.stacks = stacks
        self._stop(running)

    def _name_stuck_ranks(self, running: Mapping[int, RankProcess]) -> None:
        """When every failure so far came from torch.distributed, the ranks still running are suspects."""
        failed = {f.rank for f in self.outcome.failures}
        # A rank that reported an error or finished its work is on its way out, not stuck.
        suspects = {rank: p for rank, p in running.items()
                    if rank not in failed and rank not in self._stopped and not self._is_exiting(rank)}  # fmt: skip
        if suspects and self.outcome.failures and all(f.communication for f in self.outcome.failures):
            if not self.outcome.stuck_ranks:
                self.outcome.stuck_ranks = tuple(sorted(suspects))
                self._stopped.update(suspects)
                self.outcome.stacks = self._collect_stacks(suspects)

    def _collect_exits(self, running: dict[int, RankProcess]) -> None:
        for rank, process in list(running.items()):
            code = process.poll()
            if code is None:
                self._last_alive[rank] = time.time()
                continue
            del running[rank]
            process.close()
            if code == 0 or self.reports.has_finished(rank):
                # Its work returned: if its peers then fail inside torch.distributed, it left them waiting.
                self.outcome.departures.append(Failure(rank, self._last_alive[rank], 0, "left the run", ""))
                continue
            failure = self._failure(rank, code)
            # A rank we stopped failed on its own only if it reported before we stopped it.
            if rank not in self._stopped or failure.traceback:
                self.outcome.failures.append(failure)
                abandon_rendezvous()  # a rank in this process stops waiting for its peers there

    def _failure(self, rank: int, code: int) -> Failure:
        report = self.reports.read_error(rank)
        if report is not None:
            return Failure(rank, report.time, code, report.summary, report.traceback, report.communication,
                           report.rendezvous_timeout, report.lost_peer)  # fmt: skip
        summary = f"killed by signal {-code}" if code < 0 else "exited without reporting an error (see its output)"
        # It died between the last poll that saw it alive and this one: blame from the earlier.
        return Failure(rank, self._last_alive[rank], code, summary, "")

    def _work_returned(self, rank: int, running: Mapping[int, RankProcess]) -> bool:
        if rank in self.processes:
            return rank not in running or self._is_exiting(rank)
        return any(departure.rank == rank for departure in self.outcome.departures)  # the rank in this process

    def _is_exiting(self, rank: int) -> bool:
        return self.reports.read_error(rank) is not None or self.reports.has_finished(rank)

    def _reported_a_cause(self, rank: int) -> bool:
        report = self.reports.read_error(rank)
        return report is not None and not report.communication

    def _stop(self, running: dict[int, RankProcess]) -> None:
        # A rank that reported an error, or whose work returned, is on its way out: let it exit with
        # its own code (a torch process can take seconds to finish on a busy machine).
        # Once a rank's own failure is known, a rank that reported only an echo of it (or finished) cannot
        # change the blame: it is stopped at once, which matters when the launch restarts (max_restarts).
        abandon_rendezvous()  # a rank in this process stops waiting for its peers there
        cause_known = any(not f.communication for f in self.outcome.failures)
        deadline = time.monotonic() + _EXITING_GRACE
        for rank, process in running.items():
            if self._is_exiting(rank) and not (cause_known and not self._reported_a_cause(rank)):
                process.wait(max(0.0, deadline - time.monotonic()))
        self._collect_exits(running)
        self._stopped.update(running)
        stop_processes(running, self.grace)
        self._collect_exits(running)

    def _collect_stacks(self, running: Mapping[int, RankProcess]) -> dict[int, str]:
        stacks, self.outcome.silent = request_stacks(self.reports, running)
        # torch's record of their last collectives, from the ranks that answered (running, not frozen)
        self.outcome.flight_recorder = flight_recorder.request_dumps(self.reports.directory, sorted(stacks))
        return stacks
