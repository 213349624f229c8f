"""The fault table: every fault under every launcher, with real processes on this machine.

``python tests/runtime/fault_campaign.py [--repeat N] [LAUNCHER...]`` runs each fault of
:data:`FAULTS` (injected into rank 1 by ``scripts/fault_script.py``, while rank 0 waits for it in a
barrier; the ``rank 0:`` faults the other way round, rank 1 waiting in an all_reduce) under each
launcher (``ddp``, ``ddp_spawn``, ``ddp_fork``: the script launches; ``run``:
``resolver run --devices 2 --strategy ddp``) and prints a Markdown table: the error named (type,
rank(s), exit code), the median seconds from start to failure, and what was left behind (rank
processes still alive, report folders left in the case's own ``TMPDIR``). Not a test: the
assertions live in ``test_runtime_faults.py``; this is the campaign to run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]
from runtime_workers import process_is_gone, recorded_pids  # noqa: E402

REPOSITORY = HERE.parents[1]
SCRIPT = HERE / "scripts" / "fault_script.py"
LAUNCHERS = ("ddp", "ddp_spawn", "ddp_fork", "run")
#: fault name in the table -> the kind fault_script.py injects
FAULTS = {
    "raise": "raise",
    "os._exit(3)": "exit3",
    "SIGKILL": "sigkill",
    "fail before rendezvous": "device-fail",
    "fail in rendezvous": "device-late-fail",
    "hang before rendezvous": "device-hang",
    "hang in rendezvous": "device-late-hang",
    "hang in collective": "hang",
    "skip collective, exit": "skip",
    "SIGTERM to launcher": "hang",
    "rank 0: skip collective, return": "skip@0",
    "rank 0: hang in work": "hang@0",
}
#: Defaults of --launch-timeout (bounds "hang in collective") and --rendezvous-timeout ("hang before/in
#: rendezvous"); on a loaded machine raise the latter above the time ranks take to start.
LAUNCH_TIMEOUT = 60.0
RENDEZVOUS_TIMEOUT = 30.0
_DROP = (
    "RESOLVER_CONFIG",
    "RUNTIME_REPORT_DIR",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "RUNTIME_RENDEZVOUS_TIMEOUT",
)


@attrs.frozen
class Case:
    launcher: str
    fault: str
    named: str
    seconds: float
    leftover_processes: int
    leftover_folders: int


def _command(launcher: str, kind: str, out: str, launch_timeout: float) -> list[str]:
    if launcher == "run":
        return [sys.executable, "-m", "resolver.cli", "run", "--devices", "2", "--strategy", "ddp",
                "--timeout", str(launch_timeout), str(SCRIPT), "run", kind, out]  # fmt: skip
    return [sys.executable, str(SCRIPT), launcher, kind, out, str(launch_timeout)]


def _named(launcher: str, returncode: int, stdout: str, stderr: str) -> str:
    if launcher == "run":
        head = next((line for line in stderr.splitlines() if line.startswith("resolver run:")), "")
        return f"exit {returncode}: {head.removeprefix('resolver run: ')[:80]}"
    lines = [line for line in stdout.splitlines() if line.startswith("OUTCOME ")]
    if not lines:
        return f"no outcome (exit {returncode})"
    outcome = json.loads(lines[-1].removeprefix("OUTCOME "))
    if outcome["error"] is None:
        return "no error"
    who = f"rank {outcome['rank']}" if outcome.get("rank") is not None else f"ranks {outcome.get('ranks')}"
    code = f", exit code {outcome['exit_code']}" if outcome.get("exit_code") is not None else ""
    return f"{outcome['error']} ({who}{code})"


def run_case(launcher: str, fault: str, launch_timeout: float = LAUNCH_TIMEOUT,
             rendezvous_timeout: float = RENDEZVOUS_TIMEOUT) -> Case:  # fmt: skip
    kind = FAULTS[fault]
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k not in _DROP}
        env.update(
            TMPDIR=tmp,
            RUNTIME_RENDEZVOUS_TIMEOUT=str(rendezvous_timeout),
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
        )
        start = time.monotonic()
        process = subprocess.Popen(_command(launcher, kind, out, launch_timeout), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env, cwd=REPOSITORY)  # fmt: skip
        if fault == "SIGTERM to launcher":
            while len(recorded_pids(Path(out))) < 2 and time.monotonic() - start < 120:
                time.sleep(0.05)
            time.sleep(1.0)  # rank 0 is in the barrier by now
            process.send_signal(signal.SIGTERM)
            start = time.monotonic()  # time from the signal to the exit
        try:
            stdout, stderr = process.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        seconds = time.monotonic() - start
        named = _named(launcher, process.returncode, stdout, stderr)
        if fault == "SIGTERM to launcher":
            named = f"launcher exit {process.returncode}"
        time.sleep(0.2)
        left = sum(not process_is_gone(pid) for pid in recorded_pids(Path(out)))
        folders = len(list(Path(tmp).glob("runtime-ranks-*")))
    return Case(launcher, fault, named, seconds, left, folders)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("launchers", nargs="*", help=f"some of {', '.join(LAUNCHERS)} (default: all)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the time shown is their median")
    parser.add_argument("--fault", action="append", choices=list(FAULTS), help="only these faults (repeatable)")
    parser.add_argument("--launch-timeout", type=float, default=LAUNCH_TIMEOUT, help="seconds (default: %(default)s)")
    parser.add_argument(
        "--rendezvous-timeout", type=float, default=RENDEZVOUS_TIMEOUT, help="seconds (default: %(default)s)"
    )
    args = parser.parse_args()
    unknown = set(args.launchers) - set(LAUNCHERS)
    if unknown:
        parser.error(f"unknown launcher(s) {', '.join(sorted(unknown))}; choose from {', '.join(LAUNCHERS)}")
    print(
        f"launch timeout {args.launch_timeout:g} s, rendezvous timeout {args.rendezvous_timeout:g} s, "
        f"{args.repeat} run(s) per case"
    )
    print(
        "| fault (in rank 1 unless named) | launcher | error named (rank, exit code) | median s to fail "
        "| leftover processes | leftover report folders |"
    )
    print("|---|---|---|---|---|---|")
    for fault in args.fault or FAULTS:
        for launcher in args.launchers or LAUNCHERS:
            cases = [run_case(launcher, fault, args.launch_timeout, args.rendezvous_timeout)
                     for _ in range(args.repeat)]  # fmt: skip
            named = " / ".join(sorted({c.named for c in cases}))
            seconds = statistics.median(c.seconds for c in cases)
            leftovers = f"{sum(c.leftover_processes for c in cases)} | {sum(c.leftover_folders for c in cases)}"
            print(f"| {fault} | {launcher} | {named} | {seconds:.1f} | {leftovers} |", flush=True)


if __name__ == "__main__":
    main()
