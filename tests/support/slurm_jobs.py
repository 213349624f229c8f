"""Running bounded SLURM jobs from the tests and reading what their ranks printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: (job shape, entry point, seconds from submission to the slowest rank's start, to its first step)
FIGURES: list[tuple[str, str, float, float]] = []
#: (what, seconds) of the pre-emption test (test_slurm_preemption.py)
PREEMPTION_FIGURES: list[tuple[str, float]] = []

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCRIPT = ROOT / "scripts" / "test-cluster.sh"
REQUIRED = os.environ.get("RESOLVER_REQUIRE_CLUSTER") == "1"
CANNOT_RUN = 3  # the script's exit code when this machine cannot run the cluster

# Variables that would make a job (or a rank in it) believe it is part of another run.
_INHERITED_RUN = (
    "RESOLVER_CONFIG",
    "RUNTIME_REPORT_DIR",
    "RUNTIME_LAUNCHER_PID",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)

#: The SLURM time limit of every job (``--time``, minutes): a hung job is ended by SLURM too.
JOB_MINUTES = "5"


@dataclass
class Cluster:
    """A started test cluster: its folder and the environment its commands (srun, sbatch) need."""

    folder: Path
    slurm_conf: Path
    node: str
    env: dict[str, str]
    #: What runs a client command (sbatch, scontrol, scancel) where it reaches slurmctld: nothing
    #: on the one-node cluster; on the two-node one, entering node-0's network namespace.
    client: tuple[str, ...] = ()

    def command(self, *argv: str) -> list[str]:
        """``argv`` as run where the controller is reachable."""
        return [*self.client, *argv]


def start_cluster() -> tuple[Cluster | None, str]:
    """Start a cluster with the script; (None, why) where it cannot run here."""
    try:
        done = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        return None, f"scripts/test-cluster.sh start took over {exc.timeout} s"
    if done.returncode == CANNOT_RUN:
        return None, done.stderr.strip().splitlines()[-1]
    if done.returncode != 0:
        pytest.fail(f"scripts/test-cluster.sh start failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    node = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    env = job_environment(Path(values["SLURM_CONF"]))
    return Cluster(Path(values["TEST_CLUSTER_DIR"]), Path(values["SLURM_CONF"]), node, env), ""


def job_environment(slurm_conf: Path) -> dict[str, str]:
    """This process's environment for SLURM's commands and the jobs they start: no SLURM_ variable nor
    rank of this session's own, the cluster's configuration, the venv and this repository first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in _INHERITED_RUN}
    env["SLURM_CONF"] = str(slurm_conf)
    # the venv's python and resolver first, for job scripts that call them by name (docs/usage.md's)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), *filter(None, env.get("PYTHONPATH", "").split(":"))])
    return env


def stop_cluster(cluster: Cluster) -> None:
    """Stop the cluster's jobs and daemons and remove its folder (``scripts/test-cluster.sh stop``)."""
    subprocess.run(["bash", str(SCRIPT), "stop", str(cluster.folder)], check=True, timeout=120)


@dataclass
class Job:
    """A finished job: its output and how long it took from submission."""

    returncode: int
    stdout: str
    stderr: str
    submitted_at: float
    seconds: float

    @property
    def output(self) -> str:
        streams = f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        return f"exit code {self.returncode} after {self.seconds:.1f} s\n{streams}"


def run_job(cluster: Cluster, command: list[str], name: str, *, timeout: float = 240, cwd: Path | None = None) -> Job:
    """Run a SLURM command (srun, salloc, sbatch --wait) to its end, at most ``timeout`` seconds.

    ``name`` is the job's name (the command must pass ``--job-name``): on a timeout the job is
    cancelled by it, so no task outlives the test.
    """
    submitted = time.time()
    try:
        done = subprocess.run(
            cluster.command(*command), env=cluster.env, capture_output=True, text=True, timeout=timeout, cwd=cwd
        )
    except subprocess.TimeoutExpired as exc:
        subprocess.run(cluster.command("scancel", f"--name={name}"), env=cluster.env, timeout=30, check=False)
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"{' '.join(command)} did not finish in {timeout} s (job cancelled); output:\n{stdout}")
    return Job(done.returncode, done.stdout, done.stderr, submitted, time.time() - submitted)


_ENDED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)


def run_batch(
    cluster: Cluster,
    script: Path,
    name: str,
    *,
    timeout: float = 240,
    cwd: Path | None = None,
    options: Sequence[str] = (),
) -> Job:
    """Submit ``script`` with sbatch and poll ``scontrol show job`` until it ends, at most ``timeout`` seconds.

    ``options`` go to sbatch before the script (the job's shape, e.g. ``-N 2 --ntasks-per-node=1``).
    (``sbatch --wait`` polls at growing intervals, up to half a minute late.) The job's output file
    is read as the job's stdout; the job is cancelled when it runs out of time.
    """
    output = script.with_suffix(".out")
    submitted = time.time()
    shape = [f"--job-name={name}", f"--time={JOB_MINUTES}", f"--output={output}", *options]
    command = cluster.command("sbatch", "--parsable", *shape, str(script))
    done = subprocess.run(command, env=cluster.env, capture_output=True, text=True, timeout=60, cwd=cwd)
    assert done.returncode == 0, f"sbatch failed:\n{done.stdout}{done.stderr}"
    job_id = done.stdout.strip().split(";")[0]
    state, exit_code = "", ""
    while time.time() - submitted < timeout:
        shown = subprocess.run(
            cluster.command("scontrol", "show", "job", "--oneliner", job_id),
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        fields = dict(item.split("=", 1) for item in shown.split() if "=" in item)
        state, exit_code = fields.get("JobState", ""), fields.get("ExitCode", "")
        if state in _ENDED:
            break
        time.sleep(0.2)
    else:
        subprocess.run(cluster.command("scancel", job_id), env=cluster.env, timeout=30, check=False)
        pytest.fail(f"batch job {job_id} did not end in {timeout} s (cancelled; last state {state})")
    ended = time.time()
    # ExitCode=CODE:SIGNAL, as a shell reports it: the code, else 128 + the signal, else 1 unless COMPLETED
    code, signal = (int(part) if part.isdigit() else 0 for part in (exit_code.split(":") + ["0"])[:2])
    returncode = code or (128 + signal if signal else int(state != "COMPLETED"))
    stdout = output.read_text() if output.exists() else ""
    return Job(returncode, stdout, f"job {job_id}: {state} (ExitCode={exit_code})", submitted, ended - submitted)


def task_lines(text: str) -> dict[int, list[str]]:
    """The lines of each task in the output of ``srun --label`` ("0: ..."), by task id."""
    lines: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\s*(\d+): (.*)", line)
        if match:
            lines.setdefault(int(match.group(1)), []).append(match.group(2))
    return lines


def rank_reports(job: Job) -> dict[int, dict[str, Any]]:
    """Each rank's ``RANK_REPORT`` (printed by slurm_train.py), by global rank."""
    reports = {}
    for line in job.stdout.splitlines():
        if "RANK_REPORT " in line:
            report = json.loads(line.split("RANK_REPORT ", 1)[1])
            # two processes of one rank: a task launched ranks of its own beside SLURM's
            assert report["global_rank"] not in reports, f"rank {report['global_rank']} reported twice:\n{job.output}"
            reports[report["global_rank"]] = report
    return reports


def record_figures(shape: str, entry: str, job: Job, reports: dict[int, dict[str, Any]]) -> None:
    """Note when the slowest rank started and took its first step, counted from submission."""
    started = max(r["started_at"] for r in reports.values()) - job.submitted_at
    first_step = max(r["first_step_at"] for r in reports.values()) - job.submitted_at
    FIGURES.append((shape, entry, started, first_step))
