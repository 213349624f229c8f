"""``runtime.is_global_zero()``: exactly one process of a run answers True, whatever started it.

A script asks it before ``runtime.launch``, in the work and after, started by plain ``python``, by
each local launcher, by ``resolver run``, torchrun and mpirun (srun: tests/runtime/test_slurm_runtime_docs.py);
and the rank it picks from a launcher's variables is the rank the resolver gives 0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

import resolver
import runtime
from runtime.global_zero import LAUNCHER_RANK_VARIABLES, answer_from_variables, launcher_global_rank

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240

SCRIPT = """\
import os

import torch

import runtime


def work(strategy):
    print(f"ANSWER {os.getpid()} in {strategy.global_rank} {runtime.is_global_zero()}", flush=True)
    return strategy.collective.all_reduce(torch.tensor([1.0]), "sum").item()


if __name__ == "__main__":
    print(f"ANSWER {os.getpid()} before - {runtime.is_global_zero()}", flush=True)
    total = runtime.launch(work)  # the flags: RESOLVER_DEVICES and RESOLVER_STRATEGY, or resolver run's
    print(f"ANSWER {os.getpid()} after - {runtime.is_global_zero()}", flush=True)
"""

# What a launcher (or this test's own session) may have set: each run starts from a clean shell.
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "HOROVOD_", "JSM_", "LSB_", "TORCHELASTIC_", "RESOLVER_")
_LAUNCHER_NAMES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "ROLE_RANK"}
_LAUNCHER_NAMES |= {"MASTER_ADDR", "MASTER_PORT", "RUNTIME_REPORT_DIR", "RUNTIME_LAUNCHER_PID"}


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES) and k not in _LAUNCHER_NAMES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    if os.geteuid() == 0:  # Open MPI's mpirun refuses root unless told twice
        env["OMPI_ALLOW_RUN_AS_ROOT"] = env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env.update(extra)
    return env


def _bin(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.is_file():
        pytest.skip(f"{name} is not installed in {path.parent}")
    return str(path)


def _mpirun() -> list[str]:
    path = shutil.which("mpirun")
    if path is None:
        if os.environ.get("RESOLVER_REQUIRE_CLUSTER") == "1":
            pytest.fail("mpirun is not installed (apt-get install -y openmpi-bin); RESOLVER_REQUIRE_CLUSTER=1 needs it")
        pytest.skip("mpirun is not installed (apt-get install -y openmpi-bin)")
    passed = ["-x", "PYTHONPATH", "-x", "PYTHONUNBUFFERED", "-x", "RESOLVER_DEVICES", "-x", "RESOLVER_STRATEGY"]
    return [path, "--oversubscribe", "-np", "2", *passed, sys.executable]


# (how the script is started, the processes that run its work, the flags given as variables)
LAUNCHES: dict[str, tuple[list[str], int, dict[str, str]]] = {
    "python, one process": ([sys.executable], 1, {}),
    "python, ddp": ([sys.executable], 2, {"RESOLVER_DEVICES": "2", "RESOLVER_STRATEGY": "ddp"}),  # rank 1 re-runs it
    "python, ddp_spawn": ([sys.executable], 2, {"RESOLVER_DEVICES": "2", "RESOLVER_STRATEGY": "ddp_spawn"}),
    "python, ddp_fork": ([sys.executable], 2, {"RESOLVER_DEVICES": "2", "RESOLVER_STRATEGY": "ddp_fork"}),
    "resolver run": ([sys.executable, "-m", "resolver", "run", "--devices", "2", "--strategy", "ddp"], 2, {}),
    "torchrun": (["torchrun", "--nproc-per-node", "2"], 2, {"RESOLVER_DEVICES": "2", "RESOLVER_STRATEGY": "ddp"}),
    "mpirun": (["mpirun"], 2, {"RESOLVER_DEVICES": "2", "RESOLVER_STRATEGY": "ddp"}),
}


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_exactly_rank_zero_answers_true_before_in_and_after_the_work(launch: str, tmp_path: Path) -> None:
    command, processes, flags = LAUNCHES[launch]
    if command == ["torchrun"]:
        command = [_bin("torchrun"), *command[1:]]
    elif command == ["mpirun"]:
        command = _mpirun()
    script = tmp_path / "answer.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [*command, str(script)],
        env=_environment(**flags),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    output = f"exit code {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, output
    # pid -> {when: (rank, answer)}; a rank's process prints all three (with ddp, rank 0 is this process)
    seen: dict[str, dict[str, tuple[str, bool]]] = {}
    for pid, when, rank, answer in re.findall(r"ANSWER (\d+) (\w+) (\S+) (True|False)", done.stdout):
        seen.setdefault(pid, {})[when] = (rank, answer == "True")
    ranks = {pid: answers["in"][0] for pid, answers in seen.items() if "in" in answers}
    assert sorted(ranks.values()) == [str(rank) for rank in range(processes)], output
    for pid, answers in seen.items():
        expected = ranks.get(pid) == "0"
        if launch in ("python, ddp_spawn", "python, ddp_fork") and pid not in ranks:
            expected = True  # the calling process: it launches rank 0 and rank 1 as children
        assert {when: answer for when, (_, answer) in answers.items()} == dict.fromkeys(answers, expected), (
            f"process {pid} (rank {ranks.get(pid, 'launching')}) answered {answers}\n{output}"
        )
    assert sum(answer for answers in seen.values() for when, (_, answer) in answers.items() if when == "after") == 1


def _resolved_rank(variables: Mapping[str, str], **flags: object) -> int:
    config = resolver.resolve(accelerator="cpu", environment=resolver.Environment(variables=variables), **flags)
    return config.global_rank


def _torchrun(rank: int) -> dict[str, str]:
    return {"TORCHELASTIC_RUN_ID": "7", "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}  # fmt: skip


def _srun(rank: int) -> dict[str, str]:
    return {"SLURM_NTASKS": "2", "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0",
            "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "localhost"}  # fmt: skip


def _mpirun_rank(rank: int) -> dict[str, str]:
    return {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "8", "PMIX_NAMESPACE": "8"}  # fmt: skip


# Each launcher's variables for ranks 0 and 1 of a 2-process job on one machine.
JOBS = {
    "torchrun": _torchrun,
    "srun": _srun,
    "mpirun": _mpirun_rank,
    # torchrun in a one-task srun step: both workers inherit the step's SLURM_PROCID=0
    "torchrun inside srun": lambda rank: {**_srun(0), "SLURM_NTASKS": "1", **_torchrun(rank)},
}


@pytest.mark.parametrize("job", list(JOBS))
def test_the_rank_read_from_a_launchers_variables_is_the_rank_the_resolver_gives(job: str) -> None:
    for rank in (0, 1):
        variables = JOBS[job](rank)
        assert launcher_global_rank(variables) == _resolved_rank(variables, devices=2, strategy="ddp") == rank
        assert answer_from_variables(variables) is (rank == 0)


@pytest.mark.parametrize("node", [0, 1])
def test_the_launching_process_of_a_machine_after_the_first_is_not_global_zero(node: int) -> None:
    """A multi-node run started by hand (docs/runtime.md): NODE_RANK=N python train.py on each machine."""
    for variables in ({"NODE_RANK": str(node)}, {"GROUP_RANK": str(node)}):
        rendezvous = {**variables, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
        resolved = _resolved_rank(rendezvous, devices=2, num_nodes=2, strategy="ddp")
        assert answer_from_variables(rendezvous) is (resolved == 0) is (node == 0)


def test_every_rank_variable_of_the_rule_tables_clusters_is_read() -> None:
    """A cluster added to rules/clusters/ with a rank variable of its own must be known here too."""
    declared = set()
    for path in (ROOT / "rules" / "clusters").glob("*.toml"):
        cases = tomllib.loads(path.read_text()).get("cases", {}).get("cluster.rank_variables", {})
        declared |= {case["set"]["cluster.rank_variable"] for case in cases.values()}
    assert declared and declared <= {name for name, _ in LAUNCHER_RANK_VARIABLES}


def test_a_rank_variable_that_is_not_a_rank_is_named_with_who_sets_it() -> None:
    with pytest.raises(runtime.RuntimeConfigError) as caught:
        launcher_global_rank({"SLURM_PROCID": "first"})
    assert str(caught.value) == (
        "SLURM_PROCID='first' is not a global rank (a whole number from 0)\n"
        "  hint: SLURM_PROCID is set by srun for each process it starts: unset it in your shell"
    )
    assert launcher_global_rank({"RANK": " ", "SLURM_PROCID": "1"}) == 1  # an empty variable is not set
    assert launcher_global_rank({}) is None
    with pytest.raises(runtime.RuntimeConfigError, match=r"NODE_RANK='-1' is not a machine's index"):
        answer_from_variables({"NODE_RANK": "-1"})
