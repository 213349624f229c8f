"""docs/runtime.md's examples that print on rank 0, run with plain ``python`` and under torchrun too.

Each prints its rank-0 line exactly once (tests/support/docs_launcher_runs.py says how each runs, or why
not); under srun: tests/runtime/test_slurm_runtime_docs.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docs_examples import named_file_block, user_environment
from tests.support.docs_launcher_runs import LAUNCHERS, PAGE, RUNS, Run, count_line, examples_asking_for_rank_zero

TIMEOUT_S = 280


def test_every_example_that_asks_for_rank_zero_says_how_it_runs_under_each_launcher() -> None:
    assert examples_asking_for_rank_zero() == sorted(RUNS)
    assert all(set(ways) == set(LAUNCHERS) for ways in RUNS.values())


def _command(launcher: str, run: Run) -> list[str]:
    if launcher == "python":
        return [sys.executable, *run.argv]
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file():
        pytest.skip(f"torchrun is not installed in {torchrun.parent}")
    return [str(torchrun), "--nproc-per-node", "2", *run.argv]


@pytest.mark.parametrize(
    ("example", "launcher"),
    [(example, launcher) for example, ways in RUNS.items() for launcher in ("python", "torchrun")],
)
def test_the_example_prints_its_rank_zero_line_once(example: str, launcher: str, tmp_path: Path) -> None:
    run = RUNS[example][launcher]
    if isinstance(run, str):
        pytest.skip(run)
    (tmp_path / example).write_text(named_file_block(PAGE, example))
    env = {**user_environment(), **run.flags}
    for number, (exit_code, line) in enumerate(run.steps, 1):
        done = subprocess.run(
            _command(launcher, run), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        output = f"step {number}: exit code {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        assert done.returncode == exit_code, output
        assert count_line(line, done.stdout + done.stderr) == 1, f"{line!r} not printed once\n{output}"
