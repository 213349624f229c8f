"""The rounds of a run whose nodes restart together (``resolver run --nnodes N --max-restarts K``).

Each round: join the rendezvous (:class:`~runtime._supervision.node_rendezvous.NodeRendezvous`), start
this node's ranks with the round's ranks and store, and watch them while a helper thread watches the
rendezvous. Then, on every node alike:

- a rank's failure (here, or seen here as a peer's) with restarts left: this node joins the next round,
  and the other nodes, seeing it wait, stop their ranks and join too; the round's number is every rank's
  ``TORCHELASTIC_RESTART_COUNT``; a node that joins (``--nnodes MIN:MAX``: started later, or again) makes
  the running nodes join the next round too, without using a restart; so does a node the rendezvous
  dropped (its keep-alive lapsed: its link cut, say), whose peers' ranks may be blocked on it, is named;
  with a fixed number of nodes its loss is a failure (a restart used: the next round waits for it to come
  back within the join timeout, then ends naming it);
- a failure that must not restart (a timeout, a configuration error, the launcher interrupted,
  pre-emption, the last restart used): the reason is written to the rendezvous, which is closed; every
  node stops its ranks and prints that same reason;
- the rendezvous store's host lost: every other node ends, saying that torch's rendezvous cannot move its
  store (:class:`~runtime._supervision.node_faults.RendezvousStoreLostError`);
- success: torch's exit barrier, then every node leaves.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from runtime._protocol.restarts import report_restart
from runtime._supervision.node_faults import RendezvousStoreLostError
from runtime._supervision.progress_exchange import ProgressExchange
from runtime.errors import PeerLostError, ProgressTimeoutError, RankFailedError

if TYPE_CHECKING:
    from runtime._supervision.node_rendezvous import NodeRendezvous, NodeRound
    from runtime._supervision.supervisor import Outcome, Supervisor

__all__ = ["RoundResult", "run_rounds"]

#: Seconds between two looks at the rendezvous while this node's ranks run.
_LOOK = 0.25
#: How long a node must stay out of the round, with no node waiting, to count as dropped: a node restarting
#: leaves the round and joins the wait list in two steps, and torch serves its state from a 1 s cache.
_DROPPED_FOR = 1.5
#: How long a node whose ranks saw only a peer's failure waits for that peer's node to give the reason.
_ECHO_WAIT = 5.0
#: How long a node waits for the word of the node that holds the rank a stall is blamed on: that node's stack
#: requests (SLOW_STACK_WAIT), the exchange of where ranks wait (3 s) and a margin.
_REMOTE_STALL_WAIT = 12.0
#: The exit status of a node whose run another node ended.
ENDED_ELSEWHERE = 1

#: What one round's ranks did: the supervisor's outcome, and whether they stopped on pre-emption.
RoundResult = tuple["Outcome", bool]
#: Starts this node's ranks for a round and watches them; calls its second argument with the round's
#: supervisor once the ranks run (so that the rendezvous watch can stop them).
StartRound = Callable[["NodeRound", Callable[["Supervisor"], None]], RoundResult]


class _Watch(threading.Thread):
    """Watches the rendezvous while a round's ranks run: another node waiting for a new round, or the
    run ended, stops them. The looks run in a thread of their own: a store cut off (this node's link
    down) does not answer, and no answer for :meth:`NodeRendezvous.silence_limit` counts as lost."""

    def __init__(self, nodes: NodeRendezvous, supervisor: Supervisor) -> None:
        super().__init__(name="rendezvous-watch", daemon=True)
        self.nodes, self.supervisor = nodes, supervisor
        self.done = threading.Event()
        self.seen: str | None = None  # "ended", "new round", "dropped" or "lost"
        self.reason = ""
        self._missing_since: float | None = None
        self.answered = time.monotonic()

    def run(self) -> None:
        threading.Thread(target=self._looks, name="rendezvous-looks", daemon=True).start()
        limit = self.nodes.silence_limit()
        while not self.done.wait(_LOOK) and self.seen is None:
            silent = time.monotonic() - self.answered
            if silent > limit:
                self.nodes.lost = True
                self.seen, self.reason = "lost", self.nodes.store_lost(f"no answer for {silent:.0f} s")
                self.supervisor.stop()

    def _looks(self) -> None:
        while not self.done.wait(_LOOK) and self.seen is None:
            try:
                reason = self.nodes.ended()
                if reason is not None:
                    self.seen, self.reason = "ended", reason
                elif self.nodes.others_waiting():
                    self.seen, self.reason = "new round", "another node asks for a new round"
                elif dropped := self.nodes.dropped():
                    self._missing_since = self._missing_since or time.monotonic()
                    if time.monotonic() - self._missing_since >= _DROPPED_FOR:
                        self.seen = "dropped"
                        self.reason = f"the rendezvous dropped {', '.join(dropped)} of this round (no keep-alive)"
                else:
                    self._missing_since = None
            except RendezvousStoreLostError as lost:
                self.seen, self.reason = "lost", str(lost)
            except Exception as exc:  # noqa: BLE001 - torch raises its own errors when the store is gone
                self.seen, self.reason = "lost", self.nodes.store_lost(exc)
            self.answered = time.monotonic()
            if self.seen is not None:
                self.supervisor.stop()
                return


def _echo(problem: Exception | None) -> bool:
    """Whether ``problem`` is what a peer's failure looks like from here (its node will say why)."""
    return isinstance(problem, PeerLostError)


def _echo_wait(problem: Exception | None, number: int) -> float:
    """How long to wait for another node's word on ``problem`` before this node's own ends the run: a peer's
    loss (that node says why); no progress with no rank here found frozen, since a rank frozen or stuck on
    another node leaves the ranks here waiting in a collective, and that node, which can tell frozen from
    stuck, fires at about the same time (longer when the diagnosis across hosts places the blamed rank
    there: its stack requests and the exchange of where ranks wait come first); none when it places it here."""
    if isinstance(problem, PeerLostError):
        return _ECHO_WAIT
    if not isinstance(problem, ProgressTimeoutError) or problem.silent:
        return 0.0
    if problem.across_hosts and problem.place:
        return 0.0 if problem.place.startswith(f"on node {number} ") else _REMOTE_STALL_WAIT
    return _ECHO_WAIT


def run_rounds(
    nodes: NodeRendezvous, start: StartRound, max_restarts: int, timeout: float | None, preempted_code: int
) -> Exception | int | None:
    """Run rounds until the run ends (module docstring); the problem that ended it on this node (``None``:
    none), or an exit status (130 after Ctrl-C, ``preempted_code``, :data:`ENDED_ELSEWHERE`)."""
    host = socket.gethostname()
    number = -1
    exchanges: list[ProgressExchange] = []  # this round's: the ranks' progress shared with the other nodes
    try:
        while True:
            try:
                current = nodes.next_round()
            except Exception as exc:  # noqa: BLE001 - torch's RendezvousClosedError, RendezvousTimeoutError
                return _ended_elsewhere(nodes, exc)
            number = current.node_rank
            watches: list[_Watch] = []
            for exchange in exchanges:
                exchange.stop()
            exchanges[:] = [progress_exchange(nodes, current)]

            def watching(supervisor: Supervisor, watches: list[_Watch] = watches) -> None:
                watches.append(_Watch(nodes, supervisor))
                watches[0].start()
                supervisor.judge_progress_across(exchanges[0].start())

            try:
                outcome, preempted = start(current, watching)
            finally:
                for watch in watches:
                    watch.done.set()
                    watch.join()
            seen = watches[0].seen if watches else None
            if seen == "ended":
                return _print_end(watches[0].reason)
            if seen == "lost":
                raise RendezvousStoreLostError(watches[0].reason)
            problem = outcome.problem(timeout)
            if problem is None and preempted:
                _print_end(nodes.end(f"node {number} ({host}): its ranks stopped on pre-emption"))
                return preempted_code
            if problem is None and seen is None:
                nodes.finish()
                return None
            if seen in ("new round", "dropped") and (problem is None or _echo(problem)):
                print(f"resolver run: node {number} ({host}): {watches[0].reason}: this node's ranks stopped",
                      file=sys.stderr, flush=True)  # fmt: skip
                if seen == "new round" or nodes.elastic:
                    continue
            if seen == "dropped" and not nodes.elastic:
                # A fixed number of nodes cannot go on without it: a failure (a restart, or the end).
                lost = f"node {number} ({host}): {watches[0].reason}"
                if max_restarts and (failed := nodes.failures(current)) <= max_restarts:
                    report_restart(watches[0].reason, failed, max_restarts, f"resolver run: node {number}")
                    continue
                return _print_end(nodes.end(lost))
            restartable = isinstance(problem, RankFailedError) and problem.exit_code != preempted_code
            if restartable and max_restarts and (failed := nodes.failures(current)) <= max_restarts:
                report_restart(problem, failed, max_restarts, f"resolver run: node {number}")
                continue
            if (wait := _echo_wait(problem, number)) > 0:
                reason = nodes.wait_for_end(wait)
                if reason is not None:
                    return _print_end(reason)
            first = _reason(problem)
            _print_end(nodes.end(f"node {number} ({host}): {first}"))
            return problem
    except RendezvousStoreLostError as lost:
        print(f"resolver run: the run ended on this node: {lost}", file=sys.stderr, flush=True)
        return ENDED_ELSEWHERE
    except (KeyboardInterrupt, SystemExit) as stop:
        signal_name = "SIGINT (Ctrl-C)" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"
        who = f"node {number}" if number >= 0 else "a node joining"
        _print_end(nodes.end(f"{who} ({host}): its launcher was stopped by {signal_name}"))
        if isinstance(stop, KeyboardInterrupt):
            return 130
        raise
    finally:
        for exchange in exchanges:
            exchange.stop()
        nodes.leave()


def progress_exchange(nodes: NodeRendezvous, current: NodeRound) -> ProgressExchange:
    """This node's exchange of its ranks' progress with the round's other nodes, through the rendezvous store."""
    addresses = current.nodes if len(current.nodes) == current.num_nodes else tuple(map(str, range(current.num_nodes)))
    return ProgressExchange(nodes.store, f"{nodes.keys}progress.{current.restart_count}.", current.node_rank,
                            socket.gethostname(), addresses)  # fmt: skip


def _reason(problem: Exception | None) -> str:
    """What every node prints as the run's end: the error's first line; across hosts, the progress
    watchdog's whole diagnosis but the stacks (which rank on which host, where the others wait)."""
    if problem is None:
        return "stopped"
    if isinstance(problem, ProgressTimeoutError) and problem.across_hosts:
        return problem.summary()
    return str(problem).splitlines()[0]


def _print_end(reason: str) -> int:
    print(f"resolver run: the run ended on every node: {reason}", file=sys.stderr, flush=True)
    return ENDED_ELSEWHERE


def _ended_elsewhere(nodes: NodeRendezvous, exc: Exception) -> int:
    try:
        closed = nodes.ended()
    except RendezvousStoreLostError:  # the store is gone with its node
        print(f"resolver run: the run ended on this node: {nodes.store_lost(exc)}", file=sys.stderr, flush=True)
        return ENDED_ELSEWHERE
    return _print_end(closed if closed is not None else f"the rendezvous at {nodes.endpoint} failed: {exc}")
