"""The launch-stall benchmark script still runs: one short round per launcher (no timing claim)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_process import run_script

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("launch_stalls.py")


def test_one_short_round_counts_our_launches_and_the_controls():
    done = run_script(SCRIPT, "--launches", "2", "--launchers", "ddp_fork", "ddp_spawn", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for launcher, method in (("ddp_fork", "fork"), ("ddp_spawn", "spawn")):
        for side in ("ours", f"control (raw torch, {method})"):
            assert any(line.startswith(f"{launcher} {side}: ") and "/2 over 1 s" in line for line in lines), done.stdout
