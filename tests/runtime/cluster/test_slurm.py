"""Training under a real SLURM (srun, sbatch, salloc) through ``runtime.launch`` and ``resolver run``.

Every job runs ``slurm_train.py`` in two tasks on this machine's one-node cluster (conftest.py);
each rank reports its config, its losses and its rendezvous. What must hold: SLURM's variables are
read (global ranks 0 and 1, ``SLURMEnvironment``, the job's first node and a port from its id),
``resolver run`` starts no process of its own beside the task's script, the loss goes down, and
the ranks' configs differ in their ranks only. A job whose task count disagrees with the flags
fails on every rank within seconds with the conflict.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.slurm_jobs import (
    CANNOT_RUN,
    JOB_MINUTES,
    REQUIRED,
    SCRIPT,
    Cluster,
    Job,
    rank_reports,
    record_figures,
    run_batch,
    run_job,
    start_cluster,
    stop_cluster,
    task_lines,
)

pytestmark = pytest.mark.cluster

TRAIN = str(Path(__file__).resolve().parent / "slurm_train.py")
RESOLVER_RUN = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp"]
ENTRIES = {
    "runtime.launch": [sys.executable, TRAIN, "2"],
    "resolver run": [*RESOLVER_RUN, TRAIN, "2"],
}
RANK_FIELDS = ("global_rank", "local_rank", "node_rank")


def _srun(name: str, *shape: str) -> list[str]:
    return ["srun", f"--job-name={name}", f"--time={JOB_MINUTES}", *shape, "--label"]


# Each shape: the command that starts a two-task job around the entry's command, and the job's
# name (to cancel it on a timeout). salloc keeps the name SLURM gives it, 'interactive', as a user's would.
SHAPES = {
    "srun -n 2": lambda name: _srun(name, "-n", "2"),
    "srun -N1 --ntasks-per-node=2": lambda name: _srun(name, "-N1", "--ntasks-per-node=2"),
    "salloc -n 2 srun": lambda name: ["salloc", f"--time={JOB_MINUTES}", "-n", "2", "srun", "--label"],
}
JOB_NAMES = {"salloc -n 2 srun": "interactive"}


def check_training(cluster: Cluster, job: Job, entry: str) -> dict[int, dict[str, Any]]:
    """Both ranks trained as SLURM's tasks 0 and 1, met where the job says, and agree but for their ranks."""
    assert job.returncode == 0, job.output
    reports = dict(sorted(rank_reports(job).items()))
    assert list(reports) == [0, 1], job.output
    job_id = reports[0]["slurm_job_id"]
    for rank, report in reports.items():
        assert report["slurm_procid"] == str(rank), report  # rank i is SLURM's task i: nothing else started ranks
        assert report["world_size"] == 2
        assert report["cluster"] == "SLURMEnvironment"
        assert report["config"]["launcher"] is None  # SLURM started every process
        assert report["config"]["cluster_environment"] == "slurm"
        assert report["under_resolver_run"] == (entry == "resolver run")
        # the rendezvous: the job's first (only) node, 15000 + the job id's last four digits
        assert report["rendezvous"] == [cluster.node, 15000 + int(job_id[-4:])]
        assert report["slurm_job_id"] == job_id
    losses = [report["losses"] for report in reports.values()]
    assert losses[0] == losses[1]  # averaged over both ranks' samples
    assert losses[0][-1] < losses[0][0] / 2, losses[0]
    configs = [{k: v for k, v in r["config"].items() if k not in RANK_FIELDS} for r in reports.values()]
    assert configs[0] == configs[1]
    assert [(r["config"]["global_rank"], r["config"]["local_rank"]) for r in reports.values()] == [(0, 0), (1, 1)]
    return reports


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("shape", SHAPES)
def test_two_tasks_train_with_slurms_ranks(slurm_cluster: Cluster, shape: str, entry: str) -> None:
    name = JOB_NAMES.get(shape, f"resolver-test-{shape.split()[0]}-{entry.split()[-1]}")
    job = run_job(slurm_cluster, [*SHAPES[shape](name), *ENTRIES[entry]], name)
    record_figures(shape, entry, job, check_training(slurm_cluster, job, entry))


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_batch_script_that_calls_srun_trains(slurm_cluster: Cluster, entry: str, tmp_path: Path) -> None:
    script = tmp_path / "train.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --ntasks=2\nexec srun --label {shlex.join(ENTRIES[entry])}\n")
    job = run_batch(slurm_cluster, script, f"resolver-test-sbatch-{entry.split()[-1]}")
    record_figures("sbatch (script calls srun)", entry, job, check_training(slurm_cluster, job, entry))


@pytest.mark.parametrize("entry", ENTRIES)
def test_training_started_by_the_batch_script_itself_fails_at_once(
    slurm_cluster: Cluster, entry: str, tmp_path: Path
) -> None:
    # The batch script has the job's SLURM_NTASKS=2 and SLURM_PROCID=0 but is no task: without srun,
    # rank 1 never starts, and rank 0 would wait for it the whole rendezvous timeout (300 s).
    script = tmp_path / "no-srun.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --ntasks=2\n{shlex.join(ENTRIES[entry])}\n")
    job = run_batch(slurm_cluster, script, f"resolver-test-no-srun-{entry.split()[-1]}", timeout=180)
    assert job.returncode != 0, job.output
    assert job.seconds < 120, job.output
    assert "is the batch script of SLURM job" in job.stdout and "not one of its 2 tasks" in job.stdout, job.output
    assert "start the training with srun in the batch script" in job.stdout, job.output
    assert "RANK_REPORT" not in job.stdout


@pytest.mark.skipif(not shutil.which("mpirun"), reason="needs Open MPI's mpirun (openmpi-bin)")
def test_mpirun_in_a_batch_script_fails_at_once_naming_the_fix(slurm_cluster: Cluster, tmp_path: Path) -> None:
    # mpirun's ranks inherit the batch script's SLURM_PROCID=0: by SLURM's variables both are rank 0.
    script = tmp_path / "mpirun.sbatch"
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2", *ENTRIES["runtime.launch"]]
    script.write_text(f"#!/bin/bash\n#SBATCH --ntasks=2\n{shlex.join(mpirun)}\n")
    job = run_batch(slurm_cluster, script, "resolver-test-mpirun-in-sbatch", timeout=180)
    assert job.returncode != 0, job.output
    assert job.seconds < 120, job.output
    assert job.stdout.count("is a process mpirun started in the batch script of SLURM job") == 2, job.output
    assert "pass cluster_environment='mpi'" in job.stdout, job.output


@pytest.mark.parametrize("entry", ENTRIES)
def test_more_tasks_than_devices_fail_on_every_rank_at_once(slurm_cluster: Cluster, entry: str) -> None:
    name = f"resolver-test-mismatch-{entry.split()[-1]}"
    job = run_job(slurm_cluster, [*_srun(name, "-n", "3"), *ENTRIES[entry]], name, timeout=120)
    assert job.returncode != 0, job.output
    # before torch is imported or a process group waits for a third rank that never joins
    assert job.seconds < 60, job.output
    conflict = "SLURM started 3 task(s) (SLURM_NTASKS=3) but num_nodes=1 x devices=2 = 2"
    hint = "make them agree: #SBATCH --nodes=1 --ntasks-per-node=2, or pass num_nodes and devices that multiply to 3"
    by_task = task_lines(job.stdout + job.stderr)
    if entry == "resolver run":  # each task's resolver run prints its diagnostic, as on one machine
        for task in range(3):
            text = "\n".join(by_task.get(task, []))
            assert conflict in text and hint in text, f"task {task}:\n{job.output}"
    else:  # issue 39, point 13: the whole error once (rank 0), one line from each other task, no traceback
        assert f"runtime.launch() ({TRAIN}:" in by_task[0][0], job.output
        assert conflict in by_task[0][1] and hint in by_task[0][-1] and len(by_task[0]) == 7, job.output
        for task in (1, 2):
            assert by_task[task] == [
                f"rank {task}: error[slurm.tasks_vs_world]: {conflict} (rank 0 prints the whole error)"
            ], job.output
        assert "Traceback" not in job.output and "File " not in job.output, job.output
    assert "RANK_REPORT" not in job.stdout


def test_explain_inside_srun_shows_each_ranks_decisions(slurm_cluster: Cluster) -> None:
    name = "resolver-test-explain"
    command = [*_srun(name, "-n", "2"), sys.executable, "-m", "resolver", "explain", "--devices", "2"]
    job = run_job(slurm_cluster, command, name, timeout=120)
    assert job.returncode == 0, job.output
    by_task = task_lines(job.stdout)
    for task in (0, 1):
        rows = {line.split()[0]: line.split()[1:] for line in by_task[task] if line.strip()}
        assert rows["global_rank"][:3] == [str(task), "variable", f"SLURM_PROCID={task}"], job.output
        assert rows["local_rank"][:3] == [str(task), "variable", f"SLURM_LOCALID={task}"], job.output
        assert rows["world_size"][0] == "2"
        assert rows["cluster_environment"][0] == "slurm"
        assert rows["launcher"][0] == "None"
        assert rows["main_address"][:2] == [slurm_cluster.node, "variable"]


def test_stopping_a_cluster_leaves_no_process_and_no_file() -> None:
    cluster, why = start_cluster()
    if cluster is None:
        if REQUIRED:
            pytest.fail(f"RESOLVER_REQUIRE_CLUSTER=1 but {why}")
        pytest.skip(why)
    pids = {name: int((cluster.folder / f"{name}.pid").read_text()) for name in ("munged", "slurmctld", "slurmd")}
    assert all(Path(f"/proc/{pid}").exists() for pid in pids.values()), pids
    stop_cluster(cluster)
    time.sleep(0.2)
    assert not cluster.folder.exists()
    assert [name for name, pid in pids.items() if Path(f"/proc/{pid}").exists()] == []
    left = [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(cluster.folder) in _read(p)]
    assert left == []


def _read(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # the process ended meanwhile
        return ""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root and runuser to act as nobody")
def test_a_user_who_cannot_start_the_cluster_is_told_why() -> None:
    # the script on stdin: user 'nobody' may not read the checkout
    command = ["runuser", "-u", "nobody", "--", "bash", "-s", "start"]
    done = subprocess.run(command, input=SCRIPT.read_text(), capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == CANNOT_RUN, done  # the fixture's skip (or, in CI, failure) with this line
    assert done.stderr.strip().splitlines()[-1].endswith("run as root"), done.stderr
    assert done.stdout == ""


PEER_GONE = str(Path(__file__).resolve().parents[1] / "scripts" / "peer_gone.py")


def test_a_task_killed_mid_training_stopped_answering_it_made_no_misuse(slurm_cluster: Cluster) -> None:
    """srun's task 1 killed (kill -9, as the out-of-memory killer does) in training: task 0 names it as
    the rank that stopped answering, not as a misuse of strategy.backward() (issue 39, point 2)."""
    name = "resolver-test-peer-gone"
    job = run_job(slurm_cluster, [*_srun(name, "-n", "2"), sys.executable, PEER_GONE, "sigkill"], name, timeout=180)
    assert job.returncode != 0, job.output
    task_0 = "\n".join(task_lines(job.stdout + job.stderr).get(0, []))
    assert "runtime.errors.PeerStoppedAnsweringError: rank 1 (host " in task_0, job.output
    assert "stopped answering: rank 0 waited for it in strategy.backward() and the connection ended (" in task_0
    assert "StrategyMisuseError" not in job.output and "every rank must call it" not in job.output, job.output
