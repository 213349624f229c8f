"""``runtime.launch`` takes what ``resolver.resolve`` takes: site rule files and a flags file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import runtime

ROOT = Path(__file__).resolve().parents[2]
SITE_RULES = """
[[rule]]
id = "site.note"
stage = "planned"
when = { strategy = "ddp" }
note = "our site's note on {strategy}"
"""

pytestmark = pytest.mark.timeout(200)


def notes_and_world_size(strategy: runtime.Strategy) -> tuple[tuple[str, ...], int]:
    return strategy.config.notes, strategy.world_size


def test_rules_and_a_flags_file_reach_the_resolution_of_a_forked_run(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text(SITE_RULES)
    (tmp_path / "train.toml").write_text('[flags]\naccelerator = "cpu"\ndevices = 2\nstrategy = "ddp_fork"\n')

    notes, world_size = runtime.launch(
        notes_and_world_size, rules=[tmp_path / "site.toml"], config_file=tmp_path / "train.toml", timeout=120
    )

    assert world_size == 2
    assert "our site's note on ddp" in notes


def test_a_script_relaunched_by_the_subprocess_launcher_finds_the_launch_with_its_flags_file(tmp_path: Path) -> None:
    """Each worker re-runs the script and reaches launch(config_file=..., devices=2) again: it is the same launch."""
    (tmp_path / "train.toml").write_text('accelerator = "cpu"\nstrategy = "ddp"\n')
    (tmp_path / "script.py").write_text(
        textwrap.dedent("""
        import runtime

        def world_size(strategy):
            return strategy.world_size

        total = runtime.launch(world_size, config_file="train.toml", devices=2, timeout=120)
        if runtime.launched_config() is None:
            print("world size", total)
    """)
    )
    drop = {"RESOLVER_CONFIG", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])

    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["world size 2"]
