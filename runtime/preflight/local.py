"""``resolver check`` on this machine: start the resolved local ranks, watch them, merge the report.

Each rank is a fresh ``python -m runtime.preflight.rank`` with the variables ``resolver run``
gives a rank (``RESOLVER_CONFIG``, ``MASTER_ADDR``, ...). The launcher reads each rank's state
file, so it can say in which step a rank died or hung; a rank that has not exited ``timeout``
seconds (and a grace) after the first one did is stopped (its whole process group), and every rank
is reaped before the report is made: nothing is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from resolver import ResolvedConfig
from runtime._protocol.rank_environment import rank_config, rank_variables
from runtime._supervision.capacity import TORCH_RANK_MEMORY, check_room_for
from runtime._supervision.signals import sigterm_guard
from runtime.preflight.prestart import before_ranks, quiet_torch_log
from runtime.preflight.progress import Progress, StepReporter
from runtime.preflight.rank_output import last_meaningful_line
from runtime.preflight.report import SKIP, STEPS, Check, CheckReport, RankState, merge
from runtime.registry import ACCELERATORS, CLUSTER_ENVIRONMENTS

__all__ = ["check_locally"]

#: Seconds a rank may take to import torch and start, on top of the steps' timeouts.
STARTUP_ALLOWANCE = 60.0
#: Seconds, after the first rank exits, that the others get on top of the timeout before being stopped.
GRACE = 3.0


def _read_state(path: Path, rank: int) -> RankState:
    try:
        return RankState.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError):
        return RankState(rank)  # it never wrote one: it died (or hung) before its first step


def _last_line(path: Path) -> str:
    try:
        return last_meaningful_line(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return ""


def check_locally(config: ResolvedConfig, *, timeout: float, port_source: str | None = None,
                  reporter: StepReporter | None = None) -> CheckReport:  # fmt: skip
    """Start this node's ranks of ``config`` with the check and return the merged report.
    ``port_source``: where the main port came from, as the caller's user gave it (``--master-port``);
    ``reporter``: told each step as every rank here has passed it."""
    started = time.monotonic()
    cluster = CLUSTER_ENVIRONMENTS.get(config.cluster_environment)(config)
    address, port = cluster.main_address, cluster.main_port
    source = port_source or cluster.main_port_source
    ranks = [rank_config(config, local) for local in range(config.num_devices)]
    cannot = before_ranks(config, [rank.global_rank for rank in ranks], address, port, source)
    if cannot is not None:  # found without starting a rank, as `resolver run` finds it
        return _not_started(config, cannot, time.monotonic() - started)
    on_cpu = ACCELERATORS.get(config.accelerator).computes_on_cpu
    check_room_for(len(ranks), TORCH_RANK_MEMORY, "check ranks", on_cpu=on_cpu)  # before starting any
    folder = Path(tempfile.mkdtemp(prefix="resolver-check-"))
    try:
        # SIGTERM (like Ctrl-C) unwinds through the finally blocks: every rank stopped, the folder removed.
        with sigterm_guard(str(folder)):
            states = _run_ranks(ranks, address, port, source, folder, timeout, reporter)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    summary = config.summary()
    if config.node_rank != 0:
        summary = f"node {config.node_rank}'s ranks (rank 0's node reports the whole run): {summary}"
    return merge([states[r] for r in sorted(states)], config.world_size, timeout=timeout, summary=summary,
                 seconds=time.monotonic() - started)  # fmt: skip


def _not_started(config: ResolvedConfig, cannot: Check, seconds: float) -> CheckReport:
    """The report of a check that found, before starting any rank, that the rendezvous cannot work."""
    later = [Check(name, SKIP, "not run: an earlier check failed") for name in STEPS[1:]]
    return CheckReport((cannot, *later), config.world_size, (socket.gethostname(),) * config.world_size,
                       config.summary(), seconds)  # fmt: skip


def _run_ranks(ranks: list[ResolvedConfig], address: str, port: int, source: str, folder: Path,
               timeout: float, reporter: StepReporter | None = None) -> dict[int, RankState]:  # fmt: skip
    """Start ``ranks`` with their files in ``folder``, wait for them (stopping any that hang), and read
    their states; no rank is left running however this ends."""
    processes: dict[int, subprocess.Popen[bytes]] = {}
    logs = {}
    try:
        for rank in ranks:
            r = rank.global_rank
            environ = {**os.environ, **rank_variables(rank, address, port)}
            environ["RESOLVER_CHECK_SOURCE"] = source
            quiet_torch_log(environ)
            logs[r] = folder / f"rank-{r}.log"
            with open(logs[r], "wb") as log:
                processes[r] = subprocess.Popen(
                    [sys.executable, "-m", "runtime.preflight.rank", "--timeout", str(timeout),
                     "--state-file", str(folder / f"rank-{r}.json"), "--report-file", str(folder / "everyone.json")],
                    env=environ, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group: stopped whole, children included
                )  # fmt: skip
        progress = None if reporter is None else Progress(
            list(processes), lambda r: _read_state(folder / f"rank-{r}.json", r), reporter)  # fmt: skip
        stopped = _watch(processes, timeout, lambda: _host_left(processes, folder), progress)
    finally:
        for process in processes.values():  # an interrupt, SIGTERM or an error above: stop and reap every rank
            if process.poll() is None:
                _stop(process)
    states: dict[int, RankState] = {}
    everyone = folder / "everyone.json"
    if everyone.exists():  # rank 0's view of every rank (other nodes' ranks included)
        for data in json.loads(everyone.read_text(encoding="utf-8")):
            states[int(data["rank"])] = RankState.from_dict(data)
    host_left = _host_left(processes, folder)
    for r, process in processes.items():
        state = _read_state(folder / f"rank-{r}.json", r)
        exit_code = process.returncode
        finished = state.current == "done" and r not in stopped
        last = "" if finished else _last_line(logs[r])  # its error, when it ended before the end
        waited = 0 if host_left and r in stopped and state.current in (None, STEPS[0]) else None
        states[r] = RankState(r, state.host if state.host != "?" else os.uname().nodename, state.checks,
                              state.current, exit_code, r in stopped, output=last, waited_for=waited)  # fmt: skip
    return states


def _host_left(processes: dict[int, subprocess.Popen[bytes]], folder: Path) -> bool:
    """Whether rank 0, the rendezvous's host, started here and exited without passing the rendezvous:
    then the ranks still starting or in the rendezvous can only wait for it."""
    if 0 not in processes or processes[0].poll() is None:
        return False
    state = _read_state(folder / "rank-0.json", 0)
    return not any(check.name == STEPS[0] and check.ok for check in state.checks)


def _watch(processes: dict[int, subprocess.Popen[bytes]], timeout: float,
           hopeless: Callable[[], bool] = lambda: False, progress: Progress | None = None) -> set[int]:  # fmt: skip
    """Wait for every rank; stop those still running ``timeout + GRACE`` s after the first exit, at
    once when ``hopeless()`` says they can only wait (rank 0 left the rendezvous), or when the whole
    check's bound passes. Returns the ranks stopped."""
    overall = time.monotonic() + STARTUP_ALLOWANCE + timeout * len(STEPS) + 30
    first_exit: float | None = None
    stopped: set[int] = set()
    while True:
        if progress is not None:
            progress()
        running = [r for r, p in processes.items() if p.poll() is None]
        if not running:
            return stopped
        now = time.monotonic()
        if first_exit is None and len(running) < len(processes):
            first_exit = now
        if now > overall or (first_exit is not None and (now > first_exit + timeout + GRACE or hopeless())):
            for r in running:
                _stop(processes[r])
                stopped.add(r)
            return stopped
        time.sleep(0.02)


def _stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
