"""What happened to the ranks of one launch, and which rank is blamed: the :class:`Failure` of each rank that
raised, died or left, gathered by the :class:`~runtime._supervision.supervisor.Supervisor` into an
:class:`Outcome`, whose :meth:`Outcome.problem` is the exception the launch raises.

An :class:`Outcome` blames the cause, not its echoes:

- a rank's own failure (an exception it reported, or a death without a report: ``os._exit``, a
  signal) comes before any failure raised inside ``torch.distributed`` (a peer's "connection
  reset/closed", a collective timeout), which is what the surviving peers see a moment later;
  among causes the earliest wins, an unreported death counting from the last moment the rank
  was seen alive;
- with only communication failures, a rank that exited cleanly before them is the one that left
  its peers waiting; otherwise ranks still running when the others failed are the hung ones, and
  are named with their stacks;
- a timeout comes before any communication failure, and before a cause that happened later.
"""

from __future__ import annotations

from typing import Any

import attrs

from runtime._protocol import flight_recorder
from runtime._protocol.peers import LostPeer
from runtime._protocol.rank_files import (
    describe_exception,
    is_communication_error,
    peer_named_by,
    rendezvous_wait_timeout,
    timeout_error,
)
from runtime._supervision.progress_watchdog import Stall, stall_error
from runtime._supervision.stragglers import StragglerWatch
from runtime.errors import LaunchTimeoutError, PeerLostError, RankFailedError, SilentRank, failure_time

__all__ = ["Failure", "Outcome"]


@attrs.frozen
class Failure:
    """A rank that raised, died or left, and when (wall-clock seconds)."""

    rank: int
    time: float
    exit_code: int | None
    summary: str
    traceback: str
    #: Raised inside ``torch.distributed``: usually the echo of a peer's failure.
    communication: bool = False
    #: Set when it is a rank's rendezvous wait that timed out (that timeout): its peers hung before joining.
    rendezvous_timeout: float | None = None
    #: The peer its communication error names (gloo: "connection closed by peer [ADDRESS]").
    lost_peer: LostPeer | None = None

    @classmethod
    def from_exception(cls, rank: int, exc: BaseException) -> Failure:
        """The failure of a rank that ran in this process."""
        summary, text = describe_exception(exc)
        return cls(rank, failure_time(exc), None, summary, text, is_communication_error(exc),
                   rendezvous_wait_timeout(exc), peer_named_by(exc))  # fmt: skip

    def error(self) -> RankFailedError:
        return RankFailedError(self.rank, exit_code=self.exit_code, traceback=self.traceback, summary=self.summary)


def _earliest(failures: list[Failure]) -> Failure | None:
    return min(failures, key=lambda f: f.time, default=None)


@attrs.define
class Outcome:
    """What happened to the ranks of one launch."""

    failures: list[Failure] = attrs.field(factory=list)
    #: Ranks whose work returned (time: last seen alive); the cause when their peers then fail in a collective.
    departures: list[Failure] = attrs.field(factory=list)
    timed_out_ranks: tuple[int, ...] = ()
    timed_out_at: float | None = None
    #: The timeout was the rendezvous timeout (the ranks never reached the rendezvous).
    rendezvous_timeout: float | None = None
    stacks: dict[int, str] = attrs.field(factory=dict)
    #: torch's flight record of each rank that answered (:mod:`runtime._protocol.flight_recorder`).
    flight_recorder: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    #: Ranks asked for their stack that did not answer (a stopped or otherwise frozen process).
    silent: dict[int, SilentRank] = attrs.field(factory=dict)
    #: Ranks still running when every failure so far was a communication failure.
    stuck_ranks: tuple[int, ...] = ()
    #: The ranks this launch runs on this node (a peer lost elsewhere is another node's rank).
    local_ranks: frozenset[int] = frozenset()
    #: Set when the progress watchdog stopped the launch (no rank made progress for its deadline).
    stall: Stall | None = None
    #: The stragglers the progress watchdog watched for (each rank's own work per step, who was named).
    stragglers: StragglerWatch | None = None

    def problem(self, timeout: float | None) -> RankFailedError | LaunchTimeoutError | None:
        """The exception for the cause of the failure (see the module docstring), or ``None``."""
        blamed = _earliest([f for f in self.failures if not f.communication])
        echoes = {f.rank: f.traceback for f in self.failures if f.communication}
        if blamed is None and self.failures:
            echo = _earliest(self.failures)
            assert echo is not None
            left = _earliest(self.departures)
            if left is not None:
                blamed = attrs.evolve(
                    left,
                    summary=(
                        f"its work returned and it left the run while rank {echo.rank} still waited for "
                        f"it in a collective, which then failed ({echo.summary.splitlines()[0][:200]})"
                    ),
                )
            elif (lost := self._lost_elsewhere()) is not None:
                return lost
            elif self.stuck_ranks and self.timed_out_at is None:
                waited = next((f.rendezvous_timeout for f in self.failures if f.rendezvous_timeout is not None), None)
                limit = (timeout or 0.0) if waited is None else waited
                return self._recorded(timeout_error(self.stuck_ranks, limit, self.stacks, echoes,
                                                    rendezvous=waited is not None, silent=self.silent))  # fmt: skip
            else:
                blamed = echo
        timed_out_first = blamed is None or blamed.communication or (self.timed_out_at or 0.0) <= blamed.time
        if self.timed_out_at is not None and timed_out_first:
            limit = (timeout or 0.0) if self.rendezvous_timeout is None else self.rendezvous_timeout
            error = None if self.stall is None else stall_error(self.stall)
            return self._recorded(timeout_error(self.timed_out_ranks, limit, self.stacks, echoes,
                                                rendezvous=self.rendezvous_timeout is not None, silent=self.silent,
                                                error=error))  # fmt: skip
        return blamed.error() if blamed is not None else None

    def _recorded(self, error: LaunchTimeoutError) -> LaunchTimeoutError:
        if self.flight_recorder:
            error.add_flight_record(self.flight_recorder, flight_recorder.summary(self.flight_recorder))
        return error

    def _lost_elsewhere(self) -> PeerLostError | None:
        """The earliest echo naming a peer on another node: that node vanished (killed, host down)."""
        for echo in sorted(self.failures, key=lambda f: f.time):
            peer = echo.lost_peer
            if peer is not None and not self.local_ranks.intersection(peer.ranks) and self.timed_out_at is None:
                return PeerLostError(peer.ranks, peer.address, host=peer.host, node=peer.node, seen_by=echo.rank,
                                     words=peer.words, traceback=echo.traceback)  # fmt: skip
        return None
