"""The files launched ranks and their launcher exchange: error reports, rank 0's result, stack dumps.

Each launch gets a private directory (``RUNTIME_REPORT_DIR``). A rank that raises writes its
traceback there before exiting; local rank 0 of an in-process launch (spawn/fork) pickles its
return value there; and on a timeout the launcher asks a rank for its Python stack (``SIGUSR2``,
answered by :mod:`faulthandler` even while the rank is blocked inside C code).
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.util
import json
import os
import pickle
import re
import signal
import stat
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import IO, Any

import attrs

from resolver._runtime_interface import diagnostic
from runtime._protocol import flight_recorder
from runtime._protocol.peers import LostPeer, lost_peer
from runtime._protocol.rank_environment import DOORBELL_VARIABLE, REPORT_DIR_VARIABLE
from runtime.errors import LaunchTimeoutError, RendezvousTimeoutError, RendezvousWaitError, SilentRank, failure_time

__all__ = [
    "ErrorReport",
    "RankFiles",
    "abandon_rendezvous",
    "rendezvous_abandoned",
    "rendezvous_may_be_abandoned",
    "supervising",
    "STACK_SIGNAL",
    "describe_exception",
    "is_communication_error",
    "mark_as_echo",
    "mark_as_plain",
    "peer_named_by",
    "split_waiting",
    "timeout_error",
    "where_waiting",
]

#: The signal that makes a rank dump its stack (None where the platform has no SIGUSR2). Not SIGUSR1:
#: that is the signal SLURM clusters send before pre-empting a job (``--signal=USR1@90``,
#: ``runtime.preemption``); SIGQUIT is a stop signal for torchrun's agent and a terminal's Ctrl-\.
STACK_SIGNAL: int | None = getattr(signal, "SIGUSR2", None)

_stack_files: list[IO[str]] = []  # kept open: faulthandler writes to their descriptors


def describe_exception(exc: BaseException) -> tuple[str, str]:
    """``(summary, full traceback text)`` of ``exc``. The summary of an error that carries its fix as data
    (``message`` and ``hint``: a ``HintedError``, a ``resolver.ResolutionError``) is ``diagnostic``'s
    rendering, as the command line and a rank's exit report print it; of any other, Python's last line."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(getattr(exc, "message", None), str) and hasattr(exc, "hint"):
        return diagnostic(exc), text
    summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    try:
        str(exc)
    except Exception:
        # Its __str__ fails (torch's CheckpointException given bare exceptions, not the pairs it
        # expects): Python would show "<exception str() failed>"; its arguments say what happened.
        kind = type(exc)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        try:
            summary = f"{name}: {BaseException.__str__(exc)}"
        except Exception:
            summary = name
    return summary, text


def _distributed_directory() -> str | None:
    # torch's own spec: find_spec("torch.distributed") would import torch (its parent package),
    # which a process that only starts ranks (resolver run) never needs.
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(os.path.realpath(next(iter(spec.submodule_search_locations))), "distributed", "")


_DISTRIBUTED_DIRECTORY = _distributed_directory()


_ECHO = "_runtime_echo"
_abandoned = threading.Event()
#: The process id of every supervisor watching ranks, once per supervisor (list.append and
#: list.remove are atomic: no lock a forked child could inherit held). A forked child inherits its
#: parent's entries under the parent's id, so they do not count for it.
_supervisors: list[int] = []


def abandon_rendezvous() -> None:
    """The launcher gave up on the launch (a rank failed or timed out): a rank that runs in the
    launching process stops waiting in the rendezvous (cleared when the next launch starts)."""
    _abandoned.set()


def rendezvous_abandoned() -> bool:
    return _abandoned.is_set()


def supervising(started: bool) -> None:
    """A supervisor in this process started (``True``) or stopped watching ranks (``False``)."""
    if started:
        _supervisors.append(os.getpid())
    else:
        with contextlib.suppress(ValueError):
            _supervisors.remove(os.getpid())


def rendezvous_may_be_abandoned() -> bool:
    """Whether a supervisor in this process may call :func:`abandon_rendezvous` (a rank runs in
    the launching process). Elsewhere nobody can, so a rank waits for its peers without polling."""
    return os.getpid() in _supervisors


_PLAIN = "_runtime_plain"


def mark_as_plain(exc: BaseException) -> None:
    """Report ``exc`` without its traceback: its message names the cause and the fix, and its frames
    are the runtime's own (a ``launch()`` that does not fit the run that started the rank)."""
    setattr(exc, _PLAIN, True)


def mark_as_echo(exc: BaseException) -> None:
    """Mark ``exc`` as what a rank saw of a peer's fault (e.g. a rendezvous wait that timed out)."""
    setattr(exc, _ECHO, True)


#: In the first line of every error gloo's transport raises
#: ("[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer").
_GLOO_TRANSPORT = "/gloo/transport/"


def is_communication_error(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside ``torch.distributed`` (a collective or the rendezvous).

    Gloo reports a vanished peer ("connection reset/closed by peer") and a timed-out collective
    as plain ``RuntimeError``; what sets them apart from the user's own errors is where they
    were raised. Such a failure is usually the echo of a peer that failed, left or hung first.
    An exception marked with :func:`mark_as_echo` counts too.
    """
    if getattr(exc, _ECHO, False):
        return True
    if isinstance(exc, RuntimeError) and _GLOO_TRANSPORT in str(exc).split("\n", 1)[0]:
        # Gloo's own error (it names its source file), surfacing outside torch.distributed: DDP's
        # gradient all-reduce runs in autograd's backward, whose frames are the last ones.
        return True
    if _DISTRIBUTED_DIRECTORY is None:
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and os.path.realpath(frames[-1].filename).startswith(_DISTRIBUTED_DIRECTORY)


@attrs.frozen
class ErrorReport:
    """A rank's failure as it reported it."""

    rank: int
    time: float
    summary: str
    traceback: str
    communication: bool = False
    #: Set when the rank timed out waiting in the rendezvous for peers (its rendezvous timeout).
    rendezvous_timeout: float | None = None
    #: The peer a communication error names (gloo's "connection closed by peer [ADDRESS]").
    lost_peer: LostPeer | None = None


def peer_named_by(exc: BaseException) -> LostPeer | None:
    """The peer a communication error says went away (gloo names it by address), with its ranks where known."""
    known = getattr(exc, "lost_peer", None)  # runtime.errors.PeerStoppedAnsweringError keeps gloo's words there
    if isinstance(known, LostPeer):
        return known
    return lost_peer(str(exc)) if is_communication_error(exc) else None


def rendezvous_wait_timeout(exc: BaseException) -> float | None:
    """The rendezvous timeout after which ``exc`` was raised, if it is a rendezvous wait that timed out."""
    return exc.timeout if isinstance(exc, RendezvousWaitError) else None


_FRAME = re.compile(r'File "([^"]+)", line (\d+),? in (\S+)')
_COLLECTIVES_DIRECTORY = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "collectives", "")
_JOINING = "setup"  # Collective.setup: the rendezvous


def where_waiting(text: str) -> str | None:
    """Where a traceback or a stack dump shows its rank waiting for peers, e.g.
    ``"barrier() (called at train.py:12 in step)"``, or ``None`` if it is not in a collective."""
    threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
    for thread in threads:
        frames = [(os.path.realpath(f), int(n), fn) for f, n, fn in _FRAME.findall(thread)]
        if "most recent call first" in thread:
            frames.reverse()  # faulthandler lists the innermost frame first
        for index, (filename, _, function) in enumerate(frames):
            if not filename.startswith(_COLLECTIVES_DIRECTORY) or function.startswith("_"):
                continue
            what = "the rendezvous (joining the process group)" if function == _JOINING else f"{function}()"
            callers = [frame for frame in frames[:index] if not frame[0].startswith(_COLLECTIVES_DIRECTORY)]
            if callers:
                caller_file, caller_line, caller = callers[-1]
                what += f" (called at {os.path.basename(caller_file)}:{caller_line} in {caller})"
            return what
    return None


def split_waiting(
    ranks: tuple[int, ...], stacks: dict[int, str], tracebacks: dict[int, str]
) -> tuple[tuple[int, ...], dict[int, str]]:
    """Split the ranks of a timeout into those that hung and those that waited for them (with where).

    ``stacks`` are the stacks of ``ranks``; ``tracebacks`` those of peers whose wait failed. A rank
    is waiting when its stack or traceback is in a collective; when every rank is, none is set apart.
    """
    waiting = {rank: where for rank, text in {**stacks, **tracebacks}.items() if (where := where_waiting(text))}
    hung = tuple(rank for rank in ranks if rank not in waiting)
    if not hung:
        return ranks, {rank: where for rank, where in waiting.items() if rank not in ranks}
    return hung, {rank: where for rank, where in waiting.items() if rank not in hung}


def timeout_error(
    ranks: tuple[int, ...],
    limit: float,
    stacks: dict[int, str],
    echoes: dict[int, str],
    *,
    rendezvous: bool,
    silent: dict[int, SilentRank] | None = None,
    error: Callable[..., LaunchTimeoutError] | None = None,
) -> LaunchTimeoutError:
    """The error for ``ranks`` that ran past ``limit`` seconds (the rendezvous timeout if ``rendezvous``),
    naming those that hung, with their stacks, and the peers that waited for them (:func:`split_waiting`).

    ``silent`` are the ranks asked for their stack that did not answer. When some of ``ranks`` answered
    and others did not, the silent ones are named by elimination: a rank that answers is running,
    one that cannot (stopped, blocked in the kernel) is the one its peers wait for. ``error`` makes the
    error instead of the class (the progress watchdog's, which numbers the collectives).
    """
    hung, waiting = split_waiting(ranks, stacks, echoes)
    silent = {rank: process for rank, process in (silent or {}).items() if rank in ranks}
    frozen = tuple(rank for rank in hung if rank in silent)
    running = tuple(rank for rank in hung if rank in stacks and rank not in silent)
    shown = hung
    if frozen and running:
        hung, shown = frozen, hung
    kind = error or (RendezvousTimeoutError if rendezvous else LaunchTimeoutError)
    return kind(hung, limit, {rank: stacks[rank] for rank in shown if rank in stacks}, waiting=waiting,
                silent={rank: silent[rank] for rank in hung if rank in silent})  # fmt: skip


class RankFiles:
    """The report directory of one launch, used by the launcher and by its ranks."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    @classmethod
    def for_new_launch(cls, directory: str) -> RankFiles:
        """The files of a launch starting now in the fresh ``directory`` (the launcher makes and removes
        it: :func:`runtime._supervision.cleanup.temporary_rank_files`)."""
        _abandoned.clear()  # a new launch
        return cls(directory)

    @classmethod
    def from_environment(cls) -> RankFiles | None:
        directory = os.environ.get(REPORT_DIR_VARIABLE)
        return cls(directory) if directory and os.path.isdir(directory) else None

    def _path(self, rank: int, kind: str) -> str:
        return os.path.join(self.directory, f"rank-{rank}.{kind}")

    # -- the rank's side ----------------------------------------------------------------------

    @contextlib.contextmanager
    def reporting(self, rank: int) -> Iterator[None]:
        """Inside a rank: answer stack requests, and report an exception before it propagates."""
        self.answer_stack_requests(rank)
        try:
            yield
        except SystemExit as exc:
            if exc.code not in (None, 0):
                self.write_error(rank, exc)
            raise
        except BaseException as exc:
            self.write_error(rank, exc)
            raise

    def answer_stack_requests(self, rank: int) -> None:
        """Dump this process's Python stack to the rank's stack file on ``STACK_SIGNAL`` (once per process),
        and torch's flight record when asked (:mod:`runtime._protocol.flight_recorder`)."""
        flight_recorder.answer_requests(self.directory, rank)
        if STACK_SIGNAL is None or _stack_files:
            return
        stack_file = open(self._path(rank, "stack.txt"), "w")  # noqa: SIM115 (must stay open)
        _stack_files.append(stack_file)
        faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True)

    def mark_joined(self, rank: int) -> None:
        """This rank reached the launch it was started for and is about to join the process group."""
        self._write_atomically(self._path(rank, "joined"), b"")

    def mark_finished(self, rank: int) -> None:
        """This rank's work returned (it left the process group); it is about to exit cleanly."""
        self._write_atomically(self._path(rank, "finished"), b"")

    def write_error(self, rank: int, exc: BaseException) -> None:
        summary, text = describe_exception(exc)
        data = {
            "rank": rank,
            "time": failure_time(exc),
            "summary": summary,
            "traceback": "" if getattr(exc, _PLAIN, False) else text,
            "communication": is_communication_error(exc),
            "rendezvous_timeout": rendezvous_wait_timeout(exc),
            "lost_peer": None if (lost := peer_named_by(exc)) is None else lost.to_json(),
        }
        self._write_atomically(self._path(rank, "error.json"), json.dumps(data).encode())

    def write_result(self, rank: int, value: Any) -> None:
        try:
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(
                f"rank {rank} returned {type(value).__name__}, which cannot be pickled back to the "
                f"launching process ({exc}); return plain data (move tensors to CPU, no open handles)"
            ) from exc
        self._write_atomically(self._path(rank, "result.pkl"), payload)

    @staticmethod
    def _write_atomically(path: str, payload: bytes) -> None:
        partial = f"{path}.partial"
        with open(partial, "wb") as handle:
            handle.write(payload)
        os.replace(partial, path)
        _ring_launcher()

    # -- the launcher's side ------------------------------------------------------------------

    def read_error(self, rank: int) -> ErrorReport | None:
        try:
            with open(self._path(rank, "error.json")) as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            return None
        return ErrorReport(
            rank=int(data["rank"]),
            time=float(data["time"]),
            summary=data["summary"],
            traceback=data["traceback"],
            communication=bool(data.get("communication", False)),
            rendezvous_timeout=data.get("rendezvous_timeout"),
            lost_peer=LostPeer.from_json(data.get("lost_peer")),
        )

    def has_joined(self, rank: int) -> bool:
        return os.path.exists(self._path(rank, "joined"))

    def has_finished(self, rank: int) -> bool:
        return os.path.exists(self._path(rank, "finished"))

    def has_result(self, rank: int) -> bool:
        return os.path.exists(self._path(rank, "result.pkl"))

    def read_result(self, rank: int) -> Any:
        with open(self._path(rank, "result.pkl"), "rb") as handle:
            return pickle.load(handle)

    def answers_stack_requests(self, rank: int) -> bool:
        """Whether the rank registered its stack handler (its stack file exists)."""
        return os.path.exists(self._path(rank, "stack.txt"))

    def read_stack(self, rank: int) -> str:
        try:
            with open(self._path(rank, "stack.txt")) as handle:
                return handle.read()
        except OSError:
            return ""


def _ring_launcher() -> None:
    """Wake this rank's launcher (see ``DOORBELL_VARIABLE``): a report was just written."""
    fd, _, inode = os.environ.get(DOORBELL_VARIABLE, "").partition(":")
    if not (fd.isascii() and fd.isdigit() and inode.isascii() and inode.isdigit()):
        return
    try:
        # Only the pipe it names: an inherited variable may name a descriptor that is now something else.
        found = os.fstat(int(fd))
        if stat.S_ISFIFO(found.st_mode) and found.st_ino == int(inode):
            os.write(int(fd), b"!")
    except OSError:
        pass  # the launcher's pipe is full (it wakes anyway) or gone
