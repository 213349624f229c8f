"""``resolver run``'s own process starts and supervises the ranks without importing torch: the
ranks import it (when their script does), the launching process only waits for them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = pytest.mark.timeout(120)


def _cli_in_process(prelude: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``resolver run ARGS`` through ``resolver.cli.main`` in a fresh interpreter that then prints
    the heavy modules it imported (``PARENT-MODULES [...]``)."""
    code = (
        "import json, sys\n"
        f"{prelude}\n"
        "from resolver.cli import main\n"
        f"code = main({list(args)!r})\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'networkx') and sys.modules[m])\n"
        "print('PARENT-MODULES', json.dumps(heavy), flush=True)\n"
        "sys.exit(code)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RESOLVER_CONFIG", "MASTER_PORT", "RANK")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90, env=env)


def _two_rank_run_args(tmp_path: Path) -> tuple[str, ...]:
    """The arguments of a ``resolver run`` of a script that prints each rank's environment, on 2 CPU ranks."""
    flags = ("--accelerator", "cpu", "--devices", "2", "--strategy", "ddp")
    return ("run", *flags, str(SCRIPTS / "print_rank.py"), str(tmp_path))


def _parent_modules(stdout: str) -> list[str]:
    line = next(line for line in stdout.splitlines() if line.startswith("PARENT-MODULES "))
    return list(json.loads(line.split(" ", 1)[1]))


def test_resolver_run_starts_two_ranks_without_importing_torch(tmp_path: Path) -> None:
    done = _cli_in_process("", *_two_rank_run_args(tmp_path))

    assert done.returncode == 0, done.stderr
    ranks = sorted(line for line in done.stdout.splitlines() if "RANK-ENV " in line)
    assert [line.split(": ", 1)[0] for line in ranks] == ["[rank 0]", "[rank 1]"]
    assert _parent_modules(done.stdout) == []


def test_resolver_run_without_torch_says_what_to_install(tmp_path: Path) -> None:
    # sys.modules["torch"] = None: torch cannot be imported or found, as where it is not installed.
    done = _cli_in_process("sys.modules['torch'] = None", *_two_rank_run_args(tmp_path))

    assert done.returncode != 0
    assert "error: `resolver run` needs the runtime (torch)" in done.stderr
    assert "pip install 'training-flag-resolver[runtime]'" in done.stderr
    assert "RANK-ENV" not in done.stdout
