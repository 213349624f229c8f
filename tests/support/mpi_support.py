"""Running real launchers (mpirun, torchrun, horovodrun) for a 2-process job on this machine.

A test that needs a launcher which is not installed is skipped with the reason, unless
``RESOLVER_REQUIRE_CLUSTER=1`` (the CI phase that installs them) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Set to 1 where the launchers must be present (CI's cluster phase): a missing one fails the test.
REQUIRE_VARIABLE = "RESOLVER_REQUIRE_CLUSTER"
#: Seconds a whole 2-process job may take on a loaded 2-core machine before the test fails.
JOB_TIMEOUT = 240.0

# Variables of an enclosing launcher or rendezvous: a job started here must not inherit them.
_INHERITED_PREFIXES = ("OMPI_", "PMIX_", "SLURM_", "HOROVOD_", "TORCHELASTIC_", "LSB_", "JSM_", "RESOLVER_")
_INHERITED_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")
_INHERITED_NAMES += ("MASTER_ADDR", "MASTER_PORT", "ROLE_RANK", "ROLE_WORLD_SIZE", "KUBERNETES_PORT")


def require(condition: bool, reason: str) -> None:
    """Skip the test with ``reason`` when ``condition`` is false; fail instead under RESOLVER_REQUIRE_CLUSTER=1."""
    if condition:
        return
    if os.environ.get(REQUIRE_VARIABLE, "").strip() == "1":
        pytest.fail(f"{reason} ({REQUIRE_VARIABLE}=1 requires it)")
    pytest.skip(reason)


def mpirun() -> str:
    """The path of Open MPI's mpirun, or a skip saying how to install it."""
    path = shutil.which("mpirun")
    require(path is not None, "mpirun is not installed (apt-get install -y openmpi-bin)")
    assert path is not None
    return path


def launcher_script(name: str) -> str:
    """A console script of this virtual environment (torchrun, horovodrun), or a skip."""
    path = Path(sys.executable).parent / name
    require(path.is_file(), f"{name} is not installed in {Path(sys.executable).parent}")
    return str(path)


def horovod_torch_importable() -> bool:
    """Whether ``import horovod.torch`` works here (Horovod built with its PyTorch extension)."""
    probe = subprocess.run([sys.executable, "-c", "import horovod.torch"], capture_output=True, timeout=120)
    return probe.returncode == 0


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any launcher's variables, with this checkout importable.

    As root, Open MPI refuses to start unless told twice that it is meant.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_INHERITED_PREFIXES) and key not in _INHERITED_NAMES
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env.update(extra or {})
    return env


def mpirun_command(processes: int, *command: str) -> list[str]:
    """``mpirun -np N COMMAND`` as a user types it; ``--oversubscribe`` lets 2 ranks share fewer cores,
    ``-x PYTHONPATH`` hands the ranks this checkout (mpirun passes no variable it is not told to)."""
    return [mpirun(), "--oversubscribe", "-np", str(processes), "-x", "PYTHONPATH", "-x", "PYTHONUNBUFFERED", *command]


def run_job(
    command: Sequence[str], env: Mapping[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a launcher to completion (bounded by :data:`JOB_TIMEOUT`); its ranks end with it."""
    return subprocess.run(
        list(command), capture_output=True, text=True, timeout=JOB_TIMEOUT, env=dict(env), cwd=cwd or ROOT
    )


#: Writes this rank's whole environment to DIR/rank-<rank>.json; the rank is the launcher's variable.
_DUMP = """\
import json, os, sys
rank = next(os.environ[k] for k in ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "RANK") if k in os.environ)
with open(os.path.join(sys.argv[1], f"rank-{rank}.json"), "w") as out:
    json.dump(dict(os.environ), out)
"""


def captured_rank_environments(
    launcher: Sequence[str], env: Mapping[str, str], *, runs_python: bool = False
) -> dict[int, dict[str, str]]:
    """Run ``LAUNCHER [python] dump.py DIR`` and return each rank's environment, by global rank.

    ``runs_python``: the launcher runs a script with Python itself (torchrun), as users call it.
    """
    with tempfile.TemporaryDirectory(prefix="launcher-env-") as folder:
        script = Path(folder) / "dump_environment.py"
        script.write_text(_DUMP)
        command = [*launcher, *([] if runs_python else [sys.executable]), str(script), folder]
        result = run_job(command, env)
        assert result.returncode == 0, f"{' '.join(launcher)} failed:\n{result.stdout}\n{result.stderr}"
        found = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in Path(folder).glob("rank-*.json")}
    assert sorted(found) == [0, 1], f"expected ranks 0 and 1, got {sorted(found)}:\n{result.stdout}\n{result.stderr}"
    return found
