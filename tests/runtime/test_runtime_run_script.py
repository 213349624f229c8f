"""``runtime.run_script``: the torchrun-like launcher behind ``resolver run``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_workers import process_is_gone, recorded_pids

SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = pytest.mark.timeout(120)


def resolver_run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RESOLVER_CONFIG", "MASTER_PORT", "RANK")}
    return subprocess.run([sys.executable, str(SCRIPTS / "run_script_driver.py"), *args],
                          capture_output=True, text=True, timeout=90, env=env)


def lines_with(prefix: str, output: str) -> list[dict[str, object]]:
    return [json.loads(line[len(prefix):]) for line in output.splitlines() if line.startswith(prefix)]


def test_every_rank_gets_torchrun_variables_and_the_resolved_config(tmp_path: Path) -> None:
    done = resolver_run(str(SCRIPTS / "print_rank.py"), str(tmp_path))

    assert done.returncode == 0, done.stderr
    ranks = sorted(lines_with("RANK-ENV ", done.stdout), key=lambda r: r["RANK"])  # type: ignore[arg-type,return-value]
    assert [(r["RANK"], r["LOCAL_RANK"], r["config_rank"]) for r in ranks] == [("0", "0", 0), ("1", "1", 1)]
    for r in ranks:
        assert (r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"], r["NODE_RANK"], r["GROUP_RANK"]) == ("2", "2", "0", "0")
        assert r["MASTER_ADDR"] == "127.0.0.1" and r["MASTER_PORT"] == ranks[0]["MASTER_PORT"]


def test_a_failing_rank_sets_the_exit_code_and_the_others_are_stopped(tmp_path: Path) -> None:
    done = resolver_run(str(SCRIPTS / "print_rank.py"), str(tmp_path), "1", "3")

    assert done.returncode == 3
    assert "resolver run: rank 1 failed (exit code 3)" in done.stderr
    pids = recorded_pids(tmp_path)
    assert len(pids) == 2 and all(process_is_gone(pid) for pid in pids)


def test_a_script_using_runtime_launch_runs_each_rank_with_the_config_it_was_given(tmp_path: Path) -> None:
    done = resolver_run(str(SCRIPTS / "launch_ranks.py"), str(tmp_path), "identities")

    assert done.returncode == 0, done.stderr
    identities = lines_with("IDENTITIES ", done.stdout)[0]
    assert [(i["global_rank"], i["config_rank"]) for i in identities] == [(0, 0), (1, 1)]  # type: ignore[index,union-attr]
    # use_distributed_sampler=False was only in the config run_script was given: nobody re-resolved.
    assert [i["use_distributed_sampler"] for i in identities] == [False, False]  # type: ignore[index,union-attr]
