"""The engine parity benchmark still runs: one round per engine (no timing claim). Where an engine
is installed its comparison must print every ratio; where it is not, the line saying why."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("engine_parity.py")
#: engine -> (the module that must be importable, the report's name, the skip line's start)
ENGINES = {
    "deepspeed2": ("deepspeed", "step deepspeed ZeRO 2 x2", "step deepspeed2"),
    "deepspeed3": ("deepspeed", "step deepspeed ZeRO 3 x2", "step deepspeed3"),
    "horovod": ("horovod.torch", "step horovod x2 (horovodrun --gloo)", "step horovod"),
    "xla": ("torch_xla", "step xla x1 (XLA:CPU)", "step xla"),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_each_engine_prints_its_ratios_or_why_it_is_skipped(engine: str) -> None:
    module, name, skip_name = ENGINES[engine]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[2]), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, str(SCRIPT), "--engines", engine, "--rounds", "1"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=env)  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"engine_parity.py --engines {engine} ran past 400 s:\n{stdout}\n{stderr}")
    assert process.returncode == 0, stdout + stderr
    lines = stdout.splitlines()
    if not _installed(module):
        assert any(line.startswith(skip_name) and "skipped:" in line for line in lines), stdout
        return
    for figure in ("", ", main-thread CPU per step"):
        for pair in ("[ours vs raw]", "[control vs raw]"):
            # horovodrun prefixes each rank's lines ("[0]<stdout>:")
            assert any(f"{name}{figure} {pair}" in line and "ratio" in line for line in lines), stdout
