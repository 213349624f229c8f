"""A device and a cluster from a plugin at parity with the built-in ones: the example plugin's ``npu``
(an ``Accelerator`` of its own, not the CPU's) trains under FSDP and DeepSpeed, passes ``resolver
check``, and its ``pbs`` cluster's ranks stop together on pre-emption and requeue the job, all
through the plugin's classes.

The NPU writes each call the runtime makes of it (selecting the device, releasing it) to the file
``NPU_TRACE`` names: the trace shows which processes the runtime drove it in. The plugin runs
pip-installed in the virtual environment ``test_plugins.py`` uses too (built once a session); DeepSpeed
is not installable there (no copy of it reaches that environment's package index), so its test
installs the plugin with ``pip --target`` beside this checkout, in this environment, where DeepSpeed is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.plugin_venv import (
    EXAMPLE,
    INSTALL_TIMEOUT_S,
    ROOT,
    RUN_TIMEOUT_S,
    environ,
    free_port_from_job_id,
    pip,
    run,
)

pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 4 * RUN_TIMEOUT_S)

TRAIN = """
import sys

import torch

import runtime


def work(strategy):
    torch.manual_seed(0)
    model, optimizer = strategy.setup_module_and_optimizer(
        torch.nn.Linear(8, 1), lambda parameters: torch.optim.SGD(parameters, lr=0.1)
    )
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(strategy.global_rank))
    x = x.to(strategy.root_device)
    strategy.backward(torch.nn.functional.mse_loss(model(x).float(), x.sum(dim=1, keepdim=True)))
    strategy.optimizer_step(optimizer)
    weights = sum(float(value.float().sum()) for value in strategy.full_state_dict(model).values())
    return (type(strategy).__name__, type(strategy.accelerator).__name__, str(strategy.root_device),
            strategy.global_rank, f"{weights:.6f}")


if __name__ == "__main__":
    print("returned", *runtime.launch(work, accelerator="npu", devices=2, strategy=sys.argv[1], timeout=150),
          flush=True)
"""


def _trace(path: Path) -> list[str]:
    """The NPU calls in the trace, as ``rank R: call`` (without the process ids), in order."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [f"{line.split(' pid ')[0]}: {line.split(': ', 1)[1]}" for line in lines]


def _trained(output: str, strategy: str) -> None:
    """Both ranks trained with the strategy on the NPU, and hold the same weights after the step."""
    returned = sorted(line.split() for line in output.splitlines() if line.startswith("returned"))
    assert [row[1:5] for row in returned] == [
        [strategy, "NPUAccelerator", "cpu", "0"],
        [strategy, "NPUAccelerator", "cpu", "1"],
    ], output
    assert returned[0][5] == returned[1][5], output  # the sharded step agreed across the ranks


def test_fsdp_trains_two_ranks_on_the_npu(venv, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    trace = tmp_path / "npu-trace"
    done = run(venv, str(venv["python"]), "train.py", "fsdp", cwd=tmp_path,
               NPU_VISIBLE_DEVICES="0,1", NPU_TRACE=str(trace))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _trained(done.stdout, "FSDPStrategy")
    calls = _trace(trace)
    for rank in ("0", "1"):  # each rank selected its NPU before it trained, and released it after
        mine = [call for call in calls if call.startswith(f"rank {rank}:")]
        assert mine[0] == f"rank {rank}: NPUAccelerator.set_device(cpu)" and mine[-1].endswith("teardown()"), calls


def test_the_preflight_runs_every_step_on_the_npu(venv, tmp_path):
    trace = tmp_path / "npu-trace"
    done = run(venv, str(venv["bin"] / "resolver"), "check", "--accelerator", "npu", "--devices", "2",
               "--strategy", "fsdp", "--timeout", "120", cwd=tmp_path,
               NPU_VISIBLE_DEVICES="0,1", NPU_TRACE=str(trace))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "one fsdp step of a tiny model" in done.stdout, done.stdout
    calls = _trace(trace)
    # the check's ranks set up through the run's strategy: the NPU selected and released in both
    for rank in ("0", "1"):
        assert f"rank {rank}: NPUAccelerator.set_device(cpu)" in calls, calls
        assert f"rank {rank}: NPUAccelerator.teardown()" in calls, calls


PREEMPT = """
import os
import signal
from pathlib import Path

import torch

import runtime


def work(strategy, folder):
    model, optimizer = strategy.setup_module_and_optimizer(
        torch.nn.Linear(4, 1), lambda parameters: torch.optim.SGD(parameters, lr=0.01)
    )
    for step in range(50):
        if strategy.preempted(step):  # the same answer on every rank
            strategy.save_checkpoint(Path(folder) / f"step-{step}", {"model": model, "step": step})
            return None
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(10 * step + strategy.global_rank))
        strategy.backward(torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)))
        strategy.optimizer_step(optimizer)
        optimizer.zero_grad()
        if (step, strategy.global_rank) == (3, 1):
            os.kill(os.getpid(), signal.SIGTERM)  # what PBS sends the job's processes before it ends them
    return 50


runtime.launch(work, "checkpoints", accelerator="npu", devices=2, strategy="fsdp", timeout=150,
               strategy_options={"preemption_signal": "SIGUSR1", "requeue": True})
"""


def test_pbs_ranks_on_the_npu_stop_together_on_pbs_stop_signal_and_requeue_the_job(venv, tmp_path):
    (tmp_path / "preempt.py").write_text(PREEMPT)
    bin_folder = tmp_path / "bin"  # PBS's qrerun, as the requeue runs it: it records the job it is given
    bin_folder.mkdir()
    (bin_folder / "qrerun").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "qrerun.log"}\n')
    (bin_folder / "qrerun").chmod(0o755)
    job, _ = free_port_from_job_id()
    ranks = []
    for rank in (0, 1):
        variables = {
            "PBS_JOBID": job, "PBS_RANK": str(rank), "PBS_LOCAL_RANK": str(rank), "PBS_NODE_RANK": "0",
            "PBS_WORLD_SIZE": "2", "PBS_MAIN_ADDR": "127.0.0.1", "NPU_VISIBLE_DEVICES": "0,1",
            "PATH": f"{bin_folder}{os.pathsep}{venv['bin']}{os.pathsep}{os.environ.get('PATH', '')}",
        }  # fmt: skip
        ranks.append(subprocess.Popen([str(venv["python"]), "preempt.py"], cwd=tmp_path,
                                      env=environ(venv, **variables), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))  # fmt: skip
    outputs = []
    try:
        for process in ranks:
            out, err = process.communicate(timeout=RUN_TIMEOUT_S)
            outputs.append((process.returncode, out, err))
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert [code for code, _, _ in outputs] == [75, 75], outputs  # both pre-empted, neither failed
    said = outputs[0][2]
    assert f"pre-empted at step 4, checkpoint at checkpoints/step-4; PBS job {job} requeued" in said, outputs
    assert (tmp_path / "qrerun.log").read_text().split() == [job]  # rank 0 requeued it, once
    assert (tmp_path / "checkpoints" / "step-4").exists()


@pytest.mark.deepspeed
def test_deepspeed_trains_two_ranks_on_the_npu(tmp_path):
    pytest.importorskip("deepspeed")
    plugin, site = tmp_path / "npu-pbs-plugin", tmp_path / "site"
    shutil.copytree(EXAMPLE, plugin, ignore=shutil.ignore_patterns("__pycache__"))
    pip(sys.executable, "install", "--no-deps", "--no-build-isolation", "--target", str(site), str(plugin))
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    trace = tmp_path / "npu-trace"
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_", "PBS_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "RESOLVER_CONFIG"):
        keep.pop(name, None)
    keep.update(PYTHONPATH=f"{ROOT}{os.pathsep}{site}", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
                NPU_VISIBLE_DEVICES="0,1", NPU_TRACE=str(trace))  # fmt: skip
    done = subprocess.run([sys.executable, "train.py", "deepspeed"], cwd=tmp_path, env=keep, capture_output=True,
                          text=True, timeout=2 * RUN_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _trained(done.stdout, "DeepSpeedStrategy")
    calls = _trace(trace)
    assert "rank 0: NPUAccelerator.set_device(cpu)" in calls and "rank 1: NPUAccelerator.set_device(cpu)" in calls
