"""The errors a user of the runtime can meet (a rank's failures in :mod:`runtime.errors._ranks`).

An error that carries its fix has it as data (:class:`HintedError`: ``message`` and ``hint``), as the
resolver's errors do; ``str()`` ends with the ``  hint:`` line, and ``resolver``'s command line renders
both packages' errors from the fields alike.
"""

from __future__ import annotations

import os
import time
import types
from collections.abc import Mapping, Sequence
from typing import Any

from runtime.errors._hinted import HintedError, with_hint
from runtime.errors._ranks import (
    LaunchTimeoutError,
    PeerLostError,
    ProgressTimeoutError,
    RankFailedError,
    RendezvousTimeoutError,
    RendezvousWaitError,
    SilentRank,
)

__all__ = [
    "INSTALL_HINTS",
    "CheckpointDamagedError",
    "CheckpointError",
    "CheckpointNoSpaceError",
    "CheckpointUntrustedError",
    "DataLoaderError",
    "DataLoaderWarning",
    "HintedError",
    "LaunchError",
    "LaunchTimeoutError",
    "MissingDependencyError",
    "PeerLostError",
    "PeerStoppedAnsweringError",
    "PortInUseError",
    "PreemptedError",
    "ProgressTimeoutError",
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
    "with_hint",
]

# Tracebacks and pickles name these where users import them from, not the module that holds them.
for _error in (HintedError, LaunchTimeoutError, PeerLostError, ProgressTimeoutError, RankFailedError,
               RendezvousTimeoutError, RendezvousWaitError, SilentRank):  # fmt: skip
    _error.__module__ = __name__
del _error

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


class RuntimeConfigError(HintedError, ValueError):
    """A :class:`~resolver._domain.config.ResolvedConfig` names something the runtime cannot build.

    ``message`` says what, ``hint`` how to fix it (``None`` where no one fix is known).
    """


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


class LaunchError(HintedError, RuntimeError):
    """A launch could not start or place its ranks as asked (e.g. a launcher that failed before any rank
    reported, or a replica its engine runs as another rank than the config says); ``hint`` says what to do."""


class MissingDependencyError(HintedError, ImportError):
    """A component needs a package that is not installed; the message says which and how to get it
    (``install``; by default the package's :data:`INSTALL_HINTS` entry, else ``pip install <package>``)."""

    def __init__(self, component: str, package: str, install: str | None = None) -> None:
        if install is None:
            install = INSTALL_HINTS.get(package, f"pip install {package}")
        self.component = component
        self.package = package
        self.install = install
        super().__init__(f"{component} needs {package}, which is not installed", hint=install)


class PortInUseError(HintedError, OSError):
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
            "so rank 0 cannot host the rendezvous there",
            hint=busy_port_fix(source, port),
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


def users_frames_only(exc: BaseException) -> BaseException:
    """``exc`` with the runtime's own frames left out of its traceback (the caller's code kept): for an
    error whose message says all there is, so the user's line and the message are all that show."""
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")  # runtime/
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


class DataLoaderError(HintedError, ValueError, TypeError):
    """A DataLoader the strategy cannot shard across ranks, or rebuild with a distributed sampler (a
    ``ValueError`` and a ``TypeError``, the two it was raised as before it carried its ``hint``)."""


class DataLoaderWarning(HintedError, UserWarning):
    """A data loader setting that works, but likely not as the user intends (e.g. slow start-up);
    ``hint`` says what to change, where one change helps."""


class StrategyMisuseError(HintedError, RuntimeError):
    """A :class:`~runtime.strategies.base.Strategy` method was called when it cannot work: before the
    strategy is set up in this process, after its teardown, through another rank's strategy, or in a
    way the strategy's engine cannot train with (e.g. DeepSpeed without its optimizer).

    ``method`` is the method's name, ``argument`` the argument at fault (``None`` when it is the
    call itself), ``hint`` (also ``fix``) the fix the message ends with. Raised before the engine is reached, so
    no engine's internal error stands in for it.
    """

    def __init__(self, method: str, problem: str, fix: str, *, argument: str | None = None) -> None:
        self.method = method
        self.argument = argument
        self.fix = fix
        super().__init__(f"strategy.{method}(): {problem}", hint=fix)


class PeerStoppedAnsweringError(HintedError, RuntimeError):
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
            f"ended ({words}){store}",
            hint=f"its own output says why: killed (kill -9, the out-of-memory killer), or its host went down{also}",
        )


class StrategyArgumentError(StrategyMisuseError, TypeError, ValueError):
    """A :class:`~runtime.strategies.base.Strategy` method got an argument of the wrong type or value
    (a ``TypeError`` and a ``ValueError`` too, for code that catches those)."""


class PreemptedError(HintedError, RuntimeError):
    """The run was pre-empted: every rank stopped at ``step`` after its pre-emption signal, and the
    script saved ``checkpoint`` (``None`` when it saved none after the signal).

    ``requeued`` is the id of the job requeued to resume from it (``requeue=True``), else ``None``, and
    ``cluster`` the name of the cluster that requeued it (its environment's ``title``); ``note`` says
    why a requested requeue did not happen, ``hint`` what to do (by default, with a checkpoint and no
    requeue asked: run again to resume from it). ``exit_code`` is the status ``resolver run``
    and a pre-empted rank process exit with (75).
    """

    exit_code = 75

    def __init__(
        self,
        step: int,
        checkpoint: str | None,
        *,
        requeued: str | None = None,
        cluster: str | None = None,
        note: str = "",
        hint: str | None = None,
    ) -> None:
        self.step = step
        self.checkpoint = checkpoint
        self.requeued = requeued
        self.cluster = cluster
        self.note = note
        where = f"checkpoint at {checkpoint}" if checkpoint else "no checkpoint saved after the signal"
        message = f"pre-empted at step {step}, {where}"
        if requeued:
            message += f"; {cluster or 'the'} job {requeued} requeued to resume from it"
        if note:
            message += f"\n  {note}"
        if hint is None and not note and not requeued and checkpoint:
            hint = "run again to resume from it (strategy.latest_checkpoint finds it)"
        super().__init__(message, hint=hint)


class CheckpointError(HintedError, RuntimeError):
    """A checkpoint could not be loaded or saved; ``path`` is the checkpoint (a file or a directory),
    ``hint`` the fix (``None`` where no one fix is known)."""

    def __init__(self, path: str, message: str, *, hint: str | None = None) -> None:
        self.path = path
        super().__init__(message, hint=hint)

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
        super().__init__(path, f"the checkpoint at {path} is damaged: {where} {problem}", hint=hint)


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
            "runtime loads only tensors and plain data",
            hint=f"if you trust this file (you wrote it), load it with {opt_in}",
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
            f"no space left on the device holding {path}: saving the checkpoint failed{who}: {detail}; {removed}",
            hint="free space there (older checkpoints?) or save to another device; earlier checkpoints are intact",
        )
