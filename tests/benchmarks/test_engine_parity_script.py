"""The engine parity benchmark still runs: one round per engine (no timing claim). Where an engine
is installed its comparison must print every ratio; where it is not, the line saying why."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from script_process import run_script

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("engine_parity.py")
#: engine -> (the module that must be importable, the report's name, the skip line's start)
ENGINES = {
    "deepspeed2": ("deepspeed", "step deepspeed ZeRO 2 x2", "step deepspeed2"),
    "deepspeed3": ("deepspeed", "step deepspeed ZeRO 3 x2", "step deepspeed3"),
    "horovod": ("horovod.torch", "step horovod x2 (horovodrun --gloo)", "step horovod"),
    "xla": ("torch_xla", "step xla x1 (XLA:CPU)", "step xla"),
}

#: engine -> the marker of the CI phase that has it installed
PHASES = {"deepspeed2": "deepspeed", "deepspeed3": "deepspeed", "horovod": "horovod", "xla": "xla"}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@pytest.mark.parametrize(
    "engine", [pytest.param(engine, marks=getattr(pytest.mark, PHASES[engine])) for engine in sorted(ENGINES)]
)
def test_each_engine_prints_its_ratios_or_why_it_is_skipped(engine: str) -> None:
    module, name, skip_name = ENGINES[engine]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[2]), os.environ.get("PYTHONPATH", "")])}
    done = run_script(SCRIPT, "--engines", engine, "--rounds", "1", timeout=400, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    stdout = done.stdout
    lines = stdout.splitlines()
    if not _installed(module):
        assert any(line.startswith(skip_name) and "skipped:" in line for line in lines), stdout
        return
    for figure in ("", ", main-thread CPU per step"):
        for pair in ("[ours vs raw]", "[control vs raw]"):
            # horovodrun prefixes each rank's lines ("[0]<stdout>:")
            assert any(f"{name}{figure} {pair}" in line and "ratio" in line for line in lines), stdout


@pytest.mark.xla
def test_the_xla_step_breakdown_prints_every_side_and_what_torch_xla_counted() -> None:
    if not _installed("torch_xla") and os.environ.get("RESOLVER_REQUIRE_XLA") != "1":
        pytest.skip("torch_xla is not installed here; the XLA phase runs this in its environment (.ci/xla-env.sh)")
    script = SCRIPT.with_name("xla_step_breakdown.py")
    env = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPT.parents[2]), os.environ.get("PYTHONPATH", "")])
    done = run_script(script, "--rounds", "1", timeout=400, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    for side in ("raw, loss kept", "raw, loss let go", "precision alone", "runtime", "control"):
        assert any(line.startswith(side) and "us over raw, loss kept" in line for line in lines), done.stdout
    assert "torch_xla counted, runtime:" in done.stdout and "torch_xla counted, raw, loss kept:" in done.stdout
