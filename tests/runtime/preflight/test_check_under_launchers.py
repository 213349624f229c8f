"""``resolver check`` inside jobs that mpirun or srun started: every rank runs it, rank 0 prints
the whole run's report. mpirun: skipped where it is missing; srun: on the session's live SLURM
(tests/support/environments.py), skipped only where that cannot start (a failure under
RESOLVER_REQUIRE_CLUSTER=1)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime._protocol.ports import find_free_port
from tests.support.slurm_jobs import Cluster, run_job, task_lines

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

REPOSITORY = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RESOLVER_", "SLURM_", "OMPI_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))
    return env


# a bound against hangs, not a measure: the first run in a fresh checkout also compiles its bytecode
CHECK = [sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2", "--timeout", "90"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_under_mpirun_rank_0_prints_the_report():
    port = find_free_port()
    command = ["mpirun", "-np", "2", "--oversubscribe", "-x", "PYTHONPATH", "-x", "PATH", "-x",
               "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}", *CHECK]  # fmt: skip
    if os.geteuid() == 0:
        command.insert(1, "--allow-run-as-root")
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cluster=mpi world_size=2" in done.stdout
    assert "9 checks, passed, 2 ranks" in done.stdout
    assert done.stdout.count("resolver check:") == 1  # rank 1 prints nothing when it passes


def test_under_srun_rank_0_prints_the_report(slurm_cluster: Cluster) -> None:
    # the session's live cluster (tests/support/environments.py): skipped only where it cannot start
    job = run_job(slurm_cluster, ["srun", "--job-name=check-srun", "--ntasks", "2", "--ntasks-per-node", "2", *CHECK],
                  "check-srun", timeout=180)  # fmt: skip
    assert job.returncode == 0, job.output
    assert "cluster=slurm world_size=2" in job.stdout
    assert "9 checks, passed, 2 ranks" in job.stdout


def test_under_srun_a_foreign_listener_on_master_port_ends_every_rank_with_its_verdict(slurm_cluster: Cluster) -> None:
    # another program listens on MASTER_PORT and never answers (the kernel accepts for it): rank 0 cannot
    # listen there, rank 1 connects to that program; the whole step still ends, each rank with its verdict
    with socket.socket() as foreign:
        foreign.bind(("", 0))
        foreign.listen(16)
        port = foreign.getsockname()[1]
        command = ["env", f"MASTER_PORT={port}", "srun", "--job-name=check-foreign", "--ntasks", "2", "--label",
                   sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2",
                   "--timeout", "5"]  # fmt: skip
        job = run_job(slurm_cluster, command, "check-foreign", timeout=180)
    assert job.returncode == 1, job.output
    lines = task_lines(job.stdout + job.stderr)
    assert any(f"FAIL rendezvous  rank 0 on {slurm_cluster.node} cannot listen on port {port}" in line
               for line in lines[0]), job.output  # fmt: skip
    assert any(f":{port} (from MASTER_PORT) is answered by something that is not this job's rank 0" in line
               for line in lines[1]), job.output  # fmt: skip
    assert any("= help: another program (or another run) holds port" in line for line in lines[1]), job.output


def test_under_srun_devices_auto_on_cpu_follows_the_tasks_srun_started(slurm_cluster: Cluster) -> None:
    # `srun -n 2 resolver check` without --devices: two ranks checked, not a conflict that shrinks the job to 1
    check = [sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--timeout", "90"]
    job = run_job(slurm_cluster, ["srun", "--job-name=check-auto", "--ntasks", "2", *check], "check-auto", timeout=180)
    assert job.returncode == 0, job.output
    assert "devices=[0, 1]" in job.stdout and "cluster=slurm world_size=2" in job.stdout
    assert "9 checks, passed, 2 ranks" in job.stdout
    explain = [sys.executable, "-m", "resolver", "explain", "--accelerator", "cpu"]
    shown = run_job(slurm_cluster, ["srun", "--job-name=explain-auto", "--ntasks", "2", "--ntasks-per-node", "2",
                                    "--label", *explain], "explain-auto", timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.output
    for lines in task_lines(shown.stdout).values():
        devices = next(line for line in lines if line.startswith("num_devices"))
        assert devices.split()[1] == "2", shown.output
        assert "rule devices.cpu.auto.slurm: devices='auto' on CPU under srun" in devices, shown.output
