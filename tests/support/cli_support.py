"""Running the installed ``resolver`` command as a user does, and a Python that has no torch."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def resolver_command() -> Path:
    """The console script pip installed next to this interpreter (the real entry point)."""
    script = Path(sys.executable).parent / "resolver"
    assert script.is_file(), f"{script} is missing: install the project (pip install -e '.[runtime,test]')"
    return script


def run_resolver(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    python: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``resolver ARGS`` in a subprocess; ``python`` runs ``python -m resolver`` with that interpreter."""
    command = [str(python), "-m", "resolver", *args] if python else [str(resolver_command()), *args]
    environ = None if env is None else {**os.environ, **env}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=environ)


def _hidden(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith(("torch", "functorch", "nvidia", "triton"))


def python_without_torch(where: Path) -> Path:
    """A real virtual environment with this one's packages except torch (and its CUDA libraries).

    Built with ``venv --without-pip`` in a fraction of a second: its site-packages holds links to
    this environment's packages, so the project and its dependencies import as here, torch does not.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    python = where / "bin" / "python"
    target = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    )
    source = Path(sysconfig.get_paths()["purelib"])
    for entry in source.iterdir():
        if not _hidden(entry.name) and not (target / entry.name).exists():
            (target / entry.name).symlink_to(entry)
    return python
