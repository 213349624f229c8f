"""Horovod for real: the launcher (result, a failing rank's error, no process left behind),
end-to-end training on 2 processes, and a run that ``horovodrun`` itself started."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import runtime
from runtime.errors import RankFailedError
from tests.support.horovod_workers import fail_on_rank_1, identity, optimizer_of_ones_own, train

pytestmark = [pytest.mark.horovod, pytest.mark.usefixtures("horovod_ranks"), pytest.mark.timeout(300)]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "horovodrun_train.py"


def _pids(directory: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(directory.glob("*.pid"))]


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _assert_gone(pids: list[int]) -> None:
    alive = [pid for pid in pids if _running(pid)]
    assert not alive, f"rank processes still running after the launch: {alive}"


def test_launcher_returns_rank_0_result_and_ranks_are_horovods(tmp_path: Path) -> None:
    result = runtime.launch(identity, str(tmp_path), accelerator="cpu", devices=2, strategy="horovod", timeout=120)
    assert result["rank"] == 0 and result["world_size"] == 2
    # (config rank, hvd.rank(), hvd.size(), hvd.local_rank()) as every rank saw them
    assert result["seen"] == [(0, 0, 2, 0), (1, 1, 2, 1)]
    pids = _pids(tmp_path)
    assert len(pids) == 2 and os.getpid() not in pids
    _assert_gone(pids)


def test_failing_rank_is_named_with_its_error_and_no_process_is_left(tmp_path: Path) -> None:
    with pytest.raises(RankFailedError) as info:
        runtime.launch(fail_on_rank_1, str(tmp_path), accelerator="cpu", devices=2, strategy="horovod", timeout=120)
    assert info.value.rank == 1
    assert "ValueError: rank 1 cannot go on" in str(info.value)
    assert "fail_on_rank_1" in info.value.traceback
    pids = _pids(tmp_path)
    assert len(pids) == 2
    _assert_gone(pids)


def test_training_lowers_the_loss_and_keeps_ranks_identical() -> None:
    result = runtime.launch(train, accelerator="cpu", devices=2, strategy="horovod", timeout=180)
    assert result["last_loss"] < 0.5 * result["first_loss"], result
    assert result["identical"], "parameters differ between the two ranks after training"
    assert result["sampler"] == (2, 0)  # rank 0's sampler: Horovod's size and rank
    assert result["batches"] == 4  # 256 samples / 2 ranks / batch 32


@pytest.mark.skipif(shutil.which("horovodrun") is None, reason="horovodrun is not on PATH")
def test_a_run_started_by_horovodrun(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    completed = subprocess.run(
        [shutil.which("horovodrun") or "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo",
         sys.executable, str(SCRIPT), str(out)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["config"] == {"strategy": "horovod", "launcher": None, "cluster_environment": "horovod",
                                "collective": "horovod", "world_size": 2}  # fmt: skip
    assert result["ranks"] == [0, 1]
    assert result["last_loss"] < 0.5 * result["first_loss"]
    assert result["identical"]


def test_a_plain_optimizer_after_setup_module_is_refused_not_left_unaveraged() -> None:
    # Horovod averages gradients in its DistributedOptimizer: a plain one would let the replicas drift apart
    message = runtime.launch(optimizer_of_ones_own, accelerator="cpu", devices=2, strategy="horovod", timeout=120)

    assert message.startswith("StrategyArgumentError: strategy.optimizer_step(): this optimizer was not made by")
    assert "horovod.torch.DistributedOptimizer" in message
    assert "strategy.setup_module_and_optimizer(model, lambda params" in message


def test_before_set_up_horovods_ranks_are_not_known() -> None:
    from torch.utils.data import DataLoader

    import resolver

    strategy = runtime.build(resolver.resolve(accelerator="cpu", devices=2, strategy="horovod"))
    with pytest.raises(runtime.StrategyMisuseError, match=r"process_dataloader\(\): called before the strategy"):
        strategy.process_dataloader(DataLoader(list(range(8))), "train")


def test_the_misuse_sweep_in_two_horovod_ranks() -> None:
    from misuse_workers import sweep_in_rank

    import resolver

    config = resolver.resolve(accelerator="cpu", devices=2, strategy="horovod")
    report = runtime.launch(sweep_in_rank, config, accelerator="cpu", devices=2, strategy="horovod", timeout=120)

    assert report["wrong_types"] and all(r["argument_error"] for r in report["wrong_types"].values()), report
    assert all(r["misuse"] for r in report["other_strategy"].values()), report["other_strategy"]
    # Horovod numbers the ranks when it is set up: after teardown even process_dataloader is refused
    assert all("called after strategy.teardown()" in r["message"] for r in report["after_teardown"].values())
