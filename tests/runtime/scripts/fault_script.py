"""A user script with an injected fault: ``python fault_script.py STRATEGY FAULT OUT_DIR [TIMEOUT]``.

STRATEGY is ``ddp``, ``ddp_spawn`` or ``ddp_fork`` (the script launches), or ``run`` (``resolver
run`` started the script: it calls ``runtime.launch`` without flags). FAULT is a kind that
``fault_workers.fault`` injects, or ``device-fail``/``device-hang`` (rank 1's device selection
fails or hangs, before it joins the process group), ``device-late-hang``/``device-late-fail`` (rank 1
hangs or fails while it joins: in the rendezvous), or ``none``; ``skip@0``/``hang@0`` put the
fault in rank 0 instead. ``FAULT_SCRIPT_ALARM=SECONDS`` makes the launching process set its own
``SIGALRM`` handler and alarm first. The launching process prints one
``OUTCOME {json}`` line: the error type, rank, exit code and message, and the seconds it took.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[2])]  # fault_workers, the repository

import fault_workers  # noqa: E402  (replaces the cpu accelerator: see its docstring)

import runtime  # noqa: E402


class ProgramAlarm(Exception):
    """Raised by the program's own SIGALRM handler (``FAULT_SCRIPT_ALARM``)."""


def on_alarm(signum: int, frame: object) -> None:
    global alarm_fired
    alarm_fired = True
    raise ProgramAlarm("the program's own alarm")


alarm_fired = False


def main() -> None:
    strategy, kind, out = sys.argv[1], sys.argv[2], sys.argv[3]
    # FAULT_SCRIPT_ALARM=SECONDS: the launching process uses SIGALRM itself (a handler and an alarm).
    alarm = int(os.environ.get("FAULT_SCRIPT_ALARM", "0")) if "RUNTIME_REPORT_DIR" not in os.environ else 0
    if alarm:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(alarm)
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0
    if kind.startswith("device-"):
        os.environ[fault_workers.DEVICE_FAULT] = f"{kind.removeprefix('device-')}:1"
    start = time.monotonic()
    outcome: dict[str, object] = {}
    try:
        if strategy == "run":
            runtime.launch(fault_workers.fault, kind, out)
        else:
            runtime.launch(fault_workers.fault, kind, out, devices=2, strategy=strategy, timeout=timeout)
        outcome = {"error": None}
    except Exception as error:
        outcome = {
            "error": type(error).__name__,
            "rank": getattr(error, "rank", None),
            "ranks": list(getattr(error, "ranks", ())),
            "exit_code": getattr(error, "exit_code", None),
            "message": str(error),
        }
        if strategy == "run":
            raise
        print(f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)  # as an uncaught error would show
    outcome["seconds"] = round(time.monotonic() - start, 2)
    if alarm:
        signal.alarm(0)
        outcome.update(alarm_fired=alarm_fired, alarm_handler_kept=signal.getsignal(signal.SIGALRM) is on_alarm)
    if os.environ.get("RANK") in (None, "0") or "RUNTIME_REPORT_DIR" not in os.environ:
        print("OUTCOME " + json.dumps(outcome) + "\n", end="", flush=True)


if __name__ == "__main__":  # ddp_spawn imports this file again in each rank
    main()
