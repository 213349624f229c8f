"""The launch examples in docs/runtime.md run as written: ddp, ddp_spawn, ddp_fork and `resolver run`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"

pytestmark = pytest.mark.timeout(200)


def example(name: str) -> str:
    """The python block of docs/runtime.md whose first line is ``# docs example: <name>``."""
    blocks = re.findall(r"```python\n(# docs example: (\S+)\n.*?)```", DOCS.read_text(), flags=re.S)
    found = [code for code, title in blocks if title == name]
    assert len(found) == 1, f"docs/runtime.md has {len(found)} examples named {name}"
    return found[0]


def run(command: list[str], directory: Path) -> subprocess.CompletedProcess[str]:
    drop = {"RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK",
            "LOCAL_RANK", "WORLD_SIZE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "ddp_fork"])
def test_the_launch_example_runs_as_written(strategy: str, tmp_path: Path) -> None:
    script = tmp_path / "launch_example.py"
    script.write_text(example("launch_example.py"))

    done = run([sys.executable, str(script), strategy], tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines().count("sum over ranks: 3.0") == 1, done.stdout


def test_the_resolver_run_example_runs_as_written(tmp_path: Path) -> None:
    script = tmp_path / "run_example.py"
    script.write_text(example("run_example.py"))

    done = run([sys.executable, "-m", "resolver", "run", "--devices", "2", "--strategy", "ddp", str(script)], tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "[rank 0]: ranks: 2" in done.stdout.splitlines()  # resolver run prefixes each rank's lines
