"""Progress across hosts: each node's launcher shares its ranks' progress records through the rendezvous store.

On several nodes (``resolver run --nnodes N --rdzv-endpoint HOST:PORT`` with restarts or a range of
nodes) each node's progress watchdog reads only its own ranks' records
(:mod:`runtime._protocol.progress`). A :class:`ProgressExchange` is a launcher thread that, about once
a second, writes this node's records as one small key in torch's c10d rendezvous store (which every
node reaches already) and reads the other nodes' keys; the watchdog judges every rank of the round
from them. No rank does anything more: the ranks still only store into their shared-memory record.

So when no rank anywhere made progress for the deadline, each node's diagnosis names the rank outside
any collective with its node and host, and where the others wait (their collective's number and
operation; the line too where their node took their stack in time); a node whose key stopped changing
(its link cut, its host down, its launcher stopped) is named as silent, with where its ranks were last
seen. The first node to stop the run writes that summary as the reason every node prints.

A static run (``--nnodes N --node-rank R --master-addr ...``, no restarts) has no such store: the only one
every node reaches there is the ``TCPStore`` rank 0 hosts inside its own process, which dies or freezes
with rank 0 (the faults to diagnose) and which the launchers, which never import torch there, do not
join. Its nodes' watchdogs judge their own ranks (see docs/runtime.md).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from runtime._protocol.progress import RankProgress
from runtime._protocol.rank_files import where_waiting
from runtime._supervision.progress_watchdog import _numbered, mismatches
from runtime.errors import ProgressTimeoutError, SilentRank

if TYPE_CHECKING:
    from torch.distributed import Store

    from runtime._supervision.progress_watchdog import Stall

__all__ = ["NodeEntry", "NodesView", "ProgressExchange"]

#: Seconds between two exchanges (one write of this node's key, one read of each other node's).
PERIOD = 1.0
#: A node whose key has not changed for this many seconds (four missed writes) is silent.
SILENT_AFTER = 4.0
#: How long a node that stops the run waits for the other nodes' stacks' lines (where their ranks wait).
_WHERE_WAIT = 3.0


@attrs.frozen
class NodeEntry:
    """What one node's launcher wrote: its ranks' records, and after its own stop where they waited."""

    node: int
    host: str
    address: str
    #: Each write's number: a key that keeps its number is a node that stopped writing.
    count: int
    ranks: Mapping[int, RankProgress]
    #: Its ranks whose work returned.
    done: frozenset[int] = frozenset()
    #: Once its watchdog stopped its ranks: where each waited in a collective, from its stack.
    where: Mapping[int, str] | None = None

    def name(self) -> str:
        return f"node {self.node} ({self.host})"

    def to_json(self) -> str:
        ranks = {str(r): [p.steps, p.collectives, p.current, p.operation, p.long, p.work]
                 for r, p in self.ranks.items()}  # fmt: skip
        where = None if self.where is None else {str(r): w for r, w in self.where.items()}
        return json.dumps({"node": self.node, "host": self.host, "address": self.address, "count": self.count,
                           "ranks": ranks, "done": sorted(self.done), "where": where})  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> NodeEntry:
        data = json.loads(text)
        ranks = {int(r): RankProgress(*fields) for r, fields in data["ranks"].items()}
        where = None if data["where"] is None else {int(r): str(w) for r, w in data["where"].items()}
        return cls(int(data["node"]), str(data["host"]), str(data["address"]), int(data["count"]), ranks,
                   frozenset(data["done"]), where)  # fmt: skip


class ProgressExchange:
    """This node's side of the exchange for one round (module docstring): :meth:`share` takes the watchdog's
    look at the local ranks, :meth:`records` gives the other nodes' ranks, :meth:`view` the picture at a stop.

    ``store`` is the rendezvous store, ``prefix`` the round's keys; ``addresses`` every node's address by
    node rank (a node that never wrote is named by it)."""

    def __init__(self, store: Store, prefix: str, node: int, host: str, addresses: Sequence[str], *,
                 period: float = PERIOD) -> None:  # fmt: skip
        self.store, self.prefix, self.node, self.host = store, prefix, node, host
        self.addresses = tuple(addresses)
        self.period = period
        self._lock = threading.Lock()
        self._mine = NodeEntry(node, host, self.addresses[node] if node < len(self.addresses) else "", 0, {})
        self._entries: dict[int, NodeEntry] = {}
        self._changed: dict[int, float] = {}  # node -> when its count last changed (monotonic, as read here)
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._now = threading.Event()  # write at once (where the ranks waited)
        self._thread = threading.Thread(target=self._run, name="progress-exchange", daemon=True)

    def start(self) -> ProgressExchange:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop exchanging (a store call blocked on a cut link is left to its own timeout: daemon thread)."""
        self._stop.set()
        self._now.set()
        self._thread.join(timeout=self.period)

    # -- the watchdog's side ------------------------------------------------------------------

    def share(self, progress: Mapping[int, RankProgress], done: Collection[int]) -> None:
        """This node's ranks as the watchdog just saw them (about once a second), written at once."""
        with self._lock:
            self._mine = attrs.evolve(self._mine, ranks=dict(progress), done=frozenset(done))
        self._now.set()  # written now: the other nodes see a look at most one exchange late

    def records(self) -> tuple[dict[int, RankProgress], frozenset[int]]:
        """The other nodes' ranks' records, as last read, and those of their ranks whose work returned."""
        with self._lock:
            entries = list(self._entries.values())
        return ({r: p for e in entries for r, p in e.ranks.items()}, frozenset(r for e in entries for r in e.done))

    def hosts(self) -> dict[int, str]:
        """The host each of the other nodes' ranks runs on, as last read."""
        with self._lock:
            return {r: e.host for e in self._entries.values() for r in e.ranks}

    def view(self) -> NodesView:
        """The other nodes as they are now: their entries, and those silent for :data:`SILENT_AFTER` seconds."""
        now = time.monotonic()
        with self._lock:
            entries = dict(self._entries)
            quiet = {n: now - self._changed.get(n, self._started) for n in range(len(self.addresses)) if n != self.node}
        silent = {n: age for n, age in quiet.items() if age >= SILENT_AFTER}
        return NodesView(self, entries, silent)

    def publish_where(self, where: Mapping[int, str]) -> None:
        """Where this node's ranks waited (from their stacks), written at once for the other nodes."""
        with self._lock:
            self._mine = attrs.evolve(self._mine, where=dict(where))
        self._now.set()

    def wait_for_where(self, nodes: Collection[int], seconds: float) -> dict[int, NodeEntry]:
        """The entries of ``nodes`` once each wrote where its ranks waited, or as they are after ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            with self._lock:
                entries = dict(self._entries)
            if all(n in entries and entries[n].where is not None for n in nodes) or time.monotonic() >= deadline:
                return entries
            time.sleep(0.05)

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.exchange()
            except Exception:  # noqa: BLE001 - the store gone (its host ended, a cut link): the others go silent
                pass
            # At most two exchanges a second, at least one: the next when the watchdog looks again.
            self._stop.wait(self.period / 2)
            self._now.wait(self.period / 2)
            self._now.clear()

    def exchange(self) -> None:
        """Write this node's key once, then read every other node's."""
        with self._lock:
            self._mine = attrs.evolve(self._mine, count=self._mine.count + 1)
            text = self._mine.to_json()
        self.store.set(f"{self.prefix}{self.node}", text)
        for node in range(len(self.addresses)):
            key = f"{self.prefix}{node}"
            if node == self.node or not self.store.check([key]):
                continue
            entry = NodeEntry.from_json(self.store.get(key).decode())
            with self._lock:
                before = self._entries.get(node)
                if before is None or before.count != entry.count:
                    self._changed[node] = time.monotonic()
                self._entries[node] = entry


@attrs.define
class NodesView:
    """The other nodes at the moment this node's watchdog stopped the run; makes its diagnosis."""

    exchange: ProgressExchange
    #: Their entries at the stop (their ranks' records then).
    entries: Mapping[int, NodeEntry]
    #: Nodes whose key has not changed for :data:`SILENT_AFTER` seconds, with for how long.
    silent: Mapping[int, float]
    #: Where each rank of the other nodes waited, from their stacks (:meth:`stacks_taken`).
    where: dict[int, str] = attrs.field(factory=dict)
    #: The other nodes that took their ranks' stacks: a rank of theirs not in :attr:`where` is in its own work.
    stacked: set[int] = attrs.field(factory=set)

    def stacks_taken(self, stacks: Mapping[int, str], progress: Mapping[int, RankProgress]) -> None:
        """This node's ranks' stacks were taken, before they are stopped: write where they wait, and wait a
        little (:data:`_WHERE_WAIT`) for the other nodes still writing to take theirs too (their watchdogs stop
        their ranks at about the same time: every node judges the same records), so that a rank stuck there
        is shown with its stack on its node, and the lines where its peers wait are known here."""
        here = {r: _numbered(w, progress.get(r)) for r, s in stacks.items() if (w := where_waiting(s))}
        self.exchange.publish_where(here)
        live = {n for n in self.entries if n not in self.silent}
        for node, entry in self.exchange.wait_for_where(live, _WHERE_WAIT if live else 0.0).items():
            if entry.where is not None:
                self.stacked.add(node)
                self.where.update({r: w for r, w in entry.where.items() if r in entry.ranks})

    def error(
        self,
        stall: Stall,
        ranks: tuple[int, ...],
        stacks: Mapping[int, str],
        *,
        waiting: Mapping[int, str],
        silent: Mapping[int, SilentRank],
    ) -> ProgressTimeoutError:
        """The :class:`ProgressTimeoutError` for every rank of the round: this node's ``ranks`` (those the
        local diagnosis blamed), ``stacks``, ``waiting`` (peers' echoes) and ``silent`` as the watchdog made
        them, the other nodes' ranks from their entries, each rank named with its node and host."""
        progress = stall.progress
        local = set(ranks) | set(stacks) | set(waiting)
        here = {**{r: w for r, s in stacks.items() if (w := where_waiting(s))}, **waiting}
        here = {r: _numbered(w, progress.get(r)) for r, w in here.items()}
        entries = self.entries
        node_of = {r: n for n, e in entries.items() for r in e.ranks}
        names = {n: e.name() for n, e in entries.items()}
        names[self.exchange.node] = f"node {self.exchange.node} ({self.exchange.host})"
        for r in local:
            node_of[r] = self.exchange.node
        done = {r for n, e in entries.items() for r in e.done}
        where = dict(here)
        for node, entry in entries.items():
            for r, record in entry.ranks.items():
                if r in self.where:
                    where[r] = self.where[r]
                elif record.current and node not in self.stacked:  # its record, where no stack tells
                    where[r] = f"{record.operation} #{record.current}"
        on_silent = {r for r, n in node_of.items() if n in self.silent}
        outside = sorted(r for r in node_of if r not in where and r not in done and r not in on_silent)
        # no rank outside a collective, none silent: every rank of the round waits in one (different ones, a deadlock)
        blamed = tuple(outside) or tuple(sorted(on_silent)) or tuple(sorted(node_of)) or ranks
        notes = [self._silent_line(n, names, progress) for n in sorted(self.silent)]
        remote = [r for r in outside if node_of.get(r) != self.exchange.node and r in progress]
        notes += [f"rank {r} on {names[node_of[r]]} is outside any collective (step {progress[r].steps}, after "
                  f"collective #{progress[r].collectives}); its stack is in that node's output"
                  for r in remote]  # fmt: skip
        notes += mismatches({r: p for r, p in progress.items() if r not in on_silent}, where)  # theirs are stale
        waits = {r: f"{w} on {names[node_of[r]]}" for r, w in where.items() if r not in blamed and r in node_of}
        places = {node_of.get(r, -1) for r in blamed}
        place = next((f"on {names[n]}" for n in places if n in names), "") if len(places) == 1 else ""
        return ProgressTimeoutError(blamed, stall.deadline, stacks, waiting=waits,
                                    silent={r: s for r, s in silent.items() if r in blamed}, why=stall.why(),
                                    notes=notes, place=place, across_hosts=True)  # fmt: skip

    def _silent_line(self, node: int, names: Mapping[int, str], progress: Mapping[int, RankProgress]) -> str:
        entry = self.entries.get(node)
        address = self.exchange.addresses[node] if node < len(self.exchange.addresses) else "?"
        age = self.silent[node]
        if entry is None:
            return (f"node {node} ({address}) is silent: no progress entry from it in the {age:.0f} s since this round "
                    "began (its link cut, its host down or its launcher stopped)")  # fmt: skip
        seen = ", ".join(_last_seen(r, p) for r, p in sorted(entry.ranks.items()) if r in progress) or "no rank yet"
        return (
            f"node {node} ({entry.host}, {address}) is silent: its progress entry stopped changing {age:.0f} s "
            f"ago (its link cut, its host down or its launcher stopped); last seen: {seen}"
        )


def _last_seen(rank: int, record: RankProgress) -> str:
    if record.current:
        return f"rank {rank} in {record.operation} #{record.current} (step {record.steps})"
    return f"rank {rank} outside any collective (step {record.steps}, after #{record.collectives})"
