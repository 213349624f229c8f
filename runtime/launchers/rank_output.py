"""Each rank's output on the console as whole lines prefixed with its rank, and in one log file per rank.

A launcher that starts rank processes through :meth:`RankOutputPump.popen` (or hands a
:mod:`multiprocessing` rank the pipes of :meth:`RankOutputPump.child_streams`) gives each one pipes
for its stdout and stderr; one thread reads every pipe and writes each complete line, prefixed
``[rank N]: ``, to this process's stdout or stderr (the stream it came from), so two ranks' text
never share a line. With a log folder, each rank's lines (without the prefix, byte for byte)
also go to ``<log_dir>/rank_<N>.log``. Output is handled as bytes: text that is not UTF-8
passes through unchanged. A last line without a newline is written whole when the pipe closes;
a line longer than :data:`MAX_LINE` bytes is cut into pieces of that size.

Options follow torchrun's: ``tee`` picks the streams that go to the log files (0 none,
1 stdout, 2 stderr, 3 both) and ``local_ranks_filter`` the local ranks shown on the console
(the log files still get every rank).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any, TextIO

import attrs

from runtime.errors import RuntimeConfigError

__all__ = ["MAX_LINE", "ChildStreams", "RankOutput", "RankOutputPump"]

#: A line longer than this (bytes, without a newline) is written in pieces of this size.
MAX_LINE = 1 << 20
#: After the ranks have exited, how long to wait for their pipes to close (a process they left
#: behind may hold them open) before the rest is dropped.
DRAIN_TIMEOUT = 5.0
_READ_SIZE = 1 << 16
_STDOUT, _STDERR = 1, 2


def _tee(_: Any, __: Any, value: int) -> None:
    if isinstance(value, bool) or value not in (0, 1, 2, 3):
        raise ValueError(f"tee must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both), got {value!r}")


@attrs.frozen(kw_only=True)
class RankOutput:
    """How the output of the rank processes a launcher starts is shown and kept.

    - ``prefix``: write ``[rank N]: `` before every console line (whole lines are kept either way).
    - ``log_dir``: also write each rank's output to ``<log_dir>/rank_<N>.log`` (global rank N;
      the folder is created; files are overwritten).
    - ``tee``: which streams go to the log files (0 none, 1 stdout, 2 stderr, 3 both).
    - ``local_ranks_filter``: show only these local ranks on the console (``None``: all).
    - ``redirects``: streams that go to the log files only, never the console (torchrun's
      ``--redirects``; same values as ``tee``).
    """

    prefix: bool = True
    log_dir: str | None = None
    tee: int = attrs.field(default=3, validator=_tee)
    local_ranks_filter: tuple[int, ...] | None = attrs.field(
        default=None, converter=lambda v: None if v is None else tuple(sorted(set(v)))
    )
    redirects: int = attrs.field(default=0, validator=_tee)

    def check(self, local_world_size: int) -> None:
        """A :class:`RuntimeConfigError` for a filter naming a rank outside the run or an unusable log folder."""
        if self.local_ranks_filter is not None:
            outside = [rank for rank in self.local_ranks_filter if not 0 <= rank < local_world_size]
            if outside or not self.local_ranks_filter:
                named = f"names local rank(s) {', '.join(map(str, outside))}" if outside else "is empty"
                raise RuntimeConfigError(
                    f"the local ranks filter (--local-ranks-filter) {named}, but this node runs local ranks "
                    f"0-{local_world_size - 1} ({local_world_size} process(es))",
                    hint=f"name ranks between 0 and {local_world_size - 1}, like 0 or 0,{local_world_size - 1}",
                )
        if self.log_folder is not None:
            try:
                self.log_folder.mkdir(parents=True, exist_ok=True)
                if not os.access(self.log_folder, os.W_OK | os.X_OK):
                    raise PermissionError(13, "permission denied")
            except OSError as exc:
                raise RuntimeConfigError(
                    f"cannot write the rank logs (--log-dir) to {self.log_dir}: {exc.strerror or exc}",
                    hint="pass a folder you can write, or one that can be created",
                ) from None

    @property
    def log_folder(self) -> Path | None:
        """The folder of the log files, or ``None`` when nothing is logged."""
        return None if self.log_dir is None or (self.tee | self.redirects) == 0 else Path(self.log_dir)

    def log_path(self, rank: int) -> Path | None:
        """Where global rank ``rank``'s output is logged."""
        folder = self.log_folder
        return None if folder is None else folder / f"rank_{rank}.log"

    def shows(self, local_rank: int) -> bool:
        return self.local_ranks_filter is None or local_rank in self.local_ranks_filter


class _Console:
    """One of this process's streams, written by file descriptor so each line is one write."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.broken = False

    def write(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            try:
                fd = self.stream.fileno()
            except (AttributeError, OSError, ValueError):  # replaced by an object without a file
                self.stream.write(data.decode("utf-8", "backslashreplace"))
                self.stream.flush()
                return
            _write_all(fd, data)
        except OSError:  # the reader went away (`resolver run ... | head`): keep draining the ranks
            self.broken = True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@attrs.define(eq=False)
class _Stream:
    rank: int
    which: int
    file: IO[bytes]
    console: _Console | None
    log: int | None  # file descriptor of the rank's log, when this stream is logged
    prefix: bytes
    partial: bytearray = attrs.field(factory=bytearray)

    def feed(self, data: bytes) -> None:
        self.partial += data
        while True:
            end = self.partial.find(b"\n")
            if end < 0:
                if len(self.partial) >= MAX_LINE:
                    self._emit(bytes(self.partial[:MAX_LINE]))
                    del self.partial[:MAX_LINE]
                    continue
                return
            line = bytes(self.partial[: end + 1])
            del self.partial[: end + 1]
            self._emit(line)

    def finish(self) -> None:
        if self.partial:
            self._emit(bytes(self.partial))
            self.partial.clear()

    def _emit(self, line: bytes) -> None:
        if self.log is not None:
            try:
                _write_all(self.log, line)
            except OSError as exc:  # a full disk must not stop the ranks (their pipes must be read)
                self.log = None
                if self.console is not None:
                    self.console.write(self.prefix + f"(its log stops here: {exc.strerror})\n".encode())
        if self.console is not None:
            self.console.write(self.prefix + line + (b"" if line.endswith(b"\n") else b"\n"))


@attrs.frozen
class ChildStreams:
    """The write ends of a rank's stdout and stderr pipes, for a :mod:`multiprocessing` rank process."""

    stdout: Connection
    stderr: Connection

    def connect(self) -> None:
        """In the rank process: make its stdout and stderr these pipes, written line by line."""
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.stdout.fileno(), 1)
        os.dup2(self.stderr.fileno(), 2)
        self.close()
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(line_buffering=True)

    def close(self) -> None:
        """In the launching process, once the rank has started: its copies of the write ends go."""
        self.stdout.close()
        self.stderr.close()


class RankOutputPump:
    """Starts rank processes with piped output and writes that output as described by a :class:`RankOutput`.

    Use as a context manager around the whole life of the ranks: leaving it (after the ranks
    were reaped) writes what is left in the pipes and ends the reading thread. With ``output``
    ``None`` it only starts the processes, whose output goes straight to this process's streams.
    """

    def __init__(self, output: RankOutput | None, local_world_size: int) -> None:
        if output is not None:
            output.check(local_world_size)
        self.output = output
        self._pending: list[_Stream] = []
        self._logs: list[int] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        # Wakes the reading thread (new streams, closing): it sleeps in select() without a timeout.
        self._wake: tuple[int, int] | None = None

    def popen(
        self,
        command: Sequence[str],
        *,
        env: dict[str, str],
        rank: int,
        local_rank: int,
        start: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
    ) -> subprocess.Popen[bytes]:
        """Start one rank's process (``rank`` global, ``local_rank`` on this node) with ``start``
        (called like :class:`subprocess.Popen`: ``start(command, env=..., stdout=..., stderr=...)``)."""
        if self.output is None:
            return start(command, env=env)
        log = self._open_log(rank)
        # Lines reach the console as the rank prints them, not when its buffer fills.
        env = {"PYTHONUNBUFFERED": "1", **env}
        process = start(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None and process.stderr is not None
        self._watch(rank, local_rank, process.stdout, process.stderr, log)
        return process

    def child_streams(self, *, rank: int, local_rank: int) -> ChildStreams | None:
        """Pipes for a rank process started another way (:mod:`multiprocessing`), or ``None`` when off.

        Pass the result to the process (it pickles for ``spawn``); the process calls
        :meth:`ChildStreams.connect` first thing, and this process calls :meth:`ChildStreams.close`
        once the process has started.
        """
        if self.output is None:
            return None
        log = self._open_log(rank)
        ends = [os.pipe(), os.pipe()]
        self._watch(rank, local_rank, open(ends[0][0], "rb", buffering=0), open(ends[1][0], "rb", buffering=0), log)
        return ChildStreams(
            Connection(ends[0][1], readable=False),
            Connection(ends[1][1], readable=False),
        )

    def _open_log(self, rank: int) -> int | None:
        assert self.output is not None
        path = self.output.log_path(rank)
        if path is None:
            return None
        try:
            log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise RuntimeConfigError(
                f"cannot write the log of rank {rank} (--log-dir): {path}: {exc.strerror}",
                hint="pass a folder you can write",
            ) from None
        self._logs.append(log)
        return log

    def _watch(self, rank: int, local_rank: int, stdout: IO[bytes], stderr: IO[bytes], log: int | None) -> None:
        assert self.output is not None
        prefix = f"[rank {rank}]: ".encode() if self.output.prefix else b""
        shown = self.output.shows(local_rank)
        redirects = self.output.redirects
        streams = [
            _Stream(
                rank,
                which,
                file,
                console if shown and not redirects & which else None,
                log if (self.output.tee | redirects) & which else None,
                prefix,
            )
            for which, file, console in ((_STDOUT, stdout, self._stdout), (_STDERR, stderr, self._stderr))
        ]
        with self._lock:
            self._pending.extend(streams)
        self._ring()

    def _ring(self) -> None:
        if self._wake is not None:
            try:
                os.write(self._wake[1], b"!")
            except OSError:  # full: the thread wakes anyway
                pass

    def __enter__(self) -> RankOutputPump:
        if self.output is not None:
            sys.stdout.flush()  # what this process printed before comes first
            sys.stderr.flush()
            self._stdout, self._stderr = _Console(sys.stdout), _Console(sys.stderr)
            self._wake = os.pipe()
            for end in self._wake:
                os.set_blocking(end, False)
            self._thread = threading.Thread(target=self._run, name="rank-output", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, drain: float = DRAIN_TIMEOUT) -> None:
        """Write what the ranks left in their pipes (waiting up to ``drain`` seconds for them to close), then stop."""
        if self._thread is not None:
            self._drain = drain
            self._closing.set()
            self._ring()
            self._thread.join()
            self._thread = None
        if self._wake is not None:
            for end in self._wake:
                os.close(end)
            self._wake = None
        for fd in self._logs:
            os.close(fd)
        self._logs.clear()

    def _run(self) -> None:
        assert self._wake is not None
        wake = self._wake[0]
        selector = selectors.DefaultSelector()
        selector.register(wake, selectors.EVENT_READ, None)
        open_streams: list[_Stream] = []
        deadline: float | None = None
        try:
            while True:
                with self._lock:
                    for new in self._pending:
                        selector.register(new.file, selectors.EVENT_READ, new)
                        open_streams.append(new)
                    self._pending.clear()
                if self._closing.is_set():
                    deadline = deadline if deadline is not None else time.monotonic() + self._drain
                    if not open_streams or time.monotonic() >= deadline:
                        return
                # No timeout until closing: output, a new rank or close() wakes it (no polling).
                for key, _ in selector.select(None if deadline is None else max(0.0, deadline - time.monotonic())):
                    if key.data is None:
                        try:
                            os.read(wake, 4096)
                        except BlockingIOError:
                            pass
                        continue
                    stream: _Stream = key.data
                    data = os.read(stream.file.fileno(), _READ_SIZE)
                    if data:
                        stream.feed(data)
                    else:
                        selector.unregister(stream.file)
                        open_streams.remove(stream)
                        stream.finish()
                        stream.file.close()
        finally:
            for left in open_streams:  # still held open by a process the rank left behind
                left.finish()
                left.file.close()
            selector.close()
