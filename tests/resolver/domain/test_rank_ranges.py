"""A rank outside its range is a conflict naming the variable, its value and the range, for every
cluster type (the scenarios are tests/golden/ranks-*.toml; this checks what the message says)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from resolver import ConflictError, golden, resolve

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "golden").glob("ranks-*.toml"))


def test_every_cluster_type_has_rank_scenarios():
    clusters = {p.stem.split("-")[1] for p in SCENARIOS}
    assert clusters >= {"torchelastic", "slurm", "lsf", "mpi", "kubeflow", "local"}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_rank_conflict_names_variable_value_and_range(path: Path):
    scenario = golden.load_scenario(path)
    with pytest.raises(ConflictError) as caught:
        resolve(**scenario.flags, environment=scenario.environment)
    message = caught.value.message
    assert re.search(r"run from 0 to \S+-1 \(\S+=\d+\)", message), message
    named = re.match(r"(?:this host \((\S+)\) is compute host (-?\d+) of )?([A-Z_]+)[=( ]", message)
    assert named, message
    variable = named.group(3)
    value = scenario.environment.variables[variable]
    if named.group(1) is None:
        assert message.startswith(f"{variable}={value} "), message
    else:  # LSF: the node rank is the host's place in LSB_MCPU_HOSTS, shown whole
        assert value in message
