"""docs/usage.md's "Running on a cluster / SLURM" section, run as written on the test cluster.

Each ``$ srun``/``$ salloc``/``$ sbatch`` line runs from the checkout (``sbatch train.sbatch`` with
the doc's ``train.sbatch``); a training command must print examples/train.py's ``RESULT`` with two
ranks, the same parameters in both and a lower loss, and a command shown with output must print
each of its lines in every task.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.support.slurm_jobs import ROOT, Cluster, Job, run_batch, run_job

pytestmark = pytest.mark.cluster

USAGE = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
SECTION = USAGE[USAGE.index("\n### SLURM\n") :].split("\n## ", 1)[0].split("\n### ", 2)[1]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _commands() -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) for each ``$`` line of the section."""
    commands: list[tuple[str, list[str]]] = []
    for kind, body in BLOCK.findall(SECTION):
        for line in body.splitlines() if kind == "console" else []:
            if line.startswith("$ "):
                commands.append((line[2:], []))
            elif line.strip():
                commands[-1][1].append(line)
    return commands


def _batch_script() -> str:
    return next(
        body for kind, body in BLOCK.findall(SECTION) if kind == "bash" and "docs example: train.sbatch" in body
    )


def test_the_section_shows_every_way_to_start_a_job() -> None:
    programs = [shlex.split(command)[0] for command, _ in _commands()]
    assert {"srun", "salloc", "sbatch"} <= set(programs)
    assert "#SBATCH --ntasks-per-node=2" in _batch_script()


def _check_result(job: Job) -> None:
    assert job.returncode == 0, job.output
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in job.stdout.splitlines() if "RESULT " in line]
    assert len(results) == 1, job.output  # rank 0's only
    result = results[0]
    assert result["world_size"] == 2 and result["launcher"] is None, result
    assert len(set(result["checksums"])) == 1  # DDP kept both ranks' parameters equal
    assert result["final_loss"] < result["initial_loss"] / 2, result


@pytest.mark.parametrize("command", [command for command, _ in _commands()])
def test_each_command_runs_as_written(slurm_cluster: Cluster, command: str, tmp_path: Path) -> None:
    expected = dict(_commands())[command]
    argv = shlex.split(command)
    if argv == ["sbatch", "train.sbatch"]:
        script = tmp_path / "train.sbatch"
        script.write_text(_batch_script())
        job = run_batch(slurm_cluster, script, "train.sbatch", cwd=ROOT)
    else:
        # the job's name, to cancel it on a timeout: salloc's is 'interactive', srun's its program's
        program = next(Path(arg).name for arg in argv[1:] if not arg.startswith("-") and not arg.isdigit())
        name = "interactive" if argv[0] == "salloc" else program
        job = run_job(slurm_cluster, argv, name, cwd=ROOT)
    if not expected:
        _check_result(job)
        return
    assert job.returncode != 0, job.output
    tasks = int(argv[argv.index("-n") + 1])
    for line in expected:
        assert (job.stdout + job.stderr).count(line) == tasks, f"{line!r} not printed by each of {tasks} tasks:\n" + (
            job.output
        )
    assert job.seconds < 60, job.output
