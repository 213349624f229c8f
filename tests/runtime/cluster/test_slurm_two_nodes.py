"""A 2-node SLURM job on one machine: two network namespaces, node-0 and node-1, each running a slurmd
(slurm_two_nodes.py). ``sbatch -N 2 --ntasks-per-node=1`` runs a script that calls ``srun`` on
``slurm_train.py`` (``runtime.launch(..., devices=1, num_nodes=2)``): its two tasks run on the two
nodes, take their ranks from SLURM and meet at the rendezvous derived from the job's own variables
(node-0, the first node of ``SLURM_JOB_NODELIST``; 15000 + the job id's last four digits) over the
namespaces' veth pair, the only network they have. Nothing of the cluster may be left afterwards.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_two_nodes import TwoNodeCluster, missing_prerequisite, running

from tests.support.slurm_jobs import JOB_MINUTES, rank_reports, record_figures, run_batch, run_job, task_lines
from tests.support.two_hosts_support import REQUIRE_VARIABLE

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

TRAIN = Path(__file__).resolve().parent / "slurm_train.py"


def _start_or_skip() -> TwoNodeCluster:
    """A started cluster; a skip with the reason where none can run here (a failure under CI's variable)."""
    why = missing_prerequisite()
    if why is not None:
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_VARIABLE}=1 but a two-node SLURM cluster cannot run here: {why}")
        pytest.skip(f"two-node SLURM cluster: {why}")
    return TwoNodeCluster.start()


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodeCluster]:
    cluster = _start_or_skip()
    try:
        yield cluster
    finally:
        cluster.stop()
    assert cluster.leftovers() == []


def test_a_two_node_batch_job_trains_with_one_rank_per_node(two_nodes: TwoNodeCluster, tmp_path: Path) -> None:
    script = tmp_path / "train.sbatch"
    script.write_text(f"#!/bin/bash\nexec srun --label {sys.executable} {TRAIN} 1 2\n")
    job = run_batch(two_nodes.jobs, script, "resolver-test-two-nodes", options=["-N", "2", "--ntasks-per-node=1"])
    assert job.returncode == 0, f"{job.output}\n{two_nodes.logs()}"
    reports = dict(sorted(rank_reports(job).items()))
    assert list(reports) == [0, 1], job.output
    job_id = reports[0]["slurm_job_id"]
    for rank, report in reports.items():
        assert report["host"] == f"node-{rank}", report  # one rank per node, in the node's own namespace
        assert report["slurm_procid"] == str(rank)
        assert report["slurm_job_id"] == job_id
        assert report["cluster"] == "SLURMEnvironment"
        assert report["world_size"] == 2
        assert (report["config"]["node_rank"], report["config"]["local_rank"]) == (rank, 0)
        assert report["config"]["launcher"] is None  # SLURM started both processes
        # both ranks derive the same rendezvous from the job's variables alone
        assert report["rendezvous"] == ["node-0", 15000 + int(job_id[-4:])], report
    # the all_reduce of both ranks' summed losses and sample counts: each node trained on its half
    assert [report["samples"] for report in reports.values()] == [256.0, 256.0]
    losses = [report["losses"] for report in reports.values()]
    assert losses[0] == losses[1]
    assert losses[0][-1] < losses[0][0] / 2, losses[0]
    record_figures("sbatch -N 2 (two namespaces)", "runtime.launch", job, reports)


def test_resolver_explain_on_each_node_names_its_rank_and_the_same_rendezvous(two_nodes: TwoNodeCluster) -> None:
    name = "resolver-test-two-nodes-explain"
    explain = ["resolver", "explain", "--num-nodes", "2", "--devices", "1", "--accelerator", "cpu", "--format", "json"]
    srun = ["srun", f"--job-name={name}", f"--time={JOB_MINUTES}", "-N", "2", "-n", "2", "--label"]
    job = run_job(two_nodes.jobs, [*srun, *explain], name, timeout=120)
    assert job.returncode == 0, job.output
    configs = {task: json.loads("\n".join(lines))["config"] for task, lines in task_lines(job.stdout).items()}
    assert sorted(configs) == [0, 1], job.output
    job_id = configs[0]["provenance"]["main_port"]["source"].removeprefix("SLURM_JOB_ID=")
    for config in configs.values():  # both nodes: the job's first node, the port from the job's id
        assert (config["main_address"], config["main_port"]) == ("node-0", 15000 + int(job_id[-4:])), config
    for task, config in configs.items():
        assert (config["global_rank"], config["node_rank"], config["local_rank"]) == (task, task, 0), config
        assert (config["world_size"], config["num_nodes"], config["cluster_environment"]) == (2, 2, "slurm"), config
        assert config["provenance"]["main_address"]["source"] == "SLURM_JOB_NODELIST=node-[0-1]", config


def test_stopping_kills_and_names_a_process_a_job_left_on_a_node() -> None:
    cluster = _start_or_skip()  # a cluster of its own: what this job leaves must not count against the module's
    try:
        # setsid: a process that leaves its task's process tree, where proctrack/linuxproc no longer sees it
        escape = ["sh", "-c", "setsid sleep 300 < /dev/null > /dev/null 2>&1 &"]
        name = "resolver-test-two-nodes-stray"
        job = run_job(cluster.jobs, ["srun", f"--job-name={name}", "-N", "2", "-n", "2", *escape], name, timeout=60)
        assert job.returncode == 0, job.output
    finally:
        cluster.stop()
    left = cluster.leftovers()
    assert sorted((stray.split()[3], stray.split(": ", 1)[1]) for stray in left) == [
        ("node-0:", "sleep 300"),
        ("node-1:", "sleep 300"),
    ], left
    pids = [int(stray.split()[1]) for stray in left]
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(pid) for pid in pids), left
