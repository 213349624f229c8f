"""The FSDP and DeepSpeed examples in docs/runtime.md run as written (real processes, subprocess launcher)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"

pytestmark = pytest.mark.timeout(300)


def example(name: str) -> str:
    """The python block of docs/runtime.md whose first line is ``# docs example: <name>``."""
    blocks = re.findall(r"```python\n(# docs example: (\S+)\n.*?)```", DOCS.read_text(), flags=re.S)
    found = [code for code, title in blocks if title == name]
    assert len(found) == 1, f"docs/runtime.md has {len(found)} examples named {name}"
    return found[0]


def run_example(name: str, directory: Path) -> subprocess.CompletedProcess[str]:
    script = directory / name
    script.write_text(example(name))
    drop = {"RESOLVER_CONFIG", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run(
        [sys.executable, str(script)], cwd=directory, env=env, capture_output=True, text=True, timeout=280
    )


def loss_went_down(output: str) -> bool:
    match = re.search(r"^loss (\S+) -> (\S+)$", output, flags=re.M)
    assert match is not None, output
    first, last = map(float, match.groups())
    return last < 0.2 * first


def test_the_fsdp_example_trains_and_writes_a_checkpoint_a_plain_model_loads(tmp_path: Path) -> None:
    done = run_example("fsdp_train.py", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert loss_went_down(done.stdout)
    assert (tmp_path / "fsdp-checkpoint.pt").is_file()


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'",
)
def test_the_deepspeed_example_trains_and_writes_a_checkpoint(tmp_path: Path) -> None:
    done = run_example("deepspeed_train.py", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert loss_went_down(done.stdout)
    assert (tmp_path / "deepspeed-checkpoint" / "latest").is_file()
