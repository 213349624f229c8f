"""The rank that runs in the launching process (the ``ddp`` launcher's rank 0) runs on the strategy it was
given: the object the caller built, attributes and all, for every launch and every restarted attempt.

Real processes: the two-rank run is a script that the subprocess launcher re-runs as rank 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from runtime_workers import process_is_gone, recorded_pids

import resolver
import runtime

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

pytestmark = pytest.mark.timeout(240)


def test_rank_0_in_the_launching_process_gets_the_strategy_it_was_given_at_each_launch() -> None:
    strategy = runtime.build(resolver.resolve("cpu", 1, "ddp"), timeout=60)
    strategy.team = "vision"  # type: ignore[attr-defined]

    def work(received: runtime.Strategy) -> tuple[bool, str, float]:
        total = received.collective.all_reduce(torch.tensor([2.0]), "sum")
        return received is strategy, getattr(received, "team", ""), total.item()

    assert strategy.launcher is not None and strategy.launcher.runs_first_rank_here
    assert strategy.launch(work) == (True, "vision", 2.0)
    assert strategy.launch(work) == (True, "vision", 2.0)  # a second launch sets it up again


def test_a_restarted_attempt_runs_rank_0_on_the_given_strategy_with_a_fresh_peer(tmp_path: Path) -> None:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    drop = {"RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK",
            "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"}  # fmt: skip
    environment = {**{k: v for k, v in os.environ.items() if k not in drop}, "TMPDIR": str(tmp)}
    command = [sys.executable, str(SCRIPTS / "given_strategy.py"), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=200, env=environment)
    lines = [line for line in done.stdout.splitlines() if line.startswith("OUTCOME ")]
    assert len(lines) == 1, done.stdout + done.stderr

    # The all-reduce rank 0 made in the dead attempt is compared again with the restarted rank 1 (a call
    # trusted from the first attempt would leave that rank waiting for rank 0's side of the check).
    outcome = json.loads(lines[0][len("OUTCOME ") :])
    assert outcome == {"result": {"attempt": 1, "given": True, "team": "vision", "sum": 3.0}}, done.stderr
    assert "restarting every local rank (restart 1 of 1" in done.stderr
    assert sorted(p.name for p in out.glob("pid-*")) == ["pid-0-0", "pid-0-1", "pid-1-0", "pid-1-1"]
    assert all(process_is_gone(pid) for pid in recorded_pids(out)), "a rank outlived the run"
