"""The runtime benchmark script still runs: one round of its in-rank comparisons (no timing claim)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("runtime_speed.py")


def _run_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """The script in a session of its own: on a timeout its ranks go with it."""
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"runtime_speed.py {' '.join(args)} ran past {timeout} s:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_in_rank_comparisons_print_a_ratio_for_each_side():
    # --repeats 0: one timed round of each comparison, enough to run every side once.
    done = _run_script("--only", "steps", "gpu", "--gpu-on-cpu", "--repeats", "0", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for name in ("step ddp", "step fsdp", "step bf16-mixed cpu ddp x2 small", "step bf16-mixed cpu fsdp x2 small"):
        for pair in ("[ours vs raw]", "[control vs raw]"):
            assert any(line.startswith(f"{name} {pair}") and "ratio" in line for line in lines), done.stdout
        cpu = f"{name}, main-thread CPU per step [ours vs raw]"
        assert any(line.startswith(cpu) and " us " in line for line in lines), done.stdout


def test_gpu_comparison_says_why_it_is_skipped_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the comparison runs")
    done = _run_script("--only", "gpu", "--repeats", "0", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped: no CUDA device (--gpu-on-cpu runs it on the CPU)" in done.stdout
