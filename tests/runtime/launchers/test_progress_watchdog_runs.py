"""The progress watchdog with real processes: a rank stuck in plain Python, with no ``timeout`` set, ends
the launch, named with its stack, with where its peer waits (the collective's number and line).

The script (``scripts/stall_script.py``) trains with an ``all_reduce`` per parameter and an optimizer
step; a small ``progress_timeout`` keeps the wall time small where the behaviour allows it. The
default (60 s) deadline itself is the same logic with another floor (``tests/runtime/supervision``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_workers import process_is_gone, recorded_pids

from tests.support.cli_support import resolver_command

pytestmark = pytest.mark.timeout(150)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "stall_script.py"
#: The line of the script's all_reduce, where rank 0 waits, and of the broadcast rank 1 makes instead.
ALL_REDUCE_LINE = next(n for n, line in enumerate(SCRIPT.read_text().splitlines(), 1) if ".all_reduce(" in line)
BROADCAST_LINE = next(n for n, line in enumerate(SCRIPT.read_text().splitlines(), 1) if ".broadcast(" in line)


def _environment(tmp: Path) -> dict[str, str]:
    drop = {"RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "TMPDIR": str(tmp)}


def _launch(launcher: str, kind: str, tmp_path: Path, **options: float) -> tuple[dict[str, object], Path]:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), launcher, str(out), kind, json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=140,  # bounds the test: without the watchdog the stuck rank hangs the launch for good
        env=_environment(tmp),
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("OUTCOME ")]
    assert len(lines) == 1, done.stdout + done.stderr
    assert all(process_is_gone(pid) for pid in recorded_pids(out))
    assert list(tmp.iterdir()) == []  # the report folder (with the progress records) is gone
    return json.loads(lines[0][len("OUTCOME ") :]), out


@pytest.mark.parametrize("launcher", ["ddp_spawn", "ddp"])
def test_a_rank_stuck_in_plain_python_is_named_and_where_its_peer_waits_without_a_timeout(
    launcher: str, tmp_path: Path
) -> None:
    # Steps of 0.3 s and a 1 s floor: the deadline is 10x the median step time (about 3 s), learned.
    outcome, _ = _launch(launcher, "slow-stuck", tmp_path, progress_timeout=1)

    assert (outcome["error"], outcome["ranks"]) == ("ProgressTimeoutError", [1]), outcome
    message = str(outcome["message"])
    assert message.startswith("rank 1 made no progress for "), message
    assert "(the progress deadline, 10x the median step time, median step 0." in message
    # 12 steps of 2 all_reduces: rank 0 waits in the 25th, rank 1 ran 24 and is in its own work.
    assert f"rank 0 was waiting for it in all_reduce #25 (called at stall_script.py:{ALL_REDUCE_LINE} in train)" in (
        message
    )
    assert "rank 1 is at #24: it ran 1 collective fewer than rank 0, and is outside any collective" in message
    assert "in train" in message.split("--- where rank 1 was ---")[1]  # its stack: the loop in train()
    # torch's own record, read from both ranks while they hung: rank 0 in its 25th all_reduce (torch numbers
    # every collective of the group: the launch's own come first), rank 1 past its last one.
    record = message.split("--- torch's flight recorder: each rank's last collective per process group ---\n")[1]
    assert re.search(r"^rank 0: all_reduce #\d+ of default_pg \(Float \[\d+(, \d+)*\]\), scheduled$", record, re.M), (
        record
    )
    assert re.search(r"^rank 1: all_reduce #\d+ of default_pg ", record, re.M), record
    assert "flight_recorder.py" not in message  # the thread that answers for the record is left out of the stacks


def test_ranks_waiting_in_different_collectives_are_named_each_with_its_line(tmp_path: Path) -> None:
    # At step 12 rank 1 broadcasts where rank 0 all-reduces: both wait, in collective #25, for good.
    outcome, _ = _launch("ddp_spawn", "mismatch", tmp_path, progress_timeout=1)

    assert (outcome["error"], outcome["ranks"]) == ("ProgressTimeoutError", [0, 1]), outcome
    message = str(outcome["message"])
    assert message.startswith("ranks 0, 1 made no progress for "), message
    assert (
        f"the ranks wait in different collectives: rank 0 in all_reduce #25 (called at stall_script.py:"
        f"{ALL_REDUCE_LINE} in train), rank 1 in broadcast #25 (called at stall_script.py:{BROADCAST_LINE} in train)"
    ) in message
    # torch's flight recorder says the same in its own terms: the same number, two operations
    record = message.split("--- torch's flight recorder: each rank's last collective per process group ---\n")[1]
    first = re.search(r"^rank 0: all_reduce #(\d+) of default_pg", record, re.M)
    second = re.search(r"^rank 1: (\w+) #(\d+) of default_pg", record, re.M)
    assert first is not None and second is not None, record
    assert second.group(1) != "all_reduce" and second.group(2) == first.group(1), record


def test_resolver_run_stops_a_stuck_rank_at_its_progress_timeout_with_status_124(tmp_path: Path) -> None:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    command = [str(resolver_command()), "run", "--devices", "2", "--strategy", "ddp", "--progress-timeout", "3"]
    done = subprocess.run(
        [*command, str(SCRIPT), "run", str(out), "stuck"],
        capture_output=True,
        text=True,
        timeout=140,
        env=_environment(tmp),
    )

    assert done.returncode == 124, done.stderr
    assert "resolver run: rank 1 made no progress for 3 s (the progress deadline, progress_timeout=3" in done.stderr
    assert "rank 0 was waiting for it in all_reduce #81 (called at stall_script.py:" in done.stderr
    assert all(process_is_gone(pid) for pid in recorded_pids(out))


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("healthy", {}),  # the default watchdog
        ("heartbeat", {"progress_timeout": 1}),  # 4 s of heartbeats only: progress all the same
        ("pause", {"progress_timeout": 0}),  # 4 s with no progress at all, the watchdog off
        # a checkpoint that takes 4 s to write, under a 1 s deadline: saving is not judged
        ("slow-save", {"progress_timeout": 1}),
    ],
)
def test_a_run_that_makes_progress_or_turned_the_watchdog_off_is_not_stopped(
    kind: str, options: dict[str, float], tmp_path: Path
) -> None:
    outcome, _ = _launch("ddp_spawn", kind, tmp_path, **options)

    assert outcome["error"] is None, outcome
