"""A script's ``runtime.launch(...)`` under ``resolver run``, as a user starts it: its flags join the command
line's, a disagreement names both sides, ``max_restarts`` is the command line's to give, and a
``ddp_spawn`` script without ``if __name__ == "__main__":`` is told so.

Real processes: ``python -m resolver run`` (or ``python script.py``) on a script written to a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(200)

_DROP = ("RESOLVER_CONFIG", "RESOLVER_RUN_CONTEXT", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "RANK",
         "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID")  # fmt: skip

TRAIN = """
import json, os, runtime

def train(strategy):
    config = runtime.launched_config()
    print("RANK-CONFIG " + json.dumps({{"rank": strategy.global_rank, "world": strategy.world_size,
        "strategy": config.strategy, "precision": config.precision, "attempt": strategy.restart_count}}))
    if {kill} and strategy.global_rank == 0 and strategy.restart_count == 0:
        os.kill(os.getpid(), 9)

if __name__ == "__main__":
    runtime.launch(train, {arguments})
"""


def run(tmp_path: Path, command: list[str], script: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "train.py"
    path.write_text(script)
    environment = {k: v for k, v in os.environ.items() if k not in _DROP}
    return subprocess.run(
        [sys.executable, *command, str(path)],
        capture_output=True,
        text=True,
        timeout=180,
        env=environment,
        cwd=tmp_path,
    )


def resolver_run(
    tmp_path: Path, options: str, arguments: str, *, kill: bool = False
) -> subprocess.CompletedProcess[str]:
    return run(tmp_path, ["-m", "resolver", "run", *options.split()], TRAIN.format(arguments=arguments, kill=kill))


def configs(output: str) -> list[dict[str, object]]:
    found = [json.loads(line.split("RANK-CONFIG ", 1)[1]) for line in output.splitlines() if "RANK-CONFIG " in line]
    return sorted(found, key=lambda c: (c["attempt"], c["rank"]))  # type: ignore[no-any-return]


def assert_one_plain_error(stderr: str) -> None:
    """The error once, with its fix last as the command line renders it, without a traceback of the runtime's frames."""
    assert stderr.count("failed (exit code 1)") == 1, stderr
    assert "Traceback" not in stderr and "--- traceback" not in stderr, stderr
    assert stderr.splitlines()[-1].startswith("  = help: ") and "  hint: " not in stderr, stderr


def test_flags_the_command_line_left_at_auto_take_the_launch_calls_values(tmp_path: Path) -> None:
    done = resolver_run(tmp_path, "--nproc-per-node 2", 'devices=2, strategy="ddp", precision="bf16-mixed"')

    assert done.returncode == 0, done.stderr
    assert configs(done.stdout) == [
        {"rank": rank, "world": 2, "strategy": "ddp", "precision": "bf16-mixed", "attempt": 0} for rank in (0, 1)
    ]


def test_a_flag_both_name_with_different_values_is_one_error_naming_the_flag_and_both_values(tmp_path: Path) -> None:
    done = resolver_run(tmp_path, "--devices 3", 'devices=2, strategy="ddp"')

    assert done.returncode == 1
    assert "disagree on devices" in done.stderr
    assert "resolver run was given --devices 3, the script's launch() asks devices=2" in done.stderr
    assert "pass the script's to resolver run (--devices 2)" in done.stderr
    assert "ddp_spawn" not in done.stderr
    assert_one_plain_error(done.stderr)


def test_a_launch_call_that_needs_more_processes_than_resolver_run_started_says_which_option_to_pass(
    tmp_path: Path,
) -> None:
    done = resolver_run(tmp_path, "", "devices=2")  # the command line left devices at auto: one process

    assert done.returncode == 1
    assert "resolver run already started this run's processes with num_devices=1" in done.stderr
    assert "pass the script's flags to resolver run (--devices 2)" in done.stderr
    assert_one_plain_error(done.stderr)


def test_max_restarts_in_launch_without_the_same_on_the_command_line_is_an_error_not_ignored(tmp_path: Path) -> None:
    done = resolver_run(tmp_path, "--devices 1", "max_restarts=2", kill=True)

    assert done.returncode == 1  # not 137: the rank never ran
    assert "launch(max_restarts=2) in a rank that resolver run started" in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "  = help: pass --max-restarts 2 to resolver run, and drop max_restarts from launch()"
    ), done.stderr
    assert configs(done.stdout) == []
    assert_one_plain_error(done.stderr)


def test_max_restarts_in_launch_equal_to_the_command_lines_restarts(tmp_path: Path) -> None:
    done = resolver_run(tmp_path, "--devices 1 --max-restarts 2", "max_restarts=2", kill=True)

    assert done.returncode == 0, done.stderr
    assert [c["attempt"] for c in configs(done.stdout)] == [0, 1]


SPAWN_UNGUARDED = """
import runtime

def train(strategy):
    print("RAN", strategy.global_rank)

runtime.launch(train, devices=2, strategy="ddp_spawn", accelerator="cpu")
"""


def test_an_unguarded_ddp_spawn_launch_names_the_reimport_and_the_main_guard(tmp_path: Path) -> None:
    done = run(tmp_path, [], SPAWN_UNGUARDED)

    assert done.returncode == 1
    assert "re-imports the main script (train.py)" in done.stderr
    assert done.stderr.splitlines()[-1].startswith('  = help: put the launch() call under `if __name__ == "__main__":`')
    assert "exited without reporting an error" not in done.stderr
    assert "bootstrapping phase" not in done.stderr  # multiprocessing's own error never happens
    assert "RAN" not in done.stdout


def test_ddp_spawn_under_resolver_run_says_resolver_run_started_the_processes(tmp_path: Path) -> None:
    done = run(tmp_path, ["-m", "resolver", "run", "--nproc-per-node", "2"], SPAWN_UNGUARDED)

    assert done.returncode == 1
    assert "has the 'spawn' launcher start the processes, but resolver run already started them" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("  = help: under resolver run, use strategy='ddp' in launch()")
    assert_one_plain_error(done.stderr)


OPTIONS = """
import json, runtime

def train(strategy):
    print("RANK-OPTIONS " + json.dumps({{"rank": strategy.global_rank, "timeout": strategy.options.timeout,
        "signal": strategy.options.preemption_signal}}))

if __name__ == "__main__":
    runtime.launch(train, {arguments})
"""


def test_the_launch_calls_strategy_options_reach_the_ranks_and_a_clash_names_both_values(tmp_path: Path) -> None:
    """``launch(timeout=..., strategy_options=...)`` in a ``resolver run`` rank is applied, not ignored."""
    done = run(tmp_path, ["-m", "resolver", "run", "--nproc-per-node", "2"], OPTIONS.format(arguments="timeout=42"))
    assert done.returncode == 0, done.stderr
    seen = [
        json.loads(line.split("RANK-OPTIONS ", 1)[1]) for line in done.stdout.splitlines() if "RANK-OPTIONS " in line
    ]
    assert sorted((s["rank"], s["timeout"]) for s in seen) == [(0, 42), (1, 42)], done.stdout

    command = ["-m", "resolver", "run", "--nproc-per-node", "2", "--preemption-signal", "SIGUSR1"]
    clash = run(tmp_path, command, OPTIONS.format(arguments="strategy_options={'preemption_signal': 'SIGUSR2'}"))
    assert clash.returncode == 1
    assert (
        "the script's launch() sets the strategy option preemption_signal='SIGUSR2', but resolver run's "
        "command line gave preemption_signal='SIGUSR1'" in clash.stderr + clash.stdout
    )
    assert "Traceback" not in clash.stderr
