"""The wheel carries the rule table: `resolver explain` works from any directory after `pip install .`."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (found,) = out.glob("training_flag_resolver-*.whl")
    return found


def test_wheel_is_named_for_the_project_and_typed(wheel):
    """pip installs it as DISTRIBUTION (never the index's unrelated `resolver`), and users' type
    checkers read the annotations of both packages (PEP 561's marker file)."""
    from resolver.cli.env import DISTRIBUTION

    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert "resolver/py.typed" in names and "runtime/py.typed" in names
    (metadata,) = (n for n in names if n.endswith(".dist-info/METADATA"))
    assert f"Name: {DISTRIBUTION}" in archive.read(metadata).decode().splitlines()


def test_wheel_contains_every_rule_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.removeprefix("resolver/_rules/") for n in names if n.startswith("resolver/_rules/"))
    assert shipped == sorted(p.relative_to(ROOT / "rules").as_posix() for p in (ROOT / "rules").rglob("*.toml"))
    assert "resolver/_rules/clusters/slurm.toml" in names  # the folders of rules/ ship as they are
    assert any(n.startswith("runtime/") for n in names)


def test_installed_wheel_explains_from_another_directory(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = "import resolver; print(resolver.__file__); print(resolver.builtin_rules_dir())"
    where = subprocess.run(
        [sys.executable, "-c", code], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert where[0].startswith(str(site)) and where[1] == str(site / "resolver" / "_rules")
    result = subprocess.run(
        [sys.executable, "-m", "resolver", "explain", "--devices", "2", "--strategy", "ddp", "--simulate", ""],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "launcher.script" in result.stdout
