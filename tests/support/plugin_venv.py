"""The example plugin (``tests/plugin_example``) pip-installed into a fresh virtual environment beside
this project, as a user installs both, and running commands there as that user does.

The environment is built once per test session (the ``venv`` fixture in ``tests/resolver/conftest.py``)
and shared by the tests that use it: ``python -m venv``, then pip installs torch (the pinned CPU
build), this project's wheel and the plugin's wheel.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "plugin_example"
#: Every file of the example package: a plugin needs nothing else.
EXAMPLE_FILES = {
    "pyproject.toml",
    "npu_pbs_plugin/__init__.py",  # the entry module: the NPU probe, RULES and COMPONENTS
    "npu_pbs_plugin/rules/npu.toml",
    "npu_pbs_plugin/npu.py",
    "npu_pbs_plugin/rules/pbs.toml",
    "npu_pbs_plugin/pbs.py",
}
INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 180


def pip(python: Path | str, *args: str, cwd: Path | None = None) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        cwd=cwd,
    )
    assert result.returncode == 0, f"pip {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


def _example_files(folder: Path) -> set[str]:
    return {
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def make_venv(where: Path) -> dict[str, Path]:
    """A fresh virtual environment in ``where`` holding torch, this project and the example plugin, all
    pip-installed (the test is skipped where no virtual environment can be made)."""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, timeout=300,
                       capture_output=True)  # fmt: skip
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"cannot create a virtual environment here ({exc}); the plugin tests need one")
    python = where / "venv" / "bin" / "python"
    # the plugin package, from a copy holding only its own files
    plugin = where / "npu-pbs-plugin"
    shutil.copytree(EXAMPLE, plugin, ignore=shutil.ignore_patterns("__pycache__"))
    assert _example_files(plugin) == EXAMPLE_FILES
    # wheels built here (hatchling is in this environment), installed there with their dependencies;
    # --no-compile: torch's thousands of modules are compiled when imported, not all now
    wheels = where / "wheels"
    pip(sys.executable, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT), str(plugin))
    pip(python, "install", "--no-compile", "torch==2.13.0", *map(str, sorted(wheels.glob("*.whl"))))
    cache = where / "cache"
    return {"python": python, "bin": python.parent, "cache": cache, "work": where}


def environ(venv: dict[str, Path], **extra: str) -> dict[str, str]:
    """A user's shell in the venv: no PYTHONPATH (the installed project runs, not this checkout),
    no cluster or launcher variables."""
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    found = {name: os.environ[name] for name in keep if name in os.environ}
    found.update(
        PATH=f"{venv['bin']}{os.pathsep}{os.environ.get('PATH', '')}",
        RESOLVER_CACHE_DIR=str(venv["cache"]),
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
    )
    found.update(extra)
    return found


def run(venv: dict[str, Path], *argv: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), env=environ(venv, **extra), cwd=cwd or venv["work"], capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip


def python(venv: dict[str, Path], code: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return run(venv, str(venv["python"]), "-c", textwrap.dedent(code), **extra)


def free_port_from_job_id() -> tuple[str, int]:
    """A PBS job id whose derived port (15000 + its last four digits) is free now."""
    for port in range(15000 + os.getpid() % 9000, 25000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return f"{port - 15000}.pbs-server", port
    raise AssertionError("no free port between 15000 and 24999")
