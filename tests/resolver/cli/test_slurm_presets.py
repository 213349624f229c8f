"""``--simulate slurm=2`` resolves as the variables a real ``srun`` and ``sbatch`` set do.

The resolver's SLURM tests and ``resolver explain --simulate slurm...`` rely on the preset in
``resolver/cli/simulate.py`` standing for what SLURM sets; here each task of a real two-task job dumps
its environment, and the config resolved from the variables SLURM added must equal the one the
preset gives (the preset's job id replaced by the real one: the port derives from it). A preset
that drifts from SLURM fails here, naming the fields that differ.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

import resolver
from resolver.cli.simulate import simulate
from tests.support.slurm_jobs import JOB_MINUTES, Cluster, run_batch, run_job

pytestmark = pytest.mark.cluster

# Each task writes its environment to FOLDER/env.<task>.json.
DUMP = """import json, os, sys
with open(os.path.join(sys.argv[1], f"env.{os.environ['SLURM_PROCID']}.json"), "w") as out:
    json.dump(dict(os.environ), out)
"""
FLAGS: dict[str, Any] = {"accelerator": "cpu", "devices": 2}
COMPARED = (
    "world_size",
    "global_rank",
    "local_rank",
    "node_rank",
    "num_nodes",
    "num_devices",
    "cluster_environment",
    "launcher",
    "main_address",
    "main_port",
)


def slurm_variables(cluster: Cluster, folder: Path) -> dict[int, dict[str, str]]:
    """What SLURM set or changed in each task's environment, by task."""
    variables = {}
    for dump in sorted(folder.glob("env.*.json")):
        dumped = json.loads(dump.read_text())
        variables[int(dump.name.split(".")[1])] = {k: v for k, v in dumped.items() if cluster.env.get(k) != v}
    return variables


def srun_tasks(cluster: Cluster, folder: Path) -> dict[int, dict[str, str]]:
    name = "resolver-test-env-srun"
    command = [
        "srun",
        f"--job-name={name}",
        f"--time={JOB_MINUTES}",
        "-n",
        "2",
        sys.executable,
        "-c",
        DUMP,
        str(folder),
    ]
    job = run_job(cluster, command, name, timeout=120)
    assert job.returncode == 0, job.output
    return slurm_variables(cluster, folder)


def sbatch_tasks(cluster: Cluster, folder: Path) -> dict[int, dict[str, str]]:
    script = folder / "env.sbatch"
    dump = shlex.join([sys.executable, "-c", DUMP, str(folder)])
    script.write_text(f"#!/bin/bash\n#SBATCH --nodes=1 --ntasks-per-node=2\nexec srun {dump}\n")
    job = run_batch(cluster, script, "resolver-test-env-sbatch", timeout=120)
    assert job.returncode == 0, job.output
    return slurm_variables(cluster, folder)


def preset_spec(cluster: Cluster, task: int, variables: dict[str, str]) -> str:
    # The preset always describes a node's first task: task 1's ranks are given as variables.
    ranks = f",SLURM_PROCID={task},SLURM_LOCALID={task}" if task else ""
    return f"slurm=2,hostname={cluster.node},SLURM_JOB_ID={variables['SLURM_JOB_ID']}{ranks}"


@pytest.mark.parametrize("launch", ["srun -n 2", "sbatch --nodes=1 --ntasks-per-node=2 + srun"])
def test_the_slurm_preset_resolves_as_a_real_job_does(slurm_cluster: Cluster, launch: str, tmp_path: Path) -> None:
    tasks = srun_tasks(slurm_cluster, tmp_path) if launch.startswith("srun") else sbatch_tasks(slurm_cluster, tmp_path)
    assert sorted(tasks) == [0, 1]
    for task, variables in tasks.items():
        real = resolver.resolve(
            **FLAGS, environment=resolver.Environment(hostname=slurm_cluster.node, variables=variables)
        )
        spec = preset_spec(slurm_cluster, task, variables)
        preset = resolver.resolve(**FLAGS, environment=simulate(spec))
        assert real.global_rank == task
        differs = {
            field: (getattr(real, field), getattr(preset, field))
            for field in COMPARED
            if getattr(real, field) != getattr(preset, field)
            or real.provenance[field].rule != preset.provenance[field].rule
        }
        assert differs == {}, f"task {task}: real {launch} vs --simulate {spec}: {differs}\nreal variables: {variables}"
        assert real.to_dict(with_provenance=False) == preset.to_dict(with_provenance=False)
