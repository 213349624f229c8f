"""The errors of a rank that failed, hung, or lost a peer or the rendezvous (imported from :mod:`runtime.errors`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from runtime.errors._hinted import HintedError, with_hint

__all__ = [
    "LaunchTimeoutError",
    "PeerLostError",
    "RankFailedError",
    "RendezvousTimeoutError",
    "RendezvousWaitError",
    "SilentRank",
]


class RankFailedError(RuntimeError):
    """A rank raised (or died); carries that rank's traceback text.

    ``rank`` is the global rank that failed first, ``exit_code`` its exit status when it was a
    separate process (``None`` for a rank that ran inside the calling process), and
    ``traceback`` the formatted traceback it reported (empty when it died without reporting,
    e.g. killed by a signal).
    """

    #: The fix, where the failure has one (a :class:`PeerLostError`'s); ``None`` for a rank's own error.
    hint: str | None = None

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
        message = f"{head}: rank {seen_by}'s connection to it ended ({words}), and no rank on this node failed first"
        self.hint = (
            "nothing reached this node about why; that node's own output says (a rank or its launcher "
            "killed, e.g. kill -9 or the out-of-memory killer, or the host went down)"
        )
        body = f"\n\n--- traceback of rank {seen_by} ---\n{traceback.rstrip()}" if traceback else ""
        RuntimeError.__init__(self, with_hint(message, self.hint) + body)


class LaunchTimeoutError(HintedError, TimeoutError):
    """Ranks did not finish within the launch timeout; they were stopped.

    ``ranks`` lists the global ranks that hung (those still running at the deadline, less those seen
    waiting for them); ``stacks`` maps a rank to the Python stack it was in when it was stopped
    (where it could be captured). ``silent`` are the ranks that did not answer the request for their
    stack (a stopped or otherwise frozen process cannot), with their pid and process state; when
    other ranks did answer, the silent ones are the ranks named in ``ranks``: the others were running.
    ``hint`` says what to look at and what to raise.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        timeout: float,
        stacks: Mapping[int, str] | None = None,
        *,
        waiting: Mapping[int, str] | None = None,
        silent: Mapping[int, SilentRank] | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        self.ranks = tuple(ranks)
        self.timeout = timeout
        self.stacks = dict(stacks or {})
        #: The other ranks that were waiting for these, and where (e.g. ``{0: "barrier()"}``), where known.
        self.waiting = dict(waiting or {})
        self.silent = dict(silent or {})
        #: torch's flight record of each rank that answered, as torch dumps it (``add_flight_record``).
        self.flight_recorder: dict[int, dict[str, Any]] = {}
        names = ", ".join(str(r) for r in self.ranks)
        noun = "rank" if len(self.ranks) == 1 else "ranks"
        lines = [f"{noun} {names} {self._what(len(self.ranks) == 1)}"]
        lines += [f"  rank {rank} (pid {s.pid}) did not answer the request for its Python stack: {s.describe()}"
                  for rank, s in sorted(self.silent.items())]  # fmt: skip
        lines += [f"  rank {rank} was waiting for {'it' if len(self.ranks) == 1 else 'them'} in {where}"
                  for rank, where in sorted(self.waiting.items())]  # fmt: skip
        #: What else the launcher saw (collectives that do not match across ranks).
        self.notes = tuple(notes)
        lines += [f"  {note}" for note in self.notes]
        lines += [f"  rank {rank} answered the request for its stack (below): it was running, not frozen"
                  for rank in sorted(self.stacks) if rank not in self.ranks and rank not in self.waiting]  # fmt: skip
        for rank, stack in sorted(self.stacks.items()):
            lines.append(f"\n--- where rank {rank} was ---\n{stack.rstrip()}")
        super().__init__("\n".join(lines), hint=self._hint())

    def add_flight_record(self, dumps: Mapping[int, Mapping[str, Any]], lines: Sequence[str]) -> None:
        """Keep torch's flight record of the ranks (``dumps``) and show its summary ``lines`` in the message."""
        self.flight_recorder = {rank: dict(dump) for rank, dump in dumps.items()}
        if lines:
            self.message += "\n\n--- torch's flight recorder: each rank's last collective per process group ---\n"
            self.message += "\n".join(lines)
            self.args = (with_hint(self.message, self.hint),)

    def _what(self, one: bool) -> str:
        return f"did not finish within the {self.timeout:g} s launch timeout and {'was' if one else 'were'} stopped"

    def _hint(self) -> str:
        return (
            "a rank waiting in a collective for a peer that never arrives hangs; "
            "raise `timeout` if the work is just slow; if ranks may have passed different arguments to a "
            "collective (the stacks show where each waits), run with RUNTIME_CHECK_COLLECTIVES=every to "
            "compare every call across ranks (by default each distinct call is compared once)"
        )


class ProgressTimeoutError(LaunchTimeoutError):
    """No rank made progress (a step, a collective, a heartbeat) for the progress deadline; every rank was stopped.

    Raised with no ``timeout`` set, where the ranks would otherwise wait until torch's own collective
    timeout (30 minutes). ``timeout`` is the deadline that passed, ``why`` what it came from
    (``progress_timeout`` or the median step time); the rest is as for :class:`LaunchTimeoutError`.
    """

    def __init__(self, *args: Any, why: str = "", place: str = "", across_hosts: bool = False, **kwargs: Any) -> None:
        self.why = why
        #: Where the ranks named ran (``on node 1 (gpu-17)``), across hosts.
        self.place = place
        #: Judged from every node's ranks (their records shared through the rendezvous store).
        self.across_hosts = across_hosts
        super().__init__(*args, **kwargs)

    def summary(self) -> str:
        """The diagnosis without the stacks and the hint (what every node prints across hosts)."""
        return self.message.split("\n\n")[0]

    def _what(self, one: bool) -> str:
        because = f" ({self.why})" if self.why else ""
        place = f"{self.place} " if self.place else ""
        return (
            f"{place}made no progress for {self.timeout:g} s{because}: no optimizer step, collective or heartbeat on "
            f"any rank; every rank was stopped"
        )

    def _hint(self) -> str:
        return (
            "a rank outside any collective while its peers wait in one is stuck in its own work (see its stack); "
            "if the work is only slow between steps (evaluation, saving), call strategy.heartbeat() in its loop, "
            "or raise the strategy option `progress_timeout` (resolver run --progress-timeout; 0 turns the "
            "watchdog off)"
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
            "a rank reaches the rendezvous when its launch() call is about to join the process "
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
