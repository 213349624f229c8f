"""Pre-emption and requeue under a real SLURM: a 2-task batch job told to stop (``scancel --signal=USR1``).

The job runs ``resolver run --preemption-signal SIGUSR1 --requeue`` in each of its two tasks
(``srun``), on ``tests/runtime/scripts/preempt_training.py``. Once both ranks have trained some steps the
test sends SIGUSR1 to the job's steps, as ``sbatch --signal=USR1@N`` does before a time limit or a
pre-emption. What must hold: both ranks stop at the same step and save a checkpoint there; rank 0
requeues the job once (``Restarts=1``); the second run (``SLURM_RESTART_COUNT=1``) starts at the saved
step and trains to the end; the job completes. The times from the signal to both ranks stopped, and
from the requeue to the second run's first step, are printed with the other SLURM figures.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.slurm_jobs import JOB_MINUTES, PREEMPTION_FIGURES, Cluster

ROOT = Path(__file__).resolve().parents[3]
TRAINING = ROOT / "tests" / "runtime" / "scripts" / "preempt_training.py"
STEPS = 400

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def _job_fields(cluster: Cluster, job: str) -> dict[str, str]:
    shown = subprocess.run(cluster.command("scontrol", "show", "job", "--oneliner", job), env=cluster.env,
                           capture_output=True, text=True, timeout=30).stdout  # fmt: skip
    return dict(item.split("=", 1) for item in shown.split() if "=" in item)


def _read(path: Path) -> dict[str, float]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _wait_for(what: str, ready: object, seconds: float, job: str, cluster: Cluster, output: Path) -> None:
    deadline = time.time() + seconds
    while not ready():  # type: ignore[operator]
        if time.time() > deadline:
            text = output.read_text() if output.exists() else "(no output)"
            pytest.fail(f"job {job}: {what} did not happen in {seconds} s; state {_job_fields(cluster, job)}\n{text}")
        time.sleep(0.2)


def test_a_signalled_job_stops_every_rank_at_one_step_is_requeued_once_and_resumes_there(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    run = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp",
           "--preemption-signal", "SIGUSR1", "--requeue", str(TRAINING), str(out), str(STEPS)]  # fmt: skip
    script = tmp_path / "job.sh"
    script.write_text(
        f'#!/bin/bash\necho "run ${{SLURM_RESTART_COUNT:-0}} of job $SLURM_JOB_ID"\nsrun --label {shlex.join(run)}\n'
    )
    output = tmp_path / "job.out"
    # --open-mode=append: the second run's output follows the first's instead of replacing it
    submit = ["sbatch", "--parsable", "--requeue", "--open-mode=append", "-n", "2", "--job-name=preempt",
              f"--time={JOB_MINUTES}", f"--output={output}", str(script)]  # fmt: skip
    done = subprocess.run(slurm_cluster.command(*submit), env=slurm_cluster.env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, f"sbatch failed: {done.stdout}{done.stderr}"
    job = done.stdout.strip().split(";")[0]
    try:
        progress = out / "progress-1"
        _wait_for("rank 1's 20th step", lambda: progress.exists() and int(progress.read_text() or 0) >= 20,
                  240, job, slurm_cluster, output)  # fmt: skip
        signalled = time.time()
        subprocess.run(slurm_cluster.command("scancel", "--signal=USR1", job), env=slurm_cluster.env, check=True,
                       timeout=30)  # fmt: skip
        _wait_for("the second run's end", lambda: _job_fields(slurm_cluster, job).get("JobState") in (
            "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 300, job, slurm_cluster, output)  # fmt: skip
    finally:
        subprocess.run(slurm_cluster.command("scancel", job), env=slurm_cluster.env, timeout=30, check=False)
    fields, text = _job_fields(slurm_cluster, job), output.read_text()
    assert fields["JobState"] == "COMPLETED", f"{fields}\n{text}"
    assert fields["Restarts"] == "1", f"requeued {fields['Restarts']} times, not once\n{text}"  # exactly once
    assert "run 0 of job" in text and "run 1 of job" in text, text
    assert text.count("requeued SLURM job") == 1, text  # by rank 0 alone
    stopped = [_read(out / f"stopped-{rank}") for rank in (0, 1)]
    step = stopped[0]["step"]
    assert stopped[1]["step"] == step and step >= 20, stopped  # every rank stopped at the same step
    checkpoint = out / "checkpoints" / f"step-{step}"
    assert checkpoint.exists()
    assert f"pre-empted at step {step}, checkpoint at {checkpoint}; SLURM job {job} requeued" in text, text
    resumed = [_read(out / f"started-1-{rank}") for rank in (0, 1)]
    assert [r["step"] for r in resumed] == [step, step], resumed  # the second run starts at the saved step
    assert (out / "final-1").read_text() == str(STEPS)  # and trains to the end
    stopped_at = max(s["time"] for s in stopped)
    first_step = max(r["time"] for r in resumed)
    PREEMPTION_FIGURES.append(("from the signal to both ranks stopped and saved", stopped_at - signalled))
    PREEMPTION_FIGURES.append(("from the requeue to the second run's first step", first_step - stopped_at))
