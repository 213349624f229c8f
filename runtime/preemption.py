"""Pre-emption: a signal announces it, every rank stops at the same step, saves and returns.

With the strategy option ``preemption_signal`` (``resolver run --preemption-signal``), each rank
catches that signal while its work runs, and, in ranks a cluster started, the signals that cluster
stops them with (its environment's ``stop_signals``: SLURM's ``SIGTERM``, which it sends to every
task of a job it pre-empts or ends at its time limit). The handler only sets a flag:
:meth:`~runtime.Strategy.preempted` reads it at the script's next check and agrees on it across
the ranks (an ``all_reduce`` of the flags with ``max``), so every rank sees ``True`` at the same
step, however many ranks got the signal. The script saves a checkpoint and returns; then:

- with ``requeue`` (``--requeue``) in a job of a cluster that requeues (the cluster environment's
  ``requeue``: SLURM's runs ``scontrol requeue $SLURM_JOB_ID``), global rank 0 requeues it once,
  after the checkpoint is written (every rank waited for it in ``save_checkpoint``), and the
  cluster starts the job again, from its checkpoint;
- the run ends with "pre-empted at step N, checkpoint at PATH": ``launch()`` raises
  :class:`~runtime.errors.PreemptedError` in the launching process, and a rank process that
  something else started (``resolver run``, SLURM, torchrun) prints it (rank 0) and exits with
  :data:`PREEMPTED_EXIT_CODE` (75), as ``resolver run`` then does.

Without the option nothing is installed and ``preempted()`` is ``False`` with no collective.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from runtime.errors import PreemptedError

if TYPE_CHECKING:
    import torch

    from resolver import ResolvedConfig
    from runtime.cluster.base import ClusterEnvironment
    from runtime.collectives.base import Collective

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "STACK_SIGNAL_NAME",
    "Preempted",
    "PreemptibleStrategy",
    "check_preemption_signal",
    "exit_if_preempted",
    "forwarding",
    "launching_signals",
    "raise_if_preempted",
    "settle_preempted",
    "watched",
]


class PreemptibleStrategy(Protocol):
    """What pre-emption asks of the strategy (``runtime.strategies.base.Strategy``, above this module:
    a protocol here rather than an import of it)."""

    @property
    def config(self) -> ResolvedConfig: ...

    @property
    def options(self) -> Any: ...

    @property
    def collective(self) -> Collective: ...

    @property
    def cluster_environment(self) -> ClusterEnvironment: ...

    @property
    def is_global_zero(self) -> bool: ...

    @property
    def world_size(self) -> int: ...

    @property
    def root_device(self) -> torch.device: ...


#: The exit status of a pre-empted run: ``EX_TEMPFAIL`` of ``sysexits.h`` ("try again later"),
#: apart from 1 (a failure), 124 (a timeout) and 128 + N (a death by signal N).
PREEMPTED_EXIT_CODE = 75
#: The signal that asks a rank for its Python stack (not to be a pre-emption signal too).
STACK_SIGNAL_NAME = "SIGUSR2"
#: Signals the runtime uses itself, or that cannot be caught.
_TAKEN = {
    "SIGUSR2": "the runtime's stack-dump signal (a launcher asks a hung rank for its stack with it)",
    "SIGALRM": "the launcher's timeout signal for a rank running in the launching process",
    "SIGINT": "Ctrl-C, which stops the run at once",
    "SIGKILL": "a signal no process can catch",
    "SIGSTOP": "a signal no process can catch",
    "SIGCHLD": "sent whenever a child process ends",
}


def check_preemption_signal(name: str) -> signal.Signals:
    """The signal ``name`` names (``"SIGUSR1"``, ``"USR1"``, ``"usr1"``), or a ``ValueError`` saying why not."""
    text = name.strip().upper()
    full = text if text.startswith("SIG") else f"SIG{text}"
    found = getattr(signal.Signals, full, None) if full.isidentifier() else None
    if found is None:
        raise ValueError(f"preemption_signal {name!r} names no signal; give a name like 'SIGUSR1' (SLURM's --signal)")
    if full in _TAKEN:
        raise ValueError(
            f"preemption_signal {name!r} cannot announce pre-emption: it is {_TAKEN[full]}; "
            "use SIGUSR1 (sbatch --signal=USR1@90) or SIGTERM"
        )
    return found


@attrs.frozen
class Preempted:
    """What a rank's work hands back when the ranks agreed on pre-emption (in place of its result)."""

    step: int
    checkpoint: str | None
    requeued: str | None
    note: str = ""
    hint: str | None = None
    cluster: str | None = None  # the title of the cluster that requeued the job

    def error(self) -> PreemptedError:
        return PreemptedError(self.step, self.checkpoint, requeued=self.requeued, cluster=self.cluster, note=self.note,
                              hint=self.hint)  # fmt: skip


class PreemptionState:
    """One rank's view: the signal received (set by the handler), and what was agreed and saved after it."""

    def __init__(self, signals: tuple[signal.Signals, ...]) -> None:
        self.signals = signals
        self.received: int | None = None
        self.checks = 0
        self.step: int | None = None
        self.checkpoint: str | None = None
        self.requeued = False

    def handler(self, signum: int, frame: object) -> None:
        self.received = signum  # read at the next check: a handler must not call into a collective


def signals_for(strategy: PreemptibleStrategy) -> tuple[signal.Signals, ...]:
    """The option's signal, and the stop signals of the cluster that started this rank (SLURM's ``SIGTERM``;
    none without the option)."""
    name = strategy.options.preemption_signal
    if name is None:
        return ()
    chosen = check_preemption_signal(name)
    # SIGTERM is what stops a rank that a local launcher started (a peer failed, a timeout): it stays that.
    started_by_cluster = strategy.config.launcher is None
    extra = strategy.cluster_environment.stop_signals if started_by_cluster else ()
    return (chosen, *(number for number in extra if number != chosen))


@contextmanager
def catching(strategy: PreemptibleStrategy) -> Iterator[PreemptionState | None]:
    """While the work runs: the pre-emption signals set this rank's flag (the previous handlers come back after)."""
    signals = signals_for(strategy)
    if not signals or threading.current_thread() is not threading.main_thread():
        yield None if not signals else PreemptionState(())  # signals reach the main thread only
        return
    state = PreemptionState(signals)
    previous = {number: signal.signal(number, state.handler) for number in signals}
    try:
        yield state
    finally:
        for number, handler in previous.items():
            if not (state.requeued and number == signal.SIGTERM):  # still ignored until the rank exits
                signal.signal(number, handler)


def agree(strategy: PreemptibleStrategy, state: PreemptionState | None, step: int | None) -> bool:
    """Whether any rank has received a pre-emption signal (every rank gets the same answer)."""
    if state is None:
        return False
    state.checks += 1
    if state.step is not None:
        return True  # agreed before: stays so, with no more exchanges
    import torch

    local = torch.tensor([0.0 if state.received is None else 1.0], device=strategy.root_device)
    if strategy.world_size > 1:
        local = strategy.collective.all_reduce(local, "max")
    if float(local.item()) == 0.0:
        return False
    state.step = state.checks - 1 if step is None else step
    return True


def finish(strategy: PreemptibleStrategy, state: PreemptionState | None, result: Any) -> Any:
    """The work's result, or a :class:`Preempted` when the ranks agreed on it (rank 0 requeues first)."""
    if state is None or state.step is None:
        return result
    requeued, note, hint = None, "", None
    if strategy.options.requeue:
        cluster = strategy.cluster_environment
        job = cluster.job_to_requeue()
        if job is None:
            note = f"not requeued: requeue=True, but {cluster.cannot_requeue}"
        else:
            # The cluster ends the requeued job's processes with SIGTERM: each rank is about to exit (status 75)
            # with its checkpoint saved, so it does, with its message, rather than die by that signal.
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            state.requeued = True
            # rank 0 requeues it
            requeued, note, hint = cluster.requeue(job) if strategy.is_global_zero else (job, "", None)
    return Preempted(state.step, state.checkpoint, requeued, note, hint, strategy.cluster_environment.title)


def raise_if_preempted(result: Any) -> Any:
    """In the launching process: rank 0's result, or :class:`PreemptedError` when the run was pre-empted."""
    if isinstance(result, Preempted):
        raise result.error()
    return result


def exit_if_preempted(result: Any, global_rank: int) -> Any:
    """In a rank process something else started: the result, or (pre-empted) rank 0 prints the message
    and every rank exits with :data:`PREEMPTED_EXIT_CODE`."""
    if not isinstance(result, Preempted):
        return result
    if global_rank == 0:
        print(str(result.error()), file=sys.stderr, flush=True)
    sys.stdout.flush()
    raise SystemExit(PREEMPTED_EXIT_CODE)


def recording_saves(save: Callable[..., None]) -> Callable[..., None]:
    """Wrap a strategy's ``save_checkpoint`` so that a save after agreed pre-emption names the checkpoint."""

    def save_checkpoint(self: PreemptibleStrategy, path: Any, *args: Any, **kwargs: Any) -> None:
        save(self, path, *args, **kwargs)
        state = getattr(self, "_preemption", None)
        if state is not None and state.step is not None:
            state.checkpoint = os.fspath(path)

    save_checkpoint.__wrapped__ = save  # type: ignore[attr-defined]
    save_checkpoint.__name__ = save.__name__
    save_checkpoint.__doc__ = save.__doc__
    save_checkpoint.__qualname__ = save.__qualname__
    return save_checkpoint


def settle_preempted(result: Any, config: ResolvedConfig, cluster: ClusterEnvironment) -> Any:
    """For a run of no launcher (one process, or ranks a cluster started): raise where the user launched
    (one local process), exit where this process is one rank of a cluster's job."""
    from runtime._protocol.rank_environment import launched_config

    if launched_config() is None and not cluster.starts_processes:
        return raise_if_preempted(result)
    return exit_if_preempted(result, config.global_rank)


#: The rank processes of this process's running launches (``rank_group`` registers each group's).
_groups: list[Mapping[int, Any]] = []


@contextmanager
def watched(processes: Mapping[int, Any]) -> Iterator[None]:
    """While the block runs, :func:`forwarding` passes pre-emption signals on to these rank processes."""
    _groups.append(processes)
    try:
        yield
    finally:
        _groups.remove(processes)


def launching_signals(
    options: Mapping[str, Any], stop_signals: Sequence[signal.Signals] = ()
) -> tuple[signal.Signals, ...]:
    """What a launching process passes on to its ranks: the chosen signal (and ``stop_signals``, those
    of the cluster that started this process, e.g. SLURM's ``SIGTERM``, which the rank then takes as
    pre-emption too)."""
    name = options.get("preemption_signal")
    if name is None:
        return ()
    chosen = check_preemption_signal(name)
    return (chosen, *(number for number in stop_signals if number != chosen))


_owner: list[int] = []  # the process that installed _forward (a forked rank inherits the handler, not the role)


def _forward(signum: int, frame: object) -> None:
    if os.getpid() not in _owner:
        return  # a forked rank before its own handler is set: its launcher passes the signal on
    for processes in list(_groups):
        for process in list(processes.values()):
            if process.poll() is None:
                process.send_signal(signum)


@contextmanager
def forwarding(signals: Sequence[signal.Signals]) -> Iterator[None]:
    """In a launching process: these signals are passed on to the rank processes instead of ending it
    (SLURM signals every process of a step; ``kill -USR1`` may name the launcher). A handler of the
    program's own (not the default) is left alone."""
    if not signals or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    _owner.append(os.getpid())
    for number in signals:
        if signal.getsignal(number) is signal.SIG_DFL:
            previous[number] = signal.signal(number, _forward)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _owner.remove(os.getpid())
