"""The progress watchdog's cost benchmark still runs: one round of each comparison (no timing claim)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_process import run_script

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("progress_cost.py")


def test_each_comparison_prints_ours_beside_its_control() -> None:
    done = run_script(SCRIPT, "--rounds", "1", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for name in ("progress.step(): recording", "collective_entered+left: recording"):
        assert any(line.startswith(name) and "control (not recording again)" in line for line in lines), done.stdout
    for side in ("recording", "not recording", "control"):
        assert any(line.strip().startswith(f"{side}: ") and "ms/step" in line for line in lines), done.stdout
