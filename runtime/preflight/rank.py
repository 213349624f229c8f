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
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch
import torch.distributed as dist

from resolver import ResolvedConfig
from runtime.collectives.rendezvous import Rendezvous
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


def _setup_collective(config: ResolvedConfig, store: dist.TCPStore, address: str, port: int, timeout: float) -> Any:
    """The run's ``Collective``, on a process group made over the check's store (so it needs no
    second rendezvous), with the collective timeout of the check."""
    from runtime._gloo_interface import apply_gloo_interface
    from runtime.registry import COLLECTIVES

    rank, world = config.global_rank, config.world_size
    device = torch.device("cpu")
    if config.accelerator == "cuda":
        device = torch.device("cuda", config.device_ids[config.local_rank])
        torch.cuda.set_device(device)
    if config.collective in ("horovod", "xla"):  # their own rendezvous (horovodrun's driver, PJRT), no torch group
        collective = COLLECTIVES.get(config.collective)()
        collective.setup(
            Rendezvous(
                rank=rank, world_size=world, timeout=timeout, device=None if config.collective == "xla" else device
            )
        )
        collective.check_across_ranks = False
        return collective
    backend = config.process_group_backend or "gloo"
    if backend == "gloo":
        apply_gloo_interface(address)
    prefixed = dist.PrefixStore("check/group/", store)
    dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
    collective = COLLECTIVES.get(config.collective)()
    collective.setup(  # adopts the group above
        Rendezvous(
            rank=rank,
            world_size=world,
            backend=backend,
            master_addr=address,
            master_port=port,
            timeout=timeout,
            device=device,
        )
    )
    collective.check_across_ranks = False  # the check's calls match by construction; measure the bare operation
    return collective


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
    if config.collective == "xla" and world == 1:  # one replica: no collective, but the engine step
        for name in STEPS[2:-1]:
            progress.record(Check(name, SKIP, "one XLA replica: no collective to check"))
        _engine(config, timeout, progress, strategy)
        return
    if config.collective not in ("torch", "horovod", "xla") or world == 1:
        why = (
            "one process: there is no collective to check"
            if world == 1 or config.collective == "single_device"
            else f"the check runs on torch.distributed, Horovod and XLA, not on the {config.collective} collective"
        )
        for name in STEPS[2:]:
            progress.record(Check(name, SKIP, why))
        return
    progress.enter("barrier")
    try:
        collective = _setup_collective(config, store, address, port, timeout)
    except Exception as exc:
        progress.record(Check("barrier", FAIL, f"rank {rank} ({hosts[rank]}): joining the "
                              f"{config.process_group_backend} group failed: {exc}".splitlines()[0],
                              (rank,), (hosts[rank],), fix="see this rank's error"))  # fmt: skip
        return
    for name in OPERATIONS:
        progress.enter(name)
        check = check_operation(collective, name, timeout)
        progress.record(check)
        if not check.ok:
            return
    if config.collective in ("horovod", "xla"):
        engine = "Horovod" if config.collective == "horovod" else "XLA"
        progress.record(Check("ring", SKIP, f"{engine} has no point-to-point messages: no pair can be timed alone "
                              "(the operations above crossed every link)"))  # fmt: skip
    elif world > 1:
        progress.enter("ring")
        check = ring(collective, hosts, timeout)
        progress.record(check)
        if not check.ok:
            return
    else:
        progress.record(Check("ring", SKIP, "one rank: no pair to check"))
    progress.enter("speed")
    fault_at(rank, "speed")
    if config.collective == "xla":
        speed = Check("speed", SKIP, "XLA records collectives lazily into each replica's graph: a time per call "
                      "would measure graph building and compilation, not the link")  # fmt: skip
    else:
        speed = measure(collective)
    progress.record(speed)
    try:
        if speed.ok:
            # Horovod stays joined: the strategy's collective finds it set up and leaves it so (a second
            # hvd.init after shutdown is not something Horovod promises); a torch group is adopted either way
            _engine(config, timeout, progress, strategy)
    finally:
        collective.teardown()


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
