"""The errors a user of the runtime can meet."""

from __future__ import annotations

import os
import time
import types
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "INSTALL_HINTS",
    "CheckpointDamagedError",
    "CheckpointError",
    "CheckpointNoSpaceError",
    "CheckpointUntrustedError",
    "DataLoaderWarning",
    "LaunchTimeoutError",
    "MissingDependencyError",
    "PeerLostError",
    "PeerStoppedAnsweringError",
    "PortInUseError",
    "PreemptedError",
    "RankFailedError",
    "RendezvousTimeoutError",
    "RendezvousWaitError",
    "RuntimeConfigError",
    "SilentRank",
    "StrategyArgumentError",
    "StrategyMisuseError",
    "busy_port_fix",
    "failure_time",
    "stamp_failure_time",
    "users_frames_only",
]

_FAILURE_TIME = "_runtime_failure_time"


def stamp_failure_time(exc: BaseException) -> None:
    """Remember when ``exc`` first surfaced in a rank, before cleanup lets peers fail too.

    Leaving the process group makes the other ranks' pending collectives fail a moment
    later; launchers compare these times to blame the rank that failed first.
    """
    if not hasattr(exc, _FAILURE_TIME):
        try:
            setattr(exc, _FAILURE_TIME, time.time())
        except AttributeError:  # exceptions with __slots__
            pass


def failure_time(exc: BaseException) -> float:
    """When ``exc`` was stamped (now, if it never was)."""
    return float(getattr(exc, _FAILURE_TIME, time.time()))


class RuntimeConfigError(ValueError):
    """A :class:`~resolver._domain.config.ResolvedConfig` names something the runtime cannot build."""


#: How to install each separate engine package a built-in needs: the one place each hint is written.
#: The catalogue's entries (:data:`runtime.catalog.BUILTINS`) carry it for their package, and the
#: components' own checks (a package that is there but cannot be imported) read it through
#: :class:`MissingDependencyError`, which sits below them.
INSTALL_HINTS: Mapping[str, str] = {
    "horovod": 'build Horovod for this torch with scripts/build-horovod.sh (README, "Horovod")',
    "torch_xla": (
        "pip install torch_xla at your torch's version (torch_xla X.Y.Z needs torch X.Y.Z exactly, e.g. "
        "pip install torch==2.9.0 torch_xla==2.9.0); without a TPU, run on CPU with PJRT_DEVICE=CPU"
    ),
}


class MissingDependencyError(ImportError):
    """A component needs a package that is not installed; the message says which and how to get it
    (``install``; by default the package's :data:`INSTALL_HINTS` entry, else ``pip install <package>``)."""

    def __init__(self, component: str, package: str, install: str | None = None) -> None:
        if install is None:
            install = INSTALL_HINTS.get(package, f"pip install {package}")
        self.component = component
        self.package = package
        self.install = install
        super().__init__(f"{component} needs {package}, which is not installed\n  hint: {install}")


class PortInUseError(OSError):
    """The rendezvous port (``MASTER_PORT``) is taken by another process on this machine.

    ``source`` names where the port came from (``MASTER_PORT``, ``--master-port``, ``master_port``,
    a flags file); the hint tells how to change it there. ``holder`` names the process that
    listens on it, where that can be told (:func:`runtime._protocol.port_holder.port_holder`).
    """

    def __init__(self, address: str, port: int, source: str, holder: str | None = None) -> None:
        self.address = address
        self.port = port
        self.source = source
        self.holder = holder
        by = f" ({holder})" if holder else ""
        super().__init__(
            f"port {port} on {address} (from {source}) is already in use by another process{by}, "
            "so rank 0 cannot host the rendezvous there\n"
            f"  hint: {busy_port_fix(source, port)}"
        )


def busy_port_fix(source: str, port: int) -> str:
    """How to give the rendezvous another port, where ``source`` (the flag, option, flags file or
    variable the port came from) set it."""
    every_node = "(a multi-node run must give every node the same port)"
    if source.startswith("--"):  # a command-line option
        return f"pass {source} a free port, or leave {source} out to let the runtime pick one {every_node}"
    if source == "master_port":  # the keyword of resolve() / launch()
        return f"pass master_port= a free port, or leave it out to let the runtime pick one {every_node}"
    path, colon, key = source.rpartition(": ")
    if colon and key == "master_port":  # a flags file (--config)
        return f"set master_port in {path} to a free port, or remove it to let the runtime pick one {every_node}"
    if source == "MASTER_PORT":
        return "set MASTER_PORT to a free port, or unset it to let the runtime pick one " + every_node
    if source.startswith("a free port"):  # picked here, then taken before rank 0 listened: a race
        return "run it again: the runtime picks another free port"
    return (f"set MASTER_PORT to a free port (the port now comes from {source}), or stop what holds port {port} "
            f"(`ss -ltnp sport = :{port}`)")  # fmt: skip


class RankFailedError(RuntimeError):
    """A rank raised (or died); carries that rank's traceback text.

    ``rank`` is the global rank that failed first, ``exit_code`` its exit status when it was a
    separate process (``None`` for a rank that ran inside the calling process), and
    ``traceback`` the formatted traceback it reported (empty when it died without reporting,
    e.g. killed by a signal).
    """

    def __init__(self, rank: int, *, exit_code: int | None, traceback: str, summary: str = "") -> None:
        self.rank = rank
        self.exit_code = exit_code
        self.traceback = traceback
        #: The rank whose traceback ``traceback`` is (another than ``rank`` for a :class:`PeerLostError`).
        self.traceback_rank = rank
        head = f"rank {rank} failed"
        if exit_code is not None:
            head += f" (exit code {exit_code})"
        if summary:
            head += f": {summary}"
        body = f"\n\n--- traceback of rank {rank} ---\n{traceback.rstrip()}" if traceback else ""
        if not traceback and exit_code is not None and exit_code < 0:
            body = f"\n  it was killed by signal {-exit_code} before it could report an error"
        super().__init__(head + body)


class SilentRank(NamedTuple):
    """A rank process that did not answer the request for its Python stack: its ``pid`` and the
    state letter ``/proc/<pid>/stat`` showed then (``T``: stopped; ``None``: unknown)."""

    pid: int
    state: str | None

    def describe(self) -> str:
        """Why it could not answer, as far as its state tells."""
        where = f"state {self.state} in /proc/{self.pid}/stat"
        if self.state == "T":
            return (
                f"a signal had frozen it ({where}: SIGSTOP, or SIGTSTP from Ctrl-Z), which only SIGCONT undoes; "
                "look for what sent it (`kill -STOP`, a job scheduler's suspend, a terminal's job control)"
            )
        if self.state == "t":
            return f"a debugger held it stopped ({where})"
        if self.state == "D":
            return f"it was blocked in the kernel ({where}: uninterruptible sleep, e.g. I/O on a hung file system)"
        if self.state is None:
            return "it was frozen below Python (stopped, blocked in the kernel, or with its signals blocked)"
        return f"it was frozen below Python ({where}), e.g. with its signals blocked"


class PeerLostError(RankFailedError):
    """Ranks on another host went away without a word (killed, the host went down): the ranks here
    saw only their connection to it end. ``ranks`` are the ranks that ran on that host (``rank`` the
    first of them; empty where the host is not known), ``host``/``node`` where they ran, ``address``
    the address the connection went to, ``seen_by`` the rank here whose ``traceback`` shows it.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        address: str,
        *,
        host: str | None,
        node: int | None,
        seen_by: int,
        words: str,
        traceback: str,
    ) -> None:
        self.ranks = tuple(ranks)
        self.address = address
        self.host = host
        self.node = node
        self.seen_by = seen_by
        self.rank = self.ranks[0] if self.ranks else -1
        self.exit_code = None
        self.traceback = traceback
        self.traceback_rank = seen_by
        where = f"host {host} at {address}" if host else f"host {address}"
        names = ", ".join(map(str, self.ranks))
        if len(self.ranks) == 1:
            head = f"rank {names} ({'' if node is None else f'node {node}, '}{where}) went away"
        elif node is not None:
            head = f"a rank on node {node} ({where}" + (f": ranks {names}" if self.ranks else "") + ") went away"
        else:
            head = f"a rank on {where}" + (f" (ranks {names})" if self.ranks else "") + " went away"
        message = (
            f"{head}: rank {seen_by}'s connection to it ended ({words}), and no rank on this node failed first\n"
            "  hint: nothing reached this node about why; that node's own output says (a rank or its launcher "
            "killed, e.g. kill -9 or the out-of-memory killer, or the host went down)"
        )
        body = f"\n\n--- traceback of rank {seen_by} ---\n{traceback.rstrip()}" if traceback else ""
        RuntimeError.__init__(self, message + body)


class LaunchTimeoutError(TimeoutError):
    """Ranks did not finish within the launch timeout; they were stopped.

    ``ranks`` lists the global ranks that hung (those still running at the deadline, less those seen
    waiting for them); ``stacks`` maps a rank to the Python stack it was in when it was stopped
    (where it could be captured). ``silent`` are the ranks that did not answer the request for their
    stack (a stopped or otherwise frozen process cannot), with their pid and process state; when
    other ranks did answer, the silent ones are the ranks named in ``ranks``: the others were running.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        timeout: float,
        stacks: Mapping[int, str] | None = None,
        *,
        waiting: Mapping[int, str] | None = None,
        silent: Mapping[int, SilentRank] | None = None,
    ) -> None:
        self.ranks = tuple(ranks)
        self.timeout = timeout
        self.stacks = dict(stacks or {})
        #: The other ranks that were waiting for these, and where (e.g. ``{0: "barrier()"}``), where known.
        self.waiting = dict(waiting or {})
        self.silent = dict(silent or {})
        names = ", ".join(str(r) for r in self.ranks)
        noun = "rank" if len(self.ranks) == 1 else "ranks"
        lines = [f"{noun} {names} {self._what(len(self.ranks) == 1)}"]
        lines += [f"  rank {rank} (pid {s.pid}) did not answer the request for its Python stack: {s.describe()}"
                  for rank, s in sorted(self.silent.items())]  # fmt: skip
        lines += [f"  rank {rank} was waiting for {'it' if len(self.ranks) == 1 else 'them'} in {where}"
                  for rank, where in sorted(self.waiting.items())]  # fmt: skip
        lines += [f"  rank {rank} answered the request for its stack (below): it was running, not frozen"
                  for rank in sorted(self.stacks) if rank not in self.ranks and rank not in self.waiting]  # fmt: skip
        for rank, stack in sorted(self.stacks.items()):
            lines.append(f"\n--- where rank {rank} was ---\n{stack.rstrip()}")
        lines.append(self._hint())
        super().__init__("\n".join(lines))

    def _what(self, one: bool) -> str:
        return f"did not finish within the {self.timeout:g} s launch timeout and {'was' if one else 'were'} stopped"

    def _hint(self) -> str:
        return (
            "  hint: a rank waiting in a collective for a peer that never arrives hangs; "
            "raise `timeout` if the work is just slow; if ranks may have passed different arguments to a "
            "collective (the stacks show where each waits), run with RUNTIME_CHECK_COLLECTIVES=every to "
            "compare every call across ranks (by default each distinct call is compared once)"
        )


class RendezvousTimeoutError(LaunchTimeoutError):
    """Ranks did not reach the rendezvous (joining the process group) within the rendezvous timeout.

    Raised instead of letting the ranks that did arrive wait in torch's rendezvous for a peer
    stuck before it (torch's own default wait is 30 minutes). ``ranks`` never arrived;
    ``stacks`` shows where they were. Every rank of the launch was stopped.
    """

    def _what(self, one: bool) -> str:
        return f"did not reach the rendezvous within the {self.timeout:g} s rendezvous timeout; every rank was stopped"

    def _hint(self) -> str:
        return (
            "  hint: a rank reaches the rendezvous when its launch() call is about to join the process "
            "group; if the work before that is just slow, raise the strategy option `rendezvous_timeout` or "
            "RUNTIME_RENDEZVOUS_TIMEOUT (seconds, default 300)"
        )


class RendezvousWaitError(TimeoutError):
    """Raised in a rank that waited the rendezvous timeout in the rendezvous for peers that never came.

    It is what the waiting rank sees, not the cause: the launcher blames the ``missing`` ranks
    (with their stacks) instead, as a :class:`RendezvousTimeoutError`.
    """

    def __init__(self, rank: int, missing: Sequence[int], timeout: float, where: str) -> None:
        self.rank = rank
        self.missing = tuple(missing)
        self.timeout = timeout
        names = ", ".join(str(r) for r in self.missing) or "unknown"
        super().__init__(
            f"rank {rank} waited {timeout:g} s (the rendezvous timeout) in the rendezvous at {where} "
            f"for rank(s) {names}, which did not arrive"
        )


def users_frames_only(exc: BaseException) -> BaseException:
    """``exc`` with the runtime's own frames left out of its traceback (the caller's code kept): for an
    error whose message says all there is, so the user's line and the message are all that show."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
    kept: list[types.TracebackType] = []
    tb = exc.__traceback__
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(root):
            kept.append(tb)
        tb = tb.tb_next
    trimmed: types.TracebackType | None = None
    for tb in reversed(kept):
        trimmed = types.TracebackType(trimmed, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
    return exc.with_traceback(trimmed)


class DataLoaderWarning(UserWarning):
    """A data loader setting that works, but likely not as the user intends (e.g. slow start-up)."""


class StrategyMisuseError(RuntimeError):
    """A :class:`~runtime.strategies.base.Strategy` method was called when it cannot work: before the
    strategy is set up in this process, after its teardown, through another rank's strategy, or in a
    way the strategy's engine cannot train with (e.g. DeepSpeed without its optimizer).

    ``method`` is the method's name, ``argument`` the argument at fault (``None`` when it is the
    call itself), ``fix`` the hint the message ends with. Raised before the engine is reached, so
    no engine's internal error stands in for it.
    """

    def __init__(self, method: str, problem: str, fix: str, *, argument: str | None = None) -> None:
        self.method = method
        self.argument = argument
        self.fix = fix
        super().__init__(f"strategy.{method}(): {problem}\n  hint: {fix}")


class PeerStoppedAnsweringError(RuntimeError):
    """A peer this rank waited for in a call every rank makes went away without a word: it had not
    finished its work (it recorded nothing in the rendezvous store), so it was killed, ran out of
    memory or lost its host. Raised in the rank that saw its connection end.

    ``method`` is the strategy method this rank was in, ``ranks`` the ranks it may have been (one,
    where that is known; empty where not even that is), ``host`` where they ran (``None``: unknown),
    ``seen_by`` this rank, ``words`` what the transport said, ``unsure`` why the store could not
    tell whether the peer finished ("": it told, the peer had not), ``lost_peer`` gloo's address of it
    (a launcher's blame across hosts reads it).
    """

    def __init__(self, method: str, ranks: Sequence[int], *, host: str | None, seen_by: int, words: str,
                 unsure: str = "") -> None:  # fmt: skip
        self.method = method
        self.ranks = tuple(ranks)
        self.host = host
        self.seen_by = seen_by
        self.words = words
        self.lost_peer: object = None
        where = f" (host {host})" if host else ""
        if len(self.ranks) == 1:
            who = f"rank {self.ranks[0]}{where}"
        elif self.ranks:
            who = f"one of ranks {', '.join(map(str, self.ranks))}{where}"
        else:
            who = "a peer"
        store = f" ({unsure})" if unsure else ""
        also = (f"; if its output shows it ended normally, it returned without calling strategy.{method}(): call it "
                "on every rank") if unsure else ""  # fmt: skip
        super().__init__(
            f"{who} stopped answering: rank {seen_by} waited for it in strategy.{method}() and the connection "
            f"ended ({words}){store}\n"
            f"  hint: its own output says why: killed (kill -9, the out-of-memory killer), or its host went down{also}"
        )


class StrategyArgumentError(StrategyMisuseError, TypeError, ValueError):
    """A :class:`~runtime.strategies.base.Strategy` method got an argument of the wrong type or value
    (a ``TypeError`` and a ``ValueError`` too, for code that catches those)."""


class PreemptedError(RuntimeError):
    """The run was pre-empted: every rank stopped at ``step`` after its pre-emption signal, and the
    script saved ``checkpoint`` (``None`` when it saved none after the signal).

    ``requeued`` is the SLURM job id requeued to resume from it (``requeue=True``), else ``None``;
    ``note`` says why a requested requeue did not happen. ``exit_code`` is the status ``resolver run``
    and a pre-empted rank process exit with (75).
    """

    exit_code = 75

    def __init__(self, step: int, checkpoint: str | None, *, requeued: str | None = None, note: str = "") -> None:
        self.step = step
        self.checkpoint = checkpoint
        self.requeued = requeued
        self.note = note
        where = f"checkpoint at {checkpoint}" if checkpoint else "no checkpoint saved after the signal"
        message = f"pre-empted at step {step}, {where}"
        if requeued:
            message += f"; SLURM job {requeued} requeued to resume from it"
        if note:
            message += f"\n  {note}"
        elif not requeued and checkpoint:
            message += "\n  hint: run again to resume from it (strategy.latest_checkpoint finds it)"
        super().__init__(message)


class CheckpointError(RuntimeError):
    """A checkpoint could not be loaded or saved; ``path`` is the checkpoint (a file or a directory)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # sent between ranks (a failure every rank reports alike) and to the launcher: rebuilt as it is, not
        # by calling __init__ with the message alone
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls: type[CheckpointError], args: tuple[Any, ...], state: dict[str, Any]) -> CheckpointError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class CheckpointDamagedError(CheckpointError):
    """The checkpoint at ``path`` is damaged: ``part`` (a file of it, or ``path`` itself) is not what
    was written (``problem`` says how: missing, truncated, empty, another size or checksum)."""

    def __init__(self, path: str, part: str, problem: str, hint: str) -> None:
        self.part = part
        self.problem = problem
        where = "it" if part == path else f"its part {part}"
        super().__init__(path, f"the checkpoint at {path} is damaged: {where} {problem}\n  hint: {hint}")


class CheckpointUntrustedError(CheckpointError):
    """Loading ``part`` of the checkpoint at ``path`` would run code or build objects other than tensors
    and plain data (``found`` names what it holds); the safe loader refused it."""

    def __init__(self, path: str, part: str, found: str, opt_in: str) -> None:
        self.part = part
        self.found = found
        where = "" if part == path else f" (its part {part})"
        super().__init__(
            path,
            f"refused to load the checkpoint at {path}{where}: it holds {found}, which loading would run; the "
            "runtime loads only tensors and plain data\n"
            f"  hint: if you trust this file (you wrote it), load it with {opt_in}",
        )


class CheckpointNoSpaceError(CheckpointError):
    """Saving the checkpoint at ``path`` ran out of space (``ENOSPC``) or quota (``EDQUOT``) on ``rank``;
    what the save had written was removed, an earlier checkpoint is untouched."""

    def __init__(self, path: str, rank: int | None, detail: str, removed: str) -> None:
        self.rank = rank
        self.detail = detail
        who = "" if rank is None else f" (rank {rank})"
        super().__init__(
            path,
            f"no space left on the device holding {path}: saving the checkpoint failed{who}: {detail}; {removed}\n"
            "  hint: free space there (older checkpoints?) or save to another device; earlier checkpoints are intact",
        )
