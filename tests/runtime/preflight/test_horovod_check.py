"""``horovodrun ... resolver check --strategy horovod``: each rank runs the check on Horovod's own
collective (real horovodrun, Gloo controller, 2 processes on this machine). The collectives pass
with their values checked and their figures, the ring is skipped (Horovod has no point-to-point
messages), and one step of the tiny model through the Horovod strategy matches a single process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.horovod,
    pytest.mark.usefixtures("horovod_ranks"),
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("horovodrun") is None, reason="horovodrun is not on PATH"),
]

REPOSITORY = Path(__file__).resolve().parents[3]


def _check(*extra: str, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """Run the check under ``horovodrun -np 2``: (exit code, rank 0's stdout without horovodrun's
    prefixes, seconds)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("RESOLVER_", "MASTER_"))}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))
    environment.update(env or {})
    start = time.monotonic()
    done = subprocess.run(
        [shutil.which("horovodrun") or "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m",
         "resolver", "check", "--strategy", "horovod", "--accelerator", "cpu", "--devices", "2", "--timeout", "60",
         *extra],
        capture_output=True, text=True, timeout=240, env=environment,
    )  # fmt: skip
    seconds = time.monotonic() - start
    rank0 = [line.split(":", 1)[1] for line in done.stdout.splitlines() if line.startswith("[0]<stdout>:")]
    assert "[1]<stdout>:resolver check:" not in done.stdout or done.returncode != 0  # rank 1 quiet when it passes
    return done.returncode, "\n".join(rank0), seconds


def _checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


def _single_process_loss() -> float:
    from runtime.preflight.engine import _reference

    return _reference(2)[1]


def test_under_horovodrun_the_collectives_and_one_horovod_step_pass_with_figures():
    code, out, seconds = _check("--format", "json")
    assert code == 0, out
    report = json.loads(out)
    checks = _checks(report)
    assert report["ok"] and report["world_size"] == 2 and report["warnings"] == []
    assert "strategy=horovod" in report["summary"] and "cluster=horovod" in report["summary"]
    for name in ("rendezvous", "agreement", "barrier", "all_reduce", "broadcast", "all_gather", "speed", "engine"):
        assert checks[name]["status"] == "ok", checks[name]
    assert checks["all_reduce"]["detail"].startswith("2 ranks, values checked")
    assert checks["ring"]["status"] == "skip" and "no point-to-point messages" in checks["ring"]["detail"]
    speed = checks["speed"]["figures"]
    assert {(f["op"], f["bytes"]) for f in speed} >= {("all_reduce", 4 << 20), ("broadcast", 8), ("all_gather", 16)}
    assert all(f["latency_us"] > 0 and f["busbw_gbps"] >= 0 for f in speed)
    engine = checks["engine"]["detail"]
    assert engine.startswith("one horovod step of a tiny model: loss "), engine
    loss = float(re.search(r"loss ([0-9.e-]+),", engine).group(1))
    assert loss == pytest.approx(_single_process_loss(), rel=1e-4)
    assert seconds < 120


def test_a_horovod_step_that_differs_from_one_process_is_named_in_the_text_report():
    code, out, _ = _check(env={"RESOLVER_CHECK_FAULT": "0:wrong@engine"})
    assert code == 1, out
    assert "FAIL engine      rank 0 (" in out, out
    assert "one horovod step differs from a single-process step in the loss after the step" in out
    assert "9 checks, FAILED (engine), 2 ranks" in out
