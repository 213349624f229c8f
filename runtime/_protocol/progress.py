"""Each rank's progress, as its launcher's watchdog reads it: a few counters in a shared-memory file.

A launched rank counts its steps (``Strategy.optimizer_step``, ``Strategy.heartbeat``) and numbers
the collectives it runs (each public operation of a ``Collective``) into ``rank-N.progress`` in its
launch's report folder, mapped into memory: a count is a store into the mapping, no system call and
no message, so a step pays a few hundred nanoseconds. A step also stores the time the rank has spent
outside collectives (a clock read at each step and at each collective's start and end), from which
the launcher tells a straggler (:mod:`runtime._supervision.stragglers`). The launcher maps the same files and looks at
them about once a second (:mod:`runtime._supervision.progress_watchdog`).

What a rank records is :class:`RankProgress`: plain numbers and an operation name, so that across
hosts the same record travels through the rendezvous store too
(:mod:`runtime._supervision.progress_exchange`).

A process that is no launched rank (no report folder: torchrun, SLURM, a single process) records
nothing: every call here is then one global read.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from time import perf_counter_ns

import attrs

__all__ = [
    "RankProgress",
    "ProgressFiles",
    "collective_entered",
    "collective_left",
    "long_operation",
    "recording_progress",
    "step",
]

#: steps, collectives begun, the number of the collective the rank is in now (0: none), how many long
#: operations it is inside (0: none), its own work at its latest step (ns), the collective's operation.
_LAYOUT = struct.Struct("=qqqqq24s")
#: The words and bytes of the record, as the rank stores into them (native order: the reader is on this host).
_STEPS, _COLLECTIVES, _CURRENT, _LONG, _WORK, _OPERATION = 0, 1, 2, 3, 4, slice(40, 64)
_SUFFIX = "progress"


@attrs.frozen
class RankProgress:
    """What one rank has done so far."""

    #: Optimizer steps and heartbeats.
    steps: int = 0
    #: Collectives it began (the number of the latest: the first is #1).
    collectives: int = 0
    #: The number of the collective it waits in now (0: it is outside any).
    current: int = 0
    #: That collective's operation (``all_reduce``), or ``""``.
    operation: str = ""
    #: How many long operations it is inside (a checkpoint being saved or loaded), which take as long
    #: as the disk and the checkpoint's size make them: the watchdog does not judge a rank inside one.
    long: int = 0
    #: Nanoseconds this rank spent outside collectives (its own work), on a clock of its own, as at its
    #: latest step: between two steps, the difference over the steps is its own work per step, which in a
    #: synchronous job tells a straggler apart (every rank's step lasts as long as the slowest one's).
    work: int = 0

    def moved_since(self, other: RankProgress | None) -> bool:
        """Whether it did anything since ``other`` (a step, a collective begun or ended, a long operation
        begun or ended)."""
        return other is None or (self.steps, self.collectives, self.current, self.long) != (
            other.steps,
            other.collectives,
            other.current,
            other.long,
        )


class _Record:
    """This process's record, written in place (one per launched rank process)."""

    __slots__ = ("map", "bytes", "words", "operation", "steps", "collectives", "depth", "long", "entered", "waited")

    def __init__(self, path: str) -> None:
        partial = f"{path}.partial"
        with open(partial, "wb") as handle:
            handle.write(bytes(_LAYOUT.size))
        with open(partial, "r+b") as handle:
            self.map = mmap.mmap(handle.fileno(), _LAYOUT.size)
        os.replace(partial, path)  # the launcher maps only a file of the full size
        # Stores through views of the mapping: an index store each, cheaper than struct's pack_into.
        self.bytes = memoryview(self.map)
        self.words = self.bytes[:40].cast("q")
        self.operation = ""
        self.steps = 0
        self.collectives = 0
        self.depth = 0  # a collective that calls another counts once
        self.long = 0
        self.entered = 0  # when the collective it is in began (perf_counter_ns)
        self.waited = 0  # nanoseconds spent inside collectives so far

    def close(self) -> None:
        self.words.release()
        self.bytes.release()
        self.map.close()


_record: _Record | None = None


@contextlib.contextmanager
def recording_progress(directory: str, rank: int) -> Iterator[None]:
    """Record this process's progress as ``rank`` into ``directory`` (its launch's report folder) while inside."""
    global _record
    previous = _record
    record = _record = _Record(os.path.join(directory, f"rank-{rank}.{_SUFFIX}"))
    try:
        yield
    finally:
        _record = previous
        record.close()


def step() -> None:
    """This rank made a step (an optimizer step, or a heartbeat of a loop that makes none)."""
    record = _record
    if record is not None:
        record.steps += 1
        words = record.words
        words[_WORK] = perf_counter_ns() - record.waited  # first: a reader that sees the step sees its work
        words[_STEPS] = record.steps


def collective_entered(operation: str) -> None:
    """This rank begins ``operation`` (a collective every rank of its group must call)."""
    record = _record
    if record is None:
        return
    record.depth += 1
    if record.depth == 1:
        record.entered = perf_counter_ns()
        record.collectives += 1
        if operation != record.operation:  # the name first: a reader that sees the number sees its operation
            record.bytes[_OPERATION] = operation.encode()[:24].ljust(24, b"\0")
            record.operation = operation
        words = record.words
        words[_COLLECTIVES] = words[_CURRENT] = record.collectives


def collective_left() -> None:
    """The collective :func:`collective_entered` began has returned (or raised)."""
    record = _record
    if record is None:
        return
    record.depth -= 1
    if record.depth == 0:
        record.words[_CURRENT] = 0
        record.waited += perf_counter_ns() - record.entered


@contextlib.contextmanager
def long_operation() -> Iterator[None]:
    """This rank is inside an operation whose length is not a step's (saving or loading a checkpoint):
    while inside, the watchdog does not count the time against the ranks."""
    record = _record
    if record is None:
        yield
        return
    record.long += 1
    record.words[_LONG] = record.long
    try:
        yield
    finally:
        record.long -= 1
        record.words[_LONG] = record.long


class ProgressFiles:
    """The launcher's side: the records of a launch's ranks, mapped once each exists."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._maps: dict[int, mmap.mmap] = {}

    def read(self, rank: int) -> RankProgress | None:
        """What ``rank`` has done so far, or ``None`` if it records nothing (yet)."""
        mapped = self._maps.get(rank)
        if mapped is None:
            try:
                with open(os.path.join(self.directory, f"rank-{rank}.{_SUFFIX}"), "rb") as handle:
                    mapped = mmap.mmap(handle.fileno(), _LAYOUT.size, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                return None
            self._maps[rank] = mapped
        steps, collectives, current, long, work, operation = _LAYOUT.unpack_from(mapped, 0)
        return RankProgress(steps, collectives, current, operation.rstrip(b"\0").decode(errors="replace"), long, work)

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()
