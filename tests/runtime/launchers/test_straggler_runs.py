"""Stragglers named while the job runs, with real processes: a rank whose step sleeps 4x as long as
its peer's is named once on stderr with its figures (and in ``resolver run``'s summary and the
``progress.json`` of its log folder); ranks alike, busy on this machine's shared cores, are not.

The script (``scripts/straggler_script.py``) all-reduces the gradients and makes an optimizer step
each step. The thresholds themselves are tested on given looks (``tests/runtime/supervision``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_support import resolver_command

pytestmark = pytest.mark.timeout(200)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "straggler_script.py"


def _environment(tmp: Path) -> dict[str, str]:
    drop = {"RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "TMPDIR": str(tmp)}


def test_resolver_run_names_a_rank_slowed_4x_once_with_its_figures(tmp_path: Path) -> None:
    logs, tmp = tmp_path / "logs", tmp_path / "tmp"
    tmp.mkdir()
    # 40 ms of rank 1's own work against 10 ms, for 350 steps (about 15 s): a window (5 s) and the
    # persistence (5 s) fit in it.
    command = [str(resolver_command()), "run", "--devices", "2", "--strategy", "ddp", "--log-dir", str(logs)]
    done = subprocess.run([*command, str(SCRIPT), "run", "slow", "350"], capture_output=True, text=True, timeout=180,
                          env=_environment(tmp))  # fmt: skip

    assert done.returncode == 0, done.stderr
    named = [line for line in done.stderr.splitlines() if line.startswith("straggler")]
    assert len(named) == 1, done.stderr  # once, not at every look
    host = socket.gethostname()
    found = re.fullmatch(
        rf"straggler: rank 1 \(host {re.escape(host)}\) spends ([\d.]+) ms per step in its own work \(outside "
        r"collectives\), ([\d.]+)x the other ranks' median of ([\d.]+) ms, over its last \d+ steps",
        named[0],
    )
    assert found is not None, named
    own, ratio, median = (float(figure) for figure in found.groups())
    assert own >= 40 and 2.5 <= ratio <= 4.5 and median >= 10, named
    summary = [line for line in done.stderr.splitlines() if line.startswith("resolver run: straggler")]
    assert len(summary) == 1, done.stderr
    assert re.fullmatch(
        r"resolver run: straggler\(s\) rank 1; own work per step \(outside collectives\): rank 0 [\d.]+ ms, "
        rf"rank 1 [\d.]+ ms \(each rank's figures: {re.escape(str(logs / 'progress.json'))}\)",
        summary[0],
    ), summary
    figures = json.loads((logs / "progress.json").read_text())
    assert figures["stragglers"] == [1]
    assert figures["reports"] == named
    work = {rank["rank"]: rank["own_work_ms_per_step"] for rank in figures["ranks"]}
    assert work[1] >= 2.5 * work[0] and work[0] >= 10, figures
    assert [rank["steps"] for rank in figures["ranks"]] == [350, 350]
    assert list(tmp.iterdir()) == []


def test_ranks_alike_busy_on_the_shared_cores_are_not_named(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # Every rank computes for 10 ms of wall time a step, 1000 steps (about 15 s): both compete for the
    # machine's cores with whatever else runs on it, which makes their own work differ by the second.
    done = subprocess.run([sys.executable, str(SCRIPT), "ddp", "busy", "1000"], capture_output=True, text=True,
                          timeout=180, env=_environment(tmp))  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "DONE" in done.stdout, done.stdout + done.stderr
    assert "straggler" not in done.stderr, done.stderr
