"""``resolver check --strategy xla`` on XLA:CPU (one replica: XLA:CPU runs no collectives across
replicas, pytorch/xla#5005): the check runs in the replica torch_xla's launcher starts, the
collective steps say why they are skipped, and one step of the tiny model through the real XLA
strategy matches a single process on the CPU; a step that differs is named."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch_xla", reason="torch_xla is not installed (CI runs this in .ci/xla-env.sh's environment)")

pytestmark = [pytest.mark.xla, pytest.mark.usefixtures("xla_cpu"), pytest.mark.timeout(300)]

REPOSITORY = Path(__file__).resolve().parents[3]


def _check(*extra: str, **variables: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESOLVER_", "MASTER_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))
    env.update(PJRT_DEVICE="CPU", **variables)
    command = [sys.executable, "-m", "resolver", "check", "--accelerator", "xla", "--strategy", "xla"]
    command += ["--timeout", "60"]
    done = subprocess.run([*command, *extra], capture_output=True, text=True, env=env, timeout=240)
    return done.returncode, done.stdout, done.stderr


def _checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


def test_one_xla_step_in_the_launched_replica_matches_a_single_process():
    from runtime.preflight.engine import _reference

    code, out, err = _check("--format", "json")
    assert code == 0, out + err
    report = json.loads(out)
    checks = _checks(report)
    assert report["ok"] and report["world_size"] == 1 and "launcher=xla" in report["summary"]
    assert checks["rendezvous"]["status"] == checks["agreement"]["status"] == "ok"
    for name in ("barrier", "all_reduce", "broadcast", "all_gather", "ring", "speed"):
        assert (checks[name]["status"], checks[name]["detail"]) == ("skip", "one XLA replica: no collective to check")
    engine = checks["engine"]
    assert engine["status"] == "ok" and engine["detail"].startswith("one xla step of a tiny model: loss "), engine
    loss = float(re.search(r"loss ([0-9.e-]+),", engine["detail"]).group(1))
    assert loss == pytest.approx(_reference(1)[1], rel=1e-4)


def test_an_xla_step_that_differs_from_one_process_is_named():
    code, out, err = _check(RESOLVER_CHECK_FAULT="0:wrong@engine")
    assert code == 1, out + err
    assert re.search(
        r"FAIL engine {6}rank 0 \(\S+\): one xla step differs from a single-process step in the loss", out
    ), out
    assert "9 checks, FAILED (engine), 1 rank" in out


def test_a_replica_that_raises_is_named_with_the_step_and_its_error_not_a_traceback():
    code, out, err = _check(RESOLVER_CHECK_FAULT="0:raise@engine")
    assert code == 1, out + err
    named = (
        r"FAIL engine {6}rank 0 \(\S+\) exited with code 1 during engine \(its last line: \"rank 0 failed: "
        r"RuntimeError: injected failure at engine \(RESOLVER_CHECK_FAULT\)\"\)"
    )
    assert re.search(named, out), out
    assert "Traceback" not in out + err
