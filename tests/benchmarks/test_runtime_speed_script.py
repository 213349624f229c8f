"""The runtime benchmark script still runs: one round of its in-rank comparisons (no timing claim)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_process import run_script

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("runtime_speed.py")


def test_in_rank_comparisons_print_a_ratio_for_each_side():
    # --repeats 0: one timed round of each comparison, enough to run every side once.
    done = run_script(SCRIPT, "--only", "steps", "gpu", "--gpu-on-cpu", "--repeats", "0", timeout=240)
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
    done = run_script(SCRIPT, "--only", "gpu", "--repeats", "0", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped: no CUDA device (--gpu-on-cpu runs it on the CPU)" in done.stdout
