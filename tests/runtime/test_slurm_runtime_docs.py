"""docs/runtime.md's examples that print on rank 0, run under srun on the test cluster.

``srun -n 2`` starts each example as tests/support/docs_launcher_runs.py says (``srun python EXAMPLE``, or
``srun resolver run ...`` for the pre-emption example); rank 0's line must be printed exactly once,
and the job must end with the exit status the step expects.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.support.docs_examples import named_file_block
from tests.support.docs_launcher_runs import PAGE, RUNS, count_line
from tests.support.slurm_jobs import JOB_MINUTES, Cluster, run_job

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("example", list(RUNS))
def test_the_example_prints_its_rank_zero_line_once_under_srun(
    slurm_cluster: Cluster, example: str, tmp_path: Path
) -> None:
    run = RUNS[example]["srun"]
    if isinstance(run, str):
        pytest.skip(run)
    (tmp_path / example).write_text(named_file_block(PAGE, example))
    name = f"docs-{Path(example).stem}"
    exported = "".join(f",{variable}={value}" for variable, value in run.flags.items())
    command = ["srun", "-n", "2", f"--job-name={name}", f"--time={JOB_MINUTES}", f"--export=ALL{exported}", *run.argv]
    for number, (exit_code, line) in enumerate(run.steps, 1):
        job = run_job(slurm_cluster, command, name, cwd=tmp_path)
        output = f"step {number}: {shlex.join(command)}\n{job.output}"
        assert job.returncode == exit_code, output
        assert count_line(line, job.stdout + job.stderr) == 1, f"{line!r} not printed once\n{output}"
