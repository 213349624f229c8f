"""The flight recorder's cost benchmark still runs: one round of each side (no timing claim)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_process import run_script

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("flight_recorder_cost.py")


def test_each_side_prints_its_figure_and_the_record_is_on_only_where_asked() -> None:
    done = run_script(SCRIPT, "--rounds", "1", "--calls", "2500", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines()}
    assert set(lines) == {"recording", "not recording", "control"}, done.stdout
    assert lines["recording"].endswith("entries in the record: 2000"), done.stdout  # bounded: 2,700 calls made
    assert lines["not recording"].endswith("entries in the record: 0"), done.stdout
    assert all("µs CPU per all_reduce" in line for line in lines.values()), done.stdout
