"""One rank of ``resolver check``: the steps in order, each bounded by the timeout.

Run as ``python -m runtime.preflight.rank`` by the local launcher (:mod:`runtime.preflight.local`), or
called in the process itself where someone else started the ranks (srun, mpirun, torchrun).
After every step the rank writes its state (``--state-file``, for the local launcher) and puts it
in the rendezvous store; rank 0 collects every rank's final state from the store and merges the
report, so a job started by someone else gets the whole run's report from rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch.distributed as dist

from resolver import ResolvedConfig
from runtime.preflight.agreement import compare, exchange, rank_facts
from runtime.preflight.collectives import OPERATIONS, check_operation, ring
from runtime.preflight.faults import fault_at
from runtime.preflight.rendezvous import RendezvousFailed, meet
from runtime.preflight.report import FAIL, SKIP, STEPS, Check, RankState
from runtime.preflight.speed import measure

if TYPE_CHECKING:
    from runtime.preflight.progress import StepReporter
    from runtime.strategies.base import Strategy

__all__ = ["check_rank"]

STATE = "check/state/"
DONE = "done"


class _Progress:
    """This rank's state, written to ``path`` (atomically) and the store after every change."""

    def __init__(self, rank: int, path: str | None) -> None:
        self.state = RankState(rank, socket.gethostname())
        self.path = path
        self.store: Any = None
        self.reporter: StepReporter | None = None  # told each step as this rank finishes it
        self.started = time.monotonic()

    def enter(self, step: str) -> None:
        self._update(current=step)

    def record(self, check: Check) -> None:
        self._update(checks=(*self.state.checks, check))
        if self.reporter is not None:
            self.reporter(check, time.monotonic() - self.started)

    def _update(self, **changes: Any) -> None:
        self.state = attrs.evolve(self.state, **changes)
        text = json.dumps(self.state.to_dict())
        if self.path is not None:
            partial = f"{self.path}.partial"
            Path(partial).write_text(text, encoding="utf-8")
            os.replace(partial, self.path)
        if self.store is not None and self.state.current == DONE:
            self.store.set(f"{STATE}{self.state.rank}", text)


def _set_up(config: ResolvedConfig, store: dist.TCPStore, timeout: float, progress: _Progress,
            hosts: dict[int, str]) -> Strategy | None:  # fmt: skip
    """The run's strategy, set up as training sets it up (its accelerator picks the device, its
    collective joins), over the check's store so that the ranks need no second rendezvous; ``None``
    once the failure is recorded."""
    from runtime.build import build

    rank = config.global_rank
    try:
        strategy = build(config, timeout=timeout)
    except Exception as exc:
        progress.record(Check("barrier", FAIL, f"rank {rank} ({hosts[rank]}): the {config.strategy} strategy cannot "
                              f"be built here: {type(exc).__name__}: {exc}".splitlines()[0], (rank,), (hosts[rank],),
                              fix="see this rank's error; the same call fails in training"))  # fmt: skip
        return None
    try:
        strategy.setup_environment(store=dist.PrefixStore("check/group/", store))
    except Exception as exc:
        progress.record(Check("barrier", FAIL, f"rank {rank} ({hosts[rank]}): joining the "
                              f"{config.process_group_backend} group failed: {exc}".splitlines()[0],
                              (rank,), (hosts[rank],), fix="see this rank's error"))  # fmt: skip
        strategy.teardown()
        return None
    return strategy


def check_rank(config: ResolvedConfig, address: str, port: int, *, timeout: float, state_file: str | None = None,
               source: str = "MASTER_ADDR/MASTER_PORT", strategy: Strategy | None = None,
               reporter: StepReporter | None = None) -> tuple[RankState, list[RankState] | None]:  # fmt: skip
    """Run every step as the rank ``config`` names; return its state and, on rank 0, every rank's
    final state as the store gave them (``None`` on the other ranks). ``strategy``: this rank's,
    already set up by a launcher (the XLA replicas'), for the engine step; ``reporter``: told each
    step as this rank finishes it."""
    rank, world = config.global_rank, config.world_size
    progress = _Progress(rank, state_file)
    progress.reporter = reporter
    progress.enter("rendezvous")
    fault_at(rank, "rendezvous")
    store = None
    try:
        store, check = meet(address, port, rank, world, timeout, source)
        progress.record(check)
    except RendezvousFailed as failed:
        progress.record(failed.check)
        store = failed.store
    progress.store = store
    if store is not None and progress.state.checks[-1].ok:
        _steps(config, store, address, port, timeout, progress, strategy)
    progress.enter(DONE)
    everyone = _everyone(store, progress.state, world, timeout) if rank == 0 else None
    if dist.is_initialized():
        dist.destroy_process_group()
    return progress.state, everyone


def _steps(config: ResolvedConfig, store: dist.TCPStore, address: str, port: int, timeout: float,
           progress: _Progress, strategy: Strategy | None) -> None:  # fmt: skip
    rank, world = config.global_rank, config.world_size
    progress.enter("agreement")
    fault_at(rank, "agreement")
    tick = time.monotonic()
    try:
        everyone = exchange(store, rank, world, rank_facts(config), timeout)
    except (dist.DistError, RuntimeError) as exc:
        progress.record(Check("agreement", FAIL, f"rank {rank}: not every rank sent its facts: {exc}".splitlines()[0],
                              echo=True))  # fmt: skip
        return
    agreement = compare(everyone, rank, time.monotonic() - tick)
    progress.record(agreement)
    if "collectives skipped" in agreement.detail:
        return
    hosts = {r: str(data["host"]) for r, data in everyone.items()}
    if world == 1:
        # one process: no collective, but a replica its launcher set up still takes the engine step
        why = "one process: there is no collective to check"
        if strategy is not None:
            why = f"one {strategy.collective.display_name} replica: no collective to check"
        for name in STEPS[2:-1]:
            progress.record(Check(name, SKIP, why))
        if strategy is not None:
            _engine(config, timeout, progress, strategy)
        else:
            progress.record(Check(STEPS[-1], SKIP, why))
        return
    progress.enter("barrier")
    if strategy is not None:  # set up by the launcher that started this replica (XLA's): it tears it down
        _collective_steps(strategy, hosts, world, rank, timeout, progress, config)
        return
    own = _set_up(config, store, timeout, progress, hosts)
    if own is None:
        return
    try:
        _collective_steps(own, hosts, world, rank, timeout, progress, config)
    finally:
        own.teardown()


def _collective_steps(strategy: Strategy, hosts: dict[int, str], world: int, rank: int, timeout: float,
                      progress: _Progress, config: ResolvedConfig) -> None:  # fmt: skip
    collective = strategy.collective
    checking = collective.check_across_ranks
    collective.check_across_ranks = False  # the check's calls match by construction; measure the bare operation
    try:
        for name in OPERATIONS:
            progress.enter(name)
            check = check_operation(collective, name, timeout)
            progress.record(check)
            if not check.ok:
                return
        lacking = collective.lacks_point_to_point()
        if lacking is not None:
            progress.record(Check("ring", SKIP, f"{collective.display_name} has no point-to-point messages: no pair "
                                  "can be timed alone (the operations above crossed every link)"))  # fmt: skip
        else:
            progress.enter("ring")
            check = ring(collective, hosts, timeout)
            progress.record(check)
            if not check.ok:
                return
        progress.enter("speed")
        fault_at(rank, "speed")
        speed = Check("speed", SKIP, collective.untimed) if collective.untimed else measure(collective)
        progress.record(speed)
    finally:
        collective.check_across_ranks = checking
    if speed.ok:
        _engine(config, timeout, progress, strategy)


def _engine(config: ResolvedConfig, timeout: float, progress: _Progress, strategy: Strategy | None) -> None:
    from runtime.preflight.engine import engine_step

    progress.enter("engine")
    progress.record(engine_step(config, timeout, strategy))


def _everyone(store: Any, mine: RankState, world: int, timeout: float) -> list[RankState]:
    """Every rank's final state from the store; a rank that does not post one within ``timeout``
    is reported as stopped in the step it last wrote (or as never started)."""
    states = {mine.rank: mine}
    if store is None:
        return list(states.values())
    deadline = time.monotonic() + timeout
    waiting = [r for r in range(world) if r != mine.rank]
    while waiting and time.monotonic() < deadline:
        for r in list(waiting):
            try:
                if store.check([f"{STATE}{r}"]):
                    states[r] = RankState.from_dict(json.loads(store.get(f"{STATE}{r}")))
                    waiting.remove(r)
            except (dist.DistError, RuntimeError):
                pass
        time.sleep(0.02)
    for r in waiting:
        host = "?"
        try:
            if store.check([f"check/arrived/{r}"]):
                host = store.get(f"check/arrived/{r}").decode()
        except (dist.DistError, RuntimeError):
            pass
        states[r] = RankState(r, host, silent=True)
    return [states[r] for r in sorted(states)]


def main(argv: list[str] | None = None) -> int:
    """A rank the local launcher started: its config is ``RESOLVER_CONFIG``."""
    from runtime._protocol.rank_environment import launched_config

    parser = argparse.ArgumentParser(prog="python -m runtime.preflight.rank")
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--state-file", required=True)
    parser.add_argument("--report-file", default=None)
    args = parser.parse_args(argv)
    config = launched_config()
    if config is None:
        print("runtime.preflight.rank is started by `resolver check`, which sets RESOLVER_CONFIG", file=sys.stderr)
        return 2
    assert config.main_address is not None and config.main_port is not None
    source = os.environ.get("RESOLVER_CHECK_SOURCE", "MASTER_PORT")
    state, everyone = check_rank(config, config.main_address, config.main_port, timeout=args.timeout,
                                 state_file=args.state_file, source=source)  # fmt: skip
    if everyone is not None and args.report_file:
        Path(args.report_file).write_text(json.dumps([s.to_dict() for s in everyone]), encoding="utf-8")
    return 0 if all(c.ok for c in state.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
