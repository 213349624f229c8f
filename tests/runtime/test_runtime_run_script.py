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
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "run_script_driver.py"), *args],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )


def lines_with(prefix: str, output: str) -> list[dict[str, object]]:
    return [json.loads(line[len(prefix) :]) for line in output.splitlines() if line.startswith(prefix)]


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


@pytest.mark.parametrize("processes", [1, 2])
def test_a_torchrun_script_sees_the_same_rank_variables_under_resolver_run_and_torchrun(processes: int) -> None:
    """torchrun parity: ROLE_RANK, ROLE_WORLD_SIZE, TORCHELASTIC_RUN_ID, restart counts, and the
    script's own resolve() (torchelastic, no launcher) agree between the two launchers, for one process too
    (torch.distributed.is_torchelastic_launched() is true under both)."""
    script = str(SCRIPTS / "print_torch_ranks.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESOLVER_", "TORCHELASTIC_", "MASTER_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPTS.parents[2]), env.get("PYTHONPATH", "")])
    bin_dir = Path(sys.executable).parent
    runs = {
        "torchrun": [str(bin_dir / "torchrun"), "--nproc-per-node", str(processes), script],
        "resolver run": [str(bin_dir / "resolver"), "run", "--devices", str(processes), script],
    }
    seen = {}
    for name, command in runs.items():
        done = subprocess.run(command, capture_output=True, text=True, timeout=90, env=env)
        assert done.returncode == 0, f"{name}:\n{done.stdout}\n{done.stderr}"
        seen[name] = sorted(
            lines_with("TORCH-RANK ", done.stdout.replace("[rank 0]: ", "").replace("[rank 1]: ", "")),
            key=lambda r: r["rank"],
        )  # type: ignore[arg-type,return-value]
    assert [r["rank"] for r in seen["torchrun"]] == list(range(processes))
    assert seen["resolver run"] == seen["torchrun"]
    total = processes * (processes + 1) // 2
    assert all(r["run_id_set"] and r["ROLE_RANK"] == str(r["rank"]) and r["sum"] == total for r in seen["torchrun"])
    assert all(r["elastic_launched"] and r["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" for r in seen["resolver run"])
