"""The progress watchdog: a launch whose ranks all stopped making progress is diagnosed and stopped.

Every launched rank records its steps and collectives (:mod:`runtime._protocol.progress`). The
supervisor looks at the records about once a second and learns the usual time between steps;
when no rank has made progress for the deadline, the larger of ``progress_timeout`` (the strategy
option; ``resolver run --progress-timeout``; default 60 s) and 10x the median step time, the
launch ends as at its ``timeout``: every rank's stack, the rank outside any collective, and where
the others wait, each collective with its number (:func:`stall_error`).

The watchdog is armed by the first step any rank makes: before it (loading, compiling, the first
step itself) nothing tells how long a step takes, and a script that makes no step through the
strategy is never judged. ``progress_timeout=0`` turns it off.

The same looks feed the straggler watch (:mod:`runtime._supervision.stragglers`), which names on stderr
a rank whose own work per step stays above the others'.
"""

from __future__ import annotations

import functools
import socket
import statistics
import sys
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

import attrs

from runtime._protocol.progress import ProgressFiles, RankProgress
from runtime._protocol.rank_files import where_waiting
from runtime._protocol.timeouts import TIMEOUT_HINTS, check_timeout
from runtime._supervision.stragglers import StragglerWatch
from runtime.errors import LaunchTimeoutError, ProgressTimeoutError, SilentRank

__all__ = [
    "DEFAULT_PROGRESS_TIMEOUT",
    "STEP_MULTIPLE",
    "ProgressWatch",
    "ProgressWatchdog",
    "Stall",
    "check_progress_timeout",
    "progress_timeout",
    "stall_error",
]

#: The least deadline, in seconds, when the option is not set.
DEFAULT_PROGRESS_TIMEOUT = 60.0
#: The deadline is at least this many median step times.
STEP_MULTIPLE = 10
#: How many recent step times the median is taken over.
_SAMPLES = 64
#: The longest time between two looks at the records, in seconds.
_LOOK_EVERY = 1.0


def check_progress_timeout(value: object, given: str) -> float:
    """``value`` as the seconds of ``progress_timeout``: 0 (off) or a timeout in the usual range."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return 0.0
    return check_timeout(value, given, TIMEOUT_HINTS["progress_timeout"])


def progress_timeout(options: Mapping[str, Any], given: float | None = None) -> float:
    """The progress watchdog's least deadline: ``given`` (``resolver run --progress-timeout``), else the
    strategy option ``progress_timeout`` in ``options``, else 60 s; 0: off."""
    if given is not None:
        return check_progress_timeout(given, f"progress_timeout={given!r}")
    option = options.get("progress_timeout", DEFAULT_PROGRESS_TIMEOUT)
    return check_progress_timeout(option, f"the strategy option progress_timeout={option!r}")


@attrs.frozen
class Stall:
    """No rank made progress for ``deadline`` seconds; what the deadline came from."""

    deadline: float
    floor: float
    median_step: float | None
    #: Each rank's record when the launch was stopped (every node's, across hosts).
    progress: Mapping[int, RankProgress]
    #: Across hosts, the other nodes at the stop (runtime._supervision.progress_exchange).
    nodes: NodesAtStall | None = None

    def why(self) -> str:
        step = "" if self.median_step is None else f", median step {self.median_step:.3g} s"
        source = (
            f"{STEP_MULTIPLE}x the median step time"
            if self.median_step is not None and self.deadline > self.floor
            else f"progress_timeout={self.floor:g}"
        )
        return f"the progress deadline, {source}{step}"


class NodesAtStall(Protocol):
    """Across hosts, the other nodes as they were at the stop; makes the diagnosis of every node's ranks."""

    def stacks_taken(self, stacks: Mapping[int, str], progress: Mapping[int, RankProgress]) -> None: ...
    def error(self, stall: Stall, ranks: tuple[int, ...], stacks: Mapping[int, str], *, waiting: Mapping[int, str],
              silent: Mapping[int, SilentRank]) -> ProgressTimeoutError: ...  # fmt: skip


class Peers(Protocol):
    """Across hosts, the other nodes' ranks (:class:`runtime._supervision.progress_exchange.ProgressExchange`)."""

    def share(self, progress: Mapping[int, RankProgress], done: Collection[int]) -> None: ...
    def records(self) -> tuple[dict[int, RankProgress], frozenset[int]]: ...
    def hosts(self) -> dict[int, str]: ...
    def view(self) -> NodesAtStall: ...


class ProgressWatch:
    """When no rank has made progress for the deadline (module docstring), from looks at their records.

    ``floor`` is ``progress_timeout`` (0: off). :meth:`look` takes each rank's record at a time
    (monotonic seconds); :meth:`stalled` says whether the deadline has passed since the last change.
    """

    def __init__(self, floor: float) -> None:
        self.floor = floor
        self._last: dict[int, RankProgress] = {}
        self._done: frozenset[int] = frozenset()
        self._changed_at: float | None = None
        self._steps_at: tuple[float, int] | None = None  # the look that first saw the latest step count
        self._step_times: deque[float] = deque(maxlen=_SAMPLES)
        self.armed = False

    @property
    def on(self) -> bool:
        return self.floor > 0

    def median_step(self) -> float | None:
        return statistics.median(self._step_times) if self._step_times else None

    def deadline(self) -> float:
        median = self.median_step()
        return max(self.floor, STEP_MULTIPLE * median) if median is not None else self.floor

    def look(self, now: float, progress: Mapping[int, RankProgress], done: Collection[int] = ()) -> None:
        """Take the ranks' records as they are at ``now``; ``done``: the ranks whose work has returned
        (a rank that finishes makes progress too: its peers may take a while to follow)."""
        finished = frozenset(done)
        if finished != self._done or any(record.moved_since(self._last.get(r)) for r, record in progress.items()):
            self._changed_at = now
        self._last, self._done = dict(progress), finished
        steps = max((record.steps for record in progress.values()), default=0)
        if steps == 0:
            return
        if self._steps_at is None:
            self.armed = True  # the first step: from now on the ranks are judged
            self._changed_at = now
            self._steps_at = (now, steps)
        elif steps > self._steps_at[1]:
            since, before = self._steps_at
            self._step_times.append((now - since) / (steps - before))
            self._steps_at = (now, steps)

    def stalled(self, now: float) -> bool:
        return (
            self.on
            and self.armed
            and self._changed_at is not None
            and not any(record.long for record in self._last.values())  # a checkpoint being saved: not judged
            and now - self._changed_at >= self.deadline()
        )

    def next_look(self) -> float:
        """Seconds until the next look is due (a fraction of the deadline, at most a second)."""
        return min(_LOOK_EVERY, max(self.floor, 0.05) / 4)

    def stall(self, progress: Mapping[int, RankProgress] | None = None) -> Stall:
        return Stall(
            self.deadline(), self.floor, self.median_step(), dict(self._last if progress is None else progress)
        )


class ProgressWatchdog:
    """A :class:`ProgressWatch` over the records of ``ranks`` in a launch's report ``directory``, for the
    supervisor: :meth:`check` when :attr:`next_check` (monotonic seconds; ``None``: off) comes."""

    def __init__(self, directory: str, ranks: Sequence[int], progress_timeout: float | None, now: float) -> None:
        self.watch = ProgressWatch(progress_timeout or 0.0)
        self.files = ProgressFiles(directory)
        self.ranks = tuple(ranks)
        self.next_check: float | None = now if self.watch.on else None
        #: Across hosts: the other nodes' ranks are judged too (set by the node's rounds).
        self.peers: Peers | None = None
        #: The stragglers, named on stderr from the same looks (runtime._supervision.stragglers).
        self.stragglers = StragglerWatch(dict.fromkeys(self.ranks, socket.gethostname()))

    def check(self, now: float, done: Callable[[int], bool]) -> Stall | None:
        """Look at the records if a look is due (``done``: whether a rank's work has returned); the stall
        once the deadline has passed with a rank still at work (then the watchdog is off)."""
        if self.next_check is None or now < self.next_check:
            return None
        progress = {rank: record for rank in self.ranks if (record := self.files.read(rank)) is not None}
        finished = [rank for rank in self.ranks if done(rank)]
        seen, returned, peers = progress, finished, self.peers
        if peers is not None:
            peers.share(progress, finished)
            others, others_done = peers.records()
            seen, returned = {**others, **progress}, [*finished, *others_done]
        self.watch.look(now, seen, returned)
        if peers is not None:  # across hosts: every rank of the round is compared, each named with its host
            self.stragglers.hosts.update(peers.hosts())
        for report in self.stragglers.look(now, seen):
            print(report, file=sys.stderr, flush=True)
        if len(finished) < len(self.ranks) and self.watch.stalled(now):
            self.next_check = None
            stall = self.watch.stall(seen)
            return stall if peers is None else attrs.evolve(stall, nodes=peers.view())
        self.next_check = now + self.watch.next_look()
        return None

    def close(self) -> None:
        self.files.close()


def stall_error(stall: Stall) -> Callable[..., LaunchTimeoutError]:
    """What :func:`runtime._protocol.rank_files.timeout_error` makes for ``stall``: a
    :class:`ProgressTimeoutError` whose waiting ranks carry their collective's number, and which says
    when the ranks are in different collectives or one has run fewer."""
    return functools.partial(_stall_error, stall)


def _stall_error(
    stall: Stall,
    ranks: tuple[int, ...],
    limit: float,
    stacks: Mapping[int, str],
    *,
    waiting: Mapping[int, str],
    silent: Mapping[int, SilentRank],
) -> ProgressTimeoutError:
    if stall.nodes is not None:
        return stall.nodes.error(stall, ranks, stacks, waiting=waiting, silent=silent)
    progress = stall.progress
    numbered = {rank: _numbered(where, progress.get(rank)) for rank, where in waiting.items()}
    # Where every rank waits, none is set apart as waiting: the lines come from each one's stack.
    located = {rank: where for rank, text in stacks.items() if (where := where_waiting(text))} | dict(waiting)
    called = {rank: _numbered(where, progress.get(rank)) for rank, where in located.items()}
    return ProgressTimeoutError(ranks, stall.deadline, stacks, waiting=numbered, silent=silent,
                                why=stall.why(), notes=mismatches(progress, called))  # fmt: skip


def _numbered(where: str, record: RankProgress | None) -> str:
    """``all_reduce() (called at ...)`` as ``all_reduce #41 (called at ...)`` when the record names it."""
    if record is None or not record.current or not where.startswith(f"{record.operation}()"):
        return where
    return f"{record.operation} #{record.current}{where[len(record.operation) + 2 :]}"


def mismatches(progress: Mapping[int, RankProgress], called: Mapping[int, str] | None = None) -> list[str]:
    """What tells the ranks' collectives apart: different operations or numbers, or a rank behind; ``called``:
    where a rank waits, as :func:`_numbered` writes it (``all_reduce #41 (called at train.py:40 in step)``)."""
    inside = {rank: record for rank, record in progress.items() if record.current}
    if not inside:
        return []
    kinds = {(record.current, record.operation) for record in inside.values()}
    lines = []
    if len(kinds) > 1:
        lines.append(
            "the ranks wait in different collectives: "
            + ", ".join(
                f"rank {rank} in {_located(record, (called or {}).get(rank))}"
                for rank, record in sorted(inside.items())
            )
        )
    furthest = max(record.current for record in inside.values())
    lines += [
        f"rank {rank} is at #{record.collectives}: it ran {_collectives(furthest - record.collectives)} fewer than "
        f"rank {max(inside, key=lambda r: inside[r].current)}, and is outside any collective"
        for rank, record in sorted(progress.items())
        if not record.current and record.collectives < furthest
    ]
    return lines


def _located(record: RankProgress, line: str | None) -> str:
    """``all_reduce #41``, with the line that called it where ``line`` (numbered) names that collective."""
    numbered = f"{record.operation} #{record.current}"
    return line if line is not None and line.startswith(f"{numbered} (") else numbered


def _collectives(count: int) -> str:
    return f"{count} collective" if count == 1 else f"{count} collectives"
