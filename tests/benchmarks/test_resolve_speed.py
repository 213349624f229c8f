"""How fast a warm resolve() is (the table is loaded and compiled once per process).

Run with timings: pytest tests/benchmarks --benchmark-enable
"""

from __future__ import annotations

import pytest

from resolver import Environment, resolve
from resolver.simulate import simulate

EVERYDAY = {
    "laptop-default": ({}, Environment()),
    "cpu-ddp-2": ({"devices": 2, "strategy": "ddp"}, Environment()),
    "slurm-8gpu-bf16": ({"devices": 8, "precision": "bf16-mixed", "num_nodes": 2}, simulate("cuda=8,slurm,nodes=2")),
}


@pytest.mark.parametrize("case", sorted(EVERYDAY))
def test_warm_resolve(benchmark, case):
    flags, env = EVERYDAY[case]
    resolve(**flags, environment=env)  # warm: load and compile the table
    config = benchmark(lambda: resolve(**flags, environment=env))
    assert config.world_size >= 1
